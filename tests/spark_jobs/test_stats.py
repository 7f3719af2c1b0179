"""Range stats from the fused tasks' counts: summing splits, and refusing counts that break the plan."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kprio_core.errors import DrainOutputInvalid
from kprio_core.offsets import OffsetRange
from kprio_core.drain_plan import PlannedRange
from spark_jobs.stats import counted_stats

PLAN = [PlannedRange(2, OffsetRange("o-2", 0, 0, 10)), PlannedRange(2, OffsetRange("o-2", 0, 20, 30)),
        PlannedRange(0, OffsetRange("o-0", 3, 5, 8))]


def _entry(topic, partition, start, end, records, first=None, last=None, size=0, errors=0):
    return {"topic": topic, "partition": partition, "start": start, "end": end, "records": records, "bytes": size,
            "first": first, "last": last, "errors": errors}


def _observed(tasks, total=None):
    counted = sum(e["records"] for task in tasks for e in task)
    return SimpleNamespace(get={"total": counted if total is None else total, "tasks": tasks})


def test_splits_add_up_to_their_planned_range():
    tasks = [
        [_entry("o-2", 0, 0, 4, 4, 0, 3, 40, 1), _entry("o-2", 0, 4, 10, 6, 4, 9, 60),
         _entry("o-2", 0, 20, 30, 10, 20, 29, 100, 2)],
        [_entry("o-0", 3, 5, 8, 3, 5, 7, 30)],
    ]
    stats = counted_stats(_observed(tasks), None, None, PLAN)
    assert [(s.records, s.bytes, s.first_offset, s.last_offset, s.errors, s.lost) for s in stats] == [
        (10, 100, 0, 9, 1, ()), (10, 100, 20, 29, 2, ()), (3, 30, 5, 7, 0, ())]


@pytest.mark.parametrize(
    ("tasks", "total", "message"),
    [
        ([[_entry("o-2", 0, 0, 10, 10, 0, 9)], [_entry("o-2", 0, 20, 30, 10, 20, 29)],
          [_entry("o-0", 3, 5, 8, 3, 5, 7)]], 24, "1 written records are outside the planned ranges"),  # JVM saw more
        ([[_entry("o-2", 0, 0, 10, 10, 0, 9)], [_entry("o-2", 0, 0, 10, 10, 0, 9)], [_entry("o-2", 0, 20, 30, 10)],
          [_entry("o-0", 3, 5, 8, 3)]], None, r"more than once in o-2\[0\]@\[0,10\)"),  # a range read twice
        ([[_entry("o-2", 0, 8, 12, 4, 8, 11)]], None, r"o-2\[0\]@\[8,12\), which is in no planned range"),
        ([[_entry("o-1", 0, 0, 1, 1, 0, 0)]], None, "in no planned range"),  # a topic the plan does not have
    ],
)
def test_counts_that_break_the_plan_are_refused(tasks, total, message):
    with pytest.raises(DrainOutputInvalid, match=message):
        counted_stats(_observed(tasks, total), None, None, PLAN)
