"""The demo's pure parts: waits, conservation cases, config choice, quiet logs (doctests: test_doctests.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from kprio_core.config import DrainSettings
from kprio_core.errors import ConfigError
from kprio_core.model.offsets import OffsetRange as R
from orchestration.demo import DemoFailed
from orchestration.demo.layout import DemoLayout, demo_config, write_config
from orchestration.demo.producer import Arrival
from orchestration.demo.report import (
    Drained,
    check_conservation,
    median_low,
    priority_rows,
    wait_counts,
)
from orchestration.demo.run import cluster_settings, one_off_secrets, published_offsets
from orchestration.demo.workload import (
    POISON_KINDS,
    demo_workload,
    order_records,
    poison_value,
    wave_records,
)
from orchestration.services.broker_security import BrokerSecurity, Security


@pytest.mark.parametrize("records", [6, 7, 100, 1001, 20_000])
def test_workload_adds_up_and_never_reuses_an_order_id(records: int) -> None:
    w = demo_workload(records)
    assert w.total == records and all(x.records >= 1 for x in w.waves)
    ids = [r[1].split('"order_id":"')[1][:9] for x in w.waves for r in order_records(x, base_ts_ms=0)]
    assert len(ids) == len(set(ids)) == records


def test_workload_refuses_too_few_records() -> None:
    with pytest.raises(ValueError, match="at least 6 records"):
        demo_workload(5)
    with pytest.raises(ValueError, match="negative"):
        demo_workload(100, poison=-1)


@pytest.mark.parametrize("records,poison", [(100, 5), (12_000, 4), (20, 30)])
def test_poison_goes_into_the_low_backlog_spread_over_partitions(records: int, poison: int) -> None:
    w = demo_workload(records, poison=poison)
    assert w.total == records + poison and w.poison == poison
    backlog = w.waves[0]
    assert (backlog.priority, backlog.after_batch, backlog.poison) == (0, 0, poison)
    produced = wave_records(backlog, base_ts_ms=0, partitions=4)
    bad = [r for r in produced if r.key.startswith("poison-")]
    assert len(produced) == backlog.size and len(bad) == poison
    assert Counter(r.partition for r in bad) == Counter(k % 4 for k in range(poison))
    # The good orders keep their order and are partitioned by key (no explicit partition).
    assert [r for r in produced if r not in bad] == [tuple(o) + (None,) for o in order_records(backlog, base_ts_ms=0)]
    assert all(r.partition is None for r in produced if r not in bad)
    # Every later wave is clean.
    assert all(x.poison == 0 for x in w.waves[1:])


def test_each_kind_of_poison_breaks_the_order_schema_its_own_way() -> None:
    import json

    values = [poison_value(k, 7) for k in range(len(POISON_KINDS))]
    with pytest.raises(json.JSONDecodeError):
        json.loads(values[0])
    with pytest.raises(UnicodeDecodeError):
        values[1].decode("utf-8")
    assert isinstance(json.loads(values[2]), list)
    assert isinstance(json.loads(values[3])["amount"], str)  # amount is a double in the schema
    assert "amount" not in json.loads(values[4])  # amount is required
    assert poison_value(5, 7) == values[0] and len(set(values)) == 5


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


def test_rows_count_dead_letters_and_only_committed_batches_as_drained() -> None:
    arrivals = [Arrival(0, 1, (R("t-0", 0, 0, 10),), poison=3)]
    drains = [Drained(1, "b1", 0, (R("t-0", 0, 0, 6),), True, dead=2),
              Drained(2, "b2", 0, (R("t-0", 0, 6, 10),), False, dead=0, committed=False)]
    row = priority_rows(arrivals, drains, priorities=1)[0]
    # Batch 2 failed: its 4 records are not drained (they wait for its retry), its checks did not pass.
    assert (row.produced, row.records, row.dead_letters, row.batches, row.checks) == (10, 6, 2, 2, "1/2")
    assert dict(wait_counts(arrivals, drains)[0]) == {0: 6}
    assert row.to_dict()["dead_letters"] == 2


def test_median_low() -> None:
    assert median_low(Counter({3: 1})) == 3
    assert median_low(Counter({0: 1, 5: 1, 9: 1})) == 5


# Numbered conservation cases: (start, high, committed, output, dead letters, ok, why).
TP = ("t-0", 0)
CONSERVATION_CASES = [
    ({TP: 2}, {TP: 4}, {TP: 4}, [("t-0", 0, 2), ("t-0", 0, 3)], [], True, "1: only [start, high) is the demo's"),
    ({TP: 0}, {TP: 2}, {TP: 2}, [("t-0", 0, 0), ("t-0", 0, 1), ("t-0", 0, 2)], [], False,
     "2: an offset never produced"),
    ({TP: 0}, {TP: 2}, {TP: 1}, [("t-0", 0, 0), ("t-0", 0, 1)], [], False, "3: committed short of the watermark"),
    ({TP: 0}, {TP: 0}, {TP: None}, [], [], True, "4: an empty partition with nothing committed is fine"),
    ({TP: 0}, {TP: 1}, {TP: None}, [("t-0", 0, 0)], [], False, "5: drained but never committed"),
    ({TP: 0}, {TP: 3}, {TP: 3}, [("t-0", 0, 0), ("t-0", 0, 2)], [("t-0", 0, 1)], True,
     "6: each offset once in the output or once in the dead letters"),
    ({TP: 0}, {TP: 2}, {TP: 2}, [("t-0", 0, 0), ("t-0", 0, 1)], [("t-0", 0, 1)], False,
     "7: an offset in both the output and the dead letters"),
    ({TP: 0}, {TP: 3}, {TP: 3}, [("t-0", 0, 0)], [("t-0", 0, 1)], False,
     "8: an offset in neither the output nor the dead letters"),
    ({TP: 0}, {TP: 2}, {TP: 2}, [("t-0", 0, 0)], [("t-0", 0, 1), ("t-0", 0, 1)], False,
     "9: a dead letter twice"),
    ({TP: 0}, {TP: 1}, {TP: 1}, [], [("t-0", 0, 0)], True, "10: everything quarantined is still conserved"),
    ({TP: 0}, {TP: 1}, {TP: 1}, [], [("t-0", 0, 0), ("t-0", 0, 5)], False,
     "11: a dead letter of an offset never produced"),
]


@pytest.mark.parametrize("start,high,committed,output,dead,ok,why", CONSERVATION_CASES,
                         ids=[c[6].split(":")[0] for c in CONSERVATION_CASES])
def test_conservation(start, high, committed, output, dead, ok, why) -> None:
    c = check_conservation(start, high, committed, output, dead)
    assert c.ok is ok, (why, c.line())
    assert c.line().startswith("conservation: OK" if ok else "conservation: FAILED")
    # Every produced offset is counted in exactly one category.
    assert c.in_output + c.in_dead_letters + c.missing + c.duplicated + c.in_both == c.produced, why


def test_conservation_names_what_is_wrong() -> None:
    both = check_conservation({TP: 0}, {TP: 2}, {TP: 2}, [("t-0", 0, 0), ("t-0", 0, 1)], [("t-0", 0, 1)])
    assert (both.in_output, both.in_dead_letters, both.in_both) == (1, 0, 1)
    assert "1 in both the output and the dead letters" in both.line()
    neither = check_conservation({TP: 0}, {TP: 3}, {TP: 3}, [("t-0", 0, 0)], [("t-0", 0, 1)])
    assert (neither.in_output, neither.in_dead_letters, neither.missing) == (1, 1, 1)
    assert "(1 missing)" in neither.line() and "2 of 3 produced offsets" in neither.line()


def _parquet(path: Path, offsets: list[int], topic: str = "t-0") -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"topic": [topic] * len(offsets), "partition": pa.array([0] * len(offsets), pa.int32()),
                             "offset": pa.array(offsets, pa.int64()), "value": [b"x"] * len(offsets)}), path)


def test_published_offsets_read_every_priority_and_never_staging(tmp_path: Path) -> None:
    _parquet(tmp_path / "orders/priority=0/t-0+0+0000000000+0000000002.parquet", [0, 1])
    _parquet(tmp_path / "orders/priority=2/t-2+0+0000000000+0000000001.parquet", [0], topic="t-2")
    _parquet(tmp_path / "_staging/b-000003.1/orders/priority=0/t-0+0+0000000002+0000000004.parquet", [2, 3])
    _parquet(tmp_path / "orders/priority=0/_tmp/t-0+0+0000000002+0000000004.parquet", [2, 3])
    _parquet(tmp_path / "other/priority=0/t-0+0+0000000000+0000000002.parquet", [0, 1])
    drain = DrainSettings(output_path=str(tmp_path), dead_letter_path=f"{tmp_path}-dead",
                          replay_path=f"{tmp_path}-replay")
    assert sorted(published_offsets(drain, "output", "orders")) == [("t-0", 0, 0), ("t-0", 0, 1), ("t-2", 0, 0)]
    assert published_offsets(drain, "output", "missing") == []


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
    (d.dead_letters / "orders").mkdir(parents=True)
    d.ledger.write_text("x")
    mine = tmp_path / "notes.txt"
    mine.write_text("keep me")
    d.clear()
    assert not d.output.exists() and not d.dead_letters.exists() and not d.ledger.exists()
    assert mine.read_text() == "keep me"


def test_demo_config_puts_the_dead_letters_in_the_data_dir(tmp_path: Path) -> None:
    d = DemoLayout(tmp_path)
    path = write_config(demo_config(d, "k:9092", record_budget=50), d.config_file)
    from kprio_core.config import load_config

    cfg = load_config(path, env={})
    assert cfg.drain.dead_letter_path == str(d.dead_letters) and cfg.drain.output_path == str(d.output)
    assert f"kprio dead-letters --config {path}" in path.read_text()


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


def test_one_off_secrets_are_made_only_where_missing_and_never_for_a_kept_broker() -> None:
    env = {"KPRIO_KAFKA_SASL_PASSWORD": "mine"}
    made = one_off_secrets(BrokerSecurity(Security.SASL_SSL), env, keep_broker=False)
    assert made == ["KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD"]
    assert env["KPRIO_KAFKA_SASL_PASSWORD"] == "mine" and len(env["KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD"]) >= 24
    # A broker kept running is used afterwards by clients that need the secrets: the user sets them.
    with pytest.raises(DemoFailed, match="--keep-broker with --security sasl_ssl: set KPRIO_KAFKA_SASL_PASSWORD and "
                                         "KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD in the environment first"):
        one_off_secrets(BrokerSecurity(Security.SASL_SSL), {}, keep_broker=True)
    assert one_off_secrets(BrokerSecurity(), {}, keep_broker=True) == []
