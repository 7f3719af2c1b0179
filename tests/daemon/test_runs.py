"""Under the real Dagster daemon (``dagster dev``, the shipped dagster.yaml, Spark Connect): drains, heals, replays.

Every run is a new process launched by the daemon (the sensor's, Dagster's retries, backfills),
draining through the one Spark Connect server; the tests only produce records and watch (the
replay of the hour was launched when the deployment started: see conftest).
"""

from __future__ import annotations

import pyarrow.dataset as ds
import pytest

from kprio_core.ledger import BatchState, Ledger
from tests.daemon.conftest import DRAIN_TIMEOUT_S
from tests.fixtures.dagster_dev import wait_until
from tests.fixtures.kafka import fill

pytestmark = [pytest.mark.broker, pytest.mark.dagster, pytest.mark.slow]


def test_the_daemon_drains_every_priority_with_spark_connect(kprio_daemon):
    topic = kprio_daemon.topics["bulk"]
    fill(kprio_daemon.kafka, topic.priority_topic(0), 580, partitions=2)  # 800 records: two batches of 400
    fill(kprio_daemon.kafka, topic.priority_topic(1), 200, partitions=2)
    fill(kprio_daemon.kafka, topic.priority_topic(2), 20, partitions=2)

    kprio_daemon.drained(topic)

    assert kprio_daemon.conservation(topic).ok, kprio_daemon.conservation(topic)
    with Ledger(kprio_daemon.config.ledger.url) as ledger:
        batches = ledger.batches(topic.name)
    assert batches and all(b.state is BatchState.COMMITTED for b in batches)
    runs = [r for b in batches for r in kprio_daemon.deployment.runs(b.batch_id)]
    assert {r["status"] for r in runs} == {"SUCCESS"}
    assert all(r["tags"].get("dagster/sensor_name") == "priority_lag_sensor" for r in runs)


def test_a_killed_run_is_failed_by_dagster_and_its_batch_retried_by_itself(kprio_daemon):
    topic = kprio_daemon.topics["crash"]
    fill(kprio_daemon.kafka, topic.priority_topic(1), 300, partitions=2)

    kprio_daemon.drained(topic)

    assert kprio_daemon.crash_marker.exists()  # one run really was killed after publishing
    assert kprio_daemon.conservation(topic).ok, kprio_daemon.conservation(topic)
    with Ledger(kprio_daemon.config.ledger.url) as ledger:
        first = ledger.get(min(b.batch_id for b in ledger.batches(topic.name)))
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
    # Dagster itself (the code server that launched the run) saw its process die and failed the run.
    assert any("unexpectedly" in (e.get("message") or "") or "terminated" in (e.get("message") or "")
               for e in messages), messages[-5:]


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
