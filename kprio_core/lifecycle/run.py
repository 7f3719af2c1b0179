"""What one run of a batch must do, as pure rules: from the ledger's batch and the run's facts to one typed step.

A run is launched by the sensor (or ``kprio drain``), Dagster's run-retry daemon, or an operator (the UI, a
backfill, ``kprio retry``). Whoever launched it first decides from the ledger's batch what it is for
(:func:`decide_run`), in this order:

1. a failed or committed batch planned on an earlier incarnation of its log never runs again
   (its ranges would read another log's offsets): **fail**;
2. an operator's run re-drains a committed or failed batch (**drain**, re-drain), else takes it as it
   stands, unless another live run owns it (**wait**);
3. a committed batch has **nothing to do**; so has a failed one whose run this run waited for;
4. a failed batch is **retried** as the next attempt, after its backoff (**wait** until T), unless a later
   attempt exists, its failure holds nothing, or its attempts are exhausted (**fail**);
5. a batch in flight goes on: own lease or attempt not yet taken (**drain** as is); another live run owns
   it (**wait**); a later attempt exists (**nothing to do**); else its run died: **take it over**.

Why this order: supersession before any re-drain; an operator's wish before the sensor's attempt bookkeeping
(a person's re-drain is never "nothing to do" because an attempt number moved on).

No I/O, the clock passed in: the runtime (``orchestration.runtime.batch``) acts, and asks again after a wait.

A sensor's run for attempt 1 of a planned batch nobody holds drains it as it stands:

>>> from datetime import UTC, datetime, timedelta
>>> from kprio_core.config import RecoverySettings
>>> now = datetime(2026, 1, 1, tzinfo=UTC)
>>> me = "6f1c2d3e-aaaa@host:42"
>>> planned = BatchView("b-000007", BatchState.PLANNED, attempts=1)
>>> decide_run(planned, Intent(Launcher.SENSOR, 1, LaunchReason.NEW), owner=me, recovery=RecoverySettings(), now=now)
Drain(how=<DrainFrom.AS_IS: 'as-is'>, take_over=(), reason='', note='')

A failed batch, attempt 2 of 3, whose backoff ends in 10 s: wait until then, then retry:

>>> failed = BatchView("b-000007", BatchState.FAILED, attempts=2, holds=True, reason="boom",
...                    retry_at=now + timedelta(seconds=10))
>>> step = decide_run(failed, Intent(Launcher.SENSOR, 3, LaunchReason.RETRY), owner=me,
...                   recovery=RecoverySettings(), now=now)
>>> step.why, step.message
(<WaitWhy.BACKOFF: 'backoff'>, 'b-000007: backing off 10.0 s before its retry')
>>> decide_run(failed, Intent(Launcher.SENSOR, 3), owner=me, recovery=RecoverySettings(),
...            now=now + timedelta(seconds=10)).reason
'retry by run 6f1c2d3e'

Attempt 3 of 3 failed: its partitions wait for an operator, who may still re-drain it:

>>> spent = BatchView("b-000007", BatchState.FAILED, attempts=3, holds=True, reason="boom")
>>> decide_run(spent, Intent(Launcher.ORCHESTRATOR_RETRY, 3), owner=me, recovery=RecoverySettings(), now=now).message
'b-000007 failed 3 times (recovery.max_attempts=3): boom; its partitions wait for an operator: kprio retry b-000007'
>>> decide_run(spent, Intent(Launcher.OPERATOR), owner=me, recovery=RecoverySettings(), now=now).how
<DrainFrom.REDRAIN: 'redrain'>
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from kprio_core.errors import (
    BrokerUnreachable,
    LeaseLost,
    LogChanged,
    OutputUnavailable,
    SchemaRegistryUnavailable,
    SparkUnavailable,
)
from kprio_core.lifecycle.run_steps import (
    BatchView,
    Commit,
    CommitStep,
    DoneWhy,
    Drain,
    DrainFrom,
    Fail,
    FailWhy,
    Intent,
    Launcher,
    NothingToDo,
    Step,
    Wait,
    WaitWhy,
    Work,
)
from kprio_core.lifecycle.runs import LaunchReason as LaunchReason  # where the drivers import it from
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.recovery import Lease, may_retry, parse_owner, retry_delay_s
from kprio_core.model.states import BatchState

if TYPE_CHECKING:
    from kprio_core.config import RecoverySettings
    from kprio_core.model.drain_plan import PlannedRange

SLOT_WAIT_S = 900.0
"""Longest a run waits for a priority slot, for another run of its batch, or for the batches before it to commit."""

S = BatchState


# -- the run's decision ----------------------------------------------------------------------------


def decide_run(batch: BatchView, intent: Intent, *, owner: str, recovery: RecoverySettings, now: datetime,
               dead: Collection[str] = (), waited_on: str | None = None) -> Step:
    """What this run (lease owner ``owner``) does with ``batch`` now (the module docstring's order).

    ``dead``: lease owners known gone; ``waited_on``: the owner of the run this one already waited for, if any.
    """
    if batch.state in (S.FAILED, S.COMMITTED) and batch.superseded:
        return Fail(FailWhy.SUPERSEDED, batch.superseded)
    if intent.kind is Launcher.OPERATOR:
        return _redrain(batch, owner, now, dead, waited_on)
    if batch.state is S.COMMITTED:
        by = f" by {waited_on}" if waited_on else ""
        return NothingToDo(DoneWhy.COMMITTED,
                           f"{batch.batch_id} is already committed{by} (attempt {batch.attempts}): nothing to do")
    if batch.state is S.FAILED and waited_on is not None:
        return NothingToDo(DoneWhy.FINISHED_ELSEWHERE,
                           f"{batch.batch_id} failed in the run this one waited for ({waited_on})")
    if batch.state is S.FAILED:
        return _retry(batch, intent, owner, recovery, now)
    return _resume(batch, intent, owner, now, dead)


def _redrain(batch: BatchView, owner: str, now: datetime, dead: Collection[str], waited_on: str | None) -> Step:
    """An operator's run: re-drain a committed or failed batch, take over one whose run died."""
    if batch.state in (S.COMMITTED, S.FAILED):
        if waited_on is not None and batch.state is S.COMMITTED:
            return NothingToDo(DoneWhy.FINISHED_ELSEWHERE, f"{batch.batch_id} was drained and committed by "
                               f"{waited_on} while this run waited: nothing to do")
        return Drain(DrainFrom.REDRAIN, note=f"{batch.batch_id} is {batch.state.value}: re-draining its exact ranges")
    if live_elsewhere(batch.lease, owner, now, dead):
        return _held(batch)
    return Drain(DrainFrom.AS_IS, take_over=_dead_owner(batch, owner, dead))


def _retry(batch: BatchView, intent: Intent, owner: str, recovery: RecoverySettings, now: datetime) -> Step:
    """A failed batch: the next attempt, after its backoff, while attempts are left."""
    wanted = intent.attempt
    if intent.kind is Launcher.SENSOR and wanted is not None and wanted <= batch.attempts:
        return NothingToDo(DoneWhy.LATER_ATTEMPT, f"{batch.batch_id} failed in attempt {batch.attempts}, after the "
                           f"attempt {wanted} this run was for: nothing to do")
    if not batch.holds:
        return NothingToDo(DoneWhy.HOLDS_NOTHING, f"{batch.batch_id}: its failed re-drain holds nothing (its offsets "
                           "were committed); re-materialize it to re-drain it again")
    if not batch.transient and not may_retry(attempts=batch.attempts, max_attempts=recovery.max_attempts):
        return Fail(FailWhy.EXHAUSTED, f"{batch.batch_id} failed {batch.attempts} times "
                    f"(recovery.max_attempts={recovery.max_attempts}): {batch.reason}; its partitions wait for an "
                    f"operator: kprio retry {batch.batch_id}")
    if batch.retry_at is not None and batch.retry_at > now:
        wait = (batch.retry_at - now).total_seconds()
        return Wait(WaitWhy.BACKOFF, f"{batch.batch_id}: backing off {wait:.1f} s before its retry",
                    until=batch.retry_at)
    return Drain(DrainFrom.RETRY, reason=f"retry by run {run_label(owner)}")


def _resume(batch: BatchView, intent: Intent, owner: str, now: datetime, dead: Collection[str]) -> Step:
    """A batch in flight: this attempt's own run goes on; a run after a dead one takes over."""
    lease, wanted = batch.lease, intent.attempt
    if lease is not None and lease.owner == owner:
        return Drain(DrainFrom.AS_IS)
    if live_elsewhere(lease, owner, now, dead):
        return _held(batch)  # its outcome decides: wait for it, then decide again
    if lease is None and (intent.kind is Launcher.ORCHESTRATOR_RETRY or wanted == batch.attempts):
        return Drain(DrainFrom.AS_IS)  # nobody took it yet: this run goes on from where it stands
    if intent.kind is Launcher.SENSOR and wanted is not None and wanted < batch.attempts:
        return NothingToDo(DoneWhy.LATER_ATTEMPT, f"{batch.batch_id} is at attempt {batch.attempts}, after the "
                           f"attempt {wanted} this run was for: nothing to do")
    return Drain(DrainFrom.TAKE_OVER, take_over=_dead_owner(batch, owner, dead),
                 reason=f"resumed by run {run_label(owner)}: the run before it died")


def _held(batch: BatchView) -> Wait:
    assert batch.lease is not None
    return Wait(WaitWhy.LEASE_HELD, f"batch {batch.batch_id} is being worked on by {batch.lease.owner}",
                owner=batch.lease.owner)


def _dead_owner(batch: BatchView, owner: str, dead: Collection[str]) -> tuple[str, ...]:
    lease = batch.lease
    return (lease.owner,) if lease is not None and lease.owner != owner and lease.owner in dead else ()


def live_elsewhere(lease: Lease | None, owner: str, now: datetime, dead: Collection[str] = ()) -> bool:
    """Another run holds the lease, it has not expired, and its owner is not known dead.

    >>> from datetime import UTC, datetime
    >>> lease = Lease("r2@h:7", datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC))
    >>> now = datetime(2026, 1, 1, tzinfo=UTC)
    >>> live_elsewhere(lease, "r1@h:6", now), live_elsewhere(lease, "r2@h:7", now)
    (True, False)
    >>> live_elsewhere(lease, "r1@h:6", now, dead={"r2@h:7"})
    False
    """
    return lease is not None and lease.owner != owner and not lease.expired(now) and lease.owner not in dead


def run_label(owner: str) -> str:
    """The short run id a lease owner names (as the ledger's reasons say it; a ``driver:`` prefix kept), else owner.

    >>> run_label("6f1c2d3e-1234-5678@host:42"), run_label("airflow:0193a2b4-77@host:42"), run_label("someone")
    ('6f1c2d3e', 'airflow:0193a2b4', 'someone')
    """
    parsed = parse_owner(owner)
    if parsed is None or not parsed.run_id:
        return owner
    driver, _, run_id = parsed.run_id.rpartition(":")
    return f"{driver}:{run_id[:8]}" if driver else run_id[:8]


def refused(kind: WaitWhy, message: str) -> Wait:
    """The ledger refused this run's move (a slot or the ranges taken, a live lease): wait and decide again."""
    return Wait(kind, message)


def waited_too_long(waited_s: float, step: Wait) -> bool:
    """Whether a run gives up waiting: a backoff is waited out whole; the rest at most :data:`SLOT_WAIT_S`.

    >>> waited_too_long(901.0, Wait(WaitWhy.SLOT_TAKEN, "")), waited_too_long(901.0, Wait(WaitWhy.BACKOFF, ""))
    (True, False)
    """
    return step.why is not WaitWhy.BACKOFF and waited_s > SLOT_WAIT_S


# -- after the take --------------------------------------------------------------------------------


def work_left(state: BatchState) -> Work:
    """What a claimed batch still needs: a checked one only its commit (its output passed the checks).

    >>> work_left(BatchState.DRAINED), work_left(BatchState.CHECKED)
    (<Work.DRAIN: 'drain'>, <Work.COMMIT: 'commit'>)
    """
    return Work.COMMIT if state is S.CHECKED else Work.DRAIN


def before_commit(batch_id: str, blocking: Sequence[BatchView], intent: Intent, *, now: datetime,
                  waited_out: bool = False) -> CommitStep:
    """Commit now, wait for the runs finishing the ``blocking`` batches (unless ``waited_out``), or leave it to them.

    >>> from datetime import UTC, datetime
    >>> now = datetime(2026, 1, 1, tzinfo=UTC)
    >>> before_commit("b-2", [], Intent(Launcher.SENSOR, 1), now=now)
    Commit()
    >>> failed = BatchView("b-1", BatchState.FAILED, 3, holds=True)
    >>> before_commit("b-2", [failed], Intent(Launcher.SENSOR, 1), now=now).message
    'b-2 is checked and published; it commits once b-1 (failed) commit (the batches before it on the same partitions)'
    >>> before_commit("b-2", [failed], Intent(Launcher.OPERATOR), now=now).why
    <FailWhy.NOT_COMMITTED: 'not-committed'>
    """
    if not blocking:
        return Commit()
    running = [b for b in blocking if b.in_flight and b.lease is not None and not b.lease.expired(now)]
    if running and not waited_out:
        return Wait(WaitWhy.PREDECESSOR, f"{batch_id} waits for {', '.join(b.batch_id for b in running)} to commit")
    ids = ", ".join(f"{b.batch_id} ({b.state.value})" for b in blocking)
    message = (f"{batch_id} is checked and published; it commits once {ids} commit "
               "(the batches before it on the same partitions)")
    if intent.kind is Launcher.OPERATOR:
        return Fail(FailWhy.NOT_COMMITTED, message)  # a backfill is Succeeded only when committed
    return NothingToDo(DoneWhy.COMMITS_LATER, message)


def commits_for_another(later: BatchView, now: datetime) -> bool:
    """A later batch ready to commit is committed by this run unless its own run holds a live lease on it."""
    return later.lease is None or later.lease.expired(now)


def marks_failed(batch: BatchView, owner: str) -> bool:
    """A run's failure fails the batch only while it is in flight and not another run's (it moved on otherwise).

    >>> marks_failed(BatchView("b-1", BatchState.DRAINED, 1), "me")
    True
    >>> marks_failed(BatchView("b-1", BatchState.COMMITTED, 1), "me")
    False
    """
    return batch.in_flight and (batch.lease is None or batch.lease.owner == owner)


def retry_at(attempt: int, recovery: RecoverySettings, now: datetime, *, transient: bool = False,
             streak: int = 0) -> datetime:
    """When the attempt after failed attempt ``attempt`` may start (``recovery.backoff_s`` doubling, capped).

    A transient failure backs off by its ``streak`` (this one included): the first is due at once (the tick
    retries once its cause's probe passes), later ones back off, so a cause no probe sees is not retried in a loop.

    >>> from datetime import UTC, datetime
    >>> from kprio_core.config import RecoverySettings
    >>> recovery, t0 = RecoverySettings(backoff_s=5, backoff_max_s=60), datetime(2026, 1, 1, tzinfo=UTC)
    >>> retry_at(3, recovery, t0).second
    20
    >>> [retry_at(7, recovery, t0, transient=True, streak=n).second for n in (1, 2, 3)]
    [0, 5, 10]
    """
    if transient:
        if streak <= 1:
            return now
        return now + timedelta(seconds=retry_delay_s(streak - 1, base_s=recovery.backoff_s,
                                                     max_s=recovery.backoff_max_s))
    return now + timedelta(seconds=retry_delay_s(attempt, base_s=recovery.backoff_s, max_s=recovery.backoff_max_s))


def transient_failure(causes: Iterable[bool | None]) -> bool:
    """A failure passes by itself only when every cause does (a check's verdict or an unknown cause never does).

    >>> transient_failure([True, True]), transient_failure([True, False]), transient_failure([True, None])
    (True, False, False)
    >>> transient_failure([])
    False
    """
    flags = list(causes)
    return bool(flags) and all(f is True for f in flags)


# -- a whole batch failed --------------------------------------------------------------------------


ENVIRONMENT_FAILURES = (BrokerUnreachable, OutputUnavailable, SparkUnavailable, SchemaRegistryUnavailable, LeaseLost,
                        LogChanged)
"""Failures of the world around a batch, not of its records: splitting the batch would not find a cause."""


def isolates(failure: BaseException, state: BatchState) -> bool:
    """Whether a failure of a whole batch is isolated by splitting the batch (:func:`isolating_split`).

    Only a failure of the drain itself (still *planned*) whose cause may lie in the records (the Spark job died,
    the read failed); one of the world around (:data:`ENVIRONMENT_FAILURES`) fails every part alike.

    >>> from kprio_core.errors import BrokerUnreachable, KprioError, SchemaRegistryUnavailable
    >>> isolates(RuntimeError("Python worker exited unexpectedly"), BatchState.PLANNED)
    True
    >>> isolates(BrokerUnreachable("broker:9092", 10), BatchState.PLANNED)
    False
    >>> isolates(SchemaRegistryUnavailable("the schema registry cannot be reached"), BatchState.PLANNED)
    False
    >>> isolates(KprioError("commit failed"), BatchState.CHECKED)   # it drained: the records were fine
    False
    """
    return state is BatchState.PLANNED and not isinstance(failure, ENVIRONMENT_FAILURES)


def isolating_split(ranges: Sequence[PlannedRange]) -> tuple[OffsetRange, ...]:
    """The ranges to split off a batch whose drain failed whole, each part retried on its own: a bisection, one step
    per failure; until a part cannot be split none is to blame, so both retry as passing failures (no attempt spent).

    1. several priorities: every range below the highest (the most urgent retry alone, held one attempt at most);
    2. one priority over several partitions: the ranges of the later half of its partitions;
    3. one partition: nothing (the batch is as small as a split makes it; it fails as it is).

    >>> from kprio_core.model.drain_plan import PlannedRange
    >>> r = lambda p, t, q: PlannedRange(p, OffsetRange(t, q, 0, 10))
    >>> [str(x) for x in isolating_split([r(2, "o-2", 0), r(0, "o-0", 0), r(0, "o-0", 1)])]
    ['o-0[0]@[0,10)', 'o-0[1]@[0,10)']
    >>> [str(x) for x in isolating_split([r(0, "o-0", 0), r(0, "o-0", 1), r(0, "o-0", 2)])]
    ['o-0[1]@[0,10)', 'o-0[2]@[0,10)']
    >>> isolating_split([r(0, "o-0", 3)])
    ()
    """
    priorities = sorted({p.priority for p in ranges}, reverse=True)
    if len(priorities) > 1:
        return tuple(p.range for p in ranges if p.priority != priorities[0])
    partitions = sorted({p.range.topic_partition for p in ranges})
    if len(partitions) > 1:
        later = set(partitions[len(partitions) // 2:])
        return tuple(p.range for p in ranges if p.range.topic_partition in later)
    return ()
