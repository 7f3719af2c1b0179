"""Writers that act on what they saw a moment ago: a second driver's stale plan, a log recreated under a batch.

Each interleaving is forced, never waited for: a real ``kprio drain`` child process is stopped at a
named point (``KPRIO_PAUSE_AT``, orchestration/runtime/faults.py) while the other side acts, then
resumed; or the test runs the tick and the run apart, the recreation between them, as the Dagster
daemon does (the sensor records a batch, its run starts later).
"""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from kprio_core.kafka.produce import Record, produce
from kprio_core.ledger import BatchState, Ledger
from orchestration.services.process import wait_for
from tests.fixtures.kafka import delete_topics
from tests.orchestration.conservation import conservation, lag
from tests.orchestration.test_recovery import CHILD_TIMEOUT_S, child_config, finish, kill_group, output_of, start

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]


def test_a_plan_made_before_another_drivers_commit_is_refused_and_nothing_is_lost(
        make_topic, kprio_env, tmp_path, spark, child_spark):
    """Driver A takes its lag snapshot (100 records) and stops there; driver B plans, drains, publishes and
    commits all 200 records; A wakes and records its plan from the old snapshot: [0,100). Recorded, that
    batch would publish over B's file of [0,200) and skip its commit as a replay: offsets 100-199 gone.
    The ledger refuses it in the transaction that would record it, and A plans again from where B left off."""
    topic = make_topic(priorities=1, partitions=1, records={0: 100}, schema={"i": "long", "amount": "double"})
    env = kprio_env(topic, planner={"record_budget": 10_000, "target_batch_s": None})
    (tmp_path / "home").mkdir()
    config = child_config(env, tmp_path, child_spark)
    a = start(config, tmp_path, "--until-empty", KPRIO_PAUSE_AT=f"after-snapshot:{topic.name}",
              KPRIO_CRASH_ONCE=str(tmp_path / "paused"))
    try:
        # after-snapshot is a point of the tick: kprio drain itself stops there
        assert wait_for(lambda: psutil.Process(a.pid).status() == psutil.STATUS_STOPPED, CHILD_TIMEOUT_S,
                        interval_s=0.2), output_of(a)[-2000:]
        produce(env.config.kafka, topic.priority_topic(0),
                [Record(f"k{i}", f'{{"i": {i}, "amount": 1.0}}', partition=0) for i in range(100, 200)])
        finish(config, tmp_path)  # driver B: drains and commits [0,200)
        assert lag(topic, env.edge) == {0: 0}
        os.kill(a.pid, signal.SIGCONT)
        assert a.wait(timeout=CHILD_TIMEOUT_S) == 0, output_of(a)[-3000:]
    finally:
        kill_group(a)
    with Ledger(env.config.ledger.url) as ledger:
        batches = ledger.batches.find(topic.name)
    assert [(b.state, [str(r) for r in b.plan.offset_ranges()]) for b in batches] == [
        (BatchState.COMMITTED, [f"{topic.priority_topic(0)}[0]@[0,200)"])], "A recorded no batch"
    check = conservation(env.config, topic, env.edge)
    assert check.ok, check


def test_a_topic_recreated_while_its_batch_is_in_flight_publishes_nothing_of_the_new_log(
        make_topic, kprio_env, dagster_instance):
    """The batch was recorded from the old log (its topic id A); the topic is deleted and recreated (id B) with
    as many records before its run reads them. The run reads the new log's offsets, finds the topic id changed
    and fails as a log change before it publishes: nothing of the new log is named as the old incarnation's,
    so after the person's reset the new incarnation's records are in the output once."""
    from orchestration.dagster import drain_loop
    from orchestration.dagster.sensors import tick
    from orchestration.runtime.log_changes import reset_partition

    topic = make_topic(priorities=1, partitions=1, records={0: 300}, schema={"i": "long", "amount": "double"})
    env = kprio_env(topic, planner={"record_budget": 10_000, "target_batch_s": None},
                    recovery={"max_attempts": 1})
    turn = tick(dagster_instance, env.edge, env.ledger, env.config)
    [request] = turn.requests
    name = topic.priority_topic(0)
    old_id = env.edge.topic_ids([name])[name]
    delete_topics(env.config.kafka, [name])
    env.edge.ensure_topics(topic, 1, config={"retention.ms": "-1"})
    produce(env.config.kafka, name, [Record(f"n{i}", f'{{"i": {i}, "amount": 2.0}}', partition=0)
                                     for i in range(400)])
    assert env.edge.topic_ids([name])[name] != old_id

    dagster_instance.add_dynamic_partitions("kprio_batches", [request.partition_key])
    result = drain_loop.execute(env.defs, dagster_instance, request, log_level="WARNING")
    assert not result.success
    batch = env.ledger.batches.get(request.partition_key)
    assert batch.state is BatchState.FAILED and f"the log of {name} changed while" in batch.reason, batch.reason
    assert "nothing of it was published" in batch.reason and "\n" not in batch.reason
    from spark_jobs import tables

    assert tables.live_files(env.config.drain, topic.name) == (), "nothing of the new log under the old one's names"
    # The tick holds the partition for a person and launches no retry of a batch of another log.
    held = tick(dagster_instance, env.edge, env.ledger, env.config)
    assert not held.requests and "topic recreated" in held.skip_reason, held.skip_reason
    # The person's reset starts incarnation 2; the old batch is superseded; the new log drains once.
    reset_partition(env.edge, env.ledger, env.config, name, 0, "earliest", now_ms=int(time.time() * 1000))
    report = drain_loop.drain(env.defs, dagster_instance, config=env.config)
    assert report.ok, report.stopped
    assert lag(topic, env.edge) == {0: 0}
    files = tables.live_files(env.config.drain, topic.name)
    assert files and all(f.incarnation == 2 for f in files), files
    rows = tables.read_rows(env.config.drain, "output", topic.name, columns=["offset"])
    offsets = rows.column("offset").to_pylist()
    assert sorted(offsets) == list(range(400)), "the new log's 400 records, each once"
