"""UI backfills: re-draining chosen batch partitions, and replaying hourly time windows."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestration import runner
from tests.orchestration.dagster_env import read_all_output

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]

HOUR_22 = 1_699_999_200_000
"""2023-11-14T22:00:00Z."""


def test_redrain_of_a_committed_batch_leaves_one_copy_and_commits_nothing_new(
    make_topic, kprio_env, dagster_instance, spark
):
    topic = make_topic(priorities=2, partitions=2, records={1: 8, 0: 6})
    env = kprio_env(topic)
    assert runner.drain(env.defs, dagster_instance).ok
    before = env.edge.committed(topic)
    output = read_all_output(spark, env.config.drain.output_path, topic)
    assert len(output) == 14
    history = env.ledger.load_history(topic.name)

    # What each run of a backfill over the partition b-000001 executes.
    result = env.defs.resolve_job_def("drain_job").execute_in_process(
        instance=dagster_instance, partition_key="b-000001", tags={"dagster/backfill": "test-backfill"}
    )

    assert result.success
    batch = env.ledger.get("b-000001")
    assert (batch.state.value, batch.attempts, batch.replay_of_committed) == ("committed", 2, True)
    assert batch.commit_report["moved"] == []  # every range was committed already
    assert read_all_output(spark, env.config.drain.output_path, topic) == output  # replaced, not added
    assert env.edge.committed(topic) == before
    assert env.ledger.load_history(topic.name) == history  # a replay is not a new poll
    [commit] = result.asset_materializations_for_node("committed_offsets")
    assert commit.metadata["replay"].value == 1
    assert commit.metadata["partitions_moved"].value == 0


def test_replayed_window_holds_exactly_the_records_of_its_hour(make_topic, kprio_env, dagster_instance, spark):
    # Records 1 s apart from 22:59:50: p1 offsets 0-9 fall in hour 22, 10-19 in hour 23; p0 only in hour 22.
    topic = make_topic(priorities=2, partitions=1, records={1: 20, 0: 5}, base_ts_ms=HOUR_22 + 3_590_000)
    env = kprio_env(topic, drain={"replay_start": "2023-11-14"})
    job = env.defs.resolve_job_def("replay_window_job")

    for _ in range(2):  # a rerun replaces the hour's output
        result = job.execute_in_process(instance=dagster_instance, partition_key="2023-11-14-23:00")
        assert result.success

    assert read_all_output(spark, env.config.drain.replay_path, topic) == [
        (topic.priority_topic(1), 0, o) for o in range(10, 20)
    ]
    [materialization] = result.asset_materializations_for_node("replayed_window")
    assert materialization.metadata["records_p1"].value == 10
    assert materialization.metadata["records_p0"].value == 0
    # The live groups never moved, and the live output was never written.
    assert set(env.edge.committed(topic).values()) == {None}
    assert not Path(env.config.drain.output_path).exists()
