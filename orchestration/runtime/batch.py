"""One run of one batch, free of any orchestrator: take, drain, isolate, check, publish, commit.

:class:`BatchRun` carries out what :mod:`kprio_core.lifecycle.run` decides, with ledger calls,
Spark, Great Expectations and Kafka, and reports what happened as typed events (:class:`Checked`,
:class:`Drained`, :class:`Committed`) that a driver turns into its own (the Dagster adapter:
``orchestration.dagster.batch_asset``). In order:

1. **take the batch**: ask :func:`~kprio_core.lifecycle.run.decide_run` what this run is for and
   do it (retry, take over, re-drain, go on as is), waiting as it says (another live run owns the
   batch, a priority slot is taken, a backoff) and asking again after each wait; then claim the
   batch's lease and keep it renewed (:class:`~orchestration.runtime.leases.Heartbeat`); the lease's
   token (owner, attempt, epoch) fences every ledger move, the publish and the Kafka commit that
   follow, with no lock held: the ledger refuses a stale token, a Delta table a stale epoch, Kafka
   a writer of the group that a newer one fenced; once another run holds the batch this one stops
   having written nothing more. A run with nothing to do says why and succeeds; a run that must not try fails
   with the rule's one line;
2. **drain** the ranges to staged files (output and dead letters), nothing visible yet; ranges on a
   topic deleted or recreated since the plan (its topic id changed) are split off before anything
   is published;
3. **isolate**: ranges whose drain failed, then ranges that failed a check, are split off into a
   new failed batch that holds only their partitions; the rest goes on, or the whole batch fails, as
   :mod:`kprio_core.lifecycle.outcome` decides (:func:`~kprio_core.lifecycle.outcome.after_drain`,
   :func:`~kprio_core.lifecycle.outcome.after_checks`);
4. **check** the rest with the Great Expectations suite;
5. **publish** the checked files (readers see them only now): the batch is drained;
6. **commit** each range's end to its priority's group, never backwards, once the batches before
   it on the same partitions committed (:func:`~kprio_core.lifecycle.run.before_commit`); then
   commit later batches that were waiting for this one.

Any failure marks the batch failed (unless it moved on: :func:`~kprio_core.lifecycle.run.marks_failed`)
with one line naming the topic, partitions and offsets, and the cause, then raises
:class:`RunFailed`; whether it passes by itself is its type's verdict (the executors' typed records,
:func:`kprio_core.errors.is_transient`), combined by the outcome rules
(:func:`~kprio_core.lifecycle.outcome.passes_by_itself`, :func:`~kprio_core.lifecycle.outcome.run_failure_passes`). A drain that died as a whole is split first
(:func:`~kprio_core.lifecycle.run.isolating_split`), so the cause is narrowed down attempt by attempt. An interrupted run (SIGTERM, a terminated run) releases the
lease and leaves the batch where it was, for the next run to resume.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.errors import BatchBusy, KprioError, LeaseLost, RangeConflict, is_transient
from kprio_core.ledger import Batch, BatchState
from kprio_core.lifecycle.outcome import (
    Cause,
    FailWhole,
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
    waited_too_long,
    work_left,
)
from kprio_core.model.recovery import LeaseToken
from kprio_core.model.results import CheckReport
from orchestration.runtime.batch_metadata import Timings, drained_metadata, failure_reason, one_line
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


class Log(Protocol):
    def info(self, msg: str) -> None: ...
    def warning(self, msg: str) -> None: ...


@dataclass(frozen=True)
class Checked:
    """The blocking checks' verdicts on the batch's output (this run's, or the published one's)."""

    report: CheckReport


@dataclass(frozen=True)
class Drained:
    """The batch's output is published: its numbers (:func:`~.batch_metadata.drained_metadata`)."""

    metadata: dict[str, object]


@dataclass(frozen=True)
class Committed:
    """A batch's offsets are committed: this run's batch, or a later one that only waited for it (``note`` says)."""

    batch_id: str
    metadata: dict[str, object]
    note: str | None = None


Event = Checked | Drained | Committed


class RunFailed(Exception):
    """The run fails with this one line (the batch marked failed, or left as the rules say); its cause chained."""


class _BatchFailed(Exception):
    def __init__(self, reason: str, *, transient: bool = False, cause: BaseException | None = None) -> None:
        super().__init__(reason)
        self.reason, self.transient, self.cause = reason, transient, cause


class BatchRun:
    """Everything one run does to one batch (see the module docstring for the order)."""

    def __init__(self, *, batch_id: str, intent: Intent, run_id: str, ledger: LedgerPort, config: KprioConfig,
                 spark: Callable[[], SparkSession], edge: Callable[[], Edge], owner_dead: Callable[[str], bool],
                 add_batch: Callable[[str], None], log: Log) -> None:
        """``spark`` and ``edge`` give the Spark session and the Kafka edge when first needed; ``owner_dead``
        tells a lease owner known gone; ``add_batch`` makes a batch split off known to the driver."""
        self.batch_id, self.intent, self.run_id = batch_id, intent, run_id
        self.ledger, self.config = ledger, config
        self.spark, self.edge, self.owner_dead, self.add_batch, self.log = spark, edge, owner_dead, add_batch, log
        self.owner = this_owner(run_id)
        self.token: LeaseToken | None = None  # this run's lease of the batch, once taken: fences its writes
        self.timings = Timings()

    # -- the whole run ---------------------------------------------------------------------------

    def events(self, *, commit: bool = True) -> Iterator[Event]:
        """Carry the run out; RunFailed (or the unexpected error itself) when it fails.

        ``commit=False`` stops once the batch is published (checked): a driver that runs the commit
        as a step of its own (an Airflow task) starts another run of the batch for it, which finds
        only the commit left (:func:`~kprio_core.lifecycle.run.work_left`).
        """
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
            yield from self._work(taken, topic, heartbeat, commit=commit)
        self._release()  # a batch left in flight (waiting to commit) is free for whoever moves it next

    # -- 1. take the batch -----------------------------------------------------------------------

    def take(self) -> Batch | NothingToDo:
        """The batch, moved to the attempt this run works on and leased to it, or why there is nothing to do."""
        started = time.monotonic()
        said: set[str] = set()
        waited_on: str | None = None
        while True:
            batch = self.ledger.batches.get(self.batch_id)
            step = decide_run(self._view(batch), self.intent, owner=self.owner, recovery=self.config.recovery,
                              now=self.ledger.now(), dead=self._dead(batch), waited_on=waited_on)
            refusal: KprioError | None = None
            if isinstance(step, NothingToDo):
                return step
            if isinstance(step, Fail):
                raise RunFailed(step.message)
            if isinstance(step, Drain):
                if step.note and step.note not in said:
                    self.log.info(step.note)
                    said.add(step.note)
                try:
                    return self._take(step, batch)
                except (RangeConflict, BatchBusy) as err:
                    refusal = err
                    step = refused(WaitWhy.SLOT_TAKEN if isinstance(err, RangeConflict) else WaitWhy.LEASE_HELD,
                                   str(err))
            if step.owner is not None:
                waited_on = step.owner  # its outcome is reported, once it is known
            if waited_too_long(time.monotonic() - started, step):
                raise refusal or BatchBusy(step.message)
            self._wait(step, said)

    def _take(self, step: Drain, batch: Batch) -> Batch:
        """Move the batch to the attempt the step names (ledger refusals raise), then claim its lease."""
        max_in_flight = self.config.planner.max_in_flight
        if step.how is DrainFrom.REDRAIN:
            batch = self.ledger.attempts.replay(self.batch_id, max_in_flight=max_in_flight)
        elif step.how in (DrainFrom.RETRY, DrainFrom.TAKE_OVER):
            batch = self.ledger.attempts.retry(self.batch_id, max_in_flight=max_in_flight, take_over=step.take_over,
                                               reason=step.reason)
        return self.ledger.leases.claim(self.batch_id, self.owner, self.config.recovery.lease_s,
                                        take_over=tuple(self._dead(batch)))

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

    # -- 2-5. drain, isolate, check, publish -----------------------------------------------------

    def _work(self, batch: Batch, topic: TopicSettings, heartbeat: Heartbeat, *, commit: bool) -> Iterator[Event]:
        """Drain, check, publish and commit as far as the batch's state asks; any failure fails the batch."""
        try:
            if work_left(batch.state) is Work.DRAIN:
                yield from self._drain_and_check(batch, topic, heartbeat)
            else:
                yield from self._checks_of(batch)  # only the commit is left: its output passed these
            if commit and self.ledger.batches.get(self.batch_id).state is BatchState.CHECKED:
                yield from self._commit(topic, heartbeat)
        except _BatchFailed as failed:
            self._fail(failed.reason, transient=failed.transient)
            raise RunFailed(f"{self.batch_id} failed: {failed.reason}") from failed.cause
        except RunFailed:
            raise
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

    def _drain_and_check(self, batch: Batch, topic: TopicSettings, heartbeat: Heartbeat) -> Iterator[Event]:
        from spark_jobs import tables
        from spark_jobs.drain import discard, drain_batch, sweep_staging

        config, roots = self.config, {"output_root": self.config.drain.output_path,
                                      "dead_letter_root": self.config.drain.dead_letter_path}
        # Earlier attempts of this batch that died left their staging: this attempt replaces it.
        sweep_staging((config.drain.output_path, config.drain.dead_letter_path),
                      keep=lambda batch_id, attempt: batch_id != self.batch_id or attempt == batch.attempts)
        crash_point("before-drain", batch.logical_topic)
        started = time.monotonic()
        with spark_boundary():  # a Spark Connect server gone before the drain: SparkUnavailable
            session = self.spark()
        result = drain_batch(session, config, topic, self.batch_id, batch.attempts, batch.plan)
        self.timings.time("drain", started)
        # What was read on a topic deleted or recreated since the plan is another log's: those ranges are split
        # off before anything is published (checked after the read: a recreation after it came after the read).
        changed = other_logs(self.edge(), batch)
        moved = {s.range for s in result.ranges if s.range.topic in changed}
        batch = self.ledger.moves.mark_drained(self.batch_id, result, fence=self.token)
        crash_point("after-drain", batch.logical_topic)
        drained = [RangeDrained(s.range, s.failure is not None, s.error.transient if s.error else None)
                   for s in result.ranges]
        after = after_drain(drained, moved=moved)
        if isinstance(after, FailWhole):
            if after.cause is Cause.LOG_CHANGED:
                raise _BatchFailed(log_changed(self.batch_id, changed, "published"))
            first = next((s.error for s in result.failed_ranges if s.error is not None and s.range not in moved), None)
            raise _BatchFailed(failure_reason(result), transient=after.transient,
                               cause=first.error() if first is not None else None)
        split = [self._split(list(off.ranges), log_changed(self.batch_id, changed, "published")
                             if off.cause is Cause.LOG_CHANGED else failure_reason(result, off.ranges),
                             transient=off.transient)
                 for off in after.splits]

        started = time.monotonic()
        keep = set(after.kept)
        kept = [s for s in result.ranges if s.failure is None and s.range in keep]
        report = check_batch(kept, quality=config.quality, required_fields=topic.required_fields)
        step = after_checks(after.kept, passed=report.passed, failing=report.failed_ranges())
        if isinstance(step, Recheck):
            split.append(self._split(list(step.split.ranges), report.reason(), transient=step.split.transient))
            keep = set(step.kept)
            kept = [s for s in kept if s.range in keep]
            report = check_batch(kept, quality=config.quality, required_fields=topic.required_fields)
            step = after_checks(step.kept, passed=report.passed, failing=report.failed_ranges(), may_split=False)
        self.timings.time("check", started)
        yield Checked(report)
        if isinstance(step, FailWhole):
            discard(result, **roots)
            raise _BatchFailed(report.reason(), transient=step.transient)

        heartbeat.check()
        crash_point("before-publish", batch.logical_topic)
        started = time.monotonic()
        # No lock is held across the publish: the ledger says whether this run still holds the batch, and the
        # output refuses a stale owner itself (a Delta table by the epoch it holds as the batch's transaction).
        self.ledger.leases.check(self.batch_id, self.token, "the publish")
        published = tables.publish(config.drain, result, ranges=[s.range for s in kept],
                                   incarnations=batch.plan.incarnations, checks=report, epoch=self.token.epoch)
        self.timings.time("publish", started)
        if published.already:
            self.log.info(f"{self.batch_id}: the tables held this run's publish (epoch {self.token.epoch}) already")
        self.ledger.moves.mark_checked(self.batch_id, report, fence=self.token)
        crash_point("after-publish", batch.logical_topic)
        yield Drained({**drained_metadata(config, batch, result, kept, split, self.timings), **published.metadata()})

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
        """The check results of the batch's published output, when it has some (a run that drains nothing
        reports these); none yet (another run is on it, or it failed) leaves the optional check outputs out."""
        if batch.checks is not None:
            yield Checked(batch.checks)

    # -- 6. commit -------------------------------------------------------------------------------

    def _commit(self, topic: TopicSettings, heartbeat: Heartbeat) -> Iterator[Event]:
        started = time.monotonic()
        while True:
            blocking = [BatchView.of(b) for b in self.ledger.batches.blocking_predecessors(self.batch_id)]
            step = before_commit(self.batch_id, blocking, self.intent, now=self.ledger.now(),
                                 waited_out=time.monotonic() - started > SLOT_WAIT_S)
            if not isinstance(step, Wait):
                break
            time.sleep(POLL_S)
        if isinstance(step, Fail):
            raise RunFailed(step.message)
        if isinstance(step, NothingToDo):
            self.log.info(step.message)
            return
        heartbeat.check()
        started = time.monotonic()
        outcome = self._commit_one(topic, self.ledger.batches.get(self.batch_id), self.token)
        if isinstance(outcome, Uncommitted):
            raise _BatchFailed(outcome.reason, transient=outcome.transient)
        self.timings.time("commit", started)
        yield Committed(self.batch_id, {**outcome.metadata, **self.timings.metadata(),
                                        **self._lineage(topic, self.batch_id)})
        yield from self._commit_successors(topic)

    def _commit_one(self, topic: TopicSettings, batch: Batch, token: LeaseToken) -> CommitOutcome | Uncommitted:
        """Commit ``batch`` under ``token``; the ranges its commit leaves are split off it (``commit_batch``)."""
        return commit_batch(self.edge(), self.ledger, topic, batch, token, now_s=time.time(),
                            split=lambda ranges, reason, transient: self._split(
                                ranges, reason, transient=transient, batch_id=batch.batch_id, token=token))

    def _lineage(self, topic: TopicSettings, batch_id: str) -> dict[str, str]:
        """The committed batch's OpenLineage event, when ``lineage.enabled`` (a failure is logged, never raised:
        the batch is committed); the metadata that says how it went."""
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
        """The drain failed as a whole: split the batch (:func:`~kprio_core.lifecycle.run.isolating_split`) so
        each part is retried on its own and the parts whose records are fine commit. True when it split.

        Neither part is to blame yet, so both are retried as a passing failure would be (without
        using up ``recovery.max_attempts``); a part that cannot be split further fails as its cause says.
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
