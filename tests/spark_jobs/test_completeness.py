"""Completeness tracking: table of cases, each with why."""

from __future__ import annotations

import pytest

from kprio_core.errors import RangeIncomplete
from kprio_core.offsets import OffsetRange
from spark_jobs.completeness import RangeTracker, describe_gaps, incomplete_error, missing_offsets

R = OffsetRange("t-1", 3, 10, 20)


@pytest.mark.parametrize(
    ("chunks", "skip_to", "missing"),
    [
        ([[*range(10, 20)]], None, []),  # every offset: complete
        ([[10, 11], [12, 13, 14], range(15, 20)], None, []),  # chunks join without gaps
        ([[10, 11, 12]], None, [(13, 20)]),  # short: the tail is missing
        ([[11, 12], [13, 19]], None, [(10, 11), (14, 19)]),  # head gap and inner gap
        ([], None, [(10, 20)]),  # nothing read at all
        ([[10]], 15, [(11, 15), (15, 20)]),  # retention moved the log start to 15, then nothing
        ([[10]], 25, [(11, 20)]),  # log start beyond the range: the rest of the range is lost
    ],
)
def test_tracker_names_missing_offsets(chunks, skip_to, missing):
    t = RangeTracker(R)
    for chunk in chunks:
        t.observe(list(chunk))
    if skip_to is not None:
        t.skip_to(skip_to)
    assert [(g.start, g.end) for g in t.missing()] == missing
    assert t.complete == (not missing)


def test_tracker_refuses_offsets_going_back():
    t = RangeTracker(R)
    t.observe([10, 11])
    with pytest.raises(ValueError, match="offset 11 seen after 11"):
        t.observe([11])


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
