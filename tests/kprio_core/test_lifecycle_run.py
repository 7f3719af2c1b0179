"""The run's decision, case by case: one numbered row per situation a run of a batch can find, with why."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kprio_core.config import RecoverySettings
from kprio_core.lifecycle.run import (
    BatchView,
    Commit,
    DoneWhy,
    Drain,
    DrainFrom,
    Fail,
    FailWhy,
    Intent,
    Launcher,
    LaunchReason,
    NothingToDo,
    Wait,
    WaitWhy,
    before_commit,
    commits_for_another,
    decide_run,
    marks_failed,
    retry_at,
    transient_failure,
    waited_too_long,
    work_left,
)
from kprio_core.model.recovery import Lease
from kprio_core.model.states import BatchState

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ME = "aaaaaaaa-run@host:10"
OTHER = "bbbbbbbb-run@host:11"
RECOVERY = RecoverySettings(max_attempts=3, backoff_s=5, backoff_max_s=60)

S = BatchState
SENSOR1 = Intent(Launcher.SENSOR, 1, LaunchReason.NEW)
SENSOR2 = Intent(Launcher.SENSOR, 2, LaunchReason.RETRY)
SENSOR3 = Intent(Launcher.SENSOR, 3, LaunchReason.RETRY)
RETRY1 = Intent(Launcher.ORCHESTRATOR_RETRY, 1)
OPERATOR = Intent(Launcher.OPERATOR)


def live(owner: str) -> Lease:
    return Lease(owner, NOW + timedelta(seconds=20))


def expired(owner: str) -> Lease:
    return Lease(owner, NOW - timedelta(seconds=1))


def batch(state: BatchState, attempts: int = 1, **kw) -> BatchView:
    if state is S.FAILED:
        kw.setdefault("holds", True)
        kw.setdefault("reason", "values_match_schema failed")
    return BatchView("b-000007", state, attempts, **kw)


GONE = "batch b-000007 was planned on incarnation 1 of orders-2[0], which is now incarnation 2"

# (n, why, batch, intent, dead owners, waited on, expected step kind, expected detail)
CASES = [
    (1, "a new batch nobody holds: the sensor's run drains it as it stands",
     batch(S.PLANNED), SENSOR1, (), None, Drain, DrainFrom.AS_IS),
    (2, "this run holds the lease already (a second take): go on",
     batch(S.DRAINED, lease=live(ME)), SENSOR1, (), None, Drain, DrainFrom.AS_IS),
    (3, "another live run owns it: wait for its outcome",
     batch(S.PLANNED, lease=live(OTHER)), SENSOR1, (), None, Wait, WaitWhy.LEASE_HELD),
    (4, "its owner's run ended (known dead) on this attempt: take it over as the next attempt",
     batch(S.PLANNED, lease=live(OTHER)), SENSOR1, (OTHER,), None, Drain, DrainFrom.TAKE_OVER),
    (5, "the lease expired (the run died unseen): take it over",
     batch(S.DRAINED, lease=expired(OTHER)), SENSOR1, (), None, Drain, DrainFrom.TAKE_OVER),
    (6, "Dagster's retry of a failed run finds nobody on the batch: it goes on where it stands",
     batch(S.DRAINED), RETRY1, (), None, Drain, DrainFrom.AS_IS),
    (7, "the sensor's run for attempt 1 finds attempt 2 under way without a lease: a later attempt exists",
     batch(S.PLANNED, 2), SENSOR1, (), None, NothingToDo, DoneWhy.LATER_ATTEMPT),
    (8, "committed: nothing to do",
     batch(S.COMMITTED), SENSOR1, (), None, NothingToDo, DoneWhy.COMMITTED),
    (9, "committed by the run this one waited for: nothing to do, naming it",
     batch(S.COMMITTED), SENSOR1, (), OTHER, NothingToDo, DoneWhy.COMMITTED),
    (10, "failed in the run this one waited for: that run's failure stands",
     batch(S.FAILED), SENSOR1, (), OTHER, NothingToDo, DoneWhy.FINISHED_ELSEWHERE),
    (11, "failed, attempts left, backoff over: retry as the next attempt",
     batch(S.FAILED, 1, retry_at=NOW), SENSOR2, (), None, Drain, DrainFrom.RETRY),
    (12, "failed, backoff not over: wait until the retry time",
     batch(S.FAILED, 1, retry_at=NOW + timedelta(seconds=5)), SENSOR2, (), None, Wait, WaitWhy.BACKOFF),
    (13, "failed in attempt 2, the run was for attempt 2: a later attempt (or its failure) exists",
     batch(S.FAILED, 2), SENSOR2, (), None, NothingToDo, DoneWhy.LATER_ATTEMPT),
    (14, "attempts exhausted: fail, naming the operator's command",
     batch(S.FAILED, 3), RETRY1, (), None, Fail, FailWhy.EXHAUSTED),
    (15, "attempts exhausted but the cause passes by itself: retried anyway",
     batch(S.FAILED, 3, transient=True), RETRY1, (), None, Drain, DrainFrom.RETRY),
    (16, "a failed re-drain of committed offsets holds nothing: nothing to do",
     batch(S.FAILED, 2, holds=False), SENSOR3, (), None, NothingToDo, DoneWhy.HOLDS_NOTHING),
    (17, "an operator re-drains a committed batch",
     batch(S.COMMITTED), OPERATOR, (), None, Drain, DrainFrom.REDRAIN),
    (18, "an operator re-drains an exhausted failed batch (the operator is the one it waited for)",
     batch(S.FAILED, 3), OPERATOR, (), None, Drain, DrainFrom.REDRAIN),
    (19, "an operator's run waited for another run, which committed it: nothing to do",
     batch(S.COMMITTED), OPERATOR, (), OTHER, NothingToDo, DoneWhy.FINISHED_ELSEWHERE),
    (20, "an operator's run on a batch another live run owns: wait",
     batch(S.DRAINED, lease=live(OTHER)), OPERATOR, (), None, Wait, WaitWhy.LEASE_HELD),
    (21, "an operator's run on a batch whose run died: take the lease over, same attempt",
     batch(S.DRAINED, lease=live(OTHER)), OPERATOR, (OTHER,), None, Drain, DrainFrom.AS_IS),
    (22, "a superseded failed batch never runs again, whoever asks",
     batch(S.FAILED, superseded=GONE), OPERATOR, (), None, Fail, FailWhy.SUPERSEDED),
    (23, "a superseded committed batch is not re-drained either",
     batch(S.COMMITTED, superseded=GONE), OPERATOR, (), None, Fail, FailWhy.SUPERSEDED),
    (24, "a checked batch of this attempt without a lease: go on (only its commit is left)",
     batch(S.CHECKED, 2), Intent(Launcher.SENSOR, 2, LaunchReason.COMMIT), (), None, Drain, DrainFrom.AS_IS),
    (25, "a sensor's run for a later attempt than the ledger's, nobody on it: take it over",
     batch(S.PLANNED, 1), SENSOR2, (), None, Drain, DrainFrom.TAKE_OVER),
]


@pytest.mark.parametrize(("n", "why", "view", "intent", "dead", "waited_on", "kind", "detail"), CASES,
                         ids=[f"{c[0]:02d}" for c in CASES])
def test_the_run_decides(n, why, view, intent, dead, waited_on, kind, detail):
    step = decide_run(view, intent, owner=ME, recovery=RECOVERY, now=NOW, dead=dead, waited_on=waited_on)
    assert isinstance(step, kind), (n, why, step)
    assert (step.how if isinstance(step, Drain) else step.why) is detail, (n, why, step)


def test_the_numbers_are_in_order():
    assert [c[0] for c in CASES] == list(range(1, len(CASES) + 1))


# The one-line messages users see (the orchestration tests assert on them too).
MESSAGES = [
    (batch(S.COMMITTED, 2), SENSOR1, None,
     "b-000007 is already committed (attempt 2): nothing to do"),
    (batch(S.COMMITTED, 2), SENSOR1, OTHER,
     f"b-000007 is already committed by {OTHER} (attempt 2): nothing to do"),
    (batch(S.FAILED), SENSOR1, OTHER, f"b-000007 failed in the run this one waited for ({OTHER})"),
    (batch(S.FAILED, 2), SENSOR2, None,
     "b-000007 failed in attempt 2, after the attempt 2 this run was for: nothing to do"),
    (batch(S.PLANNED, 2), SENSOR1, None, "b-000007 is at attempt 2, after the attempt 1 this run was for: nothing to do"),
    (batch(S.FAILED, 2, holds=False), SENSOR3, None,
     "b-000007: its failed re-drain holds nothing (its offsets were committed); re-materialize it to re-drain it again"),
    (batch(S.FAILED, 3), RETRY1, None, "b-000007 failed 3 times (recovery.max_attempts=3): values_match_schema "
     "failed; its partitions wait for an operator: kprio retry b-000007"),
    (batch(S.COMMITTED), OPERATOR, OTHER,
     f"b-000007 was drained and committed by {OTHER} while this run waited: nothing to do"),
    (batch(S.PLANNED, lease=live(OTHER)), SENSOR1, None, f"batch b-000007 is being worked on by {OTHER}"),
    (batch(S.FAILED, superseded=GONE), SENSOR2, None, GONE),
]


@pytest.mark.parametrize(("view", "intent", "waited_on", "message"), MESSAGES)
def test_what_the_run_says(view, intent, waited_on, message):
    assert decide_run(view, intent, owner=ME, recovery=RECOVERY, now=NOW, waited_on=waited_on).message == message


def test_the_ledger_reasons_name_this_run():
    retried = decide_run(batch(S.FAILED, retry_at=NOW), SENSOR2, owner=ME, recovery=RECOVERY, now=NOW)
    taken = decide_run(batch(S.DRAINED, lease=live(OTHER)), SENSOR1, owner=ME, recovery=RECOVERY, now=NOW,
                       dead={OTHER})
    assert retried.reason == "retry by run aaaaaaaa"
    assert (taken.reason, taken.take_over) == ("resumed by run aaaaaaaa: the run before it died", (OTHER,))
    redrain = decide_run(batch(S.COMMITTED), OPERATOR, owner=ME, recovery=RECOVERY, now=NOW)
    assert redrain.note == "b-000007 is committed: re-draining its exact ranges"


def test_a_wait_gives_up_after_the_slot_wait_but_a_backoff_is_waited_out():
    assert not waited_too_long(899.0, Wait(WaitWhy.LEASE_HELD, ""))
    assert waited_too_long(901.0, Wait(WaitWhy.LEASE_HELD, ""))
    assert not waited_too_long(10_000.0, Wait(WaitWhy.BACKOFF, "", until=NOW))


def test_what_is_left_after_the_take():
    assert [work_left(s) for s in (S.PLANNED, S.DRAINED, S.CHECKED)] == ["drain", "drain", "commit"]


# (n, why, blocking, intent, waited out, expected)
COMMIT_CASES = [
    (1, "nothing before it: commit", [], SENSOR1, False, Commit),
    (2, "a batch before it is being finished by its live run: wait for it",
     [batch(S.CHECKED, lease=live(OTHER))], SENSOR1, False, Wait),
    (3, "waited long enough: leave the commit to the batches before it",
     [batch(S.CHECKED, lease=live(OTHER))], SENSOR1, True, NothingToDo),
    (4, "a failed batch before it: its commit waits (the sensor's run succeeds)",
     [batch(S.FAILED)], SENSOR1, False, NothingToDo),
    (5, "the same for an operator's run: it fails (a backfill is Succeeded only when committed)",
     [batch(S.FAILED)], OPERATOR, False, Fail),
    (6, "a batch before it in flight whose lease expired: no run to wait for",
     [batch(S.DRAINED, lease=expired(OTHER))], SENSOR1, False, NothingToDo),
]


@pytest.mark.parametrize(("n", "why", "blocking", "intent", "waited_out", "kind"), COMMIT_CASES,
                         ids=[f"{c[0]:02d}" for c in COMMIT_CASES])
def test_before_the_commit(n, why, blocking, intent, waited_out, kind):
    step = before_commit("b-000008", blocking, intent, now=NOW, waited_out=waited_out)
    assert isinstance(step, kind), (n, why, step)


def test_who_marks_failed_and_who_commits_for_another():
    assert marks_failed(batch(S.DRAINED, lease=live(ME)), ME)
    assert not marks_failed(batch(S.DRAINED, lease=live(OTHER)), ME)  # taken over: not this run's to fail
    assert not marks_failed(batch(S.FAILED), ME)  # it moved on already
    assert commits_for_another(batch(S.CHECKED), NOW)
    assert commits_for_another(batch(S.CHECKED, lease=expired(OTHER)), NOW)
    assert not commits_for_another(batch(S.CHECKED, lease=live(OTHER)), NOW)


def test_retry_times_double_up_to_the_cap():
    assert [(retry_at(a, RECOVERY, NOW) - NOW).total_seconds() for a in (1, 2, 3, 4, 5)] == [5, 10, 20, 40, 60]
    # A transient failure backs off by its streak, not its attempt: the first of a streak is due at once (the
    # tick retries it once a probe of its cause passes), so an outage costs no more than its own length.
    assert [(retry_at(9, RECOVERY, NOW, transient=True, streak=n) - NOW).total_seconds()
            for n in (1, 2, 3, 4, 5, 6)] == [0, 5, 10, 20, 40, 60]


def test_a_failure_is_transient_only_when_every_cause_is():
    assert transient_failure([True])
    assert not transient_failure([True, False])
    assert not transient_failure([None])
    assert not transient_failure([])
