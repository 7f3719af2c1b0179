"""A batch that fails a blocking check is not committed; after the cause is fixed, re-materializing it drains it."""

from __future__ import annotations

import json

import pytest

from orchestration import runner
from tests.fixtures.kafka import BASE_TS_MS
from tests.orchestration.dagster_env import read_all_output

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]


def test_failed_check_blocks_the_commit_and_a_retry_after_the_fix_commits(
    make_topic, kprio_env, dagster_instance, spark
):
    # Amounts 1.5, 3.5 are not JSON integers: under the schema's "long" they do not decode.
    records = [(f"k{i}", json.dumps({"i": i, "amount": i + (0.5 if i % 3 == 1 else 0)}), BASE_TS_MS + i, 0)
               for i in range(6)]
    topic = make_topic(priorities=2, partitions=1, records={1: records},
                       schema={"i": "long", "amount": "long"}, required_fields=("i",))
    env = kprio_env(topic)

    [request] = runner.tick(env.defs, dagster_instance).run_requests
    first = runner.execute(env.defs, dagster_instance, request)

    assert not first.success
    verdicts = {e.check_name: e for e in first.get_asset_check_evaluations()}
    assert {name for name, e in verdicts.items() if not e.passed} == {"values_match_schema"}
    assert verdicts["values_match_schema"].metadata["invalid_records"].value == 2
    # Dagster stopped the commit step; the ledger says why the batch failed.
    assert first.asset_materializations_for_node("committed_offsets") == []
    failed = env.ledger.get(request.partition_key)
    assert (failed.batch_id, failed.state.value) == ("b-000001", "failed")
    assert failed.reason.startswith("values_match_schema failed (")
    assert "invalid_records=2" in failed.reason
    # Nothing committed, the group has not moved, and the sensor says why it waits.
    assert env.edge.committed(topic) == {(topic.priority_topic(0), 0): None, (topic.priority_topic(1), 0): None}
    reason = runner.tick(env.defs, dagster_instance).skip_reason.skip_message
    assert reason.startswith("batch b-000001 failed (values_match_schema failed")

    # The cause: the schema. Fixed, the same partition is materialized again (what the UI does).
    fixed = env.rebuild(topics=[{**topic.model_dump(mode="json", by_alias=True),
                                 "schema": {"i": "long", "amount": "double"}}])
    retry = fixed.defs.resolve_job_def("drain_job").execute_in_process(
        instance=dagster_instance, partition_key="b-000001", raise_on_error=False)

    assert retry.success
    batch = env.ledger.get("b-000001")
    assert (batch.state.value, batch.attempts) == ("committed", 2)
    assert batch.check_results["values_match_schema"] == {"passed": True, "rows_checked": 6, "invalid_records": 0}
    assert env.edge.committed(topic)[(topic.priority_topic(1), 0)] == 6
    assert read_all_output(spark, env.config.drain.output_path, topic) == [
        (topic.priority_topic(1), 0, o) for o in range(6)
    ]
