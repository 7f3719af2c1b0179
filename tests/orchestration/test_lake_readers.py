"""Other engines read the tables kprio wrote: DuckDB (its delta and iceberg extensions) and Spark.

A real drain (broker, Spark, the Dagster drain loop) into a Delta or an Iceberg table, poison
among the records so the dead-letter table is there too; then DuckDB (extensions from their PyPI
packages, no network) and Spark read the tables and must count exactly the records the groups
committed, each once, per batch as the ledger recorded them, with the columns and types the drain
wrote. Spark reads Delta with Delta Lake's own jars in a process of its own (its session extension is
a static setting); Iceberg's Spark runtime has no build for Spark 4.2, so Spark reads the data files
the table's current snapshot names (spark_jobs/lake_readers.py).
Iceberg: one snapshot per committed batch, its batch, attempt and offset ranges in the summary, and a reader
that reads the table's current snapshot in a loop while the drain runs sees whole batches, each offset once.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pytest

from kprio_core.ledger import BatchState
from orchestration.dagster import drain_loop
from spark_jobs import lake_readers
from spark_jobs.layout import DEAD_LETTERS, OUTPUT
from spark_jobs.tables import output_of
from tests.fixtures.kafka import BASE_TS_MS
from tests.orchestration.conservation import conservation, iceberg_publishes, iceberg_table, lag
from tests.spark_jobs.test_output_formats import TABLE_FORMATS

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]

POISON = (20, 70)


def with_poison(n: int) -> list[tuple]:
    """``n`` records per partition of 2, each ``{"i", "amount"}``, not JSON at offsets 20 and 70 of each."""
    return [(f"k{p}-{i}", b"not json" if i in POISON else json.dumps({"i": i, "amount": i * 0.5}),
             BASE_TS_MS + i * 60_000, p) for p in (0, 1) for i in range(n)]


# The columns a reader must see, with DuckDB's and Spark's types: the Kafka columns kprio keeps, its own, the
# decoded fields of the topic's schema.
DUCKDB_TYPES = {"topic": "VARCHAR", "partition": "INTEGER", "offset": "BIGINT", "priority": "INTEGER",
                "batch_id": "VARCHAR", "i": "BIGINT", "amount": "DOUBLE", "timestamp": "TIMESTAMP WITH TIME ZONE"}
SPARK_TYPES = {"topic": "string", "partition": "int", "offset": "bigint", "priority": "int", "batch_id": "string",
               "i": "bigint", "amount": "double"}


class SnapshotReader(threading.Thread):
    """Reads the Iceberg output table's current snapshot in a loop (pyiceberg's own catalog and scan): per snapshot
    seen, the rows of each batch and the most times an offset appears."""

    def __init__(self, settings, output_path: str, logical_topic: str) -> None:  # noqa: ANN001 - IcebergSettings
        super().__init__(daemon=True)
        self.settings, self.logical_topic = settings, logical_topic
        self.metadata = Path(output_path) / logical_topic / "metadata"
        self.stop, self.seen, self.errors = threading.Event(), {}, []

    def run(self) -> None:
        while not self.stop.wait(0.05):
            if not any(self.metadata.glob("*.metadata.json")):
                continue  # no table yet (its catalog's tables are made by kprio's first publish, not by a reader)
            try:
                table = iceberg_table(self.settings, OUTPUT, self.logical_topic)
                snapshot = table.current_snapshot() if table is not None else None
                if snapshot is None or snapshot.snapshot_id in self.seen:
                    continue
                rows = table.scan(selected_fields=("batch_id", "topic", "partition", "offset"),
                                  snapshot_id=snapshot.snapshot_id).to_arrow().to_pylist()
            except Exception as err:  # noqa: BLE001 - a reader that fails is a finding
                self.errors.append(repr(err))
                continue
            offsets = Counter((r["topic"], r["partition"], r["offset"]) for r in rows)
            self.seen[snapshot.snapshot_id] = (Counter(r["batch_id"] for r in rows), max(offsets.values(), default=0))


@pytest.mark.parametrize("output_format", TABLE_FORMATS)  # Parquet files' readers: tests/spark_jobs/test_output_formats.py
def test_duckdb_and_spark_read_every_committed_record_once_with_the_columns_and_types_the_drain_wrote(
        make_topic, kprio_env, dagster_instance, spark, tmp_path, output_format):
    topic = make_topic(priorities=2, partitions=2, records={1: 90, 0: with_poison(100)},
                       schema={"i": "long", "amount": "double"}, required_fields=("i",))
    env = kprio_env(topic, planner={"record_budget": 150, "target_batch_s": None}, drain={"format": output_format})
    reader = (SnapshotReader(env.config.drain.iceberg, env.config.drain.output_path, topic.name)
              if output_format == "iceberg" else None)
    if reader is not None:
        reader.start()
    try:
        report = drain_loop.drain(env.defs, dagster_instance)
    finally:
        if reader is not None:
            reader.stop.set()
            reader.join(timeout=60)
    assert report.ok, report.stopped
    assert lag(topic, env.edge) == {1: 0, 0: 0}
    check = conservation(env.config, topic, env.edge)
    assert check.ok and check.dead_letters == 4 and check.output == 90 + 200 - 4, check
    batches = {b.batch_id: b for b in env.ledger.batches.find(topic.name)}
    assert len(batches) >= 2 and all(b.state is BatchState.COMMITTED for b in batches.values())
    per_batch = {b.batch_id: sum(s.output for s in b.drain.ranges) for b in batches.values()}
    drain = env.config.drain

    con = lake_readers.duckdb_connection(tmp_path / "duckdb")
    [(rows, distinct)] = lake_readers.duckdb_rows(
        drain, OUTPUT, topic.name, 'SELECT count(*), count(DISTINCT (topic, "partition", "offset")) FROM {table}',
        connection=con)
    assert rows == distinct == check.output
    seen = dict(lake_readers.duckdb_rows(drain, OUTPUT, topic.name, "SELECT batch_id, count(*) FROM {table} "
                                         "GROUP BY batch_id", connection=con))
    assert seen == {b: n for b, n in per_batch.items() if n}
    types = {name: kind for name, kind, *_ in lake_readers.duckdb_rows(drain, OUTPUT, topic.name,
                                                                       "DESCRIBE SELECT * FROM {table}", connection=con)}
    assert {k: types.get(k) for k in DUCKDB_TYPES} == DUCKDB_TYPES, types
    dead = lake_readers.duckdb_rows(drain, DEAD_LETTERS, topic.name,
                                    'SELECT "partition", "offset" FROM {table} ORDER BY 1, 2', connection=con)
    assert dead == [(p, o) for p in (0, 1) for o in POISON]
    # Pruning by priority, as a reader of a partitioned table does: the rows of priority 1 only.
    assert lake_readers.duckdb_rows(drain, OUTPUT, topic.name, "SELECT count(*) FROM {table} WHERE priority = 1",
                                    connection=con) == [(90,)]

    if output_format == "iceberg":
        # Every snapshot a reader met while the drain ran held whole batches, each offset once.
        assert len(reader.seen) >= 2 and not reader.errors, (reader.seen, reader.errors[:3])
        for snapshot, (counts, most) in reader.seen.items():
            assert most == 1, f"snapshot {snapshot} holds an offset {most} times"
            assert all(counts[b] == per_batch[b] for b in counts), (snapshot, counts, per_batch)
        # One snapshot per committed batch, its batch, attempt, epoch and ranges in the summary.
        snapshots = iceberg_publishes(drain.iceberg, OUTPUT, topic.name)
        assert sorted(s["kprio.batch_id"] for s in snapshots) == sorted(batches)
        for s in snapshots:
            batch = batches[s["kprio.batch_id"]]
            assert sorted(json.loads(s["kprio.ranges"])) == sorted(str(r.range) for r in batch.drain.ranges)
            assert int(s["kprio.attempt"]) == batch.attempts == 1 and int(s["kprio.epoch"]) == batch.lease_epoch
        # DuckDB sees the same snapshots.
        metadata = output_of(drain).scan_sql(OUTPUT, topic.name).removeprefix("iceberg_scan")
        [(count,)] = con.sql(f"SELECT count(*) FROM iceberg_snapshots{metadata}").fetchall()
        assert count == len(snapshots)
    # Spark, in the session it has, reads the files the table's current state names (Delta's log, Iceberg's snapshot).
    files = output_of(drain).data_files(OUTPUT, topic.name)
    frame = spark.read.parquet(*files)
    spark_seen = {"rows": frame.count(), "distinct": frame.select("topic", "partition", "offset").distinct().count(),
                  "dtypes": dict(frame.dtypes),
                  "per_batch": {r["batch_id"]: r["count"] for r in frame.groupBy("batch_id").count().collect()}}
    assert spark_seen["rows"] == spark_seen["distinct"] == check.output
    assert spark_seen["per_batch"] == {b: n for b, n in per_batch.items() if n}
    assert {k: spark_seen["dtypes"].get(k) for k in SPARK_TYPES} == SPARK_TYPES, spark_seen["dtypes"]
