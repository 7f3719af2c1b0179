"""One run of one batch, free of any orchestrator: take, drain, isolate, check, publish, commit, later batches.

:class:`BatchRun` executes the run's state machine (:mod:`kprio_core.lifecycle.run_machine`): each stage is a
method doing its I/O and asking its rule; typed events (:class:`~.batch_metadata.Checked`, ...) go to the driver.

The take asks :func:`~kprio_core.lifecycle.run.decide_run` what this run is for (retry, take over, re-drain, go
on), waiting and asking again as it says; then it claims the batch's lease and keeps it renewed
(:class:`~orchestration.runtime.leases.Heartbeat`). The lease's token (owner, attempt, epoch) fences every ledger
move, the publish and the Kafka commit, with no lock held: the ledger refuses a stale token, a Delta table a stale
epoch, Kafka a fenced writer; once another run holds the batch this one stops, having written nothing more.

Any failure marks the batch failed (unless it moved on: :func:`~kprio_core.lifecycle.run.marks_failed`) with one
line naming topic, partitions, offsets and cause, then raises ``RunFailed``; whether it passes by itself is its
type's verdict (:func:`kprio_core.errors.is_transient`) combined by :mod:`kprio_core.lifecycle.outcome`. A drain
that died as a whole is split first (:func:`~kprio_core.lifecycle.run.isolating_split`), narrowing the cause
attempt by attempt. An interrupted run (SIGTERM, a terminated run) releases the lease and leaves the batch where
it was, for the next run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.errors import BatchBusy, KprioError, LeaseLost, RangeConflict, is_transient
from kprio_core.ledger import Batch, BatchState
from kprio_core.lifecycle.outcome import (
    Cause,
    FailWhole,
    GoOn,
    RangeDrained,
    Recheck,
    after_checks,
    after_drain,
    run_failure_passes,
)
from kprio_core.lifecycle.run import (
    SLOT_WAIT_S,
    BatchView,
    Drain,
    DrainFrom,
    Fail,
    Intent,
    NothingToDo,
    Wait,
    WaitWhy,
    Work,
    before_commit,
    commits_for_another,
    decide_run,
    isolates,
    isolating_split,
    marks_failed,
    refused,
    retry_at,
    run_label,
    work_left,
)
from kprio_core.lifecycle.run_machine import ENDS, BatchFails, Stage, next_stage
from kprio_core.model.recovery import LeaseToken
from kprio_core.model.results import CheckReport, DrainResult, RangeStats
from orchestration.runtime.batch_metadata import (
    Checked,
    Committed,
    Drained,
    Event,
    Log,
    RunFailed,
    Timings,
    drained_metadata,
    failure_reason,
    one_line,
)
from orchestration.runtime.checks import check_batch, warm_up
from orchestration.runtime.commit import CommitOutcome, Uncommitted, commit_batch, log_changed, other_logs
from orchestration.runtime.faults import crash_point
from orchestration.runtime.leases import Heartbeat, this_owner
from orchestration.runtime.ports import Edge, LedgerPort
from spark_jobs.remote_errors import spark_boundary

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

POLL_S = 1.0
LINEAGE_KEY = "lineage"
"""The committed asset's metadata key that says whether the batch's lineage event was emitted or failed."""


@dataclass
class _Work:
    """What one run's stages hand on: batch, topic, heartbeat, drain result, and what was kept, split off, checked."""

    batch: Batch
    topic: TopicSettings
    heartbeat: Heartbeat
    result: DrainResult | None = None
    changed: dict[str, str] = field(default_factory=dict)
    """The priority topics deleted or recreated since the plan, with what changed."""
    kept: list[RangeStats] = field(default_factory=list)
    split: list[str] = field(default_factory=list)
    report: CheckReport | None = None


class BatchRun:
    """Everything one run does to one batch (see the module docstring for the order)."""

    def __init__(self, *, batch_id: str, intent: Intent, run_id: str, ledger: LedgerPort,
                 config: KprioConfig, spark: Callable[[], SparkSession], edge: Callable[[], Edge],
                 owner_dead: Callable[[str], bool], add_batch: Callable[[str], None], log: Log) -> None:
        """``spark``, ``edge``: getters called on first need; ``add_batch`` tells the driver of a split-off batch."""
        self.batch_id, self.intent, self.run_id = batch_id, intent, run_id
        self.ledger, self.config = ledger, config
        self.spark, self.edge, self.owner_dead, self.add_batch, self.log = spark, edge, owner_dead, add_batch, log
        self.owner = this_owner(run_id)
        self.token: LeaseToken | None = None  # this run's lease of the batch, once taken: fences its writes
        self.timings = Timings()
        self.refusal: KprioError | None = None  # the ledger's refusal of the last take, if it refused

    # -- the whole run ---------------------------------------------------------------------------

    def events(self, *, commit: bool = True) -> Iterator[Event]:
        """Carry the run out; RunFailed (or the unexpected error itself) when it fails; ``commit=False`` stops once
        the batch is published (a driver committing in a step of its own starts another run, which finds only that)."""
        if commit or work_left(self.ledger.batches.get(self.batch_id).state) is Work.DRAIN:
            warm_up()  # Great Expectations' import overlaps the drain
        taken = self.take()
        if isinstance(taken, NothingToDo):
            self.log.info(taken.message)
            yield from self._checks_of(self.ledger.batches.get(self.batch_id))
            return
        topic = self.config.topic(taken.logical_topic)
        self.token = taken.token
        with Heartbeat(self.ledger.leases, self.batch_id, self.token, self.config.recovery.lease_s) as heartbeat:
            yield from self._work(_Work(taken, topic, heartbeat), commit=commit)
        self._release()  # a batch left in flight (waiting to commit) is free for whoever moves it next

    def _work(self, work: _Work, *, commit: bool) -> Iterator[Event]:
        """The stages after the take, as the machine says, under the lease; any failure fails the batch."""
        try:
            at, found = yield from self._stages(work, commit=commit)
        except LeaseLost as lost:
            # Fenced: another run owns the batch now; this one wrote nothing more and leaves it alone.
            self.log.warning(f"{self.batch_id}: {lost}")
            raise RunFailed(f"{self.batch_id}: this run lost its lease and stopped: {one_line(str(lost))}") from lost
        except (KprioError, OSError) as err:
            reason = one_line(f"{err} [{err.code}]" if isinstance(err, KprioError) else f"{type(err).__name__}: {err}")
            split = self._isolate(err, reason)
            self._fail(reason, transient=run_failure_passes(is_transient(err), isolated=split))
            raise RunFailed(f"{self.batch_id} failed: {reason}") from err
        except Exception as err:
            reason = one_line(f"{type(err).__name__}: {err}")
            split = self._isolate(err, reason)
            self._fail(reason, transient=run_failure_passes(is_transient(err), isolated=split))
            raise
        except BaseException:
            # Interrupted (SIGTERM, a terminated run): leave the batch where it is for the next run.
            self._release()
            raise
        if at is Stage.REFUSED:
            raise RunFailed(found.message)
        if at is Stage.FAILED:
            self._fail(found.reason, transient=found.transient)
            raise RunFailed(f"{self.batch_id} failed: {found.reason}") from found.error
        if isinstance(found, NothingToDo):
            self.log.info(found.message)

    def _stages(self, work: _Work, *, commit: bool) -> Iterator[Event]:
        """Each stage's step, then the next stage as :func:`next_stage` says, until the run ends; how it ended."""
        at, found, since = next_stage(Stage.TAKE, work_left(work.batch.state), commit=commit), None, time.monotonic()
        while at not in ENDS:
            waited = time.monotonic() - since
            found = yield from self._step(at, found, work, waited_out=waited > SLOT_WAIT_S)
            then = next_stage(at, found, commit=commit, waited_s=waited)
            if then is at:
                time.sleep(POLL_S)  # a wait for the batches before it: asked again after a poll
            at, since = then, since if then is at else time.monotonic()
        return at, found

    def _step(self, at: Stage, found: object, work: _Work, *, waited_out: bool) -> Iterator[Event]:
        """Carry stage ``at`` out (``found``: what the stage before found); what it found."""
        match at:
            case Stage.DRAIN:
                return self._drain(work)
            case Stage.ISOLATE:
                return self._split_off(work, found)
            case Stage.CHECK | Stage.RECHECK:
                return (yield from self._check(work, found, again=at is Stage.RECHECK))
            case Stage.PUBLISH:
                return (yield from self._publish(work))
            case Stage.REPORT:  # only the commit is left: its output passed these
                yield from self._checks_of(work.batch)
                return self.ledger.batches.get(self.batch_id).state
            case Stage.ORDER:
                blocking = [BatchView.of(b) for b in self.ledger.batches.blocking_predecessors(self.batch_id)]
                return before_commit(self.batch_id, blocking, self.intent, now=self.ledger.now(), waited_out=waited_out)
            case Stage.COMMIT:
                return (yield from self._commit(work))
            case Stage.LATER:
                yield from self._commit_successors(work.topic)
        return None

    # -- take the batch --------------------------------------------------------------------------

    def take(self) -> Batch | NothingToDo:
        """The take stage until the machine leaves it: the batch, moved to this run's attempt and leased, or why not."""
        started = time.monotonic()
        said: set[str] = set()
        waited_on: str | None = None
        while True:
            found = self._take(said, waited_on)
            at = next_stage(Stage.TAKE, work_left(found.state) if isinstance(found, Batch) else found,
                            waited_s=time.monotonic() - started)
            if at is Stage.REFUSED:
                raise RunFailed(found.message)
            if at is Stage.GAVE_UP:
                raise self.refusal or BatchBusy(found.message)
            if at is not Stage.TAKE:
                return found
            if found.owner is not None:
                waited_on = found.owner  # its outcome is reported, once it is known
            self._wait(found, said)

    def _take(self, said: set[str], waited_on: str | None) -> Batch | Wait | NothingToDo | Fail:
        """Ask :func:`decide_run`; when it says drain, move the batch to the attempt it names and claim its lease.
        A ledger refusal is a wait (:attr:`refusal` says which)."""
        self.refusal = None
        batch = self.ledger.batches.get(self.batch_id)
        step = decide_run(self._view(batch), self.intent, owner=self.owner, recovery=self.config.recovery,
                          now=self.ledger.now(), dead=self._dead(batch), waited_on=waited_on)
        if not isinstance(step, Drain):
            return step
        if step.note and step.note not in said:
            self.log.info(step.note)
            said.add(step.note)
        crash_point("before-take", batch.logical_topic)
        max_in_flight = self.config.planner.max_in_flight
        try:
            if step.how is DrainFrom.REDRAIN:
                batch = self.ledger.attempts.replay(self.batch_id, max_in_flight=max_in_flight)
            elif step.how in (DrainFrom.RETRY, DrainFrom.TAKE_OVER):
                batch = self.ledger.attempts.retry(self.batch_id, max_in_flight=max_in_flight,
                                                   take_over=step.take_over, reason=step.reason)
            return self.ledger.leases.claim(self.batch_id, self.owner, self.config.recovery.lease_s,
                                            take_over=tuple(self._dead(batch)))
        except (RangeConflict, BatchBusy) as err:
            self.refusal = err
            return refused(WaitWhy.SLOT_TAKEN if isinstance(err, RangeConflict) else WaitWhy.LEASE_HELD, str(err))

    def _wait(self, step: Wait, said: set[str]) -> None:
        """Say why once, then sleep: until the backoff's end, or one poll."""
        if step.why is WaitWhy.BACKOFF:
            self.log.info(step.message)
            time.sleep(max(0.0, (step.until - self.ledger.now()).total_seconds()) if step.until else POLL_S)
            return
        if step.message not in said:
            self.log.info(f"{self.batch_id} waits: {step.message}")
            said.add(step.message)
        time.sleep(POLL_S)

    def _view(self, batch: Batch) -> BatchView:
        gone = None
        if batch.state in (BatchState.FAILED, BatchState.COMMITTED):
            found = self.ledger.batches.superseded_batch(batch.batch_id)
            gone = found[0].describe() if found else None
        return BatchView.of(batch, superseded=gone)

    def _dead(self, batch: Batch) -> frozenset[str]:
        """The batch's lease owner when it is another run known gone (the only owner a rule asks about)."""
        lease = batch.lease
        if lease is None or lease.owner == self.owner or not self.owner_dead(lease.owner):
            return frozenset()
        return frozenset({lease.owner})

    # -- drain, isolate, check, publish ----------------------------------------------------------

    def _drain(self, work: _Work) -> GoOn | BatchFails:
        """Drain the ranges to staged files and mark the batch drained; :func:`after_drain` says what goes on."""
        from spark_jobs.drain import drain_batch, sweep_staging

        config, batch = self.config, work.batch
        # Earlier attempts of this batch that died left their staging: this attempt replaces it.
        sweep_staging((config.drain.output_path, config.drain.dead_letter_path),
                      keep=lambda batch_id, attempt: batch_id != self.batch_id or attempt == batch.attempts)
        crash_point("before-drain", batch.logical_topic)
        started = time.monotonic()
        with spark_boundary():  # a Spark Connect server gone before the drain: SparkUnavailable
            session = self.spark()
        result = work.result = drain_batch(session, config, work.topic, self.batch_id, batch.attempts, batch.plan)
        self.timings.time("drain", started)
        # What was read on a topic deleted or recreated since the plan is another log's: those ranges are split
        # off before anything is published (checked after the read: a recreation after it came after the read).
        work.changed = other_logs(self.edge(), batch)
        moved = {s.range for s in result.ranges if s.range.topic in work.changed}
        work.batch = self.ledger.moves.mark_drained(self.batch_id, result, fence=self.token)
        crash_point("after-drain", batch.logical_topic)
        after = after_drain([RangeDrained(s.range, s.failure is not None, s.error.transient if s.error else None)
                             for s in result.ranges], moved=moved)
        if isinstance(after, GoOn):
            return after
        if after.cause is Cause.LOG_CHANGED:
            return BatchFails(log_changed(self.batch_id, work.changed, "published"))
        first = next((s.error for s in result.failed_ranges if s.error is not None and s.range not in moved), None)
        return BatchFails(failure_reason(result), after.transient, first.error() if first is not None else None)

    def _split_off(self, work: _Work, found: GoOn | Recheck) -> GoOn | Recheck:
        """Split off what the drain set apart or failed on, or what a check failed on; hand the answer on."""
        if isinstance(found, Recheck):
            work.split.append(self._split(list(found.split.ranges), work.report.reason(),
                                          transient=found.split.transient))
            return found
        work.split += [self._split(list(off.ranges), log_changed(self.batch_id, work.changed, "published")
                                   if off.cause is Cause.LOG_CHANGED else failure_reason(work.result, off.ranges),
                                   transient=off.transient) for off in found.splits]
        return found

    def _check(self, work: _Work, found: GoOn | Recheck, *, again: bool) -> Iterator[Event]:
        """The blocking checks on the kept ranges; :func:`after_checks` says what follows (failing whole discards)."""
        started, keep = time.monotonic(), set(found.kept)
        work.kept = [s for s in (work.kept if again else work.result.ranges) if s.failure is None and s.range in keep]
        report = work.report = check_batch(work.kept, quality=self.config.quality,
                                           required_fields=work.topic.required_fields)
        step = after_checks(found.kept, passed=report.passed, failing=report.failed_ranges(), may_split=not again)
        self.timings.time("check", started)
        if isinstance(step, Recheck):
            return step
        yield Checked(report)
        if isinstance(step, FailWhole):
            from spark_jobs.drain import discard

            discard(work.result, output_root=self.config.drain.output_path,
                    dead_letter_root=self.config.drain.dead_letter_path)
            return BatchFails(report.reason(), step.transient)
        return step

    def _publish(self, work: _Work) -> Iterator[Event]:
        """Publish the checked files, fenced by the lease, and mark the batch checked; its state then."""
        from spark_jobs import tables

        work.heartbeat.check()
        crash_point("before-publish", work.batch.logical_topic)
        started = time.monotonic()
        # No lock across the publish: the ledger, and the output itself (a Delta table's epoch), refuse a stale owner.
        self.ledger.leases.check(self.batch_id, self.token, "the publish")
        published = tables.publish(self.config.drain, work.result, ranges=[s.range for s in work.kept],
                                   incarnations=work.batch.plan.incarnations, checks=work.report,
                                   epoch=self.token.epoch)
        self.timings.time("publish", started)
        if published.already:
            self.log.info(f"{self.batch_id}: the tables held this run's publish (epoch {self.token.epoch}) already")
        state = self.ledger.moves.mark_checked(self.batch_id, work.report, fence=self.token).state
        crash_point("after-publish", work.batch.logical_topic)
        yield Drained({**drained_metadata(self.config, work.batch, work.result, work.kept, work.split, self.timings),
                       **published.metadata()})
        return state

    def _split(self, failing: list, reason: str, *, transient: bool, batch_id: str | None = None,
               token: LeaseToken | None = None) -> str:
        """Split ``failing`` off this run's batch (or ``batch_id``, under ``token``) into a new failed batch."""
        batch_id = batch_id or self.batch_id
        batch = self.ledger.batches.get(batch_id)
        child = self.ledger.attempts.split(batch_id, failing, reason, transient=transient, fence=token or self.token,
                                  retry_at=self._retry_at(batch, transient))
        self.add_batch(child.batch_id)
        self.log.warning(f"{batch_id}: {', '.join(map(str, failing))} split off into {child.batch_id}, which "
                         f"holds only those partitions: {reason}")
        return child.batch_id

    def _checks_of(self, batch: Batch) -> Iterator[Event]:
        """The check results of the batch's published output, if any (a run that drains nothing reports these)."""
        if batch.checks is not None:
            yield Checked(batch.checks)

    # -- commit ----------------------------------------------------------------------------------

    def _commit(self, work: _Work) -> Iterator[Event]:
        """Commit the batch's offsets (the ranges its commit leaves are split off); the outcome."""
        work.heartbeat.check()
        started = time.monotonic()
        outcome = self._commit_one(work.topic, self.ledger.batches.get(self.batch_id), self.token)
        if isinstance(outcome, Uncommitted):
            return BatchFails(outcome.reason, outcome.transient)
        self.timings.time("commit", started)
        yield Committed(self.batch_id, {**outcome.metadata, **self.timings.metadata(),
                                        **self._lineage(work.topic, self.batch_id)})
        return outcome

    def _commit_one(self, topic: TopicSettings, batch: Batch, token: LeaseToken) -> CommitOutcome | Uncommitted:
        """Commit ``batch`` under ``token``; the ranges its commit leaves are split off it (``commit_batch``)."""
        return commit_batch(self.edge(), self.ledger, topic, batch, token, now_s=time.time(),
                            split=lambda ranges, reason, transient: self._split(
                                ranges, reason, transient=transient, batch_id=batch.batch_id, token=token))

    def _lineage(self, topic: TopicSettings, batch_id: str) -> dict[str, str]:
        """The committed batch's OpenLineage event if ``lineage.enabled`` (failures logged, not raised); metadata."""
        if not self.config.lineage.enabled:
            return {}
        from orchestration.observe.lineage import emit_committed

        try:
            if not emit_committed(self.config, topic, self.ledger.batches.get(batch_id), self.ledger.ledger_id):
                return {}
        except KprioError as err:
            self.log.warning(f"{batch_id}: {err} [{err.code}]")
            return {LINEAGE_KEY: "failed"}
        return {LINEAGE_KEY: "emitted"}

    def _commit_successors(self, topic: TopicSettings) -> Iterator[Event]:
        """Commit later batches that only waited for this one (``planner.max_in_flight`` > 1)."""
        for later in self.ledger.batches.ready_to_commit(topic.name):
            if not commits_for_another(BatchView.of(later), self.ledger.now()):
                continue  # its own run is on it
            try:
                later = self.ledger.leases.claim(later.batch_id, self.owner, self.config.recovery.lease_s)
            except BatchBusy:
                continue
            outcome = self._commit_one(topic, later, later.token)
            if isinstance(outcome, Uncommitted):  # nothing of it committed: it fails alone, as its own run's would
                self.ledger.moves.mark_failed(later.batch_id, outcome.reason, transient=outcome.transient,
                                              fence=later.token, retry_at=self._retry_at(later, outcome.transient))
                self.log.warning(f"{later.batch_id} failed: {outcome.reason}")
                continue
            yield Committed(later.batch_id, {**outcome.metadata, **self._lineage(topic, later.batch_id)},
                            note=f"committed by run {run_label(self.owner)} once {self.batch_id}, before it, committed")
            self.log.info(f"{later.batch_id} committed after {self.batch_id}")

    # -- failure and release ---------------------------------------------------------------------

    def _isolate(self, err: BaseException, reason: str) -> bool:
        """The drain failed as a whole: split the batch so each part retries alone and fine parts commit; True if split.

        Neither part is to blame yet, so both retry as a passing failure would (not using up
        ``recovery.max_attempts``); a part that cannot be split further fails as its cause says.
        """
        batch = self.ledger.batches.get(self.batch_id)
        if not marks_failed(BatchView.of(batch), self.owner) or not isolates(err, batch.state):
            return False
        apart = isolating_split(batch.plan.ranges)
        if not apart:
            return False
        try:
            self._split(list(apart), f"the whole batch failed ({reason}): retried apart to find the cause",
                        transient=True)
        except KprioError as refused:  # fenced, or moved on: the failure below says what is left
            self.log.warning(f"{self.batch_id}: could not split the failed batch: {refused}")
            return False
        return True

    def _fail(self, reason: str, *, transient: bool) -> None:
        """Mark the batch failed (it holds its partitions; retried after a backoff) unless it moved on."""
        batch = self.ledger.batches.get(self.batch_id)
        if not marks_failed(BatchView.of(batch), self.owner):
            return
        try:
            self.ledger.moves.mark_failed(self.batch_id, reason, transient=transient, fence=self.token,
                                          retry_at=self._retry_at(batch, transient))
        except LeaseLost as lost:
            self.log.warning(f"{self.batch_id}: {lost}")  # its staging is the new owner's to replace
            return
        from spark_jobs.drain import discard

        if batch.drain is not None:
            discard(batch.drain, output_root=self.config.drain.output_path,
                    dead_letter_root=self.config.drain.dead_letter_path)

    def _retry_at(self, batch: Batch, transient: bool) -> datetime:
        """When the failure of ``batch``'s attempt (``transient`` or not) may be retried (:func:`retry_at`)."""
        return retry_at(batch.attempts, self.config.recovery, self.ledger.now(), transient=transient,
                        streak=batch.transient_streak + 1 if transient else 0)

    def _release(self) -> None:
        try:
            self.ledger.leases.release(self.batch_id, self.owner)
        except KprioError:
            pass
