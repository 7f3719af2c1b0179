"""Under the real Dagster daemon (``dagster dev``, the shipped dagster.yaml, Spark Connect): drains, heals, replays.

Every run the daemon launches (the sensor's, Dagster's retries, backfills) and every run a worker's tick requests
after its run executes on a warm worker of the home's pool, draining through the one Spark Connect server; the
tests only produce records and watch (the
backlogs were produced and drained, and the replay of the hour launched, by the
deployment's thread while the rest of the suite ran: tests/fixtures/daemon.py).
"""

from __future__ import annotations

import pyarrow.dataset as ds
import pytest

from kprio_core.ledger import BatchState, Ledger
from tests.fixtures.daemon import DRAIN_TIMEOUT_S, WORKER_RUNS
from tests.fixtures.dagster_dev import wait_until

pytestmark = [pytest.mark.broker, pytest.mark.dagster, pytest.mark.slow, pytest.mark.deployment("dagster")]


def test_the_daemon_drains_every_priority_with_spark_connect(kprio_daemon, bulk_drained):
    topic = bulk_drained

    assert kprio_daemon.conservation(topic).ok, kprio_daemon.conservation(topic)
    with Ledger(kprio_daemon.config.ledger.url) as ledger:
        batches = ledger.batches.find(topic.name)
    assert batches and all(b.state is BatchState.COMMITTED for b in batches)
    runs = [r for b in batches for r in kprio_daemon.deployment.runs(b.batch_id)]
    assert {r["status"] for r in runs} == {"SUCCESS"}
    # Each batch's first run is the sensor's (test_ui re-drains some of them from backfills later).
    assert all(kprio_daemon.deployment.runs(b.batch_id)[-1]["tags"].get("dagster/sensor_name") == "priority_lag_sensor"
               for b in batches)


def test_the_runs_execute_on_warm_workers_replaced_every_few_runs(kprio_daemon, bulk_drained, crash_drained):
    """Each run names its worker (``kprio/runner``) and says where it ran (Dagster's "Started process for run"): a
    handful of processes ran every run of the drains, each at most ``workers.max_runs`` of them."""
    deployment = kprio_daemon.deployment
    with Ledger(kprio_daemon.config.ledger.url) as ledger:
        batch_ids = [b.batch_id for t in (bulk_drained, crash_drained) for b in ledger.batches.find(t.name)]
    runs = [r for b in batch_ids for r in deployment.runs(b) if r["job"] == "drain_job"]
    by_worker: dict[str, int] = {}
    for run in runs:
        runner = run["tags"]["kprio/runner"]
        assert runner.startswith(run["run_id"] + "@"), runner
        pid = runner.rsplit(":", 1)[1]
        events = deployment.graphql('{ logsForRun(runId: "' + run["run_id"] + '") { ... on EventConnection { events '
                                    "{ ... on MessageEvent { message } } } } }")["logsForRun"]["events"]
        assert f"Started process for run (pid: {pid})." in [e.get("message") for e in events]
        by_worker[pid] = by_worker.get(pid, 0) + 1
    assert len(runs) > len(by_worker) >= 2, by_worker  # warm: a worker ran several runs, and some were replaced
    assert max(by_worker.values()) <= WORKER_RUNS, by_worker


def test_a_killed_run_is_failed_by_dagster_and_its_batch_retried_by_itself(kprio_daemon, crash_drained):
    topic = crash_drained  # drained to zero lag by the daemon's runs, all ended

    assert kprio_daemon.crash_marker.exists()  # one run really was killed after publishing
    assert kprio_daemon.conservation(topic).ok, kprio_daemon.conservation(topic)
    with Ledger(kprio_daemon.config.ledger.url) as ledger:
        first = ledger.batches.get(min(b.batch_id for b in ledger.batches.find(topic.name)))
    assert first.state is BatchState.COMMITTED and first.attempts >= 2
    deployment = kprio_daemon.deployment
    runs = wait_until(lambda: (rs := deployment.runs(first.batch_id)) and all(
        r["status"] in ("SUCCESS", "FAILURE", "CANCELED") for r in rs) and rs, 120, what="the batch's runs to end")
    # Oldest first: the killed run, failed; whatever ran after it (kprio's resume, Dagster's retry) succeeded.
    statuses = [r["status"] for r in reversed(runs)]
    assert statuses[0] == "FAILURE" and set(statuses[1:]) == {"SUCCESS"}, statuses
    killed = runs[-1]["run_id"]
    messages = deployment.graphql(
        '{ logsForRun(runId: "' + killed + '") { ... on EventConnection { events { ... on MessageEvent '
        "{ message } } } } }")["logsForRun"]["events"]
    # The run's log says it died: Dagster's (its code server or run monitoring saw the process exit) or kprio's
    # (the tick found the process holding the batch's lease gone), whichever of the two saw it first.
    said = ("unexpectedly", "terminated", "the process holding its lease", "died:")
    assert any(word in (e.get("message") or "") for e in messages for word in said), messages[-5:]


def test_the_hour_running_now_replays_from_graphql(kprio_daemon):
    topic, replay = kprio_daemon.topics["live"], kprio_daemon.replay  # produced and launched at start
    launched, deployment = replay.launched, kprio_daemon.deployment
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    assert deployment.backfill_done(launched["backfillId"], DRAIN_TIMEOUT_S) == "COMPLETED_SUCCESS"
    assert deployment.backfill(launched["backfillId"])["partitionNames"] == [replay.hour]
    replay_path = kprio_daemon.config.drain.replay_path
    files = [str(p) for p in (deployment.root / "replay" / topic.name).rglob("*.parquet") if "_" not in p.parent.name]
    assert replay_path and files
    offsets = ds.dataset(files, format="parquet").to_table(columns=["offset"]).num_rows
    assert offsets >= replay.sent
