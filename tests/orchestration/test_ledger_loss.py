"""Output identity survives the loss of the ledger and of the Dagster home: no committed output is overwritten.

In every format: Parquet files (their names and footers say what they hold), Delta tables (their log
does) and Iceberg tables (their snapshots' summaries do, read back from the catalog).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kprio_core.extras import OUTPUT_FORMATS
from kprio_core.ledger import Ledger, parse_batch_id
from orchestration.cli.drain import adoption_lines
from orchestration.dagster import drain_loop
from orchestration.dagster.definitions import build_definitions
from orchestration.dagster.sensors import tick
from orchestration.services.process import wait_for
from spark_jobs import tables
from spark_jobs.drain import drain_batch
from spark_jobs.layout import OUTPUT
from tests.fixtures.kafka import BASE_TS_MS, fill
from tests.orchestration.conservation import conservation, iceberg_publishes, iceberg_table, lag
from tests.fixtures.dagster_instances import fresh_instance

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]


def batch_ids_in(drain, logical_topic: str) -> set[str]:  # noqa: ANN001 - DrainSettings
    """The batch ids of the published output rows (what a reader sees)."""
    return set(tables.read_rows(drain, OUTPUT, logical_topic, columns=["batch_id"]).column("batch_id").to_pylist())


@pytest.mark.parametrize("output_format", list(OUTPUT_FORMATS))
def test_losing_the_ledger_and_the_dagster_home_between_two_drains_loses_nothing(
    make_topic, kprio_env, kafka_settings, spark, output_format
):
    topic = make_topic(priorities=3, partitions=2, records={2: 40, 1: 60, 0: 200})
    env = kprio_env(topic, planner={"record_budget": 100, "target_batch_s": None}, drain={"format": output_format})
    with fresh_instance() as first_life:
        report = drain_loop.drain(env.defs, first_life)
        assert report.ok, report.stopped
        # Then a batch is planned, drained and published, and the container dies before its commit.
        fill(kafka_settings, topic.priority_topic(0), 50, partitions=2)
        turn = tick(first_life, env.edge, env.ledger, env.config)
        [request] = turn.requests
        last = env.ledger.batches.get(request.partition_key)
        result = drain_batch(spark, env.config, topic, last.batch_id, last.attempts, last.plan)
        tables.publish(env.config.drain, result)
    first_ids = {b.batch_id for b in env.ledger.batches.find(topic.name)}
    assert batch_ids_in(env.config.drain, topic.name) == first_ids
    assert not conservation(env.config, topic, env.edge).ok  # 50 uncommitted records are visible

    env.ledger.close()
    Path(env.config.ledger.url.removeprefix("sqlite:///")).unlink()  # the ledger file is gone
    fill(kafka_settings, topic.priority_topic(2), 30, partitions=2)
    said: list[str] = []
    with fresh_instance() as second_life, Ledger(env.config.ledger.url) as fresh, adoption_lines(said.append):
        assert fresh.is_fresh()
        report = drain_loop.drain(build_definitions(env.config), second_life)
        assert report.ok, report.stopped
        second_ids = {b.batch_id for b in fresh.batches.find(topic.name)}
        # New ids never reuse an id the output already names.
        assert second_ids and not second_ids & first_ids
        assert min(map(parse_batch_id, second_ids)) > max(map(parse_batch_id, first_ids))
        assert not fresh.is_fresh()

    assert lag(topic, env.edge) == {2: 0, 1: 0, 0: 0}
    check = conservation(env.config, topic, env.edge)
    assert check.ok, check
    assert check.output == 40 + 60 + 200 + 50 + 30
    # The first life's output that follows on from the committed offsets (published, its commit lost with the
    # container) is adopted as committed, not deleted: its records are in the output once, and not drained again.
    assert batch_ids_in(env.config.drain, topic.name) == first_ids | second_ids
    # kprio drain says so on its terminal, in one line (it said nothing; the log holds every move).
    moved = sorted({(r.topic, r.partition) for r in last.plan.offset_ranges() if r.count})
    counts = ", ".join(f"{t}: {n}" for t, n in sorted(Counter(t for t, _ in moved).items()))
    assert said == [f"kprio drain: a new ledger took over what an earlier one drained here: batch ids go on after "
                    f"b-{max(map(parse_batch_id, first_ids)):06d}; the consumer groups of {len(moved)} partitions "
                    f"moved forward to the end of the output it published ({counts}); nothing removed"], said
    with Ledger(env.config.ledger.url) as ledger:
        assert "nothing removed" in ledger.identity().adopted_note
        again = [r for b in ledger.batches.find(topic.name) for r in b.plan.offset_ranges()
                 if any(r.overlaps(x) for x in last.plan.offset_ranges())]
        assert again == [], "no batch of the second life re-drained them"
    if output_format == "delta":  # nothing left the table
        from deltalake import DeltaTable

        history = DeltaTable(f"{env.config.drain.output_path}/{topic.name}").history()
        assert not [h for h in history if "kprio.removed" in h]
    if output_format == "iceberg":  # every snapshot publishes a batch, each batch once: nothing left the table
        snapshots = iceberg_publishes(env.config.drain.iceberg, OUTPUT, topic.name)
        assert sorted(s["kprio.batch_id"] for s in snapshots) == sorted(first_ids | second_ids)
        assert len(iceberg_table(env.config.drain.iceberg, OUTPUT, topic.name).metadata.snapshots) == len(snapshots)


def spread(n: int, *, partitions: int, partition: int = 0) -> list[tuple]:
    """``n`` JSON records as ``(key, value, timestamp, partition)``, round-robin from ``partition`` over ``partitions``."""
    return [(f"k{i}", f'{{"i": {i}}}', BASE_TS_MS + i * 1000, (partition + i) % partitions if partitions > 1
             else partition) for i in range(n)]


def test_a_ledger_lost_after_the_groups_expired_and_retention_took_the_records_keeps_every_committed_record(
    make_topic, kprio_env, kafka_settings
):
    """The documented ephemeral-container case at its worst: the first life drained and committed every record;
    the container stayed down past ``offsets.retention.minutes`` (the groups' offsets expired: deleted here, as
    Kafka does) and retention took partition 0's records, 100 undrained ones with them. A fresh ledger must
    take the output as the proof of what was committed: nothing of it deleted, the 100 lost records a gap that
    holds the partition (and is recorded once drain.allow_data_loss says so), never a silent skip."""
    topic = make_topic(priorities=1, partitions=2, records={0: spread(600, partitions=2)})
    env = kprio_env(topic, planner={"record_budget": 250, "target_batch_s": None})
    with fresh_instance() as first_life:
        report = drain_loop.drain(env.defs, first_life)
        assert report.ok, report.stopped
    drained = env.edge.committed(topic)
    assert sorted(drained.values()) == [300, 300]
    before = sorted(tables.read_rows(env.config.drain, OUTPUT, topic.name, columns=["offset"]).column("offset")
                    .to_pylist())
    name = topic.priority_topic(0)
    fill(kafka_settings, name, spread(100, partitions=1), partitions=2)  # partition 0's 300-399, never drained
    fill(kafka_settings, name, spread(50, partitions=1, partition=1), partitions=2)
    env.edge.admin.delete_consumer_groups([topic.priority_group(0)])[topic.priority_group(0)].result(timeout=30)
    assert wait_for(lambda: set(env.edge.committed(topic).values()) == {None}, 30, interval_s=0.5)
    env.edge.delete_records({(name, 0): 400})  # retention: the log now starts at 400
    env.ledger.close()
    Path(env.config.ledger.url.removeprefix("sqlite:///")).unlink()

    with fresh_instance() as second_life, Ledger(env.config.ledger.url) as fresh:
        report = drain_loop.drain(build_definitions(env.config), second_life)
        assert not report.ok and "lost to retention" in report.stopped, report.stopped
        assert "offsets [300,400) lost to retention" in report.stopped
        assert "nothing removed" in fresh.identity().adopted_note
    kept = sorted(tables.read_rows(env.config.drain, OUTPUT, topic.name, columns=["offset"]).column("offset")
                  .to_pylist())
    assert kept == sorted(before + list(range(300, 350))), "every committed record is still in the output"
    assert env.edge.committed(topic) == {(name, 0): 300, (name, 1): 350}

    allowed = env.config.model_copy(update={"drain": env.config.drain.model_copy(update={"allow_data_loss": True})})
    with fresh_instance() as third, Ledger(env.config.ledger.url) as ledger:
        report = drain_loop.drain(build_definitions(allowed), third, config=allowed)
        assert report.ok, report.stopped
        assert [str(r) for b in ledger.batches.find(topic.name) for r in b.plan.lost] == []  # no batch drained past it
        gaps = [(e.committed, e.committed_after) for e in ledger.beliefs.log_events(topic.name)
                if e.outcome == "record the gap"]
    assert gaps == [(300, 400)], "the gap is recorded, once"
    assert env.edge.committed(topic) == {(name, 0): 400, (name, 1): 350}
