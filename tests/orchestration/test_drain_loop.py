"""End to end through Dagster: the sensor plans, drain_job drains, checks and commits, until no backlog is left."""

from __future__ import annotations

import pytest

from kprio_core.lifecycle import loop
from orchestration.dagster import drain_loop
from tests.orchestration.conservation import conservation
from tests.orchestration.dagster_env import read_all_output

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]


def test_drain_to_empty_conserves_every_offset(make_topic, kprio_env, dagster_instance, spark):
    topic = make_topic(priorities=3, partitions=2, records={2: 30, 1: 12, 0: 25})
    env = kprio_env(topic, planner={"record_budget": 40})

    report = drain_loop.drain(env.defs, dagster_instance)

    assert report.ok, report.stopped
    assert report.stopped == "no backlog left"
    assert [b.state.value for b in report.batches] == ["committed"] * len(report.batches)
    assert report.records() == {2: 30, 1: 12, 0: 25}
    snapshot = env.edge.snapshot(topic, now_ms=0)
    # Every produced offset is in the output exactly once ...
    produced = sorted(
        (p.topic, p.partition, o) for p in snapshot.partitions for o in range(p.log_start, p.high_watermark)
    )
    assert len(produced) == 67
    assert read_all_output(spark, env.config.drain.output_path, topic) == produced
    # ... and every group stands at its high watermark.
    assert [(p.topic, p.partition, p.committed) for p in snapshot.partitions] == [
        (p.topic, p.partition, p.high_watermark) for p in snapshot.partitions
    ]
    # Each batch stayed within its record budget, and the ledger holds them all as committed.
    batches = env.ledger.batches.find(topic.name)
    assert all(b.plan.records <= 40 for b in batches)
    assert sum(b.plan.records for b in batches) == 67
    assert conservation(env.config, topic, env.edge).ok
    # The burst windows hold one entry per committed batch, with what each batch drained.
    history = env.ledger.samples.poll_history(topic.name, 3, 6, 4)
    for p in range(3):
        assert history.counts(p) == [b.drain.written_by_priority().get(p, 0) for b in reversed(batches)][-6:]


def test_a_run_that_fails_before_it_takes_its_batch_is_retried_backing_off_and_the_drain_stops_not_ok_naming_it(
        make_topic, kprio_env, dagster_instance, monkeypatch):
    """A run that fails before it starts (here Dagster refuses its run config) leaves its batch planned: the next
    tick fails the batch at that attempt, transient (its partitions held), and retries it under a new run key, at
    once and then backing off; the retries fail alike, and once nothing committed for the loop's limit (rule 7,
    120 s; 3 s here) the drain stops not ok naming the batch and why: never "no backlog left" while it holds it."""
    monkeypatch.setattr(loop, "BLOCKED_GIVE_UP_S", 3.0)
    topic = make_topic(priorities=2, partitions=1, records={1: 5, 0: 5})
    env = kprio_env(topic, recovery={"backoff_s": 0.5, "backoff_max_s": 1})

    report = drain_loop.drain(env.defs, dagster_instance, log_level="NOT-A-LEVEL")

    assert not report.ok
    assert "b-000001" in report.stopped and "before it took the batch" in report.stopped, report.stopped
    batch = env.ledger.batches.get("b-000001")
    assert (batch.state.value, batch.transient) == ("failed", True) and batch.transient_streak >= 2, batch
    runs = [r.batch_id for r in report.batches]
    # One run per attempt, each ended before it took the batch (a streak as long as the attempts). Two at least: the
    # first failure's retry is at once; how many backed-off ones fit in the 3 s depends on the machine's speed.
    assert runs == ["b-000001"] * len(runs) and len(runs) == batch.attempts >= 2, runs
    assert batch.transient_streak == batch.attempts, batch
