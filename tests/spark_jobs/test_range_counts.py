"""The conservation proof: per-range counts of the rows written, merged into RangeStats. Table of cases."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kprio_core.errors import DrainOutputInvalid
from kprio_core.model.drain_plan import PlannedRange
from kprio_core.model.offsets import OffsetRange
from spark_jobs.range_counts import RangeCount, merge_counts, stats_batch

R = OffsetRange("o-2", 0, 10, 20)
PLAN = [PlannedRange(2, R), PlannedRange(0, OffsetRange("o-0", 3, 5, 8))]


def _count(offsets, *, rng=R, part=None, dead=(), failure=None, nulls=(), found=None, lost=()) -> dict:
    """A task's stats row: ``found`` (default: ``offsets``) read, ``offsets`` written (those in ``dead`` to the
    dead letters), ``lost`` (start, end) gaps the read reported."""
    c = RangeCount(rng, part)
    c.found(list(offsets if found is None else found))
    c.lose([OffsetRange(rng.topic, rng.partition, a, b) for a, b in lost])
    out = [o for o in offsets if o not in dead]
    for rows, is_dead in ((out, False), ([o for o in offsets if o in dead], True)):
        if rows:
            c.count(pa.record_batch({"key": [b"k"] * len(rows), "value": [b"vv"] * len(rows), "offset": rows}),
                    dead=is_dead, nulls=nulls if not is_dead else ())
    c.failure = failure
    return c.row()


def _merge(rows, *, allow_data_loss=False, every_range_reported=False, log_bounds=None):
    return merge_counts(rows, PLAN[:1], allow_data_loss=allow_data_loss, every_range_reported=every_range_reported,
                        log_bounds=log_bounds)[0]


@pytest.mark.parametrize(
    ("rows", "kw", "want"),
    [
        # (output, dead, distinct, first, last, bytes, duplicates, lost, no_record, complete)
        ([_count(range(10, 20))], {}, (10, 0, 10, 10, 19, 30, 0, [], 0, True)),  # one task, every offset
        ([_count(range(10, 20), dead={12, 13})], {}, (8, 2, 10, 10, 19, 30, 0, [], 0, True)),  # dead letters count too
        ([_count([10, 12, 14, 16, 18], part=0), _count([11, 13, 15, 17, 19], part=1)], {},
         (10, 0, 10, 10, 19, 30, 0, [], 0, True)),  # lanes of one range in two tasks: their union
        ([_count(range(10, 20), part=0), _count([15], part=1)], {},
         (11, 0, 10, 10, 19, 33, 1, [], 0, False)),  # an offset in two tasks: a duplicate, not complete
        ([_count(range(14, 20), lost=[(10, 14)])], {"allow_data_loss": True},
         (6, 0, 6, 14, 19, 18, 0, [(10, 14)], 0, True)),  # the read lost [10, 14) to retention: recorded as lost
        ([_count([], lost=[(10, 20)])], {"allow_data_loss": True},
         (0, 0, 0, None, None, 0, 0, [(10, 20)], 0, True)),  # all of it lost
        ([_count([10, 11, 15])], {}, (3, 0, 3, 10, 15, 9, 0, [], 7, True)),  # 7 offsets held no record: complete
        ([_count([12, 14], part=0), _count([13], part=1)], {},
         (3, 0, 3, 12, 14, 9, 0, [], 7, True)),  # a head and a tail of markers (or compacted offsets)
        ([], {}, (0, 0, 0, None, None, 0, 0, [], 10, True)),  # a range of markers only, on the shuffle path
        ([_count([15, 16])], {"allow_data_loss": True, "log_bounds": {("o-2", 0): (13, 30)}},
         (2, 0, 2, 15, 16, 6, 0, [(10, 13)], 5, True)),  # shuffle path: unseen below the log start is lost
        ([_count([12, 16])], {"allow_data_loss": True, "log_bounds": {("o-2", 0): (14, 30)}},
         (2, 0, 2, 12, 16, 6, 0, [(10, 12), (13, 14)], 5, True)),  # what was read below it is not
        ([_count([12, 16])], {"allow_data_loss": True, "log_bounds": {("o-2", 0): (0, 18)}},
         (2, 0, 2, 12, 16, 6, 0, [(18, 20)], 6, True)),  # unseen past the log's end (truncated) is lost
    ],
)
def test_merge(rows, kw, want):
    s = _merge(rows, **kw)
    got = (s.output, s.dead, s.distinct, s.first, s.last, s.bytes, s.duplicates, [(g.start, g.end) for g in s.lost],
           s.no_record, s.complete)
    assert got == want


def test_a_record_found_and_not_written_fails_the_range_naming_it():
    s = _merge([_count([10, 11, 15], found=[10, 11, 12, 13, 15, 17])])
    assert s.failure == ("range o-2[0]@[10,20) is incomplete: 3 of 10 offsets missing: [12,14) [17,18) "
                         "(found by the read, missing from the drained output)")
    assert not s.complete and s.lost == () and s.no_record == 4


def test_a_loss_without_allow_data_loss_fails_the_range_naming_it():
    s = _merge([_count(range(14, 20), lost=[(10, 14)])])
    assert s.failure == "range o-2[0]@[10,20) is incomplete: 4 of 10 offsets missing: [10,14) (lost before the read)"
    assert not s.complete and s.lost == ()


def test_a_range_no_task_reported_fails_where_every_range_is_reported():
    assert _merge([], every_range_reported=True).failure == "o-2[0]@[10,20): no drain task reported this range"
    assert _merge([], every_range_reported=False).failure is None


def test_a_failed_part_fails_the_range_whatever_the_others_say():
    s = _merge([_count(range(10, 15), part=0), _count(range(15, 20), part=1, failure="o-2[0]@[10,20): boom")])
    assert s.failure == "o-2[0]@[10,20): boom" and not s.complete


def test_null_required_fields_are_summed_per_field():
    s = _merge([_count(range(10, 15), part=0, nulls=[("a", 1), ("b", 0)]), _count(range(15, 20), part=1, nulls=[("a", 2)])])
    assert s.nulls == (("a", 3), ("b", 0))


def test_rows_outside_the_range_are_counted_not_hidden():
    c = RangeCount(R)
    c.count(pa.record_batch({"key": [b"k"] * 3, "value": [b"v"] * 3, "offset": [9, 10, 20]}), dead=False)
    s = _merge([c.row()], allow_data_loss=True)
    assert (s.output, s.outside, s.distinct, s.complete) == (3, 2, 1, False)


def test_a_row_for_a_range_the_plan_does_not_hold_is_a_drain_bug():
    with pytest.raises(DrainOutputInvalid, match=r"reported o-2\[0\]@\[0,10\), which is not a planned range"):
        merge_counts([_count([], rng=OffsetRange("o-2", 0, 0, 10))], PLAN, allow_data_loss=False)


def test_stats_rows_travel_as_one_arrow_batch():
    rows = [_count(range(10, 20)), _count([5, 6, 7], rng=PLAN[1].range)]
    batch = stats_batch(rows)
    assert batch.num_rows == 2 and batch.to_pylist() == rows
    assert [s.complete for s in merge_counts(batch.to_pylist(), PLAN, allow_data_loss=False)] == [True, True]
