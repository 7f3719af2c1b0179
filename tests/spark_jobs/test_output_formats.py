"""Every output format through the same cases, by the interface only (``spark_jobs.tables.Output``).

The formats are the registry's (``kprio_core.extras.OUTPUT_FORMATS``): a new one runs here without an edit. A
batch's staged files are made by hand as the drain tasks stage them (output and dead letters under each root's
``_staging``), then published, read back, listed, scanned by DuckDB and read from the data files the format names,
as the runtime's publish, an adoption, ``kprio dead-letters`` and the other engines do. The format's own
guarantees (one commit per batch, a snapshot's summary, a concurrent reader) are in its own tests
(test_delta_table.py, test_iceberg_table.py, test_output.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from kprio_core.config import DrainSettings
from kprio_core.errors import LeaseLost
from kprio_core.extras import OUTPUT_FORMATS
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import DrainResult, RangeStats
from spark_jobs import lake_readers, tables
from spark_jobs.layout import (
    ATTEMPT_KEY,
    BATCH_KEY,
    DEAD_LETTERS,
    OUTPUT,
    RANGE_KEY,
    RangeFile,
    relative_path,
    staging_dir,
)
from spark_jobs.tables import Output, output_of

LOGICAL = "orders"
COLUMNS = ["topic", "partition", "offset"]
R = OffsetRange


def drain_settings(tmp_path, name: str) -> DrainSettings:
    return DrainSettings(format=name, output_path=str(tmp_path / "out"), dead_letter_path=str(tmp_path / "dead"),
                         iceberg={"catalog": {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db"}})


FORMATS = list(OUTPUT_FORMATS)
TABLE_FORMATS = [name for name in FORMATS if output_of(DrainSettings(format=name)).tables]
"""The formats that keep tables: a stale epoch is refused by the table, and the tables are maintained."""


@pytest.fixture(params=FORMATS)
def out(request, tmp_path) -> Output:
    return output_of(drain_settings(tmp_path, request.param))


def staged(out: Output, batch_id: str, attempt: int, ranges: Mapping[int, OffsetRange],
           dead: Mapping[int, set[int]] | None = None, incarnation: int = 1) -> DrainResult:
    """An attempt's staged rows of ``ranges`` (priority -> range): the offsets of ``dead`` in the dead letters."""
    stats = []
    for priority, r in ranges.items():
        invalid = (dead or {}).get(priority, set())
        rel = relative_path(LOGICAL, priority, RangeFile(r.topic, r.partition, r.start, r.end, incarnation=incarnation))
        files = []
        valid = [o for o in range(r.start, r.end) if o not in invalid]
        for kind, root, chosen in ((OUTPUT, out.drain.output_path, valid), (DEAD_LETTERS, out.drain.dead_letter_path,
                                                                           sorted(invalid))):
            if chosen:
                rows = pa.table({
                    "batch_id": [batch_id] * len(chosen), "priority": pa.array([priority] * len(chosen), pa.int32()),
                    "topic": [r.topic] * len(chosen), "partition": pa.array([r.partition] * len(chosen), pa.int32()),
                    "offset": pa.array(chosen, pa.int64()),
                    "timestamp": pa.array([1_767_225_600_000 + o for o in chosen], pa.timestamp("ms", tz="UTC"))})
                # Who wrote it, as the drain task's writer says it in every file's footer (spark_jobs/staged_writer.py).
                path = Path(f"{staging_dir(root, batch_id, attempt)}/{rel}")
                path.parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(rows.replace_schema_metadata({BATCH_KEY: batch_id, ATTEMPT_KEY: str(attempt),
                                                             RANGE_KEY: str(r)}), path)
                files.append(f"{kind}/{rel}")
        stats.append(RangeStats(priority, r, output=r.count - len(invalid), dead=len(invalid), distinct=r.count,
                                first=r.start, last=r.end - 1, files=tuple(files)))
    return DrainResult(batch_id, attempt, LOGICAL, tuple(stats), staging="(test)", seconds=0.1)


def offsets(out: Output, kind: str = OUTPUT, **which) -> list[tuple[str, int, int]]:
    table = out.read_rows(kind, LOGICAL, columns=COLUMNS, **which)
    return [] if table.num_columns == 0 else sorted(zip(*(table.column(c).to_pylist() for c in COLUMNS), strict=True))


def every(*ranges: OffsetRange, but: set[int] = frozenset()) -> list[tuple[str, int, int]]:
    return sorted((r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end) if o not in but)


def test_every_format_has_the_whole_interface_with_its_parameters(out):
    import inspect

    methods = {name: f for name, f in vars(Output).items() if inspect.isfunction(f) and not name.startswith("_")}
    assert {"publish", "read_rows", "live_files", "publishes", "maintain", "scan_sql", "describe"} <= set(methods)
    for name, f in methods.items():
        mine = inspect.signature(getattr(type(out), name))
        assert list(mine.parameters) == list(inspect.signature(f).parameters), f"{type(out).__name__}.{name}"
    for name in Output.__annotations__:
        assert hasattr(out, name), f"{type(out).__name__} has no {name}"


def test_a_publish_lands_each_offset_once_in_one_root_and_every_reader_sees_it(out, tmp_path):
    low, high = R("orders-0", 0, 0, 40), R("orders-2", 1, 10, 20)
    out.publish(staged(out, "b-000001", 1, {0: low, 2: high}, dead={0: {3, 30}}))

    assert offsets(out) == every(low, high, but={3, 30})
    assert offsets(out, DEAD_LETTERS) == [("orders-0", 0, 3), ("orders-0", 0, 30)]
    assert offsets(out, batch_id="b-000001") == offsets(out) and offsets(out, batch_id="b-000002") == []
    assert not list((tmp_path / "out" / "_staging").glob("*/*")), "the attempt's staging is removed"
    # What an adoption after a lost ledger reads: the live files' ranges and the batches the output names.
    assert sorted((f.topic, f.start, f.end, f.batch_id) for f in tables.live_files(out.drain, LOGICAL)) == [
        ("orders-0", 0, 40, "b-000001"), ("orders-0", 0, 40, "b-000001"), ("orders-2", 10, 20, "b-000001")]
    assert tables.batch_ids(out.drain, LOGICAL) == {"b-000001"}
    assert out.figures(OUTPUT, LOGICAL).files == 2 and out.figures(OUTPUT, LOGICAL).bytes > 0
    assert all(p["batch_id"] == "b-000001" for kind in (OUTPUT, DEAD_LETTERS) for p in out.publishes(kind, LOGICAL))
    # Other engines: DuckDB over the format's scan, and a Parquet reader over the data files it names.
    con = lake_readers.duckdb_connection(tmp_path / "duckdb", extensions=out.duckdb_extensions)
    assert lake_readers.duckdb_rows(out.drain, OUTPUT, LOGICAL, 'SELECT count(*), count(DISTINCT (topic, "partition", '
                                    '"offset")) FROM {table}', connection=con) == [(48, 48)]
    paths = [f.removeprefix("file://") for f in out.data_files(OUTPUT, LOGICAL)]  # what Spark reads, as pyarrow does
    files = ds.dataset(paths, format="parquet").to_table(columns=COLUMNS)
    assert sorted(zip(*(files.column(c).to_pylist() for c in COLUMNS), strict=True)) == offsets(out)


def test_the_same_publish_again_changes_nothing(out):
    r = R("orders-0", 0, 0, 10)
    out.publish(staged(out, "b-000001", 1, {0: r}, dead={0: {4}}), epoch=3)
    again = out.publish(staged(out, "b-000001", 1, {0: r}, dead={0: {4}}), epoch=3)
    assert offsets(out) == every(r, but={4}) and offsets(out, DEAD_LETTERS) == [("orders-0", 0, 4)]
    assert again.already == out.tables, "a table says it held this run's publish already"


def test_a_rerun_replaces_the_earlier_copy_and_decides_output_and_dead_letters_as_one(out):
    """Run 1 sent offset 7 to the dead letters; run 2 (a later attempt and epoch) finds it valid: each offset of the
    range is once in one root, as the last run decided."""
    r = R("orders-0", 0, 0, 10)
    out.publish(staged(out, "b-000001", 1, {0: r}, dead={0: {7}}), epoch=1)
    out.publish(staged(out, "b-000001", 2, {0: r}), epoch=2)
    assert (offsets(out), offsets(out, DEAD_LETTERS)) == (every(r), [])
    assert {f.attempt for f in tables.live_files(out.drain, LOGICAL)} == {2}


def test_a_publish_keeps_the_rows_of_an_overlapped_file_outside_its_ranges(out):
    old, mine = R("orders-0", 0, 0, 200), R("orders-0", 0, 0, 150)
    out.publish(staged(out, "b-000001", 1, {0: old}))
    out.publish(staged(out, "b-000002", 1, {0: mine}))
    assert offsets(out) == every(old), "offsets 150-199 are still there, once"
    assert sorted((f.start, f.end, f.batch_id) for f in out.live_files(OUTPUT, LOGICAL)) == [
        (0, 150, "b-000002"), (150, 200, "b-000001")]


def test_another_incarnation_s_rows_are_never_replaced(out):
    first, second = R("orders-0", 0, 0, 10), R("orders-0", 0, 0, 5)
    out.publish(staged(out, "b-000001", 1, {0: first}))
    out.publish(staged(out, "b-000002", 1, {0: second}, incarnation=2), incarnations={"orders-0[0]": 2})
    assert offsets(out) == sorted(every(first) + every(second)), "two logs' offsets, each once"
    assert sorted((f.incarnation, f.batch_id) for f in out.live_files(OUTPUT, LOGICAL)) == [
        (1, "b-000001"), (2, "b-000002")]


@pytest.mark.parametrize("name", TABLE_FORMATS)
def test_a_table_refuses_a_publish_of_an_older_epoch(tmp_path, name):
    out = output_of(drain_settings(tmp_path, name))
    r = R("orders-0", 0, 0, 10)
    out.publish(staged(out, "b-000001", 2, {0: r}), epoch=5)
    with pytest.raises(LeaseLost, match="b-000001"):
        out.publish(staged(out, "b-000001", 1, {0: r}, dead={0: {1}}), epoch=4)
    assert offsets(out) == every(r) and offsets(out, DEAD_LETTERS) == []


def test_a_format_without_tables_has_nothing_to_maintain_and_one_with_tables_maintains_each(out):
    from spark_jobs.maintenance import maintain

    assert maintain(out.drain, LOGICAL) == []  # nothing published yet: no table
    out.publish(staged(out, "b-000001", 1, {0: R("orders-0", 0, 0, 10)}, dead={0: {2}}))
    done = maintain(out.drain, LOGICAL)
    assert len(done) == (2 if out.tables else 0)
    assert all(d.after.files == d.before.files == 1 for d in done), done
