"""With ``quality.invalid: block``, a batch that fails a blocking check is not committed and holds its partition;
after the cause is fixed, re-materializing it (the UI's path) drains it."""

from __future__ import annotations

import json

import pytest

from orchestration.dagster.drain_loop import execute
from orchestration.dagster.sensors import tick
from tests.fixtures.kafka import BASE_TS_MS
from tests.orchestration.conservation import conservation
from tests.orchestration.dagster_env import check_evaluations, materialized_assets, read_all_output

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]


def test_failed_check_blocks_the_commit_and_a_retry_after_the_fix_commits(
    make_topic, kprio_env, dagster_instance, spark
):
    # Amounts 1.5, 3.5 are not JSON integers: under the schema's "long" they do not decode.
    records = [(f"k{i}", json.dumps({"i": i, "amount": i + (0.5 if i % 3 == 1 else 0)}), BASE_TS_MS + i, 0)
               for i in range(6)]
    topic = make_topic(priorities=2, partitions=1, records={1: records},
                       schema={"i": "long", "amount": "long"}, required_fields=("i",))
    env = kprio_env(topic, quality={"invalid": "block"}, recovery={"max_attempts": 1})

    turn = tick(dagster_instance, env.edge, env.ledger, env.config)
    [request] = turn.requests
    dagster_instance.add_dynamic_partitions("kprio_batches", list(turn.partitions))

    first = execute(env.defs, dagster_instance, request)

    assert not first.success
    verdicts = check_evaluations(dagster_instance, first.run_id)
    assert {name for name, e in verdicts.items() if not e.passed} == {"values_match_schema"}
    assert verdicts["values_match_schema"].metadata["invalid_records"].value == 2
    # Nothing was published or committed; the ledger says why the batch failed.
    assert materialized_assets(dagster_instance, first.run_id) == []
    failed = env.ledger.batches.get(request.partition_key)
    assert (failed.batch_id, failed.state.value) == ("b-000001", "failed")
    assert failed.reason.startswith(f"values_match_schema failed on {topic.priority_topic(1)}[0]@[0,6) (")
    assert "invalid_records=2" in failed.reason
    # Nothing committed, the group has not moved, and the sensor says why it waits.
    assert env.edge.committed(topic) == {(topic.priority_topic(0), 0): None, (topic.priority_topic(1), 0): None}
    reason = tick(dagster_instance, env.edge, env.ledger, env.config).skip_reason
    assert f"held: {topic.priority_topic(1)}[0] from 0 by b-000001 (failed once: values_match_schema failed" in reason
    assert not conservation(env.config, topic, env.edge).beyond  # the failed attempt published nothing

    # The cause: the schema. Fixed, the same partition is materialized again (what the UI does).
    fixed = env.rebuild(topics=[{**topic.model_dump(mode="json", by_alias=True),
                                 "schema": {"i": "long", "amount": "double"}}])
    retry = fixed.defs.resolve_job_def("drain_job").execute_in_process(
        instance=dagster_instance, partition_key="b-000001", raise_on_error=False)

    assert retry.success
    batch = env.ledger.batches.get("b-000001")
    assert (batch.state.value, batch.attempts) == ("committed", 2)
    schema_check = batch.checks.outcome("values_match_schema")
    assert schema_check.passed and schema_check.metadata["invalid_records"] == 0
    assert schema_check.metadata["rows_checked"] == 6
    assert env.edge.committed(topic)[(topic.priority_topic(1), 0)] == 6
    assert read_all_output(spark, env.config.drain.output_path, topic) == [
        (topic.priority_topic(1), 0, o) for o in range(6)
    ]
