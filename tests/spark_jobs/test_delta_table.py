"""Publishing into a Delta Lake table: one commit per batch, its transaction id, replace on a re-drain.

The staged files are written here with pyarrow as the executors write them (the staging layout,
``batch_id``/``priority``/``offset`` columns); the table is read back with delta-rs and, from the
files its log names, with a plain pyarrow dataset as a second engine.
"""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import DrainResult, RangeStats
from spark_jobs import delta_table
from spark_jobs.layout import OUTPUT, RangeFile, relative_path, staging_dir

pytest.importorskip("deltalake")

LOGICAL = "orders"


def staged(root, batch_id: str, attempt: int, ranges: dict[int, OffsetRange], incarnation: int = 1) -> DrainResult:
    """An attempt's staged output of ``ranges`` (priority -> range), one row per offset."""
    stats = []
    for priority, r in ranges.items():
        name = RangeFile(r.topic, r.partition, r.start, r.end, incarnation=incarnation)
        rel = relative_path(LOGICAL, priority, name)
        path = f"{staging_dir(str(root), batch_id, attempt)}/{rel}"
        offsets = list(range(r.start, r.end))
        table = pa.table({"batch_id": [batch_id] * len(offsets), "priority": pa.array([priority] * len(offsets),
                                                                                      pa.int32()),
                          "topic": [r.topic] * len(offsets), "partition": [r.partition] * len(offsets),
                          "offset": offsets})
        (root / path.removeprefix(f"{root}/")).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        stats.append(RangeStats(priority, r, output=r.count, dead=0, distinct=r.count, first=r.start, last=r.end - 1,
                                files=(f"{OUTPUT}/{rel}",)))
    return DrainResult(batch_id, attempt, LOGICAL, tuple(stats), staging="(test)", seconds=0.1)


COLUMNS = ("topic", "partition", "offset")


def rows_of(table) -> list[tuple[str, int, int]]:
    if table.num_columns == 0:  # no table yet
        return []
    return sorted(zip(*(table.column(c).to_pylist() for c in COLUMNS), strict=True))


def offsets(root, **kwargs) -> list[tuple[str, int, int]]:
    return rows_of(delta_table.read_table(str(root), LOGICAL, columns=COLUMNS, **kwargs))


def expected(*ranges: OffsetRange) -> list[tuple[str, int, int]]:
    return sorted((r.topic, r.partition, o) for r in ranges for o in range(r.start, r.end))


def test_each_publish_is_one_commit_with_its_batch_ranges_and_transaction(tmp_path):
    first = staged(tmp_path, "b-000001", 1, {0: OffsetRange("orders-0", 0, 0, 50), 2: OffsetRange("orders-2", 0, 0, 5)})
    second = staged(tmp_path, "b-000002", 1, {0: OffsetRange("orders-0", 0, 50, 80)})

    one = delta_table.publish(first, root=str(tmp_path), kind=OUTPUT, metadata={"kprio.checks": "passed"})
    two = delta_table.publish(second, root=str(tmp_path), kind=OUTPUT)

    assert (one.version, len(one.added), one.removed, two.version) == (0, 2, (), 1)
    assert offsets(tmp_path) == expected(OffsetRange("orders-0", 0, 0, 80), OffsetRange("orders-2", 0, 0, 5))
    assert delta_table.table_batches(str(tmp_path), LOGICAL) == [
        {"batch_id": "b-000001", "attempt": 1, "ranges": ["orders-0[0]@[0,50)", "orders-2[0]@[0,5)"], "version": 0},
        {"batch_id": "b-000002", "attempt": 1, "ranges": ["orders-0[0]@[50,80)"], "version": 1},
    ]
    from deltalake import DeltaTable

    table = DeltaTable(delta_table.table_uri(str(tmp_path), LOGICAL))
    assert table.transaction_version("kprio:b-000001") == 1 and table.transaction_version("kprio:b-000002") == 1
    assert table.history()[-1]["kprio.checks"] == "passed"
    assert table.metadata().partition_columns == ["priority"]


def test_publishing_the_same_attempt_again_changes_nothing(tmp_path):
    result = staged(tmp_path, "b-000001", 1, {0: OffsetRange("orders-0", 0, 0, 50)})
    delta_table.publish(result, root=str(tmp_path), kind=OUTPUT)

    again = delta_table.publish(result, root=str(tmp_path), kind=OUTPUT)  # a process that died after its commit

    assert again.already and again.version == 0 and again.added == ()
    assert offsets(tmp_path) == expected(OffsetRange("orders-0", 0, 0, 50))


def test_a_redrain_replaces_the_earlier_copy_in_the_same_commit(tmp_path):
    r = OffsetRange("orders-0", 0, 0, 50)
    delta_table.publish(staged(tmp_path, "b-000001", 1, {0: r}), root=str(tmp_path), kind=OUTPUT)
    other = delta_table.publish(staged(tmp_path, "b-000002", 1, {0: OffsetRange("orders-0", 0, 50, 60)}),
                                root=str(tmp_path), kind=OUTPUT)

    redrained = delta_table.publish(staged(tmp_path, "b-000001", 2, {0: r}), root=str(tmp_path), kind=OUTPUT)

    assert len(redrained.added) == 1 and len(redrained.removed) == 1 and redrained.version == other.version + 1
    assert offsets(tmp_path) == expected(OffsetRange("orders-0", 0, 0, 60))  # once each: replaced, not added
    assert offsets(tmp_path, version=other.version) == expected(OffsetRange("orders-0", 0, 0, 60))  # before: whole
    # A second engine: a plain pyarrow dataset over the files the log names agrees row for row.
    from deltalake import DeltaTable

    table = DeltaTable(delta_table.table_uri(str(tmp_path), LOGICAL))
    assert rows_of(ds.dataset(table.file_uris(), format="parquet").to_table(columns=list(COLUMNS))) == offsets(tmp_path)


def test_another_incarnation_s_files_are_never_replaced(tmp_path):
    r = OffsetRange("orders-0", 0, 0, 50)
    delta_table.publish(staged(tmp_path, "b-000001", 1, {0: r}), root=str(tmp_path), kind=OUTPUT)

    newer = delta_table.publish(staged(tmp_path, "b-000002", 1, {0: r}, incarnation=2), root=str(tmp_path),
                                kind=OUTPUT, incarnations={"orders-0[0]": 2})

    assert newer.removed == ()  # the recreated topic's offsets 0..49 are another log's
    assert len(offsets(tmp_path)) == 100


def test_a_reader_in_a_loop_never_sees_half_a_batch_or_an_offset_twice(tmp_path):
    """Batches of two ranges each publish (and re-drain) while a reader reads the table's latest version."""
    batches = [(f"b-{n:06d}", {0: OffsetRange("orders-0", 0, n * 40, n * 40 + 40),
                               1: OffsetRange("orders-1", 0, n * 10, n * 10 + 10)}) for n in range(1, 9)]
    sizes = {0}
    seen: list[int] = []
    errors: list[str] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            rows = offsets(tmp_path)
            if len(rows) != len(set(rows)):
                errors.append(f"an offset twice in {len(rows)} rows")
            seen.append(len(rows))

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for n, (batch_id, ranges) in enumerate(batches, start=1):
            delta_table.publish(staged(tmp_path, batch_id, 1, ranges), root=str(tmp_path), kind=OUTPUT)
            sizes.add(50 * n)
            if n % 3 == 0:  # a re-drain of the batch before: replaced in one commit, the size stays
                delta_table.publish(staged(tmp_path, batches[n - 2][0], 2, batches[n - 2][1]), root=str(tmp_path),
                                    kind=OUTPUT)
    finally:
        done.set()
        reader.join()
    assert not errors, errors[:3]
    assert set(seen) <= sizes, sorted(set(seen) - sizes)  # every read: whole batches only
    assert len(seen) > 1


def test_a_publish_that_died_between_its_moves_and_its_commit_is_finished_by_the_next_publish(tmp_path, monkeypatch):
    result = staged(tmp_path, "b-000001", 1, {0: OffsetRange("orders-0", 0, 0, 30), 1: OffsetRange("orders-1", 0, 0, 8)})

    def killed(*args, **kwargs):
        raise OSError("killed before the commit")

    with monkeypatch.context() as patch:  # the files are moved into the table's directory, the commit never comes
        patch.setattr("deltalake.transaction.create_table_with_add_actions", killed)
        with pytest.raises(OSError, match="killed before the commit"):
            delta_table.publish(result, root=str(tmp_path), kind=OUTPUT)
    assert offsets(tmp_path) == []  # the moved files are in no commit: no reader sees them

    done = delta_table.publish(result, root=str(tmp_path), kind=OUTPUT)

    assert done.version == 0 and len(done.added) == 2
    assert offsets(tmp_path) == expected(OffsetRange("orders-0", 0, 0, 30), OffsetRange("orders-1", 0, 0, 8))


def test_batches_publishing_at_once_into_a_table_not_there_yet_each_land_once(tmp_path):
    """Several batches in flight publish their first rows together: one creates the table, the others
    commit to it (their commits read the table again when the creation changed it under them)."""
    ranges = [OffsetRange("orders-0", p, 0, 50) for p in range(4)]
    results = [staged(tmp_path, f"b-{i + 1:06d}", 1, {0: r}) for i, r in enumerate(ranges)]
    errors: list[BaseException] = []

    def publish(result: DrainResult) -> None:
        try:
            delta_table.publish(result, root=str(tmp_path), kind=OUTPUT)
        except BaseException as err:  # noqa: BLE001 - reported by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=publish, args=(r,)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert offsets(tmp_path) == expected(*ranges)
    assert sorted(b["batch_id"] for b in delta_table.table_batches(str(tmp_path), LOGICAL)) == [
        f"b-{i:06d}" for i in range(1, 5)]


def restage_with(result: DrainResult, root, column: str, values: pa.Array) -> None:
    """Rewrite the attempt's staged files with one more column (a handler that decodes a new field)."""
    for path in (root / "_staging").rglob("*.parquet"):
        if f"/{result.batch_id}.{result.attempt}/" in str(path):
            table = pq.read_table(path)
            pq.write_table(table.append_column(column, values[: table.num_rows]), path)


def test_a_batch_with_a_new_column_adds_it_to_the_table_and_a_changed_type_fails_naming_it(tmp_path):
    from deltalake import DeltaTable

    delta_table.publish(staged(tmp_path, "b-000001", 1, {0: OffsetRange("orders-0", 0, 0, 5)}), root=str(tmp_path),
                        kind=OUTPUT)
    newer = staged(tmp_path, "b-000002", 1, {0: OffsetRange("orders-0", 0, 5, 10)})
    restage_with(newer, tmp_path, "coupon", pa.array(["c"] * 5))
    delta_table.publish(newer, root=str(tmp_path), kind=OUTPUT)

    table = DeltaTable(delta_table.table_uri(str(tmp_path), LOGICAL))
    assert "coupon" in pa.schema(table.schema().to_arrow()).names
    rows = delta_table.read_table(str(tmp_path), LOGICAL, columns=["offset", "coupon"]).to_pylist()
    assert sorted((r["offset"], r["coupon"]) for r in rows) == [(o, None) for o in range(5)] + [(o, "c") for o in
                                                                                                range(5, 10)]
    assert [b["batch_id"] for b in delta_table.table_batches(str(tmp_path), LOGICAL)] == ["b-000001", "b-000002"]
    assert any("coupon" in str(h.get("kprio.columns_added", "")) for h in table.history())

    changed = staged(tmp_path, "b-000003", 1, {0: OffsetRange("orders-0", 0, 10, 15)})
    restage_with(changed, tmp_path, "coupon", pa.array([1] * 5))
    with pytest.raises(ValueError, match="column .coupon. is long, the Delta table .* has it as string"):
        delta_table.publish(changed, root=str(tmp_path), kind=OUTPUT)
    assert offsets(tmp_path) == expected(OffsetRange("orders-0", 0, 0, 10))  # nothing of it published


# --- fencing by the table, one decision per batch, no row outside a publish's ranges -----------------------------


def test_the_table_refuses_a_publish_of_an_older_epoch_and_takes_a_newer_one(tmp_path):
    """The batch's transaction in the table is its fencing token: a run paused past its lease (epoch 3) wakes after
    the run that took the batch over (epoch 5) published; the table refuses it, whatever the ledger says."""
    from kprio_core.errors import LeaseLost

    r = OffsetRange("orders-0", 0, 0, 50)
    newer = delta_table.publish(staged(tmp_path, "b-000001", 2, {0: r}), root=str(tmp_path), kind=OUTPUT, epoch=5)
    with pytest.raises(LeaseLost, match=r"the publish of batch b-000001 refused by the Delta table .* epoch 5, newer "
                                        r"than this run's 3"):
        delta_table.publish(staged(tmp_path, "b-000001", 1, {0: r}), root=str(tmp_path), kind=OUTPUT, epoch=3)
    from deltalake import DeltaTable

    table = DeltaTable(delta_table.table_uri(str(tmp_path), LOGICAL))
    assert table.version() == newer.version and table.transaction_version("kprio:b-000001") == 5
    assert offsets(tmp_path) == expected(r)
    again = delta_table.publish(staged(tmp_path, "b-000001", 2, {0: r}), root=str(tmp_path), kind=OUTPUT, epoch=5)
    assert again.already, "the same epoch again is done already"
    later = delta_table.publish(staged(tmp_path, "b-000001", 3, {0: r}), root=str(tmp_path), kind=OUTPUT, epoch=8)
    assert not later.already and len(later.removed) == 1 and offsets(tmp_path) == expected(r)


def test_a_rerun_publishes_output_and_dead_letters_as_one_decision(tmp_path):
    """Run 1 of an attempt sent offset 7 to the dead letters, published them, and died before the output table's
    commit. Run 2 of the same attempt (a later epoch) finds offset 7 valid. Deciding "published already" per
    table would keep run 1's dead letters and add run 2's output: offset 7 in both. The output table is the
    decision: run 2 publishes both, its dead letters replacing run 1's in one commit."""
    from kprio_core.config import DrainSettings
    from spark_jobs import tables
    from spark_jobs.layout import DEAD_LETTERS

    drain = DrainSettings(format="delta", output_path=str(tmp_path / "out"), dead_letter_path=str(tmp_path / "dead"))
    r = OffsetRange("orders-0", 0, 0, 10)

    def run(attempt: int, invalid: set[int]) -> DrainResult:
        """A staged drain of ``r``: ``invalid`` offsets in the dead letters, the rest in the output."""
        name = RangeFile(r.topic, r.partition, r.start, r.end)
        files = []
        for kind, root, chosen in ((OUTPUT, drain.output_path, [o for o in range(10) if o not in invalid]),
                                   (DEAD_LETTERS, drain.dead_letter_path, sorted(invalid))):
            if not chosen:
                continue
            rel = relative_path(LOGICAL, 0, name)
            path = tmp_path / f"{staging_dir(root, 'b-000001', attempt)}/{rel}".removeprefix(f"{tmp_path}/")
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.table({"batch_id": ["b-000001"] * len(chosen), "priority": pa.array([0] * len(chosen),
                                                                                                pa.int32()),
                                     "topic": [r.topic] * len(chosen), "partition": [0] * len(chosen),
                                     "offset": chosen}), str(path))
            files.append(f"{kind}/{rel}")
        stats = (RangeStats(0, r, output=10 - len(invalid), dead=len(invalid), distinct=10, first=0, last=9,
                            files=tuple(files)),)
        return DrainResult("b-000001", attempt, LOGICAL, stats, staging="(test)", seconds=0.1)

    first = run(1, {7})
    delta_table.publish(first, root=drain.dead_letter_path, kind=DEAD_LETTERS, epoch=2)  # ... and the run died
    tables.publish(drain, run(1, set()), epoch=4)

    out = [o for _, _, o in rows_of(tables.read_rows(drain, OUTPUT, LOGICAL, columns=COLUMNS))]
    dead = [o for _, _, o in rows_of(tables.read_rows(drain, DEAD_LETTERS, LOGICAL, columns=COLUMNS))]
    assert (out, dead) == (list(range(10)), []), "each offset in one table, as the last run decided"


def test_a_publish_keeps_the_rows_of_an_overlapped_file_outside_its_ranges(tmp_path):
    """An earlier life's file of [0,200) lies across a batch's range [0,150): the batch's publish removes that file
    from the table, and keeps its rows 150-199 in a file of their own in the same commit."""
    old = OffsetRange("orders-0", 0, 0, 200)
    delta_table.publish(staged(tmp_path, "b-000001", 1, {0: old}), root=str(tmp_path), kind=OUTPUT)
    mine = OffsetRange("orders-0", 0, 0, 150)
    done = delta_table.publish(staged(tmp_path, "b-000002", 1, {0: mine}), root=str(tmp_path), kind=OUTPUT)
    assert len(done.removed) == 1 and len(done.added) == 2
    assert offsets(tmp_path) == expected(old), "offsets 150-199 are still there, once"
    live = delta_table.live_files(str(tmp_path), LOGICAL)
    assert sorted((f.start, f.end, f.batch_id) for f in live) == [(0, 150, "b-000002"), (150, 200, "b-000001")]
