"""kprio drain runs an urgent batch beside a bulk one: it does not wait for the bulk batch to end.

The bulk batch's handler holds one Spark core for 8 s on one partition (a long bulk task); the
urgent records are produced once that batch drains. The loop ticks at most every 30 s, so only its
watch can see them arrive on a priority whose slot no batch holds; the tick it wakes plans them, and their run executes in a thread
of its own, its Spark job in its priority's pool on the core the bulk batch left free: the urgent
batch commits while the bulk one still drains, and everything is conserved.
"""

from __future__ import annotations

import threading

import pytest

from kprio_core.ledger import BatchState
from kprio_core.lifecycle.loop import Until
from orchestration.dagster import drain_loop
from orchestration.services.process import wait_for
from tests.fixtures.kafka import fill
from tests.orchestration.conservation import conservation

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]

SLOW = "tests.spark_jobs.handlers_for_tests:slow_on_partition_0_of_priority_0"


def test_an_urgent_batch_drains_and_commits_while_a_bulk_batch_still_drains(make_topic, kprio_env, dagster_instance,
                                                                             kafka_settings, spark):
    topic = make_topic(priorities=3, partitions=2, records={0: 40})
    # A tick every 30 s at most: only the watch (the partitions' ends every 0.1 s) can plan the urgent
    # records while the bulk batch drains.
    env = kprio_env(topic, drain={"handler": SLOW}, sensor={"interval_s": 30, "watch_s": 0.1})
    done: dict[str, drain_loop.DrainReport] = {}
    loop = threading.Thread(target=lambda: done.update(report=drain_loop.drain(env.defs, dagster_instance,
                                                                               until=Until.EMPTY)))
    loop.start()

    def bulk_draining() -> bool:  # its run took the lease: the drain is under way
        return any(b.state is BatchState.PLANNED and b.lease is not None for b in env.ledger.batches.find(topic.name))

    assert wait_for(bulk_draining, 120, interval_s=0.05)
    fill(kafka_settings, topic.priority_topic(2), 6, partitions=2)
    loop.join(300)
    assert not loop.is_alive()
    report = done["report"]

    assert report.ok and report.stopped == "no backlog left", report.stopped
    assert report.records() == {2: 6, 0: 40}
    bulk, urgent = sorted(env.ledger.batches.find(topic.name), key=lambda b: b.batch_id)
    assert [{r.priority for r in b.plan.ranges if r.range.count} for b in (bulk, urgent)] == [{0}, {2}]

    def committed_at(batch_id: str):
        return next(e.at for e in env.ledger.batches.events(batch_id) if e.to_state is BatchState.COMMITTED)

    urgent_planned = next(e.at for e in env.ledger.batches.events(urgent.batch_id))
    # Planned and committed while the bulk batch drained (its handler still held a core).
    assert urgent_planned < committed_at(urgent.batch_id) < committed_at(bulk.batch_id)
    # The report lists each run once, in the order the runs ended.
    assert [b.batch_id for b in report.batches] == [urgent.batch_id, bulk.batch_id]
    assert conservation(env.config, topic, env.edge).ok
