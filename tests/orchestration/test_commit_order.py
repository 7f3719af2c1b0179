"""With ``planner.max_in_flight`` > 1, a batch that finishes before an earlier one commits once that one commits."""

from __future__ import annotations

import pytest

from kprio_core.ledger import BatchState
from orchestration.dagster import drain_loop
from orchestration.dagster.sensors import tick
from tests.orchestration.conservation import conservation, lag

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]


def test_a_later_batch_commits_by_itself_once_the_earlier_one_on_its_partitions_commits(
    make_topic, kprio_env, dagster_instance, spark
):
    topic = make_topic(priorities=2, partitions=1, records={1: 30})
    env = kprio_env(topic, planner={"record_budget": 10, "max_in_flight": 2, "target_batch_s": None})
    [first] = tick(dagster_instance, env.edge, env.ledger, env.config).requests
    [second] = [r for r in tick(dagster_instance, env.edge, env.ledger, env.config).requests
                if r.partition_key != first.partition_key]
    dagster_instance.add_dynamic_partitions("kprio_batches", [first.partition_key, second.partition_key])
    assert env.ledger.batches.get(second.partition_key).plan.offset_ranges()[0].start == 10  # behind the first

    # The later batch runs first: drained, checked and published, but it cannot commit past a hole.
    later = drain_loop.execute(env.defs, dagster_instance, second)
    assert later.success
    assert env.ledger.batches.get(second.partition_key).state is BatchState.CHECKED
    assert later.committed_here == {}, "no committed_offsets materialized by the later run"

    # The earlier one commits, and with it the later one: nobody re-materializes anything.
    earlier = drain_loop.execute(env.defs, dagster_instance, first)
    assert earlier.success
    assert env.ledger.batches.get(first.partition_key).state is BatchState.COMMITTED
    assert env.ledger.batches.get(second.partition_key).state is BatchState.COMMITTED
    assert env.edge.committed(topic)[(topic.priority_topic(1), 0)] == 20

    report = drain_loop.drain(env.defs, dagster_instance)
    assert report.ok, report.stopped
    assert lag(topic, env.edge) == {1: 0, 0: 0}
    check = conservation(env.config, topic, env.edge)
    assert check.ok, check
