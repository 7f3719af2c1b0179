"""The batch ledger on a SQLite file: transitions, reservations, slots, holds, replay, reading, restarts, identity."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kprio_core.config import LedgerSettings
from kprio_core.errors import (
    BatchNotFound,
    DrainStatsInvalid,
    InvalidTransition,
    LeaseLost,
    LedgerNotFresh,
    LedgerSchemaOutdated,
    RangeConflict,
)
from kprio_core.ledger import TRANSITIONS, Batch, BatchState, Ledger
from kprio_core.ledger.meta import outdated_message
from kprio_core.model.drain_plan import BurstDecision, DrainPlan, PlannedRange
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import CheckOutcome, CheckReport, CommitReport, RangeStats
from tests.kprio_core.ledger_support import (
    CHECKS_PASSED,
    Clock,
    R,
    commit_report,
    drain_check_commit,
    make_plan,
    result_for,
)

S = BatchState


# --------------------------------------------------------------------------------- transitions

ACTIONS = ("drain", "check", "commit", "fail", "replay")


def act(ledger: Ledger, batch: Batch, action: str) -> Batch:
    if action == "drain":
        return ledger.mark_drained(batch.batch_id, result_for(batch))
    if action == "check":
        return ledger.mark_checked(batch.batch_id, CHECKS_PASSED)
    if action == "commit":
        return ledger.mark_committed(batch.batch_id, commit_report(batch))
    if action == "fail":
        return ledger.mark_failed(batch.batch_id, "checks failed: 3 null ids", retry_at=None)
    return ledger.replay(batch.batch_id)


PATH_TO = {
    S.PLANNED: (),
    S.DRAINED: ("drain",),
    S.CHECKED: ("drain", "check"),
    S.COMMITTED: ("drain", "check", "commit"),
    S.FAILED: ("fail",),
}

# (from, action, expected state or None for InvalidTransition, why)
TRANSITION_CASES = [
    (S.PLANNED, "drain", S.DRAINED, "1. the drain wrote the planned ranges"),
    (S.PLANNED, "check", None, "2. nothing drained yet: nothing to check"),
    (S.PLANNED, "commit", None, "3. commit after proof: no drain, no checks"),
    (S.PLANNED, "fail", S.FAILED, "4. a planned run can die before draining"),
    (S.PLANNED, "replay", None, "5. still in flight: replay needs failed or committed"),
    (S.DRAINED, "drain", S.DRAINED, "6. a rerun of the drain replaces its output"),
    (S.DRAINED, "check", S.CHECKED, "7. checks passed on the drained output"),
    (S.DRAINED, "commit", None, "8. commit after proof: checks have not passed"),
    (S.DRAINED, "fail", S.FAILED, "9. the drain output failed the checks"),
    (S.DRAINED, "replay", None, "10. still in flight"),
    (S.CHECKED, "drain", S.DRAINED, "11. a re-drain after the checks; checks run again"),
    (S.CHECKED, "check", None, "12. checks already recorded; a re-check follows a re-drain"),
    (S.CHECKED, "commit", S.COMMITTED, "13. commit after proof"),
    (S.CHECKED, "fail", S.FAILED, "14. the commit itself can fail"),
    (S.CHECKED, "replay", None, "15. still in flight"),
    (S.COMMITTED, "drain", None, "16. a committed batch is re-drained only through replay"),
    (S.COMMITTED, "check", None, "17. nothing new to check"),
    (S.COMMITTED, "commit", None, "18. committing twice is a bug upstream"),
    (S.COMMITTED, "fail", None, "19. committed offsets cannot un-happen"),
    (S.COMMITTED, "replay", S.PLANNED, "20. replay of a committed batch re-drains; its commit adds nothing"),
    (S.FAILED, "drain", None, "21. a failed batch reserves no ranges: retry it first"),
    (S.FAILED, "check", None, "22. nothing valid to check"),
    (S.FAILED, "commit", None, "23. never commit a failed batch"),
    (S.FAILED, "fail", None, "24. already failed; the first reason stays"),
    (S.FAILED, "replay", S.PLANNED, "25. replay reserves the same ranges again"),
]


@pytest.mark.parametrize(("start", "action", "expected", "why"), TRANSITION_CASES, ids=[c[3] for c in TRANSITION_CASES])
def test_transition_table(ledger: Ledger, start: BatchState, action: str, expected: BatchState | None, why: str):
    batch = ledger.record_plan(make_plan((0, 10), (20, 30)))
    for step in PATH_TO[start]:
        batch = act(ledger, batch, step)
    assert batch.state is start
    if expected is None:
        with pytest.raises(InvalidTransition) as err:
            act(ledger, batch, action)
        assert batch.batch_id in str(err.value) and start.value in str(err.value)
        assert ledger.get(batch.batch_id) == batch, "a refused transition changes nothing"
        return
    after = act(ledger, batch, action)
    assert after.state is expected
    assert ledger.get(batch.batch_id) == after
    assert ledger.reserved_ranges("orders") == (sorted(batch.plan.offset_ranges()) if expected.in_flight else [])
    held = [(h.topic, h.partition, h.start) for h in ledger.holds("orders")]
    assert held == ([("orders-2", 0, 0)] if expected is S.FAILED else []), "a failed batch holds its partition"


def test_transition_cases_cover_the_table():
    """Every allowed move of TRANSITIONS is a case above, and every case above is in it."""
    target = {"drain": S.DRAINED, "check": S.CHECKED, "commit": S.COMMITTED, "fail": S.FAILED, "replay": S.PLANNED}
    allowed = {(start, target[action]) for start, action, expected, _ in TRANSITION_CASES if expected is not None}
    assert allowed == set(TRANSITIONS)
    assert len(TRANSITION_CASES) == len(S) * len(ACTIONS)


def test_invalid_transition_message_names_batch_state_and_asked_state(ledger: Ledger):
    batch = ledger.record_plan(make_plan((0, 10)))
    with pytest.raises(InvalidTransition, match=r"batch b-000001 is planned and cannot become committed"):
        ledger.mark_committed(batch.batch_id, CommitReport())


def test_lifecycle_keeps_typed_outcomes_times_and_events(ledger: Ledger, clock: Clock):
    plan = make_plan((0, 10), R("orders-0", 3, 5, 9))
    created = clock.now
    batch = ledger.record_plan(plan)
    assert (batch.created_at, batch.updated_at, batch.attempts, batch.reason, batch.parent) == (created, created, 1,
                                                                                                 None, None)
    assert batch.plan == plan and batch.in_flight and not batch.holds and not batch.replay_of_committed
    assert (batch.priorities, batch.drain, batch.checks, batch.commit, batch.lease) == ({2, 0}, None, None, None, None)
    clock.tick()
    drained = ledger.mark_drained(batch.batch_id, result_for(batch, dead=1))
    assert drained.drain == result_for(batch, dead=1) and drained.updated_at == created + timedelta(seconds=1)
    assert drained.drain.by_priority() == {2: (9, 1), 0: (3, 1)}
    batch = ledger.mark_checked(batch.batch_id, CHECKS_PASSED)
    assert batch.checks == CHECKS_PASSED
    batch = ledger.mark_drained(batch.batch_id, result_for(batch, 120))
    assert batch.checks is None and batch.drain.bytes == 120 * 14, "a re-drain replaces the drain and voids the checks"
    batch = ledger.mark_checked(batch.batch_id, CHECKS_PASSED)
    clock.tick()
    batch = ledger.mark_committed(batch.batch_id, commit_report(batch))
    assert batch.commit == commit_report(batch) and batch.committed_at == clock.now and not batch.in_flight
    moves = [(e.from_state, e.to_state) for e in ledger.events(batch.batch_id)]
    assert moves == [(None, S.PLANNED), (S.PLANNED, S.DRAINED), (S.DRAINED, S.CHECKED), (S.CHECKED, S.DRAINED),
                     (S.DRAINED, S.CHECKED), (S.CHECKED, S.COMMITTED)]


def test_mark_failed_needs_a_reason_and_keeps_when_to_retry(ledger: Ledger, clock: Clock):
    batch = ledger.record_plan(make_plan((0, 10)))
    with pytest.raises(ValueError, match="needs a reason"):
        ledger.mark_failed(batch.batch_id, "  ", retry_at=None)
    ledger.claim(batch.batch_id, "run-1@h:1", 30)
    retry_at = clock.now + timedelta(seconds=5)
    failed = ledger.mark_failed(batch.batch_id, "drain failed: No space left on device: /out", retry_at=retry_at)
    assert (failed.state, failed.reason, failed.retry_at, failed.lease) == (
        S.FAILED, "drain failed: No space left on device: /out", retry_at, None)
    assert ledger.events(batch.batch_id)[-1].reason == "drain failed: No space left on device: /out"


# --------------------------------------------------------------------------------- drain results and checks

STRAY = RangeStats(2, R("orders-2", 0, 0, 9), output=9, dead=0, distinct=9, first=0, last=8)

# (how a correct result is spoiled, error, message, why)
DRAIN_RESULT_CASES = [
    (lambda r: replace(r, batch_id="b-000009"), DrainStatsInvalid, "it names batch b-000009",
     "1. another batch's result"),
    (lambda r: replace(r, ranges=r.ranges[:1]), DrainStatsInvalid, r"no stats for orders-2\[0\]@\[20,30\)",
     "2. a range left out"),
    (lambda r: replace(r, ranges=(*r.ranges, r.ranges[0])), DrainStatsInvalid, "is there twice",
     "3. a range counted twice"),
    (lambda r: replace(r, ranges=(STRAY, r.ranges[1])), DrainStatsInvalid,
     r"orders-2\[0\]@\[0,9\) \(priority 2\) is not a range of the batch", "4. a range the batch does not have"),
    (lambda r: replace(r, attempt=2), LeaseLost, "is of attempt 2, but the batch is at attempt 1",
     "5. a late result of another attempt"),
]


@pytest.mark.parametrize(("spoil", "error", "message", "why"), DRAIN_RESULT_CASES,
                         ids=[c[3] for c in DRAIN_RESULT_CASES])
def test_a_drain_result_not_of_this_attempt_is_refused_and_changes_nothing(ledger: Ledger, spoil, error, message,
                                                                           why):
    batch = ledger.record_plan(make_plan((0, 10), (20, 30)))
    with pytest.raises(error, match=message):
        ledger.mark_drained(batch.batch_id, spoil(result_for(batch)))
    assert ledger.get(batch.batch_id) == batch


@pytest.mark.parametrize(
    ("failed_ranges", "accepted", "why"),
    [
        ((R("orders-2", 1, 0, 10),), True, "1. the failing range was split off: the rest is proven"),
        ((R("orders-2", 0, 0, 10),), False, "2. the failing range is still in the batch"),
        ((), False, "3. a failed check that names no range condemns the whole batch"),
    ],
)
def test_checked_needs_every_failed_check_to_be_on_ranges_split_off(ledger: Ledger, failed_ranges, accepted, why):
    batch = ledger.record_plan(make_plan((0, 10), R("orders-2", 1, 0, 10)))
    batch = ledger.mark_drained(batch.batch_id, result_for(batch))
    ledger.split(batch.batch_id, [R("orders-2", 1, 0, 10)], "invalid records", retry_at=None)
    report = CheckReport((CheckOutcome("values_match_schema", False, {"invalid_records": 7}, failed_ranges),))
    if accepted:
        assert ledger.mark_checked(batch.batch_id, report).checks == report
    else:
        with pytest.raises(InvalidTransition, match="cannot become checked: values_match_schema failed"):
            ledger.mark_checked(batch.batch_id, report)


# --------------------------------------------------------------------------------- reservations

def test_overlap_is_refused_with_the_holder_and_the_range(ledger: Ledger):
    held = ledger.record_plan(make_plan((0, 10)))
    with pytest.raises(RangeConflict) as err:
        ledger.record_plan(make_plan((30, 40), (9, 12)))
    assert held.batch_id in str(err.value)
    assert "orders-2[0]@[9,12) overlaps orders-2[0]@[0,10) held by batch b-000001 (planned)" in str(err.value)
    assert [b.batch_id for b in ledger.batches()] == [held.batch_id], "nothing of the refused plan is stored"
    assert ledger.reserved_ranges("orders") == [OffsetRange("orders-2", 0, 0, 10)]
    assert ledger.record_plan(make_plan((10, 20))).batch_id == "b-000002", "a refused plan uses no id"


@pytest.mark.parametrize(
    ("second", "why"),
    [
        (R("orders-2", 0, 10, 20), "1. adjacent: [0,10) ends where [10,20) starts"),
        (R("orders-2", 1, 0, 10), "2. same offsets, other partition"),
        (R("orders-1", 0, 0, 10), "3. same offsets, other priority topic"),
        (R("orders-2", 0, 5, 5), "4. an empty range holds no offset"),
    ],
)
def test_ranges_that_do_not_overlap_are_accepted(ledger: Ledger, second: OffsetRange, why: str):
    ledger.record_plan(make_plan((0, 10)))
    ledger.record_plan(make_plan(second))
    assert len(ledger.in_flight("orders")) == 2


def test_plan_overlapping_itself_is_refused(ledger: Ledger):
    with pytest.raises(RangeConflict, match=r"\[0,10\) overlaps orders-2\[0\]@\[5,15\) of the same plan"):
        ledger.record_plan(make_plan((0, 10), (5, 15)))


def test_once_a_batch_committed_the_offsets_after_it_are_free_and_its_own_are_refused(ledger: Ledger):
    drain_check_commit(ledger, ledger.record_plan(make_plan((0, 10))))
    assert ledger.reserved_ranges("orders") == [] and ledger.holds("orders") == []
    assert ledger.record_plan(make_plan((10, 20))).state is S.PLANNED
    # A plan made from a snapshot older than that commit (another driver's) is refused in the same transaction.
    with pytest.raises(RangeConflict, match=r"orders-2\[0\]@\[2,8\) starts below offset 10, which kprio committed"):
        ledger.record_plan(make_plan((2, 8)))
    assert [b.state for b in ledger.batches("orders")] == [S.PLANNED, S.COMMITTED]


# Batch A drains orders-2[0]@[0,10) (priority 2); batch B drains orders-2[1]@[0,10) and orders-0[0]@[0,10).
# (plan priorities, max_in_flight, refused priority or None, why)
SLOT_CASES = [
    ({1}, 1, None, "1. priority 1 has no batch in flight: its slot is free"),
    ({2}, 1, 2, "2. A and B take priority 2's one slot"),
    ({2}, 2, 2, "3. A and B take both of priority 2's slots"),
    ({2}, 3, None, "4. a third slot of priority 2 is free"),
    ({0}, 1, 0, "5. B takes priority 0's one slot"),
    ({0}, 2, None, "6. urgent or not, a priority counts only its own batches"),
    ({1, 0}, 1, 0, "7. any full priority of the plan refuses it"),
    ({2}, None, None, "8. no limit: only overlaps refuse"),
]


@pytest.mark.parametrize(("priorities", "limit", "refused", "why"), SLOT_CASES, ids=[c[3] for c in SLOT_CASES])
def test_max_in_flight_counts_slots_per_priority(ledger: Ledger, priorities, limit, refused, why):
    ledger.record_plan(make_plan(R("orders-2", 0, 0, 10)))
    ledger.record_plan(make_plan(R("orders-2", 1, 0, 10), R("orders-0", 0, 0, 10)))
    plan = make_plan(*(R(f"orders-{p}", 5, 0, 10) for p in sorted(priorities)))
    if refused is None:
        assert ledger.record_plan(plan, max_in_flight=limit).priorities == priorities
        return
    holders = ledger.full_priorities("orders", limit)[refused]
    assert holders == (["b-000001", "b-000002"] if refused == 2 else ["b-000002"])
    with pytest.raises(RangeConflict, match=rf"priority {refused} already has {len(holders)} batch\(es\) in flight "
                                            rf"\(max_in_flight={limit} per priority\): {', '.join(holders)}"):
        ledger.record_plan(plan, max_in_flight=limit)


def test_failed_batches_take_no_slot_and_topics_count_apart(ledger: Ledger):
    first = ledger.record_plan(make_plan((0, 10)), max_in_flight=1)
    assert ledger.full_priorities("orders", 1) == {2: [first.batch_id]}
    ledger.record_plan(make_plan((0, 10), topic="payments"), max_in_flight=1)  # another topic: its own slots
    ledger.mark_failed(first.batch_id, "operator stop", retry_at=None)
    assert ledger.full_priorities("orders", 1) == {}
    assert ledger.record_plan(make_plan(R("orders-2", 1, 0, 10)), max_in_flight=1).batch_id == "b-000003"
    with pytest.raises(ValueError, match="max_in_flight must be >= 1"):
        ledger.record_plan(make_plan(R("orders-2", 2, 0, 10)), max_in_flight=0)


# Failed batch F read orders-2[0]@[10,20) and orders-1[1]@[5,8): it holds both partitions from those starts.
# (wanted range, conflicts, why)
HOLD_CASES = [
    (R("orders-2", 0, 20, 30), True, "1. later on the held partition: could not commit past F"),
    (R("orders-2", 0, 1000, 1010), True, "2. held up to the end of the log"),
    (R("orders-2", 0, 5, 15), True, "3. overlaps F's own range"),
    (R("orders-2", 0, 0, 10), False, "4. before the hold's start: not held"),
    (R("orders-2", 1, 10, 20), False, "5. another partition keeps draining"),
    (R("orders-0", 0, 10, 20), False, "6. another priority keeps draining"),
    (R("orders-1", 1, 8, 9), True, "7. F's second partition is held too"),
    (R("orders-1", 1, 2, 2), False, "8. an empty range holds nothing and asks for nothing"),
]


@pytest.mark.parametrize(("wanted", "conflicts", "why"), HOLD_CASES, ids=[c[2] for c in HOLD_CASES])
def test_a_failed_batch_holds_its_partitions_from_its_range_start(ledger: Ledger, wanted, conflicts, why):
    failed = ledger.record_plan(make_plan(R("orders-2", 0, 10, 20), R("orders-1", 1, 5, 8)))
    ledger.mark_failed(failed.batch_id, "values_match_schema failed", retry_at=None)
    if not conflicts:
        assert ledger.record_plan(make_plan(wanted)).state is S.PLANNED
        return
    with pytest.raises(RangeConflict, match=rf"{wanted.topic}\[{wanted.partition}\], held from offset \d+ by failed "
                                            rf"batch {failed.batch_id} \(retry it first\)|overlaps"):
        ledger.record_plan(make_plan(wanted))


def test_holds_list_each_partition_once_until_the_retry_commits(ledger: Ledger, clock: Clock):
    retry_at = clock.now + timedelta(seconds=10)
    failed = ledger.record_plan(make_plan(R("orders-2", 0, 10, 20), R("orders-1", 1, 5, 8), R("orders-0", 2, 4, 4)))
    ledger.mark_failed(failed.batch_id, "drain failed", retry_at=retry_at)
    holds = ledger.holds("orders", max_attempts=1)
    assert [(h.topic, h.partition, h.start, h.batch_id, h.attempts, h.retry_at, h.exhausted) for h in holds] == [
        ("orders-1", 1, 5, failed.batch_id, 1, retry_at, True),
        ("orders-2", 0, 10, failed.batch_id, 1, retry_at, True),
    ], "sorted by partition; the empty range holds nothing; 1 of max 1 attempts: exhausted"
    assert [h.exhausted for h in ledger.holds("orders", max_attempts=3)] == [False, False]
    assert ledger.holds("payments") == [] and ledger.reserved_ranges("orders") == []
    retried = ledger.retry(failed.batch_id, reason="operator retry")
    assert ledger.holds("orders") == [] and ledger.reserved_ranges("orders") == sorted(
        r for r in retried.plan.offset_ranges() if r.count)
    drain_check_commit(ledger, retried)
    assert ledger.holds("orders") == [] and ledger.record_plan(make_plan(R("orders-2", 0, 20, 30))).in_flight


def test_a_failed_redrain_of_committed_offsets_holds_nothing(ledger: Ledger):
    batch = drain_check_commit(ledger, ledger.record_plan(make_plan((0, 10))))
    replay = ledger.replay(batch.batch_id)
    failed = ledger.mark_failed(replay.batch_id, "handler raised on the re-drain", retry_at=None)
    assert failed.replay_of_committed and not failed.holds
    assert ledger.holds("orders") == [] and ledger.reserved_ranges("orders") == []
    assert ledger.record_plan(make_plan((10, 20))).in_flight, "its offsets are committed: nothing waits for it"


# --------------------------------------------------------------------------------- replay

def test_replay_of_a_failed_batch_reserves_the_same_ranges(ledger: Ledger):
    plan = make_plan((0, 10), R("orders-1", 3, 7, 9))
    batch = ledger.record_plan(plan)
    batch = ledger.mark_drained(batch.batch_id, result_for(batch))
    ledger.mark_failed(batch.batch_id, "row count 9 != 10", retry_at=datetime(2030, 1, 1, tzinfo=UTC))
    again = ledger.replay(batch.batch_id)
    assert (again.state, again.attempts, again.reason, again.drain, again.retry_at) == (S.PLANNED, 2, None, None, None)
    assert again.plan == plan and not again.replay_of_committed
    assert ledger.reserved_ranges("orders") == sorted(plan.offset_ranges())
    assert ledger.events(batch.batch_id)[-1].reason == "replay of a failed batch"


def test_replay_of_a_committed_batch_is_flagged_for_good(ledger: Ledger):
    batch = ledger.record_plan(make_plan((0, 10)))
    for step in ("drain", "check", "commit", "replay"):
        batch = act(ledger, batch, step)
    assert (batch.state, batch.attempts, batch.replay_of_committed, batch.commit) == (S.PLANNED, 2, True, None)
    assert ledger.reserved_ranges("orders") == [OffsetRange("orders-2", 0, 0, 10)]
    for step in ("drain", "fail", "replay"):
        batch = act(ledger, batch, step)
    assert (batch.attempts, batch.replay_of_committed) == (3, True), "a failed re-drain stays flagged"


def test_replay_conflicts_with_a_newer_batch_taking_the_slot(ledger: Ledger):
    old = drain_check_commit(ledger, ledger.record_plan(make_plan((0, 10))))
    ledger.record_plan(make_plan((10, 20)))
    with pytest.raises(RangeConflict, match="max_in_flight=1 per priority"):
        ledger.replay(old.batch_id, max_in_flight=1)  # the newer batch already takes priority 2's one slot
    assert ledger.get(old.batch_id).state is S.COMMITTED
    # No newer batch can take the old one's offsets: a plan over them is refused as below the committed offset.
    with pytest.raises(RangeConflict, match="starts below offset 10, which kprio committed"):
        ledger.record_plan(make_plan((3, 7), OffsetRange("orders-2", 1, 0, 10)))
    assert ledger.replay(old.batch_id).state is S.PLANNED


def test_replay_of_an_in_flight_batch_says_retry_or_fail_it_first(ledger: Ledger):
    batch = ledger.record_plan(make_plan((0, 10)))
    with pytest.raises(InvalidTransition, match="b-000001 is planned and cannot be replayed.*fail it first"):
        ledger.replay(batch.batch_id)


# --------------------------------------------------------------------------------- reading

def test_unknown_and_malformed_ids_are_not_found(ledger: Ledger):
    with pytest.raises(BatchNotFound, match="no batch b-000009"):
        ledger.get("b-000009")
    with pytest.raises(BatchNotFound, match="'42' is not a ledger batch id"):
        ledger.mark_failed("42", "x", retry_at=None)
    with pytest.raises(BatchNotFound):
        ledger.events("b-000003")


def test_listing_filters_and_orders(ledger: Ledger):
    a = ledger.record_plan(make_plan((0, 10)))
    b = ledger.record_plan(make_plan((0, 10), topic="payments"))
    c = ledger.record_plan(make_plan(R("orders-2", 1, 10, 20)))
    ledger.mark_failed(a.batch_id, "x", retry_at=None)
    ids = lambda bs: [x.batch_id for x in bs]  # noqa: E731
    assert ids(ledger.batches()) == [c.batch_id, b.batch_id, a.batch_id], "newest first"
    assert ids(ledger.batches("orders")) == [c.batch_id, a.batch_id]
    assert ids(ledger.batches(states=[S.FAILED])) == [a.batch_id]
    assert ids(ledger.batches(limit=1)) == [c.batch_id]
    assert ids(ledger.in_flight()) == [b.batch_id, c.batch_id], "oldest first"
    assert ids(ledger.in_flight("payments")) == [b.batch_id]
    assert ledger.reserved_ranges("orders") == [OffsetRange("orders-2", 1, 10, 20)]
    assert ledger.reserved_ranges("nobody") == []


def test_plan_round_trips_with_every_decision(ledger: Ledger):
    plan = DrainPlan(
        logical_topic="orders",
        mode="flipkart",
        record_budget=50,
        byte_budget=4096,
        quotas={2: 29, 1: 14, 0: 7},
        grants={2: 43, 1: 0, 0: 7},
        ranges=(PlannedRange(2, R("orders-2", 0, 0, 43), 4000), PlannedRange(0, R("orders-0", 1, 3, 10))),
        burst=BurstDecision(2, 14, "priority 2 maxed out 4 of the last 6 batches"),
        lost=(R("orders-0", 1, 0, 3),),
        backlog_before={2: 100, 1: 0, 0: 10},
        snapshot_taken_at_ms=1_735_787_045_000,
    )
    assert ledger.get(ledger.record_plan(plan).batch_id).plan == plan


def test_ranges_are_stored_once(ledger: Ledger):
    batch = ledger.record_plan(make_plan((0, 10), (20, 30)))
    ledger.mark_drained(batch.batch_id, result_for(batch))
    with ledger._engine.begin() as conn:
        plan_json = conn.exec_driver_sql("SELECT plan_json FROM kprio_batches").scalar()
        columns = {row[1] for row in conn.exec_driver_sql("PRAGMA table_info(kprio_batches)")}
        tables = {row[0] for row in conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert '"ranges"' not in plan_json and "orders-2" not in plan_json, "ranges live in kprio_ranges only"
    assert not {"records", "est_bytes"} & columns
    assert {t for t in tables if t.startswith("kprio_")} == {
        "kprio_meta", "kprio_batches", "kprio_ranges", "kprio_events", "kprio_topic_locks", "kprio_partitions",
        "kprio_log_events", "kprio_launches"}


def test_from_settings_creates_the_parent_directory(tmp_path: Path):
    target = tmp_path / "a" / "b" / "ledger.db"
    with Ledger.from_settings(LedgerSettings(url=f"sqlite:///{target}")) as led:
        led.record_plan(make_plan((0, 1)))
    assert target.is_file()


def test_repr_hides_a_database_password():
    led = Ledger.__new__(Ledger)
    led._url = "postgresql+psycopg://kprio:s3cret@db:5432/kprio"
    assert "s3cret" not in repr(led) and "kprio:***@db" in repr(led)


# --------------------------------------------------------------------------------- restarts

def test_a_restarted_process_sees_the_truth(url: str, clock: Clock):
    first = Ledger(url, clock=clock)
    drained = first.record_plan(make_plan((0, 10)))
    first.mark_drained(drained.batch_id, result_for(drained))
    failed = first.record_plan(make_plan(R("orders-2", 1, 10, 20)))
    first.mark_failed(failed.batch_id, "handler raised ValueError", retry_at=None)
    ledger_id = first.ledger_id
    first.close()  # the process dies here: nothing else is written

    restarted = Ledger(url, clock=clock)
    assert restarted.ledger_id == ledger_id
    assert [(b.batch_id, b.state) for b in restarted.in_flight()] == [(drained.batch_id, S.DRAINED)]
    assert restarted.get(failed.batch_id).reason == "handler raised ValueError"
    assert restarted.reserved_ranges("orders") == [OffsetRange("orders-2", 0, 0, 10)], "a dead run keeps its ranges"
    assert [h.batch_id for h in restarted.holds("orders")] == [failed.batch_id]
    with pytest.raises(RangeConflict):
        restarted.record_plan(make_plan((5, 6)))
    restarted.mark_failed(drained.batch_id, "run died before the checks", retry_at=None)
    assert restarted.reserved_ranges("orders") == []
    assert restarted.record_plan(make_plan(R("orders-2", 2, 0, 10))).batch_id == "b-000003"
    restarted.close()


def test_two_open_ledgers_on_one_file_see_each_other(url: str):
    a, b = Ledger(url), Ledger(url)
    try:
        batch = a.record_plan(make_plan((0, 10)))
        with pytest.raises(RangeConflict, match=batch.batch_id):
            b.record_plan(make_plan((9, 11)))
        b.mark_failed(batch.batch_id, "stopped from process b", retry_at=None)
        assert a.get(batch.batch_id).state is S.FAILED
        assert a.ledger_id == b.ledger_id
    finally:
        a.close()
        b.close()


# --------------------------------------------------------------------------------- identity

def test_a_new_ledger_has_a_random_id_and_is_fresh_until_it_records(tmp_path: Path, clock: Clock):
    with Ledger(f"sqlite:///{tmp_path / 'a.db'}", clock=clock) as a, Ledger(f"sqlite:///{tmp_path / 'b.db'}") as b:
        assert len(a.ledger_id) == 16 and int(a.ledger_id, 16) >= 0 and a.ledger_id != b.ledger_id
        assert a.is_fresh() and a.identity().created_at == clock.now and a.identity().schema_version == 2
        a.record_plan(make_plan((0, 10)))
        assert not a.is_fresh()
        b.mark_adopted("adopted committed offsets of orders-2[0..2] and 3 output files")
        assert not b.is_fresh() and b.identity().adopted_note.startswith("adopted committed offsets")


# (numberings asked, after adoption, next batch id, why)
NUMBERING_CASES = [
    ((), False, "b-000001", "1. a new ledger numbers from 1"),
    ((500,), False, "b-000501", "2. after an earlier life's b-000500"),
    ((500, 100), False, "b-000501", "3. numbering never goes back"),
    ((500, 700), False, "b-000701", "4. the larger earlier life wins"),
    ((42,), True, "b-000043", "5. adopting first does not prevent numbering before the first batch"),
]


@pytest.mark.parametrize(("after", "adopted", "next_id", "why"), NUMBERING_CASES, ids=[c[3] for c in NUMBERING_CASES])
def test_batch_numbers_follow_an_earlier_life(ledger: Ledger, after, adopted, next_id, why):
    if adopted:
        ledger.mark_adopted("earlier life adopted")
    for n in after:
        ledger.number_batches_after(n)
    first = ledger.record_plan(make_plan((0, 10)))
    second = ledger.record_plan(make_plan((10, 20)))
    assert first.batch_id == next_id and ledger.get(next_id) == first
    assert int(second.batch_id[2:]) == int(next_id[2:]) + 1
    assert [e.batch_id for e in ledger.events()] == [first.batch_id, second.batch_id]
    with pytest.raises(LedgerNotFresh, match="has recorded batches already"):
        ledger.number_batches_after(10_000)


def test_ids_below_the_first_number_are_not_found(ledger: Ledger):
    ledger.number_batches_after(500)
    ledger.record_plan(make_plan((0, 10)))
    with pytest.raises(BatchNotFound, match=r"no batch b-000001 \(its batches are numbered from b-000501\)"):
        ledger.get("b-000001")


# --------------------------------------------------------------------------------- other schemas

V1_SCHEMA = """
CREATE TABLE kprio_batches (id INTEGER PRIMARY KEY AUTOINCREMENT, logical_topic VARCHAR(255) NOT NULL,
  state VARCHAR(16) NOT NULL, plan_json TEXT NOT NULL, records BIGINT NOT NULL, est_bytes BIGINT NOT NULL,
  created_us BIGINT NOT NULL, updated_us BIGINT NOT NULL, attempts INTEGER NOT NULL,
  replay_of_committed BOOLEAN NOT NULL, reason TEXT, drain_stats_json TEXT, check_results_json TEXT,
  commit_report_json TEXT);
CREATE TABLE kprio_ranges (id INTEGER PRIMARY KEY, batch_id INTEGER NOT NULL REFERENCES kprio_batches (id),
  topic VARCHAR(255) NOT NULL, kafka_partition INTEGER NOT NULL, start_offset BIGINT NOT NULL,
  end_offset BIGINT NOT NULL, priority INTEGER NOT NULL, est_bytes BIGINT NOT NULL);
CREATE TABLE kprio_events (id INTEGER PRIMARY KEY AUTOINCREMENT, batch_id INTEGER NOT NULL, from_state VARCHAR(16),
  to_state VARCHAR(16) NOT NULL, attempt INTEGER NOT NULL, at_us BIGINT NOT NULL, reason TEXT);
CREATE TABLE kprio_drained_topics (batch_id INTEGER NOT NULL, topic VARCHAR(255) NOT NULL,
  logical_topic VARCHAR(255) NOT NULL, records BIGINT NOT NULL, bytes BIGINT NOT NULL, drained_us BIGINT NOT NULL,
  PRIMARY KEY (batch_id, topic));
CREATE TABLE kprio_topic_locks (logical_topic VARCHAR(255) PRIMARY KEY);
CREATE TABLE kprio_topic_state (logical_topic VARCHAR(255) NOT NULL, name VARCHAR(255) NOT NULL,
  value_json TEXT NOT NULL, updated_us BIGINT NOT NULL, PRIMARY KEY (logical_topic, name));
INSERT INTO kprio_batches VALUES (1, 'orders', 'committed', '{}', 10, 1000, 0, 0, 1, FALSE, NULL, NULL, NULL, NULL);
"""


def test_a_ledger_of_the_previous_kprio_is_refused_with_what_to_do(tmp_path: Path):
    path = tmp_path / "ledger.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(V1_SCHEMA)
    before = path.read_bytes()
    with pytest.raises(LedgerSchemaOutdated) as err:
        Ledger(f"sqlite:///{path}")
    message = str(err.value)
    assert err.value.code == "ledger_schema_outdated"
    assert f"the ledger at sqlite:///{path} was written by an earlier kprio (tables kprio_batches, " in message
    assert "kprio_topic_state, no kprio_meta)" in message
    assert "drain it empty with the previous kprio" in message and f"(mv {path} {path}.v1)" in message
    assert "a new ledger adopts the committed offsets from Kafka and the output already written" in message
    assert message.endswith("and loses nothing.")
    assert path.read_bytes() == before, "the refused file is left as it was"
    path.rename(f"{path}.v1")  # what the message says to do
    with Ledger(f"sqlite:///{path}") as fresh:
        assert fresh.is_fresh()


def test_a_newer_schema_is_refused_and_passwords_stay_hidden(url: str):
    with Ledger(url) as led, led._engine.begin() as conn:
        conn.exec_driver_sql("UPDATE kprio_meta SET schema_version = 3")
    with pytest.raises(LedgerSchemaOutdated, match=r"written by a newer kprio \(ledger schema v3\); upgrade kprio"):
        Ledger(url)
    message = outdated_message("postgresql+psycopg://kprio:s3cret@db:5432/kprio", "was written by an earlier kprio")
    assert "s3cret" not in message and "kprio:***@db" in message and "point ledger.url at an empty database" in message
