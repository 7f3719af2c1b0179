"""Output identity survives the loss of the ledger and of the Dagster home: no committed output is overwritten.

In both formats: Parquet files (their names and footers say what they hold), and Delta tables
(their log does: the uncommitted output leaves the table in a commit of its own).
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from kprio_core.ledger import Ledger, parse_batch_id
from orchestration.dagster import drain_loop
from orchestration.dagster.definitions import build_definitions
from orchestration.dagster.sensors import tick
from spark_jobs import tables
from spark_jobs.drain import drain_batch
from spark_jobs.layout import OUTPUT
from tests.fixtures.kafka import fill
from tests.orchestration.conservation import conservation, lag

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]


def batch_ids_in(drain, logical_topic: str) -> set[str]:  # noqa: ANN001 - DrainSettings
    """The batch ids of the published output rows (what a reader sees)."""
    return set(tables.read_rows(drain, OUTPUT, logical_topic, columns=["batch_id"]).column("batch_id").to_pylist())


@pytest.mark.parametrize("output_format", ["parquet", "delta"])
def test_losing_the_ledger_and_the_dagster_home_between_two_drains_loses_nothing(
    make_topic, kprio_env, kafka_settings, spark, output_format
):
    topic = make_topic(priorities=3, partitions=2, records={2: 40, 1: 60, 0: 200})
    env = kprio_env(topic, planner={"record_budget": 100, "target_batch_s": None}, drain={"format": output_format})
    with dg.instance_for_test() as first_life:
        report = drain_loop.drain(env.defs, first_life)
        assert report.ok, report.stopped
        # Then a batch is planned, drained and published, and the container dies before its commit.
        fill(kafka_settings, topic.priority_topic(0), 50, partitions=2)
        turn = tick(first_life, env.edge, env.ledger, env.config)
        [request] = turn.requests
        last = env.ledger.get(request.partition_key)
        result = drain_batch(spark, env.config, topic, last.batch_id, last.attempts, last.plan)
        tables.publish(env.config.drain, result)
    first_ids = {b.batch_id for b in env.ledger.batches(topic.name)}
    assert batch_ids_in(env.config.drain, topic.name) == first_ids
    assert not conservation(env.config, topic, env.edge).ok  # 50 uncommitted records are visible

    env.ledger.close()
    Path(env.config.ledger.url.removeprefix("sqlite:///")).unlink()  # the ledger file is gone
    fill(kafka_settings, topic.priority_topic(2), 30, partitions=2)
    with dg.instance_for_test() as second_life, Ledger(env.config.ledger.url) as fresh:
        assert fresh.is_fresh()
        report = drain_loop.drain(build_definitions(env.config), second_life)
        assert report.ok, report.stopped
        second_ids = {b.batch_id for b in fresh.batches(topic.name)}
        # New ids never reuse an id the output already names.
        assert second_ids and not second_ids & first_ids
        assert min(map(parse_batch_id, second_ids)) > max(map(parse_batch_id, first_ids))
        assert not fresh.is_fresh()

    assert lag(topic, env.edge) == {2: 0, 1: 0, 0: 0}
    check = conservation(env.config, topic, env.edge)
    assert check.ok, check
    assert check.output == 40 + 60 + 200 + 50 + 30
    # The uncommitted output of the first life was removed and its offsets drained again.
    assert batch_ids_in(env.config.drain, topic.name) == (first_ids - {last.batch_id}) | second_ids
    if output_format == "delta":  # the table's log says what left it, and why
        from deltalake import DeltaTable

        history = DeltaTable(f"{env.config.drain.output_path}/{topic.name}").history()
        [removal] = [h for h in history if "kprio.removed" in h]
        assert "never committed" in removal["kprio.removed"]
