"""Completeness tracking: table of cases, each with why."""

from __future__ import annotations

import pytest

from kprio_core.errors import RangeIncomplete
from kprio_core.model.offsets import OffsetRange
from spark_jobs.completeness import RangeTracker, describe_gaps, incomplete_error, missing_offsets

R = OffsetRange("t-1", 3, 10, 20)


@pytest.mark.parametrize(
    ("steps", "lost", "records"),
    [
        # steps: ("seen", offsets) records found; ("reach", n) the position moved with no record (markers,
        # the end passed); ("skip", n) the log starts at n now (retention).
        ([("seen", range(10, 20))], [], 10),  # every offset held a record: complete
        ([("seen", [10, 11]), ("seen", [12, 13, 14]), ("seen", range(15, 20))], [], 10),  # chunks join
        ([("seen", [10, 11, 12])], [(13, 20)], 3),  # stopped short: the tail was not passed
        ([("seen", [11, 12]), ("seen", [13, 19])], [], 4),  # offsets 10 and 14..18 held no record: not lost
        ([("seen", [10, 12]), ("reach", 20)], [], 2),  # a range ending on markers: the end passed, complete
        ([("reach", 20)], [], 0),  # a range holding only markers: complete with no record
        ([("reach", 25)], [], 0),  # a position beyond the end counts as the end
        ([], [(10, 20)], 0),  # nothing read, end not passed: all of it unread
        ([("seen", [10]), ("skip", 15)], [(11, 15), (15, 20)], 1),  # retention moved the log start to 15, then nothing
        ([("seen", [10]), ("skip", 25)], [(11, 20)], 1),  # log start beyond the range: the rest is lost
        ([("seen", [10]), ("skip", 15), ("seen", [15]), ("reach", 20)], [(11, 15)], 2),  # lost head, read on to the end
        ([("seen", [12]), ("skip", 11)], [(13, 20)], 1),  # a log start below the position loses nothing read
    ],
)
def test_tracker_tells_lost_from_offsets_without_record(steps, lost, records):
    t = RangeTracker(R)
    for kind, arg in steps:
        {"seen": lambda a: t.observe(list(a)), "reach": t.reach, "skip": t.skip_to}[kind](arg)
    assert [(g.start, g.end) for g in t.lost()] == lost
    assert t.records == records
    assert t.complete == (not lost)


def test_tracker_refuses_offsets_going_back_or_beyond_the_range():
    t = RangeTracker(R)
    t.observe([10, 11])
    with pytest.raises(ValueError, match="offset 11 seen after 11"):
        t.observe([11])
    with pytest.raises(ValueError, match="offset 20 is beyond the range"):
        t.observe([20])


@pytest.mark.parametrize(
    ("runs", "missing"),
    [
        ([(10, 19)], []),  # one run covering the range
        ([(0, 100)], []),  # a run wider than the range (other ranges of the partition)
        ([(10, 12), (15, 19)], [(13, 15)]),
        ([(15, 19), (10, 12)], [(13, 15)]),  # runs in any order
        ([], [(10, 20)]),
        ([(30, 40)], [(10, 20)]),  # runs outside the range do not count
    ],
)
def test_missing_offsets_from_runs(runs, missing):
    assert [(g.start, g.end) for g in missing_offsets(R, runs)] == missing


def test_error_names_topic_partition_and_gaps_and_caps_the_list():
    gaps = [OffsetRange("t-1", 3, s, s + 1) for s in range(100, 120, 2)]
    err = incomplete_error(OffsetRange("t-1", 3, 100, 120), gaps, "why")
    assert isinstance(err, RangeIncomplete)
    assert str(err).startswith("range t-1[3]@[100,120) is incomplete: 10 of 20 offsets missing: [100,101)")
    assert describe_gaps(gaps).endswith("and 2 more gaps")
