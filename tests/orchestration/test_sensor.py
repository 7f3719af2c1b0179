"""priority_lag_sensor on the real broker and a real Dagster instance: plans, run requests, skip reasons."""

from __future__ import annotations

import re
import time

import dagster as dg
import pytest

from kprio_core.burst import PollHistory
from kprio_core.offsets import OffsetRange
from kprio_core.planner import Budget, plan_batch
from kprio_core.rate import RateQuotaTracker
from orchestration import runner
from orchestration.planning import RATE_STATE
from tests.fixtures.kafka import fill

pytestmark = [pytest.mark.broker, pytest.mark.dagster]


def test_tick_records_the_planners_plan_and_requests_its_run(make_topic, kprio_env, dagster_instance):
    topic = make_topic(priorities=3, partitions=2, records={2: 10, 1: 5, 0: 20})
    env = kprio_env(topic, planner={"record_budget": 20})
    expected = plan_batch(
        env.edge.snapshot(topic, now_ms=0), Budget(20, env.config.planner.byte_budget, 0.05),
        history=PollHistory(3), reserved=(),
    )

    result = runner.tick(env.defs, dagster_instance)

    assert result.skip_reason is None
    [request] = result.run_requests
    [batch] = env.ledger.batches(topic.name)
    assert (request.run_key, request.partition_key) == (batch.batch_id, batch.batch_id) == ("b-000001",) * 2
    assert batch.state.value == "planned"
    assert batch.plan.offset_ranges() == expected.offset_ranges()
    assert batch.plan.records_by_priority() == expected.records_by_priority() == {2: 10, 1: 5, 0: 5}
    assert dagster_instance.get_dynamic_partitions("kprio_batches") == ["b-000001"]

    # No run was launched for it: the next tick asks again with the same run key, and plans nothing new.
    again = runner.tick(env.defs, dagster_instance)
    assert [r.run_key for r in again.run_requests] == ["b-000001"]
    assert len(env.ledger.batches(topic.name)) == 1


def test_a_burst_in_priority_2_goes_first_while_priority_0_keeps_its_share(
    make_topic, kprio_env, dagster_instance, kafka_settings, spark
):
    topic = make_topic(priorities=3, partitions=1, records={0: 60})
    env = kprio_env(topic, planner={"record_budget": 20})
    first = runner.drain(env.defs, dagster_instance, max_batches=1)
    assert [(b.state, b.records) for b in first.batches] == [("committed", {0: 20})]

    fill(kafka_settings, topic.priority_topic(2), 40, partitions=1)
    result = runner.tick(env.defs, dagster_instance)

    [request] = result.run_requests
    plan = env.ledger.get(request.partition_key).plan
    by_p = plan.records_by_priority()
    assert by_p[2] > by_p[0] >= 1  # the burst first, and no starvation of the old backlog
    assert sum(by_p.values()) == 20
    p0 = [r.range for r in plan.ranges if r.priority == 0]
    assert p0 == [OffsetRange(topic.priority_topic(0), 0, 20, 20 + by_p[0])]  # continues where batch 1 stopped
    assert [r.range.start for r in plan.ranges if r.priority == 2] == [0]


def skip(env, instance) -> str:
    result = runner.tick(env.defs, instance)
    assert not result.run_requests
    return result.skip_reason.skip_message


def test_skip_reason_no_backlog(make_topic, kprio_env, dagster_instance):
    env = kprio_env(make_topic(priorities=2, partitions=1))
    assert skip(env, dagster_instance) == "no backlog"


def test_skip_reason_batch_in_flight(make_topic, kprio_env, dagster_instance):
    topic = make_topic(priorities=2, partitions=1, records={1: 5})
    env = kprio_env(topic)
    [request] = runner.tick(env.defs, dagster_instance).run_requests
    env.ledger.mark_drained(request.partition_key, {"ranges": []})
    assert skip(env, dagster_instance) == "batch b-000001 still in flight (drained)"


def test_skip_reason_failed_batch_waits_for_an_operator(make_topic, kprio_env, dagster_instance):
    topic = make_topic(priorities=2, partitions=1, records={1: 5})
    env = kprio_env(topic)
    [request] = runner.tick(env.defs, dagster_instance).run_requests
    env.ledger.mark_failed(request.partition_key, "values_match_schema failed (invalid_records=5)")
    assert skip(env, dagster_instance).startswith(
        "batch b-000001 failed (values_match_schema failed (invalid_records=5)); fix the cause and re-materialize"
    )


def test_skip_reason_throttled(make_topic, kprio_env, dagster_instance):
    topic = make_topic(priorities=3, partitions=1, records={2: 5})
    env = kprio_env(topic, rate={"samples": 2, "window_s": 1.0, "quotas": {2: {"records_per_s": 10}}})
    tracker = RateQuotaTracker(records_per_s={2: 10}, samples=2, window_s=1.0)
    tracker.record_batch(2, records=1000, bytes=0, now=time.time())  # 1000 records in the last second
    env.ledger.save_state(topic.name, RATE_STATE, tracker.to_dict())
    assert re.fullmatch(r"throttled for \d+\.\d s on priority 2", skip(env, dagster_instance))


def test_skip_reason_byte_budget_below_one_record(make_topic, kprio_env, dagster_instance):
    # The planner never exceeds the byte budget, so a budget below one record plans nothing:
    # the tick must say so instead of looking idle while the backlog waits.
    topic = make_topic(priorities=2, partitions=1, records={1: 5})
    env = kprio_env(topic, planner={"byte_budget": 1, "record_budget": 100})
    assert skip(env, dagster_instance).startswith("planner.byte_budget (1 bytes) is smaller than one record")


def test_skip_reason_broker_unreachable(make_topic, kprio_env, dagster_instance):
    env = kprio_env(make_topic(priorities=2, partitions=1)).rebuild(
        kafka={"bootstrap_servers": "127.0.0.1:1", "timeout_s": 1.0}
    )
    assert skip(env, dagster_instance).startswith("broker unreachable: no Kafka broker answered at 127.0.0.1:1")


def test_skip_reason_offsets_lost_to_retention(make_topic, kprio_env, dagster_instance):
    topic = make_topic(priorities=2, partitions=1, records={1: 6})
    env = kprio_env(topic)
    name = topic.priority_topic(1)
    env.edge.commit(topic, [OffsetRange(name, 0, 0, 1)])
    env.edge.delete_records({(name, 0): 3})
    assert skip(env, dagster_instance).startswith(
        f"offsets lost to retention before they were drained: {name}[0]@[1,3); set drain.allow_data_loss"
    )


def test_skip_reason_batch_whose_run_died(make_topic, kprio_env, dagster_instance):
    topic = make_topic(priorities=2, partitions=1, records={1: 5})
    env = kprio_env(topic)
    [request] = runner.tick(env.defs, dagster_instance).run_requests
    env.ledger.mark_drained(request.partition_key, {"ranges": []})

    # A drain run of that partition that ended without moving the batch (its process died).
    @dg.op
    def crash() -> None:
        raise RuntimeError("worker lost")

    @dg.job(name="drain_job")
    def drain_job() -> None:
        crash()

    drain_job.execute_in_process(
        instance=dagster_instance, tags={"dagster/partition": request.partition_key}, raise_on_error=False
    )
    assert skip(env, dagster_instance) == (
        "batch b-000001 is drained but its last run ended FAILURE; re-materialize its partition b-000001 to finish it"
    )
