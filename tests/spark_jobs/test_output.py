"""Staged files' life without Spark: publish (replace, leftovers, subsets), discard, sweep, list, read."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from kprio_core.errors import OutputPublishFailed, OutputUnavailable, is_transient
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import DrainResult, RangeStats
from spark_jobs.layout import RangeFile, filesystem, relative_path, staging_dir
from spark_jobs.output import discard, live_files, prepare_staging, publish, read_table, staging_dirs, sweep_staging
from spark_jobs.staged_writer import StagedWriter
from tests.fixtures.small_disks import read_only_dir, tiny_disk

TOPIC = "orders"
SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()), ("batch_id", pa.string())])


def _stage(root: Path, batch_id: str, attempt: int, rng: OffsetRange, offsets=None, priority=2) -> str:
    """Write one staged file of ``rng`` (its offsets, or ``offsets``); its path below the staging dir."""
    rel = relative_path(TOPIC, priority, RangeFile(rng.topic, rng.partition, rng.start, rng.end))
    fs, base = filesystem(staging_dir(str(root), batch_id, attempt))
    w = StagedWriter(fs, f"{base}/{rel}", rel, SCHEMA, row_group_records=100,
                     metadata={"kprio.batch_id": batch_id, "kprio.attempt": str(attempt), "kprio.range": str(rng)})
    offs = list(range(rng.start, rng.end)) if offsets is None else offsets
    w.write(pa.RecordBatch.from_pydict({"topic": [rng.topic] * len(offs), "partition": [rng.partition] * len(offs),
                                        "offset": offs, "batch_id": [batch_id] * len(offs)}, schema=SCHEMA))
    w.close()
    return rel


def _result(batch_id: str, attempt: int, files: dict[OffsetRange, list[str]], failed=()) -> DrainResult:
    stats = tuple(RangeStats(2, rng, output=rng.count, dead=0, distinct=rng.count, first=rng.start, last=rng.end - 1,
                             files=tuple(fs), failure="boom" if rng in failed else None)
                  for rng, fs in files.items())
    return DrainResult(batch_id, attempt, TOPIC, stats, staging="")


@pytest.fixture
def roots(tmp_path):
    return tmp_path / "out", tmp_path / "dead"


def _publish(result, roots, **kw):
    return publish(result, output_root=str(roots[0]), dead_letter_root=str(roots[1]), **kw)


def _live(root) -> list[tuple[OffsetRange, str | None, int | None]]:
    return [(f.range, f.batch_id, f.attempt) for f in live_files(str(root), TOPIC)]


def test_publish_moves_the_staged_files_and_removes_the_staging_dirs(roots):
    a, b = OffsetRange("orders-2", 0, 0, 10), OffsetRange("orders-2", 1, 0, 5)
    out_a, out_b = _stage(roots[0], "b-1", 1, a), _stage(roots[0], "b-1", 1, b)
    dead_a = _stage(roots[1], "b-1", 1, a, offsets=[3])
    result = _result("b-1", 1, {a: [f"output/{out_a}", f"dead-letters/{dead_a}"], b: [f"output/{out_b}"]})
    published = _publish(result, roots)
    assert sorted(published) == sorted([f"{roots[0]}/{out_a}", f"{roots[0]}/{out_b}", f"{roots[1]}/{dead_a}"])
    assert _live(roots[0]) == [(a, "b-1", 1), (b, "b-1", 1)] and _live(roots[1]) == [(a, "b-1", 1)]
    assert staging_dirs(str(roots[0])) == [] and staging_dirs(str(roots[1])) == []
    assert sorted(read_table(str(roots[0]), TOPIC).column("offset").to_pylist()) == sorted([*range(10), *range(5)])


def test_publish_replaces_the_same_name_and_the_overlapping_leftovers_keeping_rows_outside_its_ranges(roots):
    old = {r: [f"output/{_stage(roots[0], 'b-1', 1, r)}"] for r in (
        OffsetRange("orders-2", 0, 0, 10), OffsetRange("orders-2", 0, 10, 20), OffsetRange("orders-2", 0, 20, 30),
        OffsetRange("orders-2", 1, 0, 10))}
    old_dead = OffsetRange("orders-2", 0, 0, 10)
    old[old_dead].append(f"dead-letters/{_stage(roots[1], 'b-1', 1, old_dead, offsets=[4])}")
    _publish(_result("b-1", 1, old), roots)
    # Another life drains [0, 10) again (same name) and [10, 25) (overlaps [10, 20) and [20, 30)).
    again, wider = OffsetRange("orders-2", 0, 0, 10), OffsetRange("orders-2", 0, 10, 25)
    new = {again: [f"output/{_stage(roots[0], 'b-5', 2, again)}"], wider: [f"output/{_stage(roots[0], 'b-5', 2, wider)}"]}
    _publish(_result("b-5", 2, new), roots)
    # [20,30) lay across [10,25): its offsets 25-29 are no row of this publish's, so they stay, in [25,30).
    assert _live(roots[0]) == [(again, "b-5", 2), (wider, "b-5", 2), (OffsetRange("orders-2", 0, 25, 30), "b-1", 1),
                               (OffsetRange("orders-2", 1, 0, 10), "b-1", 1)]
    assert sorted(read_table(str(roots[0]), TOPIC, columns=["offset"]).column("offset").to_pylist()) == sorted(
        [*range(30), *range(10)]), "every offset once"
    assert _live(roots[1]) == []  # the re-drain of [0, 10) has no dead letters any more: the old ones go


def test_publish_of_some_ranges_only_and_never_a_failed_one_by_default(roots):
    a, b, c = (OffsetRange("orders-2", p, 0, 10) for p in range(3))
    files = {r: [f"output/{_stage(roots[0], 'b-2', 1, r)}"] for r in (a, b, c)}
    assert len(_publish(_result("b-2", 1, files, failed={c}), roots, ranges=[a])) == 1
    assert [f.range for f in live_files(str(roots[0]), TOPIC)] == [a]
    files = {r: [f"output/{_stage(roots[0], 'b-3', 1, r)}"] for r in (a, b, c)}
    _publish(_result("b-3", 1, files, failed={c}), roots)
    assert [f.range for f in live_files(str(roots[0]), TOPIC)] == [a, b]


def test_discard_and_sweep_remove_staging_dirs(roots):
    r = OffsetRange("orders-2", 0, 0, 3)
    for batch, attempt in (("b-1", 1), ("b-1", 2), ("b-2", 1)):
        _stage(roots[0], batch, attempt, r)
        _stage(roots[1], batch, attempt, r)
    (roots[0] / "_staging" / "b-0-1a2b3c").mkdir()  # an older kprio's staging dir
    assert discard(("b-1", 1), output_root=str(roots[0]), dead_letter_root=str(roots[1])) == (
        staging_dir(str(roots[0]), "b-1", 1), staging_dir(str(roots[1]), "b-1", 1))
    assert discard(_result("b-1", 1, {}), output_root=str(roots[0]), dead_letter_root=str(roots[1])) == ()  # gone
    removed = sweep_staging([str(roots[0]), str(roots[1])], keep=lambda batch_id, attempt: batch_id == "b-2")
    assert sorted(Path(p).name for p in removed) == ["b-0-1a2b3c", "b-1.2", "b-1.2"]
    assert [name for name, _ in staging_dirs(str(roots[0]))] == ["b-2.1"]


def test_live_files_skip_names_kprio_did_not_give(roots):
    r = OffsetRange("orders-2", 0, 0, 3)
    _publish(_result("b-1", 1, {r: [f"output/{_stage(roots[0], 'b-1', 1, r)}"]}), roots)
    (roots[0] / TOPIC / "priority=2" / "part-00000-foreign.parquet").write_bytes(b"not ours")
    (roots[0] / TOPIC / "notes.txt").write_text("hello")
    [live] = live_files(str(roots[0]), TOPIC)
    assert (live.topic, live.partition, live.start, live.end, live.priority, live.part) == ("orders-2", 0, 0, 3, 2, None)
    assert _live(roots[0]) == [(r, "b-1", 1)]
    assert read_table(str(roots[0]), TOPIC, batch_id="b-1", columns=["offset"]).column("offset").to_pylist() == [0, 1, 2]


def test_an_unwritable_root_is_refused_naming_root_path_and_cause(tmp_path):
    with read_only_dir(tmp_path / "ro") as ro, pytest.raises(OutputUnavailable) as caught:
        prepare_staging({"output": str(tmp_path / "ok"), "dead-letters": str(ro / "dead")}, "b-1", 1)
    # The real cause, by its errno: read-only (a read-only mount), or permission denied (without root).
    assert re.match(rf"the dead-letters root {re.escape(str(ro))}/dead (is read-only|is not writable "
                    r"\(permission denied\)): ", str(caught.value)), str(caught.value)
    assert str(ro) in str(caught.value).split(": ", 1)[1]


def test_a_priority_directory_on_a_mount_of_its_own_is_a_layout_mistake_named_in_one_line(roots):
    """EXDEV: a separate file system at <output>/<topic>/priority=<p> cannot take a rename from <output>/_staging."""
    a = OffsetRange("orders-2", 0, 0, 10)
    result = _result("b-1", 1, {a: [f"output/{_stage(roots[0], 'b-1', 1, a)}"]})
    with tiny_disk(roots[0] / TOPIC / "priority=2", size="1m") as mount, pytest.raises(OutputPublishFailed) as caught:
        _publish(result, roots)
    message = str(caught.value)
    assert not isinstance(caught.value, OutputUnavailable) and not is_transient(caught.value), message
    assert "\n" not in message and "are on different file systems" in message, message
    assert f"staging directory {roots[0]}/_staging/b-1.1 " in message and f"directory {mount} " in message, message
    assert f"everything below {roots[0]} must be on one file system" in message, message
    assert _live(roots[0]) == [] and [n for n, _ in staging_dirs(str(roots[0]))] == ["b-1.1"]  # the staged file kept


def test_a_publish_keeps_the_rows_of_an_overlapped_file_outside_its_ranges(roots):
    """A batch's range [0,2) overlaps the live file of [0,3) a stale plan or an earlier life left: offset 2 is no
    row of this publish's, so it stays, in a file of its own ([2,3)), and the old file goes."""
    old = OffsetRange("orders-2", 0, 0, 3)
    _publish(_result("b-1", 1, {old: [f"output/{_stage(roots[0], 'b-1', 1, old)}"]}), roots)
    mine = OffsetRange("orders-2", 0, 0, 2)
    _publish(_result("b-2", 1, {mine: [f"output/{_stage(roots[0], 'b-2', 1, mine)}"]}), roots)
    assert sorted((f.start, f.end, f.batch_id) for f in live_files(str(roots[0]), TOPIC)) == [(0, 2, "b-2"),
                                                                                            (2, 3, "b-1")]
    assert sorted(read_table(str(roots[0]), TOPIC, columns=["offset"]).column("offset").to_pylist()) == [0, 1, 2]
