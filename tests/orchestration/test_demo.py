"""The demo end to end at a hand-checkable scale: real broker, real Spark, a real Dagster instance.

100 orders, budget 70, two steady waves, the burst after batch 1 (demo_workload(100, 2, 1)):
before batch 1: p0 60, p1 13. Exponential quotas of 70 are {2: 40, 1: 20, 0: 10}; p2 is idle,
so lag-aware water-filling gives p1 its 13 and p0 the other 57. Then p1's second wave (12)
and the burst (15 of p2) arrive; batch 2 drains p2 15, p1 12 and p0's last 3, which waited
one batch. Nothing is left: two batches.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kprio_core.config import load_config
from orchestration.demo.workload import demo_workload
from orchestration.cli.demo import print_result
from orchestration.demo.run import DemoOptions, run_demo

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]


class Recorder:
    """Listener that keeps what the demo reported."""

    def __init__(self) -> None:
        self.stages: list[str] = []
        self.arrivals: list = []
        self.runs: list = []

    def stage(self, text: str) -> None:
        self.stages.append(text)

    def produced(self, arrival) -> None:
        self.arrivals.append(arrival)

    def drained(self, run) -> None:
        self.runs.append(run)


def test_the_workload_of_this_test_is_the_one_the_docstring_computes() -> None:
    w = demo_workload(100, steady_waves=2, burst_after=1)
    assert [(x.priority, x.records, x.after_batch) for x in w.waves] == [(0, 60, 0), (1, 13, 0), (1, 12, 1), (2, 15, 1)]


def test_demo_drains_everything_with_the_burst_first(kafka_bootstrap: str, spark, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("KPRIO_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "elsewhere"))  # restored after the demo points it at its own
    recorder = Recorder()
    options = DemoOptions(records=100, data_dir=tmp_path / "demo", record_budget=70, steady_waves=2, burst_after=1)

    result = run_demo(options, recorder)

    # The table: records, batches, median / max wait in batches, batches whose checks passed.
    table = [(r.priority, r.records, r.batches, r.median_wait, r.max_wait, r.checks) for r in result.rows]
    assert table == [
        (2, 15, 1, 0, 0, "1/1"),
        (1, 25, 2, 0, 0, "2/2"),
        (0, 60, 2, 0, 1, "2/2"),
    ]
    assert [sum(run.records.values()) for run in recorder.runs] == [70, 30]
    assert [run.records for run in recorder.runs] == [{1: 13, 0: 57}, {2: 15, 1: 12, 0: 3}]
    assert [(a.priority, a.first_batch, a.records) for a in recorder.arrivals] == [
        (0, 1, 60), (1, 1, 13), (1, 2, 12), (2, 2, 15)]
    assert result.drain_ok and result.drain_stopped == "no backlog left"

    # Conservation: all 100 produced offsets in the output exactly once, committed == high watermark.
    assert result.conservation.ok
    assert result.conservation.line() == ("conservation: OK: 100 of 100 produced offsets in the output exactly "
                                          "once; committed == high watermark on 12 of 12 partitions")

    # The files the user is told about.
    layout = result.layout
    assert layout.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    demo_config = load_config(layout.config_file, env={})
    assert demo_config.topics[0].name == result.logical_topic
    assert demo_config.kafka.bootstrap_servers == kafka_bootstrap
    assert demo_config.ledger.url == f"sqlite:///{layout.ledger}"
    assert (layout.dagster_home / "dagster.yaml").is_file()
    saved = json.loads(layout.report.read_text())
    assert saved["conservation"]["ok"] and saved["batches"] == 2
    assert saved["priorities"]["0"] == {"priority": 0, "produced": 60, "records": 60, "batches": 2,
                                        "median_wait_batches": 0, "max_wait_batches": 1, "checks_passed": 2}

    # What `kprio demo` prints from it: the table and the conservation line; --json the same numbers.
    print_result(result, as_json=False)
    out = capsys.readouterr().out
    assert result.conservation.line() in out
    assert f"DAGSTER_HOME={layout.dagster_home} dagster dev" in out
    row_p0 = next(line for line in out.splitlines() if line.replace("│", " ").split()[:1] == ["0"])
    assert row_p0.replace("│", " ").split() == ["0", "60", "2", "0", "1", "2/2"]
    print_result(result, as_json=True)
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and doc["records"] == 100 and doc["priorities"]["2"]["max_wait_batches"] == 0
