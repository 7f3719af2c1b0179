"""Table maintenance as scheduled work, on a real drain: the Dagster job, its schedule, ``kprio tables maintain``.

Many small batches (a small record budget, as ``kprio drain --follow`` leaves them) land in a Delta or
Iceberg table; the Dagster maintenance job compacts their files and reports the figures before and
after as its metadata, and every row is exactly what it was (all columns, each offset once). Then a
second wave drains while the maintenance runs again and again beside it: every batch publishes and
commits as if nothing happened (conservation, zero lag), and ``kprio tables maintain`` finishes the job.
"""

from __future__ import annotations

import json
import threading

import pytest
from typer.testing import CliRunner

from kprio_core.ledger import BatchState
from orchestration.cli.main import app
from orchestration.dagster import drain_loop
from orchestration.dagster.maintenance import JOB, SCHEDULE
from orchestration.runtime.maintenance import maintain_tables
from spark_jobs import tables
from spark_jobs.layout import OUTPUT
from tests.fixtures.kafka import fill
from tests.orchestration.conservation import conservation, lag

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]

KEY = ["topic", "partition", "offset"]


def all_rows(drain, logical_topic: str) -> list[dict]:
    """Every published output row, every column, in offset order."""
    rows = tables.read_rows(drain, OUTPUT, logical_topic)
    return rows.select(sorted(rows.column_names)).sort_by([(k, "ascending") for k in KEY]).to_pylist()


# Iceberg on a real drain; Delta's maintenance beside publishes and a reader is proven in
# tests/spark_jobs/test_maintenance.py (both formats), which keeps the suite's time in budget.
@pytest.mark.parametrize("output_format", ["iceberg"])
def test_the_maintenance_job_compacts_a_drain_s_small_files_keeping_every_row_and_batches_drain_beside_it(
        make_topic, kprio_env, dagster_instance, kafka_settings, tmp_path, output_format):
    topic = make_topic(priorities=2, partitions=1, records={1: 60, 0: 100}, schema={"i": "long", "amount": "double"})
    env = kprio_env(topic, planner={"record_budget": 20, "target_batch_s": None},
                    drain={"format": output_format, "maintenance": {"min_files": 4, "retention_s": 3600.0}})
    report = drain_loop.drain(env.defs, dagster_instance)
    assert report.ok, report.stopped
    drain = env.config.drain
    before = all_rows(drain, topic.name)
    assert len(before) == 160

    schedule = env.defs.resolve_schedule_def(SCHEDULE)
    assert schedule.cron_schedule == drain.maintenance.schedule and schedule.job_name == JOB
    assert schedule.default_status.value == "RUNNING"  # on by itself for a table format
    result = env.defs.resolve_job_def(JOB).execute_in_process(instance=dagster_instance)
    assert result.success
    [output] = [e for e in result.all_events if e.is_successful_output]  # the run's metadata: the figures
    meta = {k: v.value for k, v in output.step_output_data.metadata.items()}
    assert meta["format"] == output_format and meta["tables"] == 1  # no dead letters: no dead-letter table
    assert meta["files_before"] >= 8 and meta["files_after"] <= 2, meta
    assert meta["compacted_runs"] >= 1 and meta["bytes_before"] > 0 and meta["bytes_after"] > 0
    assert "files" in meta["per_table"]
    assert len(tables.live_files(drain, topic.name)) == meta["files_after"]
    assert all_rows(drain, topic.name) == before, "the same rows, every column, each offset once"

    # A second wave drains while the maintenance runs beside it, again and again.
    fill(kafka_settings, topic.priority_topic(1), 40, partitions=1)
    fill(kafka_settings, topic.priority_topic(0), 60, partitions=1)
    stop, runs, errors = threading.Event(), [], []

    def maintain_in_a_loop() -> None:
        while not stop.is_set():
            try:
                runs.append(maintain_tables(env.config))
            except Exception as err:  # noqa: BLE001 - a failing maintenance is a finding
                errors.append(repr(err))

    beside = threading.Thread(target=maintain_in_a_loop)
    beside.start()
    try:
        report = drain_loop.drain(env.defs, dagster_instance)
    finally:
        stop.set()
        beside.join(timeout=300)
    assert not errors, errors[:3]
    assert report.ok, report.stopped
    assert len(runs) >= 2, "the maintenance ran while batches drained"
    assert lag(topic, env.edge) == {1: 0, 0: 0}
    check = conservation(env.config, topic, env.edge)
    assert check.ok and check.output == 260, check
    assert all(b.state is BatchState.COMMITTED for b in env.ledger.batches.find(topic.name))
    after = all_rows(drain, topic.name)
    assert [r for r in after if r["offset"] < (60 if r["priority"] == 1 else 100)] == before

    # `kprio tables maintain`, for --follow users: the figures as JSON, the rows unchanged.
    config_file = tmp_path / "kprio.yaml"
    config_file.write_text(json.dumps(env.config.model_dump(mode="json", by_alias=True,
                                                            exclude={"kafka": {"secrets"}})))
    shown = CliRunner().invoke(app, ["tables", "maintain", "--config", str(config_file), "--json"],
                               catch_exceptions=False)
    assert shown.exit_code == 0, shown.output
    done = json.loads(shown.stdout)
    # The loop beside the drain compacted already: at most a compacted file per priority and one of the runs
    # the second wave left (fewer than min_files files, left as they are).
    assert done["format"] == output_format and done["totals"]["files_after"] <= 4, done
    assert list(done["tables"]) and all(t["files_after"] <= t["files_before"] for t in done["tables"].values())
    assert all_rows(drain, topic.name) == after
    lines = CliRunner().invoke(app, ["tables", "maintain", "--config", str(config_file)]).stdout.splitlines()
    assert len(lines) == 1 and " -> " in lines[0], lines
