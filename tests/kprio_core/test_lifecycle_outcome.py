"""What follows a drain, its checks and its commit, case by case: one numbered row per situation, with why."""

from __future__ import annotations

import pytest

from kprio_core.lifecycle.outcome import (
    Cause,
    FailWhole,
    GoOn,
    MarkCommitted,
    Publish,
    RangeDrained,
    Recheck,
    SplitOff,
    after_checks,
    after_commit,
    after_drain,
    passes_by_itself,
    run_failure_passes,
)
from kprio_core.model.offsets import OffsetRange

A, B, C = (OffsetRange("orders-2", p, 0, 10) for p in range(3))
R = OffsetRange("gone-1", 0, 0, 10)
"""A range on a topic recreated since the plan."""
P0 = OffsetRange("orders-0", 0, 0, 10)
"""A range of another priority."""


def ok(rng: OffsetRange) -> RangeDrained:
    return RangeDrained(rng)


def failed(rng: OffsetRange, transient: bool | None = False) -> RangeDrained:
    return RangeDrained(rng, failed=True, transient=transient)


# (n, why, ranges drained, moved, may split, expected)
DRAIN_CASES = [
    (1, "every range drained: all go on to the checks, nothing split",
     [ok(A), ok(B)], (), True, GoOn((A, B))),
    (2, "one range failed (not transient): it is split off, the rest goes on",
     [ok(A), failed(B)], (), True, GoOn((A,), (SplitOff((B,), Cause.DRAIN, False),))),
    (3, "the failed ranges' causes all pass by themselves: their split is transient",
     [failed(A, True), ok(B), failed(C, True)], (), True, GoOn((B,), (SplitOff((A, C), Cause.DRAIN, True),))),
    (4, "one cause passes, one does not: the split is not transient",
     [failed(A, True), ok(B), failed(C, False)], (), True, GoOn((B,), (SplitOff((A, C), Cause.DRAIN, False),))),
    (5, "a failed range without a typed record: its cause is unknown, never transient",
     [failed(A, None), ok(B)], (), True, GoOn((B,), (SplitOff((A,), Cause.DRAIN, False),))),
    (6, "every range failed: the whole batch fails for its drains",
     [failed(A, False), failed(B, False)], (), True, FailWhole(Cause.DRAIN, False)),
    (7, "every range failed, every cause transient: the whole failure is transient",
     [failed(A, True), failed(B, True)], (), True, FailWhole(Cause.DRAIN, True)),
    (8, "a range read another log: set apart before anything is judged, never transient",
     [ok(A), ok(R)], {R}, True, GoOn((A,), (SplitOff((R,), Cause.LOG_CHANGED, False),))),
    (9, "another log's range that also failed counts as another log's, not as a failed drain",
     [ok(A), failed(R, True)], {R}, True, GoOn((A,), (SplitOff((R,), Cause.LOG_CHANGED, False),))),
    (10, "another log's ranges first, then the failed drains: two splits, in that order",
     [ok(A), failed(B, True), ok(R)], {R}, True,
     GoOn((A,), (SplitOff((R,), Cause.LOG_CHANGED, False), SplitOff((B,), Cause.DRAIN, True)))),
    (11, "nothing left but another log's ranges and failed drains: the log change fails it whole (a person decides)",
     [failed(B, True), ok(R)], {R}, True, FailWhole(Cause.LOG_CHANGED, False)),
    (12, "a plan of no range: nothing to split, nothing fails",
     [], (), True, GoOn(())),
    (13, "a replay cannot split: one failed range fails it whole, transient as its cause",
     [ok(A), failed(B, True)], (), False, FailWhole(Cause.DRAIN, True)),
    (14, "a replay whose every range drained goes on",
     [ok(A), ok(B)], (), False, GoOn((A, B))),
    (15, "two priorities' drains failed, priority 2's for a passing cause, priority 0's not: one split per priority, "
         "so priority 2's is retried by itself and never waits for the person priority 0's needs",
     [failed(A, True), failed(P0, False), ok(B)], (), True,
     GoOn((B,), (SplitOff((P0,), Cause.DRAIN, False), SplitOff((A,), Cause.DRAIN, True)))),
]


@pytest.mark.parametrize(("n", "why", "ranges", "moved", "may_split", "expected"), DRAIN_CASES,
                         ids=[f"{c[0]}" for c in DRAIN_CASES])
def test_what_follows_the_drain(n, why, ranges, moved, may_split, expected):
    assert after_drain(ranges, moved=moved, may_split=may_split) == expected, f"case {n}: {why}"


# (n, why, kept, passed, failing, may split, expected)
CHECK_CASES = [
    (1, "the checks passed: publish what was checked",
     (A, B), True, (), True, Publish((A, B))),
    (2, "a check failed on one range of two: split it off (a check's verdict never passes by itself), check the rest",
     (A, B), False, (B,), True, Recheck((A,), SplitOff((B,), Cause.CHECKS, False))),
    (3, "the failing ranges are split off sorted, the others kept in their order",
     (C, A, B), False, (C, A), True, Recheck((B,), SplitOff((A, C), Cause.CHECKS, False))),
    (4, "every range failed a check: nothing is left to publish, the whole fails",
     (A, B), False, (A, B), True, FailWhole(Cause.CHECKS, False)),
    (5, "a failed check that names no range (rows outside the plan): the whole fails",
     (A, B), False, (), True, FailWhole(Cause.CHECKS, False)),
    (6, "the second check (after a split) failed again: no second split, the whole fails",
     (A, B), False, (B,), False, FailWhole(Cause.CHECKS, False)),
    (7, "the second check passed: publish the rest",
     (A,), True, (), False, Publish((A,))),
    (8, "a replay's failed check: nothing of its topic is published",
     (A, B), False, (B,), False, FailWhole(Cause.CHECKS, False)),
]


@pytest.mark.parametrize(("n", "why", "kept", "passed", "failing", "may_split", "expected"), CHECK_CASES,
                         ids=[f"{c[0]}" for c in CHECK_CASES])
def test_what_follows_the_checks(n, why, kept, passed, failing, may_split, expected):
    assert after_checks(kept, passed=passed, failing=set(failing), may_split=may_split) == expected, f"case {n}: {why}"


# (n, why, cause, causes' verdicts, expected)
PASSES_CASES = [
    (1, "failed drains whose causes all pass", Cause.DRAIN, [True, True], True),
    (2, "one cause that does not pass", Cause.DRAIN, [True, False], False),
    (3, "an unknown cause", Cause.DRAIN, [None], False),
    (4, "no cause at all", Cause.DRAIN, [], False),
    (5, "a check's verdict never passes by itself", Cause.CHECKS, [True], False),
    (6, "a log change waits for a person", Cause.LOG_CHANGED, [True], False),
]


@pytest.mark.parametrize(("n", "why", "cause", "verdicts", "expected"), PASSES_CASES,
                         ids=[f"{c[0]}" for c in PASSES_CASES])
def test_whether_a_failure_passes_by_itself(n, why, cause, verdicts, expected):
    assert passes_by_itself(cause, verdicts) is expected, f"case {n}: {why}"


# (n, why, the error's type is transient, the batch was split apart, expected)
RUN_FAILURE_CASES = [
    (1, "a broker, an output or a Spark server not there: passes by itself", True, False, True),
    (2, "the drain died as a whole and the batch was split apart: both parts retried without spending attempts",
     False, True, True),
    (3, "a failure of its own kind that could not be split: it fails as its cause says", False, False, False),
]


@pytest.mark.parametrize(("n", "why", "error_transient", "isolated", "expected"), RUN_FAILURE_CASES,
                         ids=[f"{c[0]}" for c in RUN_FAILURE_CASES])
def test_whether_a_run_that_died_fails_its_batch_as_passing(n, why, error_transient, isolated, expected):
    assert run_failure_passes(error_transient, isolated=isolated) is expected, f"case {n}: {why}"


# --- after the commit -----------------------------------------------------------------------------

HI, LO = OffsetRange("orders-2", 0, 40, 50), OffsetRange("orders-1", 0, 80, 90)
LO2 = OffsetRange("orders-1", 1, 80, 90)
GONE = OffsetRange("gone-1", 0, 80, 90)
P2, P1, P1B = ("orders-2", 0), ("orders-1", 0), ("orders-1", 1)

# (n, why, ranges, written, stands after the commit, topics of another log, expected)
COMMIT_CASES = [
    (1, "every partition written: the batch is committed whole",
     [HI, LO], {P2, P1}, {P2: 50, P1: 90}, (), MarkCommitted((HI, LO))),
    (2, "a partition committed already (a re-drain, a group moved forward past it): committed, nothing split",
     [HI, LO], {P2}, {P2: 50, P1: 120}, (), MarkCommitted((HI, LO))),
    (3, "priority 1's group moved back below the batch while it was in flight: only its range is split off, to wait "
        "for the re-drain (transient: no attempt spent); priority 2's commits",
     [HI, LO], {P2}, {P2: 50, P1: 30}, (),
     MarkCommitted((HI,), (SplitOff((LO,), Cause.GROUP_BEHIND, True),))),
    (4, "the whole group moved back (both partitions of priority 1): both ranges in one split",
     [HI, LO, LO2], {P2}, {P2: 50, P1: 30, P1B: 10}, (),
     MarkCommitted((HI,), (SplitOff((LO, LO2), Cause.GROUP_BEHIND, True),))),
    (5, "one partition of the moved group only: its other partition commits",
     [LO, LO2], {P1B}, {P1: 30, P1B: 90}, (), MarkCommitted((LO2,), (SplitOff((LO,), Cause.GROUP_BEHIND, True),))),
    (6, "the group's offsets gone under the batch (nothing committed): it waits for the restore alike",
     [HI, LO], {P2}, {P2: 50, P1: None}, (), MarkCommitted((HI,), (SplitOff((LO,), Cause.GROUP_BEHIND, True),))),
    (7, "the move came after this commit wrote it: committed (the tick sees the move and re-drains it)",
     [HI, LO], {P2, P1}, {P2: 50, P1: 30}, (), MarkCommitted((HI, LO))),
    (8, "nothing of the batch committed, its groups behind it: it fails whole, transient, for the move",
     [LO, LO2], set(), {P1: 30, P1B: 10}, (), FailWhole(Cause.GROUP_BEHIND, True)),
    (9, "a topic recreated since the plan: its range split off for a person, never written; the rest commits",
     [HI, GONE], {P2}, {P2: 50}, ("gone-1",), MarkCommitted((HI,), (SplitOff((GONE,), Cause.LOG_CHANGED, False),))),
    (10, "not written and the group inside the batch's range (its records below the log's start now): split, "
         "not transient",
     [HI, LO], {P2}, {P2: 50, P1: 85}, (), MarkCommitted((HI,), (SplitOff((LO,), Cause.COMMIT, False),))),
    (13, "both priorities' groups moved under a batch of only their ranges (two moves at once): nothing to commit, "
         "it fails whole, transient, and waits for both re-drains",
     [HI, LO], set(), {P2: 10, P1: 30}, (), FailWhole(Cause.GROUP_BEHIND, True)),
    (14, "two priorities' groups moved, a third range committed: one split per priority, so neither waits for the "
         "other's re-drain",
     [HI, LO, OffsetRange("orders-0", 0, 0, 5)], {("orders-0", 0)}, {P2: 10, P1: 30, ("orders-0", 0): 5}, (),
     MarkCommitted((OffsetRange("orders-0", 0, 0, 5),), (SplitOff((LO,), Cause.GROUP_BEHIND, True),
                                                         SplitOff((HI,), Cause.GROUP_BEHIND, True)))),
    (11, "another log and a group behind: two splits, another log's first",
     [HI, LO, GONE], {P2}, {P2: 50, P1: 30}, ("gone-1",),
     MarkCommitted((HI,), (SplitOff((GONE,), Cause.LOG_CHANGED, False), SplitOff((LO,), Cause.GROUP_BEHIND, True)))),
    (12, "nothing committed, one range behind, one on another log: fails whole, not transient (a person decides)",
     [LO, GONE], set(), {P1: 30}, ("gone-1",), FailWhole(Cause.LOG_CHANGED, False)),
]


@pytest.mark.parametrize(("n", "why", "ranges", "written", "stands", "other_log", "expected"), COMMIT_CASES,
                         ids=[f"{c[0]}" for c in COMMIT_CASES])
def test_what_follows_the_commit(n, why, ranges, written, stands, other_log, expected):
    assert after_commit(ranges, written=written, stands=stands, other_log=other_log) == expected, f"case {n}: {why}"
