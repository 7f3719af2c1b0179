"""``drain.format: delta`` on a real drain: one Delta commit per batch, whole batches for readers, replaces.

One topic (three priorities, poison among the lowest) drained by the Dagster drain loop into
Delta tables while a reader reads the output table's newest version in a loop, then one batch
re-drained as a backfill from the UI would. Checked with ``deltalake``'s own query engine
(``QueryBuilder``) and with a second engine (pyarrow's dataset over the files the log names),
never only through kprio's reader. (Not ``DeltaTable.to_pyarrow_table``: a process that scanned
through it may abort as it exits, delta-rs issue 2184.)
The fault cases (a kill between publish and commit, a lost ledger, a full or read-only output)
run on this format in test_recovery, test_ledger_loss and test_transient.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable, QueryBuilder
from typer.testing import CliRunner

from kprio_core.ledger import BatchState
from orchestration.cli.main import app
from orchestration.dagster import drain_loop
from spark_jobs.delta_table import app_id
from tests.fixtures.kafka import BASE_TS_MS
from tests.orchestration.conservation import conservation, lag

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]

COLUMNS = ["batch_id", "topic", "partition", "offset"]


def lowest_priority() -> list[tuple]:
    """400 records per partition of priority 0, a poison record at offsets 100 and 300 of each."""
    out = []
    for partition in (0, 1):
        for i in range(400):
            value = b"not json" if i in (100, 300) else json.dumps({"i": i, "amount": i * 0.5})
            out.append((f"k{partition}-{i}", value, BASE_TS_MS + i, partition))
    return out


class Reader(threading.Thread):
    """Reads the table's newest version in a loop: per version seen, the rows of each batch and the offsets."""

    def __init__(self, uri: str) -> None:
        super().__init__(daemon=True)
        self.uri, self.stop, self.seen = uri, threading.Event(), {}

    def run(self) -> None:
        while not self.stop.wait(0.02):
            if not DeltaTable.is_deltatable(self.uri):
                continue
            table = DeltaTable(self.uri)
            if table.version() in self.seen:
                continue
            rows = rows_of(table)
            offsets = Counter(row[1:] for row in rows)
            self.seen[table.version()] = (Counter(row[0] for row in rows), max(offsets.values(), default=0))


def rows_of(table: DeltaTable, columns: list[str] = COLUMNS) -> list[tuple]:
    """The table's rows as deltalake's own engine reads them (the version ``table`` is at), sorted."""
    query = "SELECT " + ", ".join(f'"{c}"' for c in columns) + " FROM t"
    cols = pa.table(QueryBuilder().register("t", table).execute(query).read_all()).to_pydict()
    return sorted(zip(*(cols[c] for c in columns), strict=True))


def test_a_delta_drain_commits_once_per_batch_readers_see_whole_batches_and_a_redrain_replaces(
    make_topic, kprio_env, dagster_instance, tmp_path: Path
):
    topic = make_topic(priorities=3, partitions=2, records={2: 120, 1: 300, 0: lowest_priority()},
                       schema={"i": "long", "amount": "double"}, required_fields=("i",))
    env = kprio_env(topic, planner={"record_budget": 300, "target_batch_s": None}, drain={"format": "delta"})
    uri = f"{env.config.drain.output_path}/{topic.name}"
    reader = Reader(uri)
    reader.start()
    try:
        report = drain_loop.drain(env.defs, dagster_instance)
    finally:
        reader.stop.set()
        reader.join(timeout=60)
    assert report.ok, report.stopped
    assert lag(topic, env.edge) == {2: 0, 1: 0, 0: 0}
    check = conservation(env.config, topic, env.edge)
    assert check.ok and check.dead_letters == 4 and check.output == 120 + 300 + 800 - 4, check

    # One commit per batch, naming the batch, its attempt, its ranges and its checks; its transaction id.
    batches = {b.batch_id: b for b in env.ledger.batches.find(topic.name)}
    assert len(batches) >= 3 and all(b.state is BatchState.COMMITTED for b in batches.values())
    table = DeltaTable(uri)
    commits = [h for h in reversed(table.history()) if "kprio.batch_id" in h]
    assert [h["kprio.batch_id"] for h in commits] == sorted(batches)
    for h in commits:
        batch = batches[h["kprio.batch_id"]]
        assert sorted(h["kprio.ranges"]) == sorted(str(s.range) for s in batch.drain.ranges)
        assert h["kprio.attempt"] == batch.attempts == 1
        assert all(c["passed"] for c in h["kprio.checks"].values()) and len(h["kprio.checks"]) == 6
        assert table.transaction_version(app_id(batch.batch_id)) == batch.lease_epoch >= 1  # the run's fencing token
    # Every version a concurrent reader saw held whole batches (each batch's rows all there, or none), each
    # offset once.
    per_batch = Counter(row[0] for row in rows_of(table))
    assert len(reader.seen) >= 2, reader.seen
    for version, (counts, most) in reader.seen.items():
        assert most == 1, f"version {version} holds an offset {most} times"
        assert all(counts[b] == per_batch[b] for b in counts), (version, counts, per_batch)

    # A second engine (pyarrow's dataset over the files the log names) reads the same rows, row for row.
    other = ds.dataset(table.file_uris(), format="parquet").to_table(columns=COLUMNS).to_pydict()
    assert sorted(zip(*(other[c] for c in COLUMNS), strict=True)) == rows_of(table)

    # The dead letters are a Delta table too, and `kprio dead-letters` reads it.
    dead = DeltaTable(f"{env.config.drain.dead_letter_path}/{topic.name}")
    assert rows_of(dead, ["partition", "offset"]) == [(p, o) for p in (0, 1) for o in (100, 300)]
    config_file = tmp_path / "kprio.yaml"
    config_file.write_text(json.dumps(env.config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})))
    shown = CliRunner().invoke(app, ["dead-letters", "--config", str(config_file), "--json"], catch_exceptions=False)
    assert shown.exit_code == 0 and json.loads(shown.stdout)["total"] == 4, shown.output

    # A re-drain of the first batch from the UI (a backfill of its partition): one commit removes its rows'
    # files and adds the new ones; the version before holds the old copy, the version after the new one.
    first = min(batches)
    before, version = rows_of(table), table.version()
    result = env.defs.resolve_job_def("drain_job").execute_in_process(
        instance=dagster_instance, partition_key=first, tags={"dagster/backfill": "delta-redrain"})
    assert result.success
    table = DeltaTable(uri)
    assert table.version() == version + 1, "one commit"
    assert rows_of(table) == before, "replaced, not added"
    [last] = table.history(1)
    assert (last["kprio.batch_id"], last["kprio.attempt"]) == (first, 2)
    old = set(DeltaTable(uri, version=version).file_uris())
    new = set(table.file_uris())
    # Named by the run that wrote them: batch, attempt, the run's lease epoch (no two runs share a file).
    assert all(f".{first}.1.e" in p for p in old - new) and all(f".{first}.2.e" in p for p in new - old)
    assert old - new and new - old
    drained = {m.asset_key.to_user_string(): m for m in result.asset_materializations_for_node("drain_batch")}
    meta = drained["drained_batch"].metadata
    assert meta["table_version"].value == table.version()
    # What the next batches are sized by: the drain tasks' time on records, a part of the drain's.
    assert 0 < meta["drain_records_s"].value < meta["drain_s"].value
    assert meta["record_budget"].value >= meta["planned_records"].value
    assert conservation(env.config, topic, env.edge).ok
