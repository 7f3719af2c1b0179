"""The ledger's recovery rules: leases, retries of failed and stuck batches, splits, and the commit order."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kprio_core.errors import BatchBusy, InvalidTransition, LeaseLost, RangeConflict
from kprio_core.ledger import BatchState, Ledger
from kprio_core.model.recovery import LeaseToken
from kprio_core.model.results import CheckOutcome, CheckReport
from tests.kprio_core.ledger_support import (
    CHECKS_PASSED,
    Clock,
    R,
    commit_report,
    drain_and_check,
    drain_check_commit,
    make_plan,
    result_for,
)

S = BatchState
A, B, C = "run-a@host:1", "run-b@host:2", "run-c@host:3"


# --------------------------------------------------------------------------------- leases

# (lease before: (owner, seconds left) or None, claimer, take_over, outcome, why)
CLAIM_CASES = [
    (None, B, (), "claimed", "1. no lease: the first run takes it"),
    ((A, 10), A, (), "claimed", "2. the owner claiming again renews"),
    ((A, 10), B, (), "busy", "3. another run's live lease: busy"),
    ((A, 0), B, (), "taken over", "4. a lease ends at its expiry: taken over"),
    ((A, -5), B, (), "taken over", "5. expired long ago: taken over"),
    ((A, 10), B, (A,), "taken over", "6. the caller knows the owner died (run ended, pid gone)"),
    ((A, 10), B, (C,), "busy", "7. another owner declared dead does not free this one"),
]


@pytest.mark.parametrize(("before", "claimer", "take_over", "outcome", "why"), CLAIM_CASES,
                         ids=[c[4] for c in CLAIM_CASES])
def test_claim(ledger: Ledger, clock: Clock, before, claimer, take_over, outcome, why):
    batch = ledger.batches.record_plan(make_plan((0, 10)))
    if before is not None:
        owner, left_s = before
        ledger.leases.claim(batch.batch_id, owner, 30)
        clock.tick(30 - left_s)
    events = len(ledger.batches.events(batch.batch_id))
    if outcome == "busy":
        with pytest.raises(BatchBusy, match=rf"batch b-000001 is held by {A} until 2025-01-02 03:04:35 UTC "
                                            r"\(10 s left\)") as err:
            ledger.leases.claim(batch.batch_id, claimer, 30, take_over=take_over)
        assert err.value.code == "batch_busy"
        assert ledger.batches.get(batch.batch_id).lease.owner == A
        return
    claimed = ledger.leases.claim(batch.batch_id, claimer, 30, take_over=take_over)
    assert (claimed.lease.owner, claimed.lease.until) == (claimer, clock.now + timedelta(seconds=30))
    logged = ledger.batches.events(batch.batch_id)[events:]
    if outcome == "claimed":
        assert logged == []
    else:
        assert [(e.from_state, e.to_state, e.attempt) for e in logged] == [(S.PLANNED, S.PLANNED, 1)]
        assert logged[0].reason.startswith(f"lease of {A} (") and logged[0].reason.endswith(f"taken over by {B}")


def test_renew_release_and_a_lost_lease(ledger: Ledger, clock: Clock):
    batch = ledger.batches.record_plan(make_plan((0, 10)))
    ledger.leases.claim(batch.batch_id, A, 30)
    clock.tick(10)
    lease = ledger.leases.renew(batch.batch_id, A, 30)
    assert lease == ledger.batches.get(batch.batch_id).lease and lease.until == clock.now + timedelta(seconds=30)
    with pytest.raises(LeaseLost, match=f"the lease is no longer {B}'s but {A}'s") as err:
        ledger.leases.renew(batch.batch_id, B, 30)
    assert err.value.code == "lease_lost"
    assert ledger.leases.release(batch.batch_id, B) is False and ledger.batches.get(batch.batch_id).lease.owner == A
    assert ledger.leases.release(batch.batch_id, A) is True and ledger.batches.get(batch.batch_id).lease is None
    with pytest.raises(LeaseLost, match="but nobody's"):
        ledger.leases.renew(batch.batch_id, A, 30)
    with pytest.raises(ValueError, match="must last > 0 s"):
        ledger.leases.claim(batch.batch_id, A, 0)


# --------------------------------------------------------------------------------- fencing

# What happened to the batch while its first owner A (attempt 1) was paused past its lease.
FENCE_CASES = [
    ("taken over", "1. B claimed the expired lease: A's token names the wrong owner"),
    ("retried", "2. a retry moved the batch to attempt 2 (nobody claimed it yet)"),
    ("retried and claimed by A", "3. A's own process claimed attempt 2: its attempt-1 token is stale all the same"),
    ("taken over and back", "4. B took the lease, then A claimed it again at the same attempt: the old epoch is stale"),
]


def _writes(ledger: Ledger, batch_id: str, token: LeaseToken) -> dict:
    """Every write a run makes, each with A's token."""
    plan = ledger.batches.get(batch_id)
    return {
        "drained": lambda: ledger.moves.mark_drained(batch_id, result_for(plan), fence=token),
        "checked": lambda: ledger.moves.mark_checked(batch_id, CHECKS_PASSED, fence=token),
        "committed": lambda: ledger.moves.mark_committed(batch_id, commit_report(plan), fence=token),
        "failed": lambda: ledger.moves.mark_failed(batch_id, "boom", retry_at=None, fence=token),
        "split": lambda: ledger.attempts.split(batch_id, [R("orders-2", 0, 0, 5)], "boom", retry_at=None, fence=token),
        "publish": lambda: ledger.leases.check(batch_id, token, "the publish"),
        "renew": lambda: ledger.leases.renew(batch_id, token.owner, 30, attempt=token.attempt, epoch=token.epoch),
    }


@pytest.mark.parametrize(("meanwhile", "why"), FENCE_CASES, ids=[c[1] for c in FENCE_CASES])
def test_a_stale_lease_token_writes_nothing(ledger: Ledger, clock: Clock, meanwhile, why):
    batch = ledger.batches.record_plan(make_plan((0, 5), (5, 10)))
    token = ledger.leases.claim(batch.batch_id, A, 30).token
    assert (token.owner, token.attempt) == (A, 1) and token.epoch >= 1, token
    clock.tick(31)  # A pauses past its lease
    if meanwhile == "taken over":
        ledger.leases.claim(batch.batch_id, B, 30)
    elif meanwhile == "taken over and back":
        ledger.leases.claim(batch.batch_id, B, 1)
        clock.tick(2)
        assert ledger.leases.claim(batch.batch_id, A, 30).token.epoch > token.epoch
    else:
        ledger.attempts.retry(batch.batch_id, reason="its lease expired")
        if meanwhile == "retried and claimed by A":
            ledger.leases.claim(batch.batch_id, A, 30)
    before = ledger.batches.get(batch.batch_id), ledger.batches.events(batch.batch_id), ledger.batches.find()
    for what, write in _writes(ledger, batch.batch_id, token).items():
        with pytest.raises(LeaseLost, match=r"refused: the batch is planned at attempt \d, held by|no longer") as err:
            write()
        assert err.value.code == "lease_lost", what
        if what != "renew":
            assert f"the lease of {token} is stale" in str(err.value) and "nothing was written" in str(err.value)
    assert (ledger.batches.get(batch.batch_id), ledger.batches.events(batch.batch_id),
            ledger.batches.find()) == before, "nothing changed"


def test_the_current_token_writes_and_an_operator_needs_none(ledger: Ledger, clock: Clock):
    batch = ledger.batches.record_plan(make_plan((0, 5), (5, 10)))
    token = ledger.leases.claim(batch.batch_id, A, 30).token
    clock.tick(31)  # expired, but nobody took it over: the owner's writes still land
    held = ledger.leases.check(batch.batch_id, token, "the publish")
    assert held.batch_id == batch.batch_id and held.token == token
    ledger.attempts.split(batch.batch_id, [R("orders-2", 0, 0, 5)], "boom", retry_at=None, fence=token)
    ledger.moves.mark_drained(batch.batch_id, result_for(ledger.batches.get(batch.batch_id)), fence=token)
    ledger.moves.mark_checked(batch.batch_id, CHECKS_PASSED, fence=token)
    done = ledger.moves.mark_committed(batch.batch_id, commit_report(ledger.batches.get(batch.batch_id)), fence=token)
    assert done.state is S.COMMITTED and done.lease is None and done.token is None
    other = ledger.batches.record_plan(make_plan((0, 10), topic="payments"))
    assert ledger.moves.mark_failed(other.batch_id, "an operator's kprio fail", retry_at=None).state is S.FAILED


def test_a_run_checking_its_lease_before_a_write_outside_the_ledger_holds_no_lock(tmp_path, clock: Clock):
    """A checks its lease right before its publish and is then slow (a long write, a pause): B's take-over and
    every other ledger write go on at once (no lock spans A's write), and A's next move is refused."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with Ledger(url, clock=clock) as a, Ledger(url, busy_timeout_s=0.5, clock=clock) as b:
        batch = a.batches.record_plan(make_plan((0, 10)))
        token = a.leases.claim(batch.batch_id, A, 30).token
        a.leases.check(batch.batch_id, token, "the publish")  # ... and A publishes for a long time
        clock.tick(31)
        assert b.leases.claim(batch.batch_id, B, 30).lease.owner == B, "B does not wait for A's write"
        b.batches.record_plan(make_plan((0, 10), topic="payments"))
        with pytest.raises(LeaseLost, match="the move to drained of batch b-000001 refused"):
            a.moves.mark_drained(batch.batch_id, result_for(batch), fence=token)
        with pytest.raises(LeaseLost, match="the Kafka commit of batch b-000001 refused"):
            a.leases.check(batch.batch_id, token, "the Kafka commit")


def test_expired_lists_in_flight_batches_whose_run_stopped_renewing(ledger: Ledger, clock: Clock):
    quiet = ledger.batches.record_plan(make_plan((0, 10)))  # no run claimed it yet: waits for its run, not stuck
    working = ledger.batches.record_plan(make_plan((10, 20)))
    dead = ledger.batches.record_plan(make_plan((20, 30)))
    other = ledger.batches.record_plan(make_plan((0, 10), topic="payments"))
    ledger.leases.claim(working.batch_id, A, 60)
    for b in (dead, other):
        ledger.leases.claim(b.batch_id, B, 30)
    assert ledger.leases.expired() == []
    clock.tick(30)
    assert [b.batch_id for b in ledger.leases.expired()] == [dead.batch_id, other.batch_id]
    assert [b.batch_id for b in ledger.leases.expired("orders")] == [dead.batch_id]
    ledger.moves.mark_failed(dead.batch_id, "run ended FAILURE", retry_at=None)
    assert ledger.leases.expired("orders") == [] and ledger.batches.get(dead.batch_id).lease is None, (
        "a failure releases the lease")
    assert quiet.batch_id not in {b.batch_id for b in ledger.leases.expired()}
    with pytest.raises(InvalidTransition, match="is failed and cannot be claimed"):
        ledger.leases.claim(dead.batch_id, A, 30)
    committed = drain_check_commit(ledger, ledger.batches.get(working.batch_id))
    assert committed.lease is None, "a commit releases the lease"


# --------------------------------------------------------------------------------- retries

def test_retry_of_a_failed_batch_reserves_its_ranges_again(ledger: Ledger, clock: Clock):
    batch = ledger.batches.record_plan(make_plan((0, 10)))
    ledger.moves.mark_drained(batch.batch_id, result_for(batch))
    ledger.moves.mark_failed(batch.batch_id, "drain failed: broker restarted",
                             retry_at=clock.now + timedelta(seconds=5))
    with pytest.raises(ValueError, match="needs a reason"):
        ledger.attempts.retry(batch.batch_id, reason="")
    again = ledger.attempts.retry(batch.batch_id, reason="automatic retry 2 of 3")
    assert (again.state, again.attempts, again.reason, again.retry_at, again.drain) == (S.PLANNED, 2, None, None, None)
    assert ledger.batches.reserved_ranges("orders") == [R("orders-2", 0, 0, 10)]
    assert ledger.batches.holds("orders") == []
    last = ledger.batches.events(batch.batch_id)[-1]
    assert (last.from_state, last.to_state, last.attempt, last.reason) == (S.FAILED, S.PLANNED, 2,
                                                                           "automatic retry 2 of 3")


def test_retry_now_ends_a_failed_batchs_backoff_and_touches_nothing_else(ledger: Ledger, clock: Clock):
    batch = ledger.batches.record_plan(make_plan((0, 10)))
    assert ledger.attempts.retry_now(batch.batch_id) == ledger.batches.get(batch.batch_id), (
        "a planned batch is left as it is")
    ledger.moves.mark_drained(batch.batch_id, result_for(batch))
    ledger.moves.mark_failed(batch.batch_id, "the output root /out is full: No space left on device: /out",
                             retry_at=clock.now + timedelta(seconds=60), transient=True)
    before = ledger.batches.events(batch.batch_id)
    now = ledger.attempts.retry_now(batch.batch_id)
    assert (now.state, now.attempts, now.transient, now.retry_at) == (S.FAILED, 1, True, clock.now)
    assert ledger.batches.events(batch.batch_id) == before, "no move, no event: only the backoff ended"
    assert [h.retry_at for h in ledger.batches.holds("orders")] == [clock.now]


# (lease: (owner, seconds left) or None, take_over, outcome, why)
STUCK_CASES = [
    ((A, 0), (), "retried", "1. the lease expired: its run died"),
    (None, (), "retried", "2. no lease: the caller saw its runs end"),
    ((A, 10), (A,), "retried", "3. the owner is known dead before the expiry"),
    ((A, 10), (), "busy", "4. a live run still works on it"),
]


@pytest.mark.parametrize(("lease", "take_over", "outcome", "why"), STUCK_CASES, ids=[c[3] for c in STUCK_CASES])
def test_retry_of_a_stuck_batch_keeps_its_state_and_drops_the_lease(ledger: Ledger, clock: Clock, lease, take_over,
                                                                     outcome, why):
    batch = ledger.batches.record_plan(make_plan((0, 10)))
    batch = ledger.moves.mark_drained(batch.batch_id, result_for(batch))
    if lease is not None:
        ledger.leases.claim(batch.batch_id, lease[0], 30)
        clock.tick(30 - lease[1])
    if outcome == "busy":
        with pytest.raises(BatchBusy, match=f"held by {A}"):
            ledger.attempts.retry(batch.batch_id, reason="stuck", take_over=take_over)
        return
    again = ledger.attempts.retry(batch.batch_id, reason=f"stuck: lease of {A} expired", take_over=take_over)
    assert (again.state, again.attempts, again.lease, again.drain) == (S.DRAINED, 2, None, batch.drain)
    last = ledger.batches.events(batch.batch_id)[-1]
    assert (last.from_state, last.to_state, last.attempt) == (S.DRAINED, S.DRAINED, 2)
    with pytest.raises(LeaseLost, match="is of attempt 1, but the batch is at attempt 2"):
        ledger.moves.mark_drained(batch.batch_id, result_for(batch))  # the dead run's attempt cannot write any more
    assert ledger.moves.mark_drained(batch.batch_id, result_for(again)).drain.attempt == 2


def test_retry_refusals_say_why(ledger: Ledger):
    committed = drain_check_commit(ledger, ledger.batches.record_plan(make_plan(R("orders-2", 3, 0, 10))))
    with pytest.raises(InvalidTransition, match="is committed and cannot be retried.*replay re-drains"):
        ledger.attempts.retry(committed.batch_id, reason="x")
    failed = ledger.batches.record_plan(make_plan((0, 10)))
    ledger.moves.mark_failed(failed.batch_id, "drain failed", retry_at=None)
    ledger.batches.record_plan(make_plan(R("orders-2", 1, 0, 10)))
    with pytest.raises(RangeConflict, match=rf"retry of {failed.batch_id}: priority 2 already has 1 batch"):
        ledger.attempts.retry(failed.batch_id, reason="automatic retry", max_in_flight=1)
    assert ledger.attempts.retry(failed.batch_id, reason="automatic retry", max_in_flight=2).state is S.PLANNED


def test_crossed_holds_do_not_stop_each_others_retry(ledger: Ledger):
    """A and B each hold a partition the other has a later range on: each retry goes; commits keep offset order."""
    a = ledger.batches.record_plan(make_plan(R("orders-2", 0, 0, 10), R("orders-2", 1, 10, 20)))
    b = ledger.batches.record_plan(make_plan(R("orders-2", 0, 10, 20), R("orders-2", 1, 0, 10)))
    for x in (a, b):
        ledger.moves.mark_failed(x.batch_id, "drain failed", retry_at=None)
    with pytest.raises(RangeConflict, match="held from offset 0 by failed batch"):
        ledger.batches.record_plan(make_plan(R("orders-2", 0, 20, 30)))  # a new plan waits behind the holds
    for x in (a, b):
        drain_and_check(ledger, ledger.attempts.retry(x.batch_id, reason="automatic retry"))
    assert [p.batch_id for p in ledger.batches.blocking_predecessors(a.batch_id)] == [b.batch_id]
    assert [p.batch_id for p in ledger.batches.blocking_predecessors(b.batch_id)] == [a.batch_id]
    assert ledger.batches.ready_to_commit("orders") == [], "neither commits a partition past the other's offsets"


# --------------------------------------------------------------------------------- split

def test_split_moves_the_failing_ranges_to_a_new_failed_batch(ledger: Ledger, clock: Clock):
    good, bad, other = R("orders-2", 0, 0, 10), R("orders-2", 1, 0, 10), R("orders-0", 0, 0, 5)
    batch = ledger.batches.record_plan(make_plan(good, bad, other))
    ledger.leases.claim(batch.batch_id, A, 30)
    batch = ledger.moves.mark_drained(batch.batch_id, result_for(batch, dead=2))
    clock.tick()
    retry_at = clock.now + timedelta(seconds=5)
    child = ledger.attempts.split(batch.batch_id, [bad], f"values_match_schema failed on {bad}", retry_at=retry_at)

    assert (child.batch_id, child.parent, child.state, child.attempts, child.retry_at) == (
        "b-000002", batch.batch_id, S.FAILED, 1, retry_at)
    assert child.reason == f"values_match_schema failed on {bad}" and child.holds and child.lease is None
    assert child.plan.offset_ranges() == (bad,) and child.plan.quotas == batch.plan.quotas
    assert child.drain.ranges == tuple(s for s in batch.drain.ranges if s.range == bad), "the outcome moved along"
    parent = ledger.batches.get(batch.batch_id)
    assert parent.plan.offset_ranges() == (good, other) and parent.state is S.DRAINED and parent.lease.owner == A
    assert [s.range for s in parent.drain.ranges] == [good, other]
    assert sum(len(b.plan.ranges) for b in ledger.batches.find()) == 3, "moved, not copied"
    assert ledger.batches.reserved_ranges("orders") == sorted([good, other])
    assert [(h.batch_id, h.topic, h.partition, h.start) for h in ledger.batches.holds("orders")] == [
        (child.batch_id, "orders-2", 1, 0)]
    assert [(e.from_state, e.to_state) for e in ledger.batches.events(child.batch_id)] == [(None, S.FAILED)]
    assert (ledger.batches.events(child.batch_id)[0].reason
            == f"split from b-000001: values_match_schema failed on {bad}")
    last = ledger.batches.events(batch.batch_id)[-1]
    assert (last.from_state, last.to_state) == (S.DRAINED, S.DRAINED)
    assert "orders-2[1]@[0,10) moved to b-000002" in last.reason

    # The original publishes and commits its good ranges; the split-off batch retries by itself later.
    report = CheckReport((CheckOutcome("values_match_schema", False, {"invalid": 2}, (bad,)),))
    ledger.moves.mark_checked(batch.batch_id, report)
    assert [b.batch_id for b in ledger.batches.ready_to_commit("orders")] == [batch.batch_id], (
        "other partitions: not blocked")
    assert ledger.moves.mark_committed(batch.batch_id, commit_report(parent)).state is S.COMMITTED
    retried = ledger.attempts.retry(child.batch_id, reason="automatic retry")
    assert drain_check_commit(ledger, retried).state is S.COMMITTED


@pytest.mark.parametrize(
    ("failing", "error", "message", "why"),
    [
        ([R("orders-2", 0, 0, 10), R("orders-2", 1, 0, 10)], ValueError, "every range fails; fail the batch instead",
         "1. nothing would be left"),
        ([R("orders-2", 5, 0, 10)], ValueError, r"orders-2\[5\]@\[0,10\) is not a range of the batch",
         "2. a range of no batch"),
        ([], ValueError, "no failing range given", "3. nothing to split"),
    ],
)
def test_split_refuses_what_is_not_a_split(ledger: Ledger, failing, error, message, why):
    batch = ledger.batches.record_plan(make_plan(R("orders-2", 0, 0, 10), R("orders-2", 1, 0, 10)))
    with pytest.raises(error, match=message):
        ledger.attempts.split(batch.batch_id, failing, "checks failed", retry_at=None)
    assert ledger.batches.find() == [batch]


def test_only_a_batch_in_flight_splits(ledger: Ledger):
    batch = ledger.batches.record_plan(make_plan(R("orders-2", 0, 0, 10), R("orders-2", 1, 0, 10)))
    ledger.moves.mark_failed(batch.batch_id, "drain failed", retry_at=None)
    with pytest.raises(InvalidTransition, match="is failed and cannot be split"):
        ledger.attempts.split(batch.batch_id, [R("orders-2", 0, 0, 10)], "checks failed", retry_at=None)


# --------------------------------------------------------------------------------- commit order

def test_two_batches_of_one_partition_commit_in_offset_order(ledger: Ledger):
    first = ledger.batches.record_plan(make_plan((0, 10)), max_in_flight=2)
    second = ledger.batches.record_plan(make_plan((10, 20)), max_in_flight=2)
    elsewhere = ledger.batches.record_plan(make_plan(R("orders-1", 0, 0, 10)), max_in_flight=2)
    with pytest.raises(RangeConflict, match="max_in_flight=2"):
        ledger.batches.record_plan(make_plan((20, 30)), max_in_flight=2)
    ids = lambda bs: [b.batch_id for b in bs]  # noqa: E731
    for b in (second, elsewhere):
        drain_and_check(ledger, b)

    assert ids(ledger.batches.blocking_predecessors(second.batch_id)) == [first.batch_id]
    assert ids(ledger.batches.ready_to_commit("orders")) == [elsewhere.batch_id], "the later batch of partition 0 waits"
    ledger.moves.mark_failed(first.batch_id, "drain failed", retry_at=None)
    assert ids(ledger.batches.blocking_predecessors(second.batch_id)) == [first.batch_id], (
        "a failed batch holds its place")
    again = drain_and_check(ledger, ledger.attempts.retry(first.batch_id, reason="automatic retry"))
    assert ids(ledger.batches.ready_to_commit("orders")) == [first.batch_id, elsewhere.batch_id]
    assert ledger.batches.blocking_predecessors(first.batch_id) == []
    ledger.moves.mark_committed(first.batch_id, commit_report(again))
    assert ids(ledger.batches.ready_to_commit("orders")) == [second.batch_id, elsewhere.batch_id], (
        "commits by itself now")


def test_a_redrain_of_committed_offsets_neither_waits_nor_blocks(ledger: Ledger):
    done = drain_check_commit(ledger, ledger.batches.record_plan(make_plan((0, 10))))
    later = ledger.batches.record_plan(make_plan((10, 20)))
    drain_and_check(ledger, ledger.attempts.replay(done.batch_id))
    drain_and_check(ledger, later)
    assert ledger.batches.blocking_predecessors(later.batch_id) == []
    assert ledger.batches.blocking_predecessors(done.batch_id) == []
    assert [b.batch_id for b in ledger.batches.ready_to_commit("orders")] == [done.batch_id, later.batch_id]
