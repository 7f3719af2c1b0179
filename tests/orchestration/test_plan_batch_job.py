"""The manual drain: plan_batch_job plans one batch with the Launchpad's config; the sensor launches it."""

from __future__ import annotations

import dagster as dg
import pytest

from orchestration.dagster import drain_loop

pytestmark = [pytest.mark.broker, pytest.mark.dagster]


def run_config(topic: str, **fields) -> dict:
    return {"ops": {"plan_batch_op": {"config": {"logical_topic": topic, **fields}}}}


@pytest.mark.spark
@pytest.mark.slow
def test_manual_plan_is_drained_through_the_same_assets(make_topic, kprio_env, dagster_instance, spark):
    topic = make_topic(priorities=3, partitions=1, records={2: 10, 1: 10, 0: 10})
    env = kprio_env(topic)
    job = env.defs.resolve_job_def("plan_batch_job")

    result = job.execute_in_process(
        run_config=run_config(topic.name, priorities=[2, 0], record_budget=8), instance=dagster_instance
    )

    assert result.success
    batch_id = result.output_for_node("plan_batch_op")
    batch = env.ledger.batches.get(batch_id)
    assert batch.state.value == "planned"
    assert {r.priority for r in batch.plan.ranges} == {2, 0}  # priority 1 left out as asked
    assert batch.plan.records == 8
    assert dagster_instance.get_dynamic_partitions("kprio_batches") == [batch_id]

    # The sensor launches it (run key = batch id), and drain_job drains, checks and commits it.
    report = drain_loop.drain(env.defs, dagster_instance, max_batches=1)
    assert [(b.batch_id, b.state.value) for b in report.batches] == [(batch_id, "committed")]
    assert report.records() == {p: n for p, n in batch.plan.records_by_priority().items() if n}
    [run] = dagster_instance.get_run_records(dg.RunsFilter(tags={"dagster/run_key": batch_id}))
    assert run.dagster_run.tags["dagster/partition"] == batch_id


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"priorities": [5]}, "has priorities 0..2, not [5]"),
        ({"priorities": [1]}, "nothing planned: no backlog"),
    ],
)
def test_manual_plan_says_why_it_planned_nothing(make_topic, kprio_env, dagster_instance, fields, message):
    topic = make_topic(priorities=3, partitions=1, records={2: 3})
    env = kprio_env(topic)
    result = env.defs.resolve_job_def("plan_batch_job").execute_in_process(
        run_config=run_config(topic.name, **fields), instance=dagster_instance, raise_on_error=False
    )
    assert not result.success
    [failure] = [e for e in result.all_events if e.is_step_failure]
    assert message in failure.step_failure_data.user_failure_data.description
    assert env.ledger.batches.find(topic.name) == []
