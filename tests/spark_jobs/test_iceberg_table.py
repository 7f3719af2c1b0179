"""Publishing into an Apache Iceberg table: one snapshot per batch, its epoch in the summary, replace on a re-drain.

The staged files are written here with pyarrow as the executors write them (the staging layout,
``batch_id``/``priority``/``offset``/``timestamp`` columns), the catalog is a SQL catalog on SQLite
in the test's directory, and the table is read back with pyiceberg's scan and, from the data files
its snapshot names, with a plain pyarrow dataset as a second engine.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from kprio_core.config import DrainSettings, IcebergSettings
from kprio_core.errors import LeaseLost
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import DrainResult, RangeStats
from spark_jobs import iceberg_catalog, iceberg_table, tables
from spark_jobs.layout import DEAD_LETTERS, OUTPUT, RangeFile, relative_path, staging_dir

pytest.importorskip("pyiceberg")

LOGICAL = "orders"
HOUR_MS = 3_600_000
BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00Z


@pytest.fixture
def settings(tmp_path) -> IcebergSettings:
    return IcebergSettings(catalog={"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db"})


def rows(r: OffsetRange, batch_id: str, priority: int, *, ms_per_offset: int = 1, offsets=None) -> pa.Table:
    chosen = list(range(r.start, r.end)) if offsets is None else offsets
    return pa.table({
        "batch_id": [batch_id] * len(chosen), "priority": pa.array([priority] * len(chosen), pa.int32()),
        "topic": [r.topic] * len(chosen), "partition": pa.array([r.partition] * len(chosen), pa.int32()),
        "offset": pa.array(chosen, pa.int64()),
        "timestamp": pa.array([BASE_MS + o * ms_per_offset for o in chosen], pa.timestamp("ms", tz="UTC")),
    })


def staged(root, batch_id: str, attempt: int, ranges: dict[int, OffsetRange], incarnation: int = 1,
           ms_per_offset: int = 1) -> DrainResult:
    """An attempt's staged output of ``ranges`` (priority -> range), one row per offset."""
    stats = []
    for priority, r in ranges.items():
        name = RangeFile(r.topic, r.partition, r.start, r.end, incarnation=incarnation)
        rel = relative_path(LOGICAL, priority, name)
        path = f"{staging_dir(str(root), batch_id, attempt)}/{rel}"
        (root / path.removeprefix(f"{root}/")).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows(r, batch_id, priority, ms_per_offset=ms_per_offset), path)
        stats.append(RangeStats(priority, r, output=r.count, dead=0, distinct=r.count, first=r.start, last=r.end - 1,
                                files=(f"{OUTPUT}/{rel}",)))
    return DrainResult(batch_id, attempt, LOGICAL, tuple(stats), staging="(test)", seconds=0.1)


COLUMNS = ("topic", "partition", "offset")


def rows_of(table) -> list[tuple[str, int, int]]:
    if table.num_columns == 0:
        return []
    return sorted(zip(*(table.column(c).to_pylist() for c in COLUMNS), strict=True))


def offsets(settings, root, **kwargs) -> list[tuple[str, int, int]]:
    return rows_of(iceberg_catalog.read_table(settings, str(root), OUTPUT, LOGICAL, columns=COLUMNS, **kwargs))


def expected(*ranges: OffsetRange) -> list[tuple[str, int, int]]:
    return sorted((r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end))


def publish(settings, root, result, **kwargs):
    return iceberg_table.publish(settings, result, root=str(root), kind=OUTPUT, **kwargs)


def test_each_publish_is_one_snapshot_with_its_batch_epoch_and_ranges_partitioned_by_priority_and_hour(
        tmp_path, settings):
    first = staged(tmp_path, "b-000001", 1, {0: OffsetRange("orders-0", 0, 0, 50), 2: OffsetRange("orders-2", 0, 0, 5)})
    second = staged(tmp_path, "b-000002", 1, {0: OffsetRange("orders-0", 0, 50, 80)}, ms_per_offset=HOUR_MS // 20)

    one = publish(settings, tmp_path, first, summary={"kprio.checks": "passed"})
    two = publish(settings, tmp_path, second, epoch=4)

    assert (len(one.added), one.removed) == (2, ())
    assert len(two.added) == 2, "offsets 50-79 at 3 minutes each span hours 2 and 3: one file per hour"
    assert offsets(settings, tmp_path) == expected(OffsetRange("orders-0", 0, 0, 80), OffsetRange("orders-2", 0, 0, 5))
    assert [(b["batch_id"], b["attempt"], b["epoch"], b["ranges"]) for b in
            iceberg_catalog.table_batches(settings, str(tmp_path), OUTPUT, LOGICAL)] == [
        ("b-000001", 1, 1, ["orders-0[0]@[0,50)", "orders-2[0]@[0,5)"]), ("b-000002", 1, 4, ["orders-0[0]@[50,80)"])]
    table = iceberg_table.load(settings, OUTPUT, LOGICAL)
    assert len(table.metadata.snapshots) == 2, "one snapshot per batch"
    assert table.current_snapshot().summary["kprio.epoch"] == "4"
    assert table.snapshot_by_id(one.snapshot_id).summary["kprio.checks"] == "passed"
    assert [f.name for f in table.spec().fields] == ["priority", "timestamp_hour"]
    # A reader prunes: a scan of priority 2 plans only its file.
    from pyiceberg.expressions import EqualTo

    assert len(list(table.scan(row_filter=EqualTo("priority", 2)).plan_files())) == 1
    # A second engine over the files the snapshot names agrees row for row.
    files = [f.file_path.removeprefix("file://") for f in iceberg_table.live_data_files(table)]
    assert rows_of(ds.dataset(files, format="parquet").to_table(columns=list(COLUMNS))) == offsets(settings, tmp_path)


def test_publishing_the_same_epoch_again_changes_nothing(tmp_path, settings):
    result = staged(tmp_path, "b-000001", 1, {0: OffsetRange("orders-0", 0, 0, 50)})
    first = publish(settings, tmp_path, result)

    again = publish(settings, tmp_path, result)  # a process that died after its commit

    assert again.already and again.snapshot_id == first.snapshot_id and again.added == ()
    assert offsets(settings, tmp_path) == expected(OffsetRange("orders-0", 0, 0, 50))


def test_a_redrain_replaces_the_earlier_copy_in_the_same_snapshot(tmp_path, settings):
    r = OffsetRange("orders-0", 0, 0, 50)
    publish(settings, tmp_path, staged(tmp_path, "b-000001", 1, {0: r}))
    other = publish(settings, tmp_path, staged(tmp_path, "b-000002", 1, {0: OffsetRange("orders-0", 0, 50, 60)}))

    redrained = publish(settings, tmp_path, staged(tmp_path, "b-000001", 2, {0: r}), epoch=2)

    assert len(redrained.added) == 1 and len(redrained.removed) == 1
    assert offsets(settings, tmp_path) == expected(OffsetRange("orders-0", 0, 0, 60))  # once each
    assert offsets(settings, tmp_path, snapshot_id=other.snapshot_id) == expected(OffsetRange("orders-0", 0, 0, 60))


def test_a_batch_following_on_appends_without_reading_the_manifests_and_a_redrain_still_replaces(
        tmp_path, settings, monkeypatch):
    """The table's high water says no live file reaches into a batch that follows on from the last: its publish
    appends (merge append) without listing the live files; a re-drain below it looks through them and replaces."""
    publish(settings, tmp_path, staged(tmp_path, "b-000001", 1, {0: OffsetRange("orders-0", 0, 0, 50)}))
    table = iceberg_table.load(settings, OUTPUT, LOGICAL)
    assert iceberg_table.high_water(table) == {"orders-0[0]#1": 50}

    def no_listing(table):  # noqa: ANN001, ARG001 - the publish must not need the live files
        raise AssertionError("a publish that follows on listed the table's live files")

    with monkeypatch.context() as m:
        m.setattr(iceberg_table, "live_data_files", no_listing)
        publish(settings, tmp_path, staged(tmp_path, "b-000002", 1, {0: OffsetRange("orders-0", 0, 50, 60),
                                                                    2: OffsetRange("orders-2", 0, 0, 5)}))
    table = iceberg_table.load(settings, OUTPUT, LOGICAL)
    assert iceberg_table.high_water(table) == {"orders-0[0]#1": 60, "orders-2[0]#1": 5}
    assert table.current_snapshot().summary.operation.value == "append"

    redrained = publish(settings, tmp_path, staged(tmp_path, "b-000001", 2, {0: OffsetRange("orders-0", 0, 0, 50)}),
                        epoch=2)
    assert len(redrained.removed) == 1
    assert iceberg_table.load(settings, OUTPUT, LOGICAL).current_snapshot().summary.operation.value == "overwrite"
    assert offsets(settings, tmp_path) == expected(OffsetRange("orders-0", 0, 0, 60), OffsetRange("orders-2", 0, 0, 5))


def test_a_catalog_whose_tables_another_process_creates_meanwhile_is_loaded_again(tmp_path, monkeypatch):
    """Two processes use a fresh SQL catalog at once: both find its tables absent, the other creates them first, and
    this one's CREATE TABLE fails ("already exists"); kprio loads the catalog again and finds them."""
    from pyiceberg.catalog.sql import SqlCatalog, SqlCatalogBaseTable
    from sqlalchemy import create_engine

    uri = f"sqlite:///{tmp_path}/fresh.db"
    create_tables, raced = SqlCatalog.create_tables, []

    def the_other_process_first(self) -> None:  # noqa: ANN001
        if raced:
            return create_tables(self)
        raced.append(True)
        SqlCatalogBaseTable.metadata.create_all(create_engine(uri))  # the other process, after this one's check
        SqlCatalogBaseTable.metadata.create_all(self.engine, checkfirst=False)  # this one's CREATE TABLE: fails
        return None

    monkeypatch.setattr(SqlCatalog, "create_tables", the_other_process_first)
    settings = IcebergSettings(catalog={"type": "sql", "uri": uri})
    assert iceberg_table.load(settings, OUTPUT, LOGICAL) is None  # loaded (again), and no table yet
    assert raced, "the race was forced"


def test_another_incarnation_s_files_are_never_replaced(tmp_path, settings):
    r = OffsetRange("orders-0", 0, 0, 50)
    publish(settings, tmp_path, staged(tmp_path, "b-000001", 1, {0: r}))

    newer = publish(settings, tmp_path, staged(tmp_path, "b-000002", 1, {0: r}, incarnation=2),
                    incarnations={"orders-0[0]": 2})

    assert newer.removed == ()
    assert len(offsets(settings, tmp_path)) == 100


def test_the_table_refuses_a_publish_of_an_older_epoch_and_takes_a_newer_one(tmp_path, settings):
    """The epoch in the batch's snapshot summary is its fencing token: a run paused past its lease (epoch 3) wakes
    after the run that took the batch over (epoch 5) published; the table refuses it, whatever the ledger says."""
    r = OffsetRange("orders-0", 0, 0, 50)
    newer = publish(settings, tmp_path, staged(tmp_path, "b-000001", 2, {0: r}), epoch=5)
    with pytest.raises(LeaseLost, match=r"refused by the Iceberg table kprio.orders: .* epoch 5, newer than this "
                                        r"run's 3"):
        publish(settings, tmp_path, staged(tmp_path, "b-000001", 1, {0: r}), epoch=3)
    table = iceberg_table.load(settings, OUTPUT, LOGICAL)
    assert table.metadata.current_snapshot_id == newer.snapshot_id
    assert publish(settings, tmp_path, staged(tmp_path, "b-000001", 2, {0: r}), epoch=5).already
    later = publish(settings, tmp_path, staged(tmp_path, "b-000001", 3, {0: r}), epoch=8)
    assert not later.already and len(later.removed) == 1 and offsets(settings, tmp_path) == expected(r)


def test_a_stale_writer_overtaken_between_its_check_and_its_commit_is_refused_on_the_state_it_commits_to(
        tmp_path, settings, monkeypatch):
    """The run of epoch 3 checks the table (nothing of the batch), then, before its commit lands, the run of epoch 5
    commits. Epoch 3's commit was made on the state it checked: pyiceberg's optimistic commit fails, the table is
    loaded and checked again, and the run is refused."""
    r = OffsetRange("orders-0", 0, 0, 20)
    publish(settings, tmp_path, staged(tmp_path, "b-000000", 1, {0: OffsetRange("orders-0", 0, 100, 110)}))
    stale = staged(tmp_path, "b-000001", 1, {0: r})
    newer = staged(tmp_path, "b-000001", 2, {0: r})
    real = iceberg_table._overlapping
    calls = []

    def overtaken(*args, **kwargs):
        out = real(*args, **kwargs)
        if not calls:
            calls.append(1)
            publish(settings, tmp_path, newer, epoch=5)  # lands between the stale run's check and its commit
        return out

    monkeypatch.setattr(iceberg_table, "_overlapping", overtaken)
    with pytest.raises(LeaseLost, match="epoch 5, newer than this run's 3"):
        publish(settings, tmp_path, stale, epoch=3)
    assert offsets(settings, tmp_path) == expected(r, OffsetRange("orders-0", 0, 100, 110))
    assert [b["epoch"] for b in iceberg_catalog.table_batches(settings, str(tmp_path), OUTPUT, LOGICAL)] == [1, 5]


def test_a_rerun_publishes_output_and_dead_letters_as_one_decision(tmp_path, settings):
    """Run 1 sent offset 7 to the dead letters, published them, and died before the output table's snapshot. Run 2
    (a later epoch) finds offset 7 valid: the output table is the decision, run 2's dead letters replace run 1's."""
    drain = DrainSettings(format="iceberg", output_path=str(tmp_path / "out"), dead_letter_path=str(tmp_path / "dead"),
                          iceberg=settings)
    r = OffsetRange("orders-0", 0, 0, 10)

    def run(attempt: int, invalid: set[int]) -> DrainResult:
        name = RangeFile(r.topic, r.partition, r.start, r.end)
        files = []
        for kind, root, chosen in ((OUTPUT, drain.output_path, [o for o in range(10) if o not in invalid]),
                                   (DEAD_LETTERS, drain.dead_letter_path, sorted(invalid))):
            if not chosen:
                continue
            rel = relative_path(LOGICAL, 0, name)
            path = tmp_path / f"{staging_dir(root, 'b-000001', attempt)}/{rel}".removeprefix(f"{tmp_path}/")
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(rows(r, "b-000001", 0, offsets=chosen), str(path))
            files.append(f"{kind}/{rel}")
        stats = (RangeStats(0, r, output=10 - len(invalid), dead=len(invalid), distinct=10, first=0, last=9,
                            files=tuple(files)),)
        return DrainResult("b-000001", attempt, LOGICAL, stats, staging="(test)", seconds=0.1)

    iceberg_table.publish(settings, run(1, {7}), root=drain.dead_letter_path, kind=DEAD_LETTERS, epoch=2)  # died
    done = tables.publish(drain, run(1, set()), epoch=4)

    out = [o for _, _, o in rows_of(tables.read_rows(drain, OUTPUT, LOGICAL, columns=COLUMNS))]
    dead = [o for _, _, o in rows_of(tables.read_rows(drain, DEAD_LETTERS, LOGICAL, columns=COLUMNS))]
    assert (out, dead) == (list(range(10)), []), "each offset in one table, as the last run decided"
    assert set(done.metadata()) == {"table_snapshot_id", "dead_letter_table_snapshot_id"}
    assert tables.publish(drain, run(1, set()), epoch=4).already


def test_a_publish_keeps_the_rows_of_an_overlapped_file_outside_its_ranges(tmp_path, settings):
    old = OffsetRange("orders-0", 0, 0, 200)
    publish(settings, tmp_path, staged(tmp_path, "b-000001", 1, {0: old}))
    mine = OffsetRange("orders-0", 0, 0, 150)
    done = publish(settings, tmp_path, staged(tmp_path, "b-000002", 1, {0: mine}))
    assert len(done.removed) == 1 and len(done.added) == 2
    assert offsets(settings, tmp_path) == expected(old), "offsets 150-199 are still there, once"
    live = iceberg_catalog.live_files(settings, str(tmp_path), OUTPUT, LOGICAL)
    assert sorted((f.start, f.end, f.batch_id) for f in live) == [(0, 150, "b-000002"), (150, 200, "b-000001")]


def restage_with(result: DrainResult, root, column: str, values: pa.Array) -> None:
    for path in (root / "_staging").rglob("*.parquet"):
        if f"/{result.batch_id}.{result.attempt}/" in str(path):
            table = pq.read_table(path)
            pq.write_table(table.append_column(column, values[: table.num_rows]), path)


def test_a_batch_with_a_new_column_adds_it_to_the_table_and_a_changed_type_fails_naming_it(tmp_path, settings):
    publish(settings, tmp_path, staged(tmp_path, "b-000001", 1, {0: OffsetRange("orders-0", 0, 0, 5)}))
    newer = staged(tmp_path, "b-000002", 1, {0: OffsetRange("orders-0", 0, 5, 10)})
    restage_with(newer, tmp_path, "coupon", pa.array(["c"] * 5))
    publish(settings, tmp_path, newer)

    table = iceberg_table.load(settings, OUTPUT, LOGICAL)
    assert "coupon" in table.schema().column_names
    assert "b-000002 attempt 1: coupon" == table.properties[iceberg_table.COLUMNS_KEY]
    got = iceberg_catalog.read_table(settings, str(tmp_path), OUTPUT, LOGICAL, columns=["offset", "coupon"]).to_pylist()
    assert sorted((r["offset"], r["coupon"]) for r in got) == [(o, None) for o in range(5)] + [(o, "c") for o in
                                                                                               range(5, 10)]
    assert len(table.metadata.snapshots) == 2, "the schema change is a commit of its own, with no snapshot"

    changed = staged(tmp_path, "b-000003", 1, {0: OffsetRange("orders-0", 0, 10, 15)})
    restage_with(changed, tmp_path, "coupon", pa.array([1] * 5, pa.int64()))
    with pytest.raises(ValueError, match="column .coupon. is long, the Iceberg table kprio.orders has it as string"):
        publish(settings, tmp_path, changed)
    assert offsets(settings, tmp_path) == expected(OffsetRange("orders-0", 0, 0, 10))


def test_batches_publishing_at_once_into_a_table_not_there_yet_each_land_once(tmp_path, settings):
    ranges = [OffsetRange("orders-0", p, 0, 50) for p in range(4)]
    results = [staged(tmp_path, f"b-{i + 1:06d}", 1, {0: r}) for i, r in enumerate(ranges)]
    errors: list[BaseException] = []

    def run(result: DrainResult) -> None:
        try:
            publish(settings, tmp_path, result)
        except BaseException as err:  # noqa: BLE001 - reported by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=run, args=(r,)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert offsets(settings, tmp_path) == expected(*ranges)
    assert sorted(b["batch_id"] for b in iceberg_catalog.table_batches(settings, str(tmp_path), OUTPUT, LOGICAL)) == [
        f"b-{i:06d}" for i in range(1, 5)]


def test_a_publish_that_died_between_its_moves_and_its_commit_is_finished_by_the_next_publish(
        tmp_path, settings, monkeypatch):
    result = staged(tmp_path, "b-000001", 1, {0: OffsetRange("orders-0", 0, 0, 30)}, ms_per_offset=HOUR_MS // 10)

    def killed(*args, **kwargs):
        raise OSError("killed before the commit")

    with monkeypatch.context() as patch:
        patch.setattr(iceberg_table, "_commit", killed)
        with pytest.raises(OSError, match="killed before the commit"):
            publish(settings, tmp_path, result)
    assert offsets(settings, tmp_path) == []

    done = publish(settings, tmp_path, result)

    assert len(done.added) == 3, "the split files of the died publish, one per hour"
    assert offsets(settings, tmp_path) == expected(OffsetRange("orders-0", 0, 0, 30))
