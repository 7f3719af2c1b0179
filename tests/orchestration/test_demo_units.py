"""The demo's pure parts: doctests of its modules, waits, conservation cases, config choice, quiet logs."""

from __future__ import annotations

import doctest
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kprio_core.errors import ConfigError
from kprio_core.offsets import OffsetRange as R
from orchestration.demo.workload import demo_workload, order_records
from orchestration.demo import layout, plot, report
from orchestration.demo.layout import DemoLayout, demo_config, write_config
from orchestration.demo.producer import Arrival
from orchestration.demo.report import Drained, check_conservation, median_low, priority_rows, wait_counts
from orchestration.demo.run import cluster_settings


@pytest.mark.parametrize("module", [layout, plot, report], ids=lambda m: m.__name__)
def test_doctests(module) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and (module is plot or result.attempted > 0)


@pytest.mark.parametrize("records", [6, 7, 100, 1001, 20_000])
def test_workload_adds_up_and_never_reuses_an_order_id(records: int) -> None:
    w = demo_workload(records)
    assert w.total == records and all(x.records >= 1 for x in w.waves)
    ids = [r[1].split('"order_id":"')[1][:9] for x in w.waves for r in order_records(x, base_ts_ms=0)]
    assert len(ids) == len(set(ids)) == records


def test_workload_refuses_too_few_records() -> None:
    with pytest.raises(ValueError, match="at least 6 records"):
        demo_workload(5)


# Numbered cases of waits: (arrivals, drains, expected waits of priority 0, why).
WAIT_CASES = [
    ([Arrival(0, 1, (R("t-0", 0, 0, 4),))], [Drained(1, "b1", 0, (R("t-0", 0, 0, 4),), True)],
     {0: 4}, "1: drained by the first batch after arrival: wait 0"),
    ([Arrival(0, 1, (R("t-0", 0, 0, 4),))],
     [Drained(1, "b1", 0, (R("t-0", 0, 0, 1),), True), Drained(3, "b3", 0, (R("t-0", 0, 1, 4),), True)],
     {0: 1, 2: 3}, "2: three records left for batch 3 waited two batches"),
    ([Arrival(0, 3, (R("t-0", 0, 10, 12),))], [Drained(3, "b3", 0, (R("t-0", 0, 0, 12),), True)],
     {0: 2}, "3: only the overlap with the arrival counts; a late arrival's clock starts at its batch"),
    ([Arrival(0, 1, (R("t-0", 0, 0, 2), R("t-0", 1, 0, 2)))], [Drained(2, "b2", 0, (R("t-0", 1, 0, 2),), True)],
     {1: 2}, "4: other partitions do not match; undrained records are not counted as waits"),
]


@pytest.mark.parametrize("arrivals,drains,expected,why", WAIT_CASES, ids=[c[3][:2] for c in WAIT_CASES])
def test_wait_counts(arrivals, drains, expected, why) -> None:
    assert dict(wait_counts(arrivals, drains)[0]) == expected, why


def test_rows_count_failed_checks_and_idle_priorities() -> None:
    arrivals = [Arrival(0, 1, (R("t-0", 0, 0, 4),))]
    drains = [Drained(1, "b1", 0, (R("t-0", 0, 0, 2),), True), Drained(2, "b2", 0, (R("t-0", 0, 2, 4),), False)]
    rows = priority_rows(arrivals, drains, priorities=2)
    assert [(r.priority, r.records, r.batches, r.checks, r.median_wait, r.max_wait) for r in rows] == [
        (1, 0, 0, "0/0", None, None), (0, 4, 2, "1/2", 0, 1)]


def test_median_low() -> None:
    assert median_low(Counter({3: 1})) == 3
    assert median_low(Counter({0: 1, 5: 1, 9: 1})) == 5


# Numbered conservation cases: (start, high, committed, output, ok, why).
TP = ("t-0", 0)
CONSERVATION_CASES = [
    ({TP: 2}, {TP: 4}, {TP: 4}, [("t-0", 0, 2), ("t-0", 0, 3)], True, "1: only [start, high) is the demo's"),
    ({TP: 0}, {TP: 2}, {TP: 2}, [("t-0", 0, 0), ("t-0", 0, 1), ("t-0", 0, 2)], False, "2: an offset never produced"),
    ({TP: 0}, {TP: 2}, {TP: 1}, [("t-0", 0, 0), ("t-0", 0, 1)], False, "3: committed short of the watermark"),
    ({TP: 0}, {TP: 0}, {TP: None}, [], True, "4: an empty partition with nothing committed is fine"),
    ({TP: 0}, {TP: 1}, {TP: None}, [("t-0", 0, 0)], False, "5: drained but never committed"),
]


@pytest.mark.parametrize("start,high,committed,output,ok,why", CONSERVATION_CASES,
                         ids=[c[5][:2] for c in CONSERVATION_CASES])
def test_conservation(start, high, committed, output, ok, why) -> None:
    c = check_conservation(start, high, committed, output)
    assert c.ok is ok, (why, c.line())
    assert c.line().startswith("conservation: OK" if ok else "conservation: FAILED")


def test_cluster_settings_choose_embedded_unless_a_cluster_is_named(tmp_path: Path) -> None:
    assert cluster_settings(None, env={}) is None
    assert cluster_settings(None, env={"KPRIO_BOOTSTRAP_SERVERS": "k:9092"}).bootstrap_servers == "k:9092"
    config = tmp_path / "k.yaml"
    config.write_text("kafka:\n  bootstrap_servers: prod:9093\n  client:\n    security.protocol: SASL_SSL\n")
    kafka = cluster_settings(config, env={"KPRIO_KAFKA_SASL_PASSWORD": "s3cret"})
    assert kafka.bootstrap_servers == "prod:9093" and kafka.client["security.protocol"] == "SASL_SSL"
    config.write_text("planner:\n  record_budget: 0\n")
    with pytest.raises(ConfigError, match="planner.record_budget"):
        cluster_settings(config, env={})


def test_written_config_keeps_cluster_settings_but_no_secret(tmp_path: Path) -> None:
    d = DemoLayout(tmp_path)
    kafka = cluster_settings(None, env={"KPRIO_BOOTSTRAP_SERVERS": "x:1", "KPRIO_KAFKA_SASL_PASSWORD": "s3cret",
                                        "KPRIO_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"})
    path = write_config(demo_config(d, "prod:9093", record_budget=50, kafka=kafka), d.config_file)
    text = path.read_text()
    assert "s3cret" not in text and "SASL_SSL" in text and "prod:9093" in text
    from kprio_core.config import load_config

    assert load_config(path, env={}).planner.record_budget == 50


def test_clear_removes_only_what_the_demo_made(tmp_path: Path) -> None:
    d = DemoLayout(tmp_path)
    (d.output / "orders").mkdir(parents=True)
    d.ledger.write_text("x")
    mine = tmp_path / "notes.txt"
    mine.write_text("keep me")
    d.clear()
    assert not d.output.exists() and not d.ledger.exists() and mine.read_text() == "keep me"


QUIET = """
import os, sys
from pathlib import Path
from orchestration.demo.quiet import logs_to
with logs_to(Path(sys.argv[1])) as terminal:
    print("python stderr", file=sys.stderr)
    os.write(2, b"fd stderr\\n")
    terminal.write("progress\\n")
print("after", file=sys.stderr)
"""


def test_logs_to_sends_both_python_and_fd_stderr_to_the_log(tmp_path: Path) -> None:
    log = tmp_path / "demo.log"
    proc = subprocess.run([sys.executable, "-c", QUIET, str(log)], capture_output=True, text=True, timeout=60,
                          env={**os.environ})
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().splitlines() == ["python stderr", "fd stderr"]
    assert proc.stderr.splitlines() == ["progress", "after"]
