"""The batch ledger on a SQLite file: transitions, drain results and checks, replay.

Reservations, slots and holds are in test_ledger_reservations.py; reading, restarts, identity and other
schemas in test_ledger_persistence.py."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from kprio_core.errors import DrainStatsInvalid, InvalidTransition, LeaseLost, RangeConflict
from kprio_core.ledger import TRANSITIONS, Batch, BatchState, Ledger
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
        return ledger.moves.mark_drained(batch.batch_id, result_for(batch))
    if action == "check":
        return ledger.moves.mark_checked(batch.batch_id, CHECKS_PASSED)
    if action == "commit":
        return ledger.moves.mark_committed(batch.batch_id, commit_report(batch))
    if action == "fail":
        return ledger.moves.mark_failed(batch.batch_id, "checks failed: 3 null ids", retry_at=None)
    return ledger.attempts.replay(batch.batch_id)


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
    batch = ledger.batches.record_plan(make_plan((0, 10), (20, 30)))
    for step in PATH_TO[start]:
        batch = act(ledger, batch, step)
    assert batch.state is start
    if expected is None:
        with pytest.raises(InvalidTransition) as err:
            act(ledger, batch, action)
        assert batch.batch_id in str(err.value) and start.value in str(err.value)
        assert ledger.batches.get(batch.batch_id) == batch, "a refused transition changes nothing"
        return
    after = act(ledger, batch, action)
    assert after.state is expected
    assert ledger.batches.get(batch.batch_id) == after
    assert ledger.batches.reserved_ranges("orders") == (sorted(batch.plan.offset_ranges()) if expected.in_flight
                                                         else [])
    held = [(h.topic, h.partition, h.start) for h in ledger.batches.holds("orders")]
    assert held == ([("orders-2", 0, 0)] if expected is S.FAILED else []), "a failed batch holds its partition"


def test_transition_cases_cover_the_table():
    """Every allowed move of TRANSITIONS is a case above, and every case above is in it."""
    target = {"drain": S.DRAINED, "check": S.CHECKED, "commit": S.COMMITTED, "fail": S.FAILED, "replay": S.PLANNED}
    allowed = {(start, target[action]) for start, action, expected, _ in TRANSITION_CASES if expected is not None}
    assert allowed == set(TRANSITIONS)
    assert len(TRANSITION_CASES) == len(S) * len(ACTIONS)


def test_invalid_transition_message_names_batch_state_and_asked_state(ledger: Ledger):
    batch = ledger.batches.record_plan(make_plan((0, 10)))
    with pytest.raises(InvalidTransition, match=r"batch b-000001 is planned and cannot become committed"):
        ledger.moves.mark_committed(batch.batch_id, CommitReport())


def test_lifecycle_keeps_typed_outcomes_times_and_events(ledger: Ledger, clock: Clock):
    plan = make_plan((0, 10), R("orders-0", 3, 5, 9))
    created = clock.now
    batch = ledger.batches.record_plan(plan)
    assert (batch.created_at, batch.updated_at, batch.attempts, batch.reason, batch.parent) == (created, created, 1,
                                                                                                 None, None)
    assert batch.plan == plan and batch.in_flight and not batch.holds and not batch.replay_of_committed
    assert (batch.priorities, batch.drain, batch.checks, batch.commit, batch.lease) == ({2, 0}, None, None, None, None)
    clock.tick()
    drained = ledger.moves.mark_drained(batch.batch_id, result_for(batch, dead=1))
    assert drained.drain == result_for(batch, dead=1) and drained.updated_at == created + timedelta(seconds=1)
    assert drained.drain.by_priority() == {2: (9, 1), 0: (3, 1)}
    batch = ledger.moves.mark_checked(batch.batch_id, CHECKS_PASSED)
    assert batch.checks == CHECKS_PASSED
    batch = ledger.moves.mark_drained(batch.batch_id, result_for(batch, 120))
    assert batch.checks is None and batch.drain.bytes == 120 * 14, "a re-drain replaces the drain and voids the checks"
    batch = ledger.moves.mark_checked(batch.batch_id, CHECKS_PASSED)
    clock.tick()
    batch = ledger.moves.mark_committed(batch.batch_id, commit_report(batch))
    assert batch.commit == commit_report(batch) and batch.committed_at == clock.now and not batch.in_flight
    moves = [(e.from_state, e.to_state) for e in ledger.batches.events(batch.batch_id)]
    assert moves == [(None, S.PLANNED), (S.PLANNED, S.DRAINED), (S.DRAINED, S.CHECKED), (S.CHECKED, S.DRAINED),
                     (S.DRAINED, S.CHECKED), (S.CHECKED, S.COMMITTED)]


def test_mark_failed_needs_a_reason_and_keeps_when_to_retry(ledger: Ledger, clock: Clock):
    batch = ledger.batches.record_plan(make_plan((0, 10)))
    with pytest.raises(ValueError, match="needs a reason"):
        ledger.moves.mark_failed(batch.batch_id, "  ", retry_at=None)
    ledger.leases.claim(batch.batch_id, "run-1@h:1", 30)
    retry_at = clock.now + timedelta(seconds=5)
    failed = ledger.moves.mark_failed(batch.batch_id, "drain failed: No space left on device: /out", retry_at=retry_at)
    assert (failed.state, failed.reason, failed.retry_at, failed.lease) == (
        S.FAILED, "drain failed: No space left on device: /out", retry_at, None)
    assert ledger.batches.events(batch.batch_id)[-1].reason == "drain failed: No space left on device: /out"


def test_a_planned_batch_a_run_did_not_take_fails_at_that_runs_attempt_and_is_retried_under_a_new_one(
        ledger: Ledger, clock: Clock):
    batch = ledger.batches.record_plan(make_plan((0, 10)))
    retry_at = clock.now + timedelta(seconds=10)
    why = "its run r2abcdef (attempt 2) ended FAILURE before it took the batch"
    failed = ledger.attempts.fail_untaken(batch.batch_id, 2, reason=why, retry_at=retry_at)
    assert (failed.state, failed.attempts, failed.reason, failed.retry_at, failed.transient,
            failed.transient_streak) == (S.FAILED, 2, why, retry_at, True, 1)  # its surroundings: a transient cause
    assert [h.batch_id for h in ledger.batches.holds("orders")] == [batch.batch_id]  # it holds its partition
    assert ledger.batches.events(batch.batch_id)[-1].reason == why
    # Its retry's run (attempt 3) ended before it took it too: attempt 3 is spent; the next retry is attempt 4.
    again = ledger.attempts.fail_untaken(batch.batch_id, 3, reason=why.replace("2", "3"), retry_at=None)
    assert (again.state, again.attempts, again.transient_streak) == (S.FAILED, 3, 2)  # in a row: backs off
    assert ledger.attempts.retry(batch.batch_id, reason="retry").attempts == 4


def test_a_checked_batch_whose_commit_run_did_not_take_it_fails_transient_and_its_retry_drains_it_again(
        ledger: Ledger):
    batch = ledger.batches.record_plan(make_plan((0, 10)))
    ledger.moves.mark_drained(batch.batch_id, result_for(batch))
    ledger.moves.mark_checked(batch.batch_id, CHECKS_PASSED)
    failed = ledger.attempts.fail_untaken(batch.batch_id, 1, reason="its commit run ended", retry_at=None)
    assert (failed.state, failed.attempts, failed.transient) == (S.FAILED, 1, True)
    assert [h.batch_id for h in ledger.batches.holds("orders")] == [batch.batch_id]
    assert ledger.attempts.retry(batch.batch_id, reason="retry").state is S.PLANNED


@pytest.mark.parametrize("moved_on", ["taken", "drained", "a later attempt", "failed at it"])
def test_a_batch_that_moved_on_meanwhile_is_not_failed_as_untaken(ledger: Ledger, moved_on):
    batch = ledger.batches.record_plan(make_plan((0, 10)))
    if moved_on == "taken":
        ledger.leases.claim(batch.batch_id, "run-1@h:1", 30)
    elif moved_on == "drained":
        ledger.moves.mark_drained(batch.batch_id, result_for(batch))
    elif moved_on == "a later attempt":
        ledger.moves.mark_failed(batch.batch_id, "failed", retry_at=None)
        ledger.attempts.retry(batch.batch_id, reason="retry")  # planned at attempt 2
    else:
        ledger.moves.mark_failed(batch.batch_id, "failed", retry_at=None)  # attempt 1 failed by its own run
    before = ledger.batches.get(batch.batch_id)
    assert ledger.attempts.fail_untaken(batch.batch_id, 1, reason="ended", retry_at=None) is None
    assert ledger.batches.get(batch.batch_id) == before


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
    batch = ledger.batches.record_plan(make_plan((0, 10), (20, 30)))
    with pytest.raises(error, match=message):
        ledger.moves.mark_drained(batch.batch_id, spoil(result_for(batch)))
    assert ledger.batches.get(batch.batch_id) == batch


@pytest.mark.parametrize(
    ("failed_ranges", "accepted", "why"),
    [
        ((R("orders-2", 1, 0, 10),), True, "1. the failing range was split off: the rest is proven"),
        ((R("orders-2", 0, 0, 10),), False, "2. the failing range is still in the batch"),
        ((), False, "3. a failed check that names no range condemns the whole batch"),
    ],
)
def test_checked_needs_every_failed_check_to_be_on_ranges_split_off(ledger: Ledger, failed_ranges, accepted, why):
    batch = ledger.batches.record_plan(make_plan((0, 10), R("orders-2", 1, 0, 10)))
    batch = ledger.moves.mark_drained(batch.batch_id, result_for(batch))
    ledger.attempts.split(batch.batch_id, [R("orders-2", 1, 0, 10)], "invalid records", retry_at=None)
    report = CheckReport((CheckOutcome("values_match_schema", False, {"invalid_records": 7}, failed_ranges),))
    if accepted:
        assert ledger.moves.mark_checked(batch.batch_id, report).checks == report
    else:
        with pytest.raises(InvalidTransition, match="cannot become checked: values_match_schema failed"):
            ledger.moves.mark_checked(batch.batch_id, report)


# --------------------------------------------------------------------------------- replay

def test_replay_of_a_failed_batch_reserves_the_same_ranges(ledger: Ledger):
    plan = make_plan((0, 10), R("orders-1", 3, 7, 9))
    batch = ledger.batches.record_plan(plan)
    batch = ledger.moves.mark_drained(batch.batch_id, result_for(batch))
    ledger.moves.mark_failed(batch.batch_id, "row count 9 != 10", retry_at=datetime(2030, 1, 1, tzinfo=UTC))
    again = ledger.attempts.replay(batch.batch_id)
    assert (again.state, again.attempts, again.reason, again.drain, again.retry_at) == (S.PLANNED, 2, None, None, None)
    assert again.plan == plan and not again.replay_of_committed
    assert ledger.batches.reserved_ranges("orders") == sorted(plan.offset_ranges())
    assert ledger.batches.events(batch.batch_id)[-1].reason == "replay of a failed batch"


def test_replay_of_a_committed_batch_is_flagged_for_good(ledger: Ledger):
    batch = ledger.batches.record_plan(make_plan((0, 10)))
    for step in ("drain", "check", "commit", "replay"):
        batch = act(ledger, batch, step)
    assert (batch.state, batch.attempts, batch.replay_of_committed, batch.commit) == (S.PLANNED, 2, True, None)
    assert ledger.batches.reserved_ranges("orders") == [OffsetRange("orders-2", 0, 0, 10)]
    for step in ("drain", "fail", "replay"):
        batch = act(ledger, batch, step)
    assert (batch.attempts, batch.replay_of_committed) == (3, True), "a failed re-drain stays flagged"


def test_replay_conflicts_with_a_newer_batch_taking_the_slot(ledger: Ledger):
    old = drain_check_commit(ledger, ledger.batches.record_plan(make_plan((0, 10))))
    ledger.batches.record_plan(make_plan((10, 20)))
    with pytest.raises(RangeConflict, match="max_in_flight=1 per priority"):
        ledger.attempts.replay(old.batch_id, max_in_flight=1)  # the newer batch already takes priority 2's one slot
    assert ledger.batches.get(old.batch_id).state is S.COMMITTED
    # No newer batch can take the old one's offsets: a plan over them is refused as below the committed offset.
    with pytest.raises(RangeConflict, match="starts below offset 10, which kprio committed"):
        ledger.batches.record_plan(make_plan((3, 7), OffsetRange("orders-2", 1, 0, 10)))
    assert ledger.attempts.replay(old.batch_id).state is S.PLANNED


def test_replay_of_an_in_flight_batch_says_retry_or_fail_it_first(ledger: Ledger):
    batch = ledger.batches.record_plan(make_plan((0, 10)))
    with pytest.raises(InvalidTransition, match="b-000001 is planned and cannot be replayed.*fail it first"):
        ledger.attempts.replay(batch.batch_id)
