"""Maintenance of Delta and Iceberg tables: many small files become few, nobody reading or publishing notices.

Batches are staged and published as the runtime publishes them (``spark_jobs.tables.publish``), one
small file per batch and priority as ``kprio drain --follow`` leaves them; the tables are read with
the formats' own readers through ``tables.read_rows`` and, where it counts, by DuckDB.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from kprio_core.config import DrainSettings
from kprio_core.model.offsets import OffsetRange
from spark_jobs import maintenance, tables
from spark_jobs.layout import OUTPUT
from tests.spark_jobs.test_iceberg_table import LOGICAL, staged
from tests.spark_jobs.test_output_formats import TABLE_FORMATS as FORMATS


def drain_settings(tmp_path, output_format: str, **maintenance_settings) -> DrainSettings:
    return DrainSettings(format=output_format, output_path=str(tmp_path / "out"),
                         dead_letter_path=str(tmp_path / "dead"),
                         iceberg={"catalog": {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db"}},
                         maintenance={"min_files": 4, **maintenance_settings})


def publish_batch(drain: DrainSettings, tmp_path, n: int, *, attempt: int = 1, epoch: int | None = None) -> None:
    """Batch ``n``: 10 records of priority 0 (offsets 10n..10n+9) and 2 of priority 2, in the output root."""
    result = staged(tmp_path / "out", f"b-{n:06d}", attempt, {0: OffsetRange("orders-0", 0, 10 * n, 10 * n + 10),
                                                              2: OffsetRange("orders-2", 0, 2 * n, 2 * n + 2)})
    tables.publish(drain, result, epoch=epoch)


def offsets(drain: DrainSettings) -> Counter:
    rows = tables.read_rows(drain, OUTPUT, LOGICAL, columns=["topic", "partition", "offset"])
    if rows.num_columns == 0:
        return Counter()
    return Counter(zip(*(rows.column(c).to_pylist() for c in ("topic", "partition", "offset")), strict=True))


def expected(batches: int) -> Counter:
    return Counter([("orders-0", 0, o) for o in range(10 * batches)] + [("orders-2", 0, o) for o in range(2 * batches)])


@pytest.mark.parametrize("output_format", FORMATS)
def test_compaction_turns_many_small_files_into_few_and_a_redrain_after_it_still_replaces_exactly_its_rows(
        tmp_path, output_format):
    drain = drain_settings(tmp_path, output_format, retention_s=0.0)  # no reader of an older version here
    for n in range(24):
        publish_batch(drain, tmp_path, n)
    assert len(tables.live_files(drain, LOGICAL)) == 48

    [done] = maintenance.maintain(drain, LOGICAL)

    live = tables.live_files(drain, LOGICAL)
    assert (done.before.files, done.after.files, len(live)) == (48, 2, 2), done
    assert done.compacted_runs == 2 and done.before.bytes > 0
    assert done.files_deleted > 0, "what no retained version names is deleted (vacuum, expired snapshots)"
    assert done.after.snapshots < done.before.snapshots
    assert offsets(drain) == expected(24), "the same rows, each once"
    # The compacted files are named by the ranges they cover and the newest batch: the output stays evidence
    # (an adoption after a lost ledger reads it) ...
    assert sorted((f.topic, f.start, f.end, f.batch_id) for f in live) == [
        ("orders-0", 0, 240, "b-000023"), ("orders-2", 0, 48, "b-000023")]
    assert tables.batch_ids(drain, LOGICAL) >= {"b-000023"}
    # ... and a re-drain of batch 5 replaces its rows only, keeping the rest of the compacted file.
    publish_batch(drain, tmp_path, 5, attempt=2, epoch=2)
    assert offsets(drain) == expected(24)
    again = maintenance.maintain(drain, LOGICAL)[0]
    assert again.after.files <= again.before.files


@pytest.mark.parametrize("output_format", FORMATS)
def test_a_reader_and_a_drain_during_maintenance_see_every_record_once(tmp_path, output_format):
    """Batches keep publishing while the maintenance compacts and a reader reads the table in a loop: each read sees
    whole batches, each offset once; every record is there once at the end."""
    # Delta: a retention an hour long (its log cleanup would pull the log entries a reader lists from under it);
    # Iceberg: none, the newest 5 snapshots kept (a reader's snapshot is among them).
    drain = drain_settings(tmp_path, output_format, retention_s=3600.0 if output_format == "delta" else 0.0,
                           keep_snapshots=5)
    for n in range(12):
        publish_batch(drain, tmp_path, n)
    stop, errors, reads = threading.Event(), [], []

    def read() -> None:
        while not stop.is_set():
            try:
                seen = offsets(drain)
            except Exception as err:  # noqa: BLE001 - a reader that fails is a finding
                errors.append(f"the reader failed: {err!r}")
                continue
            if seen and max(seen.values()) > 1:
                errors.append("an offset twice")
            zero = {o for (t, _, o) in seen if t == "orders-0"}
            if zero != set(range(len(zero))) or len(zero) % 10:
                errors.append(f"not whole batches: {len(zero)} offsets of priority 0")
            reads.append(len(seen))

    def publish_more() -> None:
        for n in range(12, 20):
            publish_batch(drain, tmp_path, n)

    reader, writer = threading.Thread(target=read), threading.Thread(target=publish_more)
    reader.start()
    writer.start()
    try:
        results = [maintenance.maintain(drain, LOGICAL) for _ in range(2)]
        writer.join(timeout=300)
        results.append(maintenance.maintain(drain, LOGICAL))
    finally:
        stop.set()
        reader.join(timeout=60)
    assert not errors, errors[:3]
    assert len(reads) > 1
    assert offsets(drain) == expected(20)
    [last] = results[-1]
    # With nothing publishing, a maintenance leaves no run of min_files (4) small files following on in a priority:
    # at most 3 in each of the two. How many it leaves depends on which batches the two maintenances beside the
    # writer caught (4 when they caught none; 6 seen on a loaded machine: a merged file and two batches each).
    assert last.after.files <= 2 * 3, last
    if output_format == "iceberg":
        assert last.after.snapshots <= 6, "expired down to the newest ones"
        assert sum(r.files_deleted for run in results for r in run) > 0, "what no retained snapshot names is deleted"
