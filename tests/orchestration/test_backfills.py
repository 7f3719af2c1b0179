"""UI backfills: re-draining chosen batch partitions, and replaying hourly time windows."""

from __future__ import annotations

import json

from pathlib import Path

import pytest

from orchestration.dagster import drain_loop
from orchestration.runtime.checks import CHECK_NAMES
from tests.fixtures.kafka import fill
from tests.orchestration.conservation import conservation
from tests.orchestration.dagster_env import read_all_output

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]

HOUR_22 = 1_699_999_200_000
"""2023-11-14T22:00:00Z."""


def test_redrain_of_a_committed_batch_leaves_one_copy_and_commits_nothing_new(
    make_topic, kprio_env, dagster_instance, spark
):
    topic = make_topic(priorities=2, partitions=2, records={1: 8, 0: 6})
    env = kprio_env(topic)
    assert drain_loop.drain(env.defs, dagster_instance).ok
    before = env.edge.committed(topic)
    output = read_all_output(spark, env.config.drain.output_path, topic)
    assert len(output) == 14
    history = env.ledger.samples.poll_history(topic.name, 2, 6, 4)

    # What each run of a backfill over the partition b-000001 executes, whichever asset the user picked:
    # the two assets are one op, so the job page and the asset page run the same single drain.
    result = env.defs.resolve_job_def("drain_job").execute_in_process(
        instance=dagster_instance, partition_key="b-000001", tags={"dagster/backfill": "test-backfill"}
    )

    assert result.success
    batch = env.ledger.batches.get("b-000001")
    assert (batch.state.value, batch.attempts, batch.replay_of_committed) == ("committed", 2, True)
    assert batch.commit.moved == ()  # every range was committed already
    assert read_all_output(spark, env.config.drain.output_path, topic) == output  # replaced, not added
    assert env.edge.committed(topic) == before
    assert env.ledger.samples.poll_history(topic.name, 2, 6, 4) == history  # a re-drain is not a new poll
    assert conservation(env.config, topic, env.edge).ok
    commit = {m.asset_key.to_user_string(): m for m in result.asset_materializations_for_node("drain_batch")}
    assert commit["committed_offsets"].metadata["replay"].value == 1
    assert commit["committed_offsets"].metadata["partitions_moved"].value == 0
    # Dagster ran the six checks on the re-drained output, and they passed.
    assert {e.check_name: e.passed for e in result.get_asset_check_evaluations()} == dict.fromkeys(
        ["row_count_matches_plan", "offsets_are_unique", "offsets_within_plan", "offsets_are_contiguous",
         "required_fields_present", "values_match_schema"], True)


@pytest.mark.parametrize("selected", ["drained_batch", "committed_offsets"])
def test_a_backfill_that_selects_one_asset_of_the_batch_still_runs_the_one_whole_drain(
    selected, make_topic, kprio_env, dagster_instance, spark
):
    import dagster as dg

    topic = make_topic(priorities=2, partitions=1, records={1: 5, 0: 4})
    env = kprio_env(topic)
    assert drain_loop.drain(env.defs, dagster_instance).ok
    before, output = env.edge.committed(topic), read_all_output(spark, env.config.drain.output_path, topic)

    # The asset page's "Materialize" of one asset: Dagster runs the op for that asset alone.
    result = env.defs.resolve_job_def("drain_job").execute_in_process(
        instance=dagster_instance, partition_key="b-000001", tags={"dagster/backfill": "test-backfill"},
        asset_selection=[dg.AssetKey(selected)],
    )

    assert result.success
    batch = env.ledger.batches.get("b-000001")
    assert (batch.state.value, batch.attempts, batch.replay_of_committed) == ("committed", 2, True)
    assert read_all_output(spark, env.config.drain.output_path, topic) == output
    assert env.edge.committed(topic) == before and conservation(env.config, topic, env.edge).ok
    # Both assets' materializations are recorded, whichever was selected; checks only with their asset.
    assert {m.asset_key.to_user_string() for m in result.asset_materializations_for_node("drain_batch")} == {
        "drained_batch", "committed_offsets"}
    evaluations = result.get_asset_check_evaluations()
    assert (len(evaluations) == 6 and all(e.passed for e in evaluations)) if selected == "drained_batch" \
        else evaluations == []


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
    assert materialization.metadata["partial_hour"].value is False
    # The live groups never moved, and the live output was never written.
    assert set(env.edge.committed(topic).values()) == {None}
    assert not Path(env.config.drain.output_path).exists()


def test_a_replay_runs_the_batch_checks_and_publishes_nothing_when_one_fails(
    make_topic, kprio_env, dagster_instance, spark
):
    # Amounts 1.5, 4.5 are not JSON integers: under the schema's "long" they do not decode.
    records = [(f"k{i}", json.dumps({"i": i, "amount": i + (0.5 if i % 3 == 1 else 0)}), HOUR_22 + 3_600_000 + i, 0)
               for i in range(6)]
    topic = make_topic(priorities=1, partitions=1, records={0: records}, schema={"i": "long", "amount": "long"})
    env = kprio_env(topic, quality={"invalid": "block"}, drain={"replay_start": "2023-11-14"})

    result = env.defs.resolve_job_def("replay_window_job").execute_in_process(
        instance=dagster_instance, partition_key="2023-11-14-23:00", raise_on_error=False)

    assert not result.success
    verdicts = {e.check_name: e for e in result.get_asset_check_evaluations()}
    assert set(verdicts) == set(CHECK_NAMES), "the six checks of a drained batch"
    assert {name for name, e in verdicts.items() if not e.passed} == {"values_match_schema"}
    failed = verdicts["values_match_schema"]
    assert (failed.asset_key.to_user_string(), failed.metadata["invalid_records"].value) == ("replayed_window", 2)
    [check_event] = [e for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
                     and e.event_specific_data.check_name == "values_match_schema"]
    assert check_event.event_specific_data.partition == "2023-11-14-23:00", "recorded on the replay's partition"
    failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error
    assert f"replay of 2023-11-14-23:00 failed its checks; nothing of {topic.name} was published: " in failure.message
    assert f"values_match_schema failed on {topic.priority_topic(0)}[0]@[0,6)" in failure.message
    replayed = Path(env.config.drain.replay_path)
    assert not replayed.exists() or not [f for f in replayed.rglob("*.parquet")], "nothing published, nothing staged"
    assert set(env.edge.committed(topic).values()) == {None}


def test_a_partition_added_by_hand_in_the_ui_fails_saying_it_is_no_batch(make_topic, kprio_env, dagster_instance):
    from orchestration.dagster.partitions import BATCH_PARTITIONS_NAME

    topic = make_topic(priorities=1, partitions=1, records={0: 2})
    env = kprio_env(topic)
    dagster_instance.add_dynamic_partitions(BATCH_PARTITIONS_NAME, ["b-999999"])  # the dialog's "Add a partition"

    result = env.defs.resolve_job_def("drain_job").execute_in_process(
        instance=dagster_instance, partition_key="b-999999", raise_on_error=False)

    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data.error
    assert "b-999999 is not a batch of Ledger(" in failure.message
    assert "Pick an existing partition of drained_batch" in failure.message
    assert env.ledger.batches.find(topic.name) == [] and not any(env.edge.committed(topic).values())


def test_a_sensor_run_whose_work_is_done_or_moved_on_says_so_and_succeeds(
    make_topic, kprio_env, dagster_instance, spark
):
    from orchestration.dagster.sensors import tick

    topic = make_topic(priorities=2, partitions=1, records={1: 3, 0: 3})
    env = kprio_env(topic)
    assert drain_loop.drain(env.defs, dagster_instance).ok
    job = env.defs.resolve_job_def("drain_job")

    # A late run of attempt 1 of a committed batch (a duplicate launch): it reports the stored checks.
    late = job.execute_in_process(instance=dagster_instance, partition_key="b-000001",
                                  tags={"kprio/attempt": "1", "kprio/why": "new"})
    assert late.success and env.ledger.batches.get("b-000001").attempts == 1
    assert [e.passed for e in late.get_asset_check_evaluations()] == [True] * 6
    assert late.asset_materializations_for_node("drain_batch") == []  # nothing drained, nothing committed

    # A run of attempt 1 of a batch already at attempt 2 (retried meanwhile): nothing to report, success.
    fill(env.config.kafka, topic.priority_topic(1), 4, partitions=1)
    turn = tick(dagster_instance, env.edge, env.ledger, env.config)
    dagster_instance.add_dynamic_partitions("kprio_batches", list(turn.partitions))
    [batch_id] = turn.partitions
    env.ledger.moves.mark_failed(batch_id, "test: failed once", retry_at=None)
    env.ledger.attempts.retry(batch_id, reason="test: the sensor's retry")
    stale = job.execute_in_process(instance=dagster_instance, partition_key=batch_id,
                                   tags={"kprio/attempt": "1", "kprio/why": "new"})
    assert stale.success and stale.get_asset_check_evaluations() == []
    batch = env.ledger.batches.get(batch_id)
    assert (batch.state.value, batch.attempts, batch.lease) == ("planned", 2, None)
    # The run of attempt 2 drains and commits it.
    assert job.execute_in_process(instance=dagster_instance, partition_key=batch_id,
                                  tags={"kprio/attempt": "2", "kprio/why": "retry"}).success
    assert env.ledger.batches.get(batch_id).state.value == "committed"
    assert conservation(env.config, topic, env.edge).ok
