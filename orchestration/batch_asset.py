"""One batch, drained, checked and committed: the ``drained_batch`` and ``committed_offsets`` assets.

Both assets are materialized by one op, so every way a user re-drains a batch — the asset page,
the asset graph, the job page, a backfill of either asset or both, the sensor, a retry — is the
same single drain of the ledger's ranges, followed by the checks and the commit. The op may be
selected for one asset alone (Dagster's UI and backfills select what the user clicked): it still
does all of the work, reports the selected assets and checks as its outputs, and records the
materialization of the other asset as an event, so the catalog tells what happened. The op, in
order:

1. **take the batch**: from its run's tags, decide what this run is for (the sensor's attempt,
   Dagster's retry of a failed run, or an operator's re-drain); a run whose work is already done
   says so and succeeds. A retry or a re-drain waits for a free slot of each priority it drains
   (``planner.max_in_flight``), saying which batch holds it. Then it claims the batch's lease
   (taking it over from a run known dead) and keeps it renewed;
2. **drain** the ranges to staged files (output and dead letters), nothing visible yet;
3. **isolate**: ranges whose drain failed, then ranges that failed a check, are split off into a
   new failed batch that holds only their partitions; the rest goes on;
4. **check** the rest with the Great Expectations suite (blocking checks of ``drained_batch``);
5. **publish** the checked files (readers see them only now): ``drained_batch`` is materialized;
6. **commit** each range's end to its priority's group, never backwards, once the batches before
   it on the same partitions committed; then commit later batches that were waiting for this
   one: ``committed_offsets`` is materialized.

Any failure marks the batch failed with one line naming the topic, partitions and offsets, and
the cause; it is retried with the same ranges after a backoff, up to ``recovery.max_attempts``.
An interrupted run (SIGTERM, a terminated run) releases the lease and leaves the batch where it
was, for the next run to resume.
"""


import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import dagster as dg

from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.errors import BatchBusy, BatchNotFound, KprioError, RangeConflict
from kprio_core.ledger import Batch, BatchState, Ledger
from kprio_core.offsets import OffsetRange
from kprio_core.recovery import may_retry, retry_delay_s, transient_cause
from kprio_core.results import CheckReport, DrainResult
from orchestration.checks import check_batch, check_results, check_specs, warm_up
from orchestration.commit import commit_batch
from orchestration.faults import crash_point
from orchestration.leases import Heartbeat, owner_dead, this_owner
from orchestration.partitions import BATCH_PARTITIONS_NAME, batch_partitions
from orchestration.resources import KafkaResource, KprioSettings, LedgerResource, SparkResource
from orchestration.tags import Intent, Launcher, intent_of

OWNERS = ["team:kprio"]
GROUP = "kprio"
DRAINED = dg.AssetKey("drained_batch")
COMMITTED = dg.AssetKey("committed_offsets")
DRAIN_POOL = "kprio_drain"
"""The Dagster pool of the drain op (its limit is set in the shipped dagster.yaml)."""
SLOT_WAIT_S = 900.0
"""Longest a retry or re-drain waits for a priority slot (or for another run of its batch)."""
POLL_S = 1.0


class NothingToDo(Exception):
    """The run's work is already done (or done by another run): it says so and succeeds."""


def per_priority(prefix: str, values: Mapping[int, int]) -> dict[str, int]:
    """``{2: 5, 0: 1}`` -> ``{"<prefix>_p2": 5, "<prefix>_p0": 1}`` (most urgent first).

    >>> per_priority("records", {0: 1, 2: 5})
    {'records_p2': 5, 'records_p0': 1}
    """
    return {f"{prefix}_p{p}": int(values[p]) for p in sorted(values, reverse=True)}


def failure_reason(result: DrainResult) -> str:
    """One line for the ranges whose drain failed: where and why (the first few named, each range once).

    >>> from kprio_core.offsets import OffsetRange
    >>> from kprio_core.results import RangeStats
    >>> r = OffsetRange("tx-0", 0, 0, 224)
    >>> s = RangeStats(0, r, 0, 0, 0, None, None, failure=f"{r}: range {r} is incomplete: 1 of 224 offsets missing")
    >>> failure_reason(DrainResult("b-1", 1, "tx", (s,), staging=""))
    'drain failed: range tx-0[0]@[0,224) is incomplete: 1 of 224 offsets missing'
    """
    failed = result.failed_ranges
    head = "; ".join(_range_failure(s.range, s.failure or "") for s in failed[:3])
    more = f" (and {len(failed) - 3} more ranges)" if len(failed) > 3 else ""
    return f"drain failed: {head}{more}"


def _range_failure(rng: OffsetRange, failure: str) -> str:
    """``<range>: <cause>``, naming the range once even when the cause names it already."""
    cause = failure.removeprefix(f"{rng}: ")
    return cause if str(rng) in cause else f"{rng}: {cause}"


@dataclass
class Timings:
    """Seconds per step of one run, for the metadata (latency is what users feel)."""

    steps: dict[str, float] = field(default_factory=dict)

    def time(self, step: str, started: float) -> None:
        self.steps[step] = round(self.steps.get(step, 0.0) + time.monotonic() - started, 3)

    def metadata(self) -> dict[str, float]:
        return {f"{step}_s": s for step, s in self.steps.items()}


class BatchWork:
    """Everything one run does to one batch (see the module docstring for the order)."""

    def __init__(self, context: dg.AssetExecutionContext, spark: SparkResource, kafka: KafkaResource,
                 ledger: Ledger, ledger_url: str, config: KprioConfig) -> None:
        self.context, self.spark, self.kafka = context, spark, kafka
        self.ledger, self.ledger_url, self.config = ledger, ledger_url, config
        self.batch_id = context.partition_key
        self.intent: Intent = intent_of(context.run.tags)
        self.owner = this_owner(context.run.run_id)
        self.timings = Timings()
        self.log = context.log
        self._waited_on: str | None = None

    # -- 1. take the batch ---------------------------------------------------------------------

    def take(self) -> Batch:
        """The batch, moved to the attempt this run works on and leased to it; NothingToDo when done."""
        deadline = time.monotonic() + SLOT_WAIT_S
        said: set[str] = set()
        while True:
            batch = self.ledger.get(self.batch_id)
            try:
                batch = self._move(batch)
                dead = (batch.lease.owner,) if batch.lease and self._dead(batch.lease.owner) else ()
                return self.ledger.claim(self.batch_id, self.owner, self.config.recovery.lease_s, take_over=dead)
            except (RangeConflict, BatchBusy) as wait:
                if time.monotonic() > deadline:
                    raise
                if str(wait) not in said:  # what waits says why, once
                    self.log.info(f"{self.batch_id} waits: {wait}")
                    said.add(str(wait))
                time.sleep(POLL_S)

    def _move(self, batch: Batch) -> Batch:
        """Retry, resume or re-drain the batch as this run's launcher asks (see :class:`Intent`)."""
        if batch.state in (BatchState.FAILED, BatchState.COMMITTED) and (
                gone := self.ledger.superseded_batch(self.batch_id)):
            # Its ranges would read another log's offsets under the earlier incarnation's file names.
            raise dg.Failure(description=gone[0].describe())
        if self.intent.kind is Launcher.OPERATOR:
            return self._redrain(batch)
        if batch.state is BatchState.COMMITTED:
            by = f" by {self._waited_on}" if self._waited_on else ""
            raise NothingToDo(f"{self.batch_id} is already committed{by} (attempt {batch.attempts}): nothing to do")
        if batch.state is BatchState.FAILED and self._waited_on is not None:
            raise NothingToDo(f"{self.batch_id} failed in the run this one waited for ({self._waited_on})")
        if batch.state is BatchState.FAILED:
            return self._retry(batch)
        return self._resume(batch)

    def _redrain(self, batch: Batch) -> Batch:
        """An operator's run: re-drain a committed or failed batch, take over one whose run died."""
        if batch.state in (BatchState.COMMITTED, BatchState.FAILED):
            if self._waited_on is not None and batch.state is BatchState.COMMITTED:
                raise NothingToDo(f"{self.batch_id} was drained and committed by {self._waited_on} while this run "
                                  "waited: nothing to do")
            self.log.info(f"{self.batch_id} is {batch.state.value}: re-draining its exact ranges")
            return self.ledger.replay(self.batch_id, max_in_flight=self.config.planner.max_in_flight)
        if self._live_elsewhere(batch):
            self._waited_on = batch.lease.owner
            raise BatchBusy(f"batch {self.batch_id} is being worked on by {batch.lease.owner}")
        return batch

    def _retry(self, batch: Batch) -> Batch:
        """A failed batch: the next attempt, after its backoff, while attempts are left."""
        wanted, recovery = self.intent.attempt, self.config.recovery
        if self.intent.kind is Launcher.SENSOR and wanted is not None and wanted <= batch.attempts:
            raise NothingToDo(f"{self.batch_id} failed in attempt {batch.attempts}, after the attempt {wanted} this "
                              "run was for: nothing to do")
        if not batch.holds:
            raise NothingToDo(f"{self.batch_id}: its failed re-drain holds nothing (its offsets were committed); "
                              "re-materialize it to re-drain it again")
        if not batch.transient and not may_retry(attempts=batch.attempts, max_attempts=recovery.max_attempts):
            raise dg.Failure(description=f"{self.batch_id} failed {batch.attempts} times "
                                         f"(recovery.max_attempts={recovery.max_attempts}): {batch.reason}; its "
                                         f"partitions wait for an operator: kprio retry {self.batch_id}")
        self._sleep_until(batch.retry_at)
        return self.ledger.retry(self.batch_id, max_in_flight=self.config.planner.max_in_flight,
                                 reason=f"retry by run {self._run()}")

    def _resume(self, batch: Batch) -> Batch:
        """A batch in flight: this attempt's own run goes on; a run after a dead one takes over."""
        lease, wanted = batch.lease, self.intent.attempt
        if lease is not None and lease.owner == self.owner:
            return batch
        if self._live_elsewhere(batch):
            # Another run works on it: wait for its outcome (take() polls), then report it.
            self._waited_on = lease.owner
            raise BatchBusy(f"batch {self.batch_id} is being worked on by {lease.owner}")
        if lease is None and (self.intent.kind is Launcher.DAGSTER_RETRY or wanted == batch.attempts):
            return batch  # nobody took it yet: this run goes on from where it stands
        if self.intent.kind is Launcher.SENSOR and wanted is not None and wanted < batch.attempts:
            raise NothingToDo(f"{self.batch_id} is at attempt {batch.attempts}, after the attempt {wanted} this run "
                              "was for: nothing to do")
        dead = (lease.owner,) if lease is not None and self._dead(lease.owner) else ()
        return self.ledger.retry(self.batch_id, max_in_flight=self.config.planner.max_in_flight, take_over=dead,
                                 reason=f"resumed by run {self._run()}: the run before it died")

    def _live_elsewhere(self, batch: Batch) -> bool:
        lease = batch.lease
        return (lease is not None and lease.owner != self.owner and not lease.expired(_now())
                and not self._dead(lease.owner))

    def _dead(self, owner: str) -> bool:
        return owner != self.owner and owner_dead(owner, self.context.instance)

    def _run(self) -> str:
        return self.context.run.run_id[:8]

    def _sleep_until(self, when: datetime | None) -> None:
        if when is None:
            return
        wait = (when - _now()).total_seconds()
        if wait > 0:
            self.log.info(f"{self.batch_id}: backing off {wait:.1f} s before its retry")
            time.sleep(wait)

    # -- 2-5. drain, isolate, check, publish ---------------------------------------------------

    def drain_and_check(self, batch: Batch, topic: TopicSettings, heartbeat: Heartbeat) -> Iterator:
        from spark_jobs.drain import discard, drain_batch, publish, sweep_staging

        config = self.config
        # Earlier attempts of this batch that died left their staging: this attempt replaces it.
        sweep_staging((config.drain.output_path, config.drain.dead_letter_path),
                      keep=lambda batch_id, attempt: batch_id != self.batch_id or attempt == batch.attempts)
        started = time.monotonic()
        result = drain_batch(self.spark.session, config, topic, self.batch_id, batch.attempts, batch.plan)
        self.timings.time("drain", started)
        batch = self.ledger.mark_drained(self.batch_id, result)
        crash_point("after-drain", batch.logical_topic)
        kept = [s for s in result.ranges if s.failure is None]
        if not kept and result.ranges:
            raise _BatchFailed(failure_reason(result))
        split = []
        if len(kept) < len(result.ranges):
            split.append(self._split([s.range for s in result.failed_ranges], failure_reason(result)))

        started = time.monotonic()
        report = check_batch(kept, quality=config.quality, required_fields=topic.required_fields)
        bad = set(report.failed_ranges())
        if not report.passed and bad and len(bad) < len(kept):
            split.append(self._split(sorted(bad), report.reason()))
            kept = [s for s in kept if s.range not in bad]
            report = check_batch(kept, quality=config.quality, required_fields=topic.required_fields)
        self.timings.time("check", started)
        yield from check_results(report, DRAINED)
        if not report.passed:
            discard(result, output_root=config.drain.output_path, dead_letter_root=config.drain.dead_letter_path)
            raise _BatchFailed(report.reason(), report=report)

        heartbeat.check()
        started = time.monotonic()
        publish(result, output_root=config.drain.output_path, dead_letter_root=config.drain.dead_letter_path,
                ranges=[s.range for s in kept], incarnations=batch.plan.incarnations)
        self.timings.time("publish", started)
        self.ledger.mark_checked(self.batch_id, report)
        crash_point("after-publish", batch.logical_topic)
        yield dg.MaterializeResult(asset_key=DRAINED, metadata=self._drained_metadata(batch, result, kept, split))

    def _split(self, failing: list[OffsetRange], reason: str) -> str:
        retry_at = self._retry_at(self.ledger.get(self.batch_id).attempts)
        child = self.ledger.split(self.batch_id, failing, reason, retry_at=retry_at,
                                  transient=transient_cause(reason))
        self.context.instance.add_dynamic_partitions(BATCH_PARTITIONS_NAME, [child.batch_id])
        self.log.warning(f"{self.batch_id}: {', '.join(map(str, failing))} split off into {child.batch_id}, which "
                         f"holds only those partitions: {reason}")
        return child.batch_id

    def _retry_at(self, attempt: int) -> datetime:
        r = self.config.recovery
        return _now() + timedelta(seconds=retry_delay_s(attempt, base_s=r.backoff_s, max_s=r.backoff_max_s))

    def _drained_metadata(self, batch: Batch, result: DrainResult, kept, split: list[str]) -> dict:
        topic = self.config.topic(batch.logical_topic)
        out = {p: 0 for p in range(topic.priorities)}
        dead = dict(out)
        for s in kept:
            out[s.priority] += s.output
            dead[s.priority] += s.dead
        meta: dict[str, object] = per_priority("records", out)
        meta.update(per_priority("dead_letters", dead))
        meta.update(per_priority("lag_before", batch.plan.backlog_before))
        meta.update(
            records=sum(out.values()), dead_letters=sum(dead.values()),
            bytes=sum(s.bytes for s in kept), data_lost=sum(g.count for s in kept for g in s.lost),
            offsets_without_record=sum(s.no_record for s in kept),
            planned_records=sum(s.range.count for s in kept), ranges=len(kept), attempt=batch.attempts,
            logical_topic=topic.name, mode=batch.plan.mode.value,
            output=dg.MetadataValue.path(f"{self.config.drain.output_path}/{topic.name}"),
            **self.timings.metadata(),
        )
        if split:
            meta["split_off"] = ", ".join(split)
        if batch.plan.log_changes:  # changes of the log kprio did not make, and what was decided
            meta["log_changes"] = dg.MetadataValue.md("\n".join(f"- {c}" for c in batch.plan.log_changes))
        return meta

    # -- 6. commit -----------------------------------------------------------------------------

    def commit(self, topic: TopicSettings, heartbeat: Heartbeat) -> Iterator:
        blocking = self._wait_for_predecessors()
        if blocking:
            ids = ", ".join(f"{b.batch_id} ({b.state.value})" for b in blocking)
            message = (f"{self.batch_id} is checked and published; it commits once {ids} commit "
                       "(the batches before it on the same partitions)")
            if self.intent.kind is Launcher.OPERATOR:
                raise dg.Failure(description=message)  # a backfill is Succeeded only when committed
            self.log.info(message)
            return
        heartbeat.check()
        started = time.monotonic()
        batch = self.ledger.get(self.batch_id)
        outcome = commit_batch(self.kafka.edge, self.ledger, topic, batch, now_s=time.time())
        self.timings.time("commit", started)
        meta = dict(outcome.metadata)
        meta.update(self.timings.metadata())
        yield dg.MaterializeResult(asset_key=COMMITTED, metadata=meta)
        self._commit_successors(topic)

    def _wait_for_predecessors(self) -> list[Batch]:
        """Batches before this one on its partitions, after waiting for those another run is finishing."""
        deadline = time.monotonic() + SLOT_WAIT_S
        while True:
            blocking = self.ledger.blocking_predecessors(self.batch_id)
            running = [b for b in blocking if b.in_flight and b.lease and not b.lease.expired(_now())]
            if not running or time.monotonic() > deadline:
                return blocking
            time.sleep(POLL_S)

    def _commit_successors(self, topic: TopicSettings) -> None:
        """Commit later batches that only waited for this one (``planner.max_in_flight`` > 1)."""
        for later in self.ledger.ready_to_commit(topic.name):
            if later.lease is not None and not later.lease.expired(_now()):
                continue  # its own run is on it
            try:
                self.ledger.claim(later.batch_id, self.owner, self.config.recovery.lease_s)
            except BatchBusy:
                continue
            outcome = commit_batch(self.kafka.edge, self.ledger, topic, later, now_s=time.time())
            self.context.log_event(dg.AssetMaterialization(
                asset_key=COMMITTED, partition=later.batch_id, metadata=dict(outcome.metadata),
                description=f"committed by run {self._run()} once {self.batch_id}, before it, committed"))
            self.log.info(f"{later.batch_id} committed after {self.batch_id}")

    # -- the whole run ---------------------------------------------------------------------------

    def run(self) -> Iterator:
        warm_up()  # Great Expectations' import overlaps the drain
        try:
            batch = self.take()
        except BatchNotFound:
            raise dg.Failure(description=(
                f"{self.batch_id} is not a batch of {self.ledger!r}: the partitions of drained_batch are the "
                "batches the sensor (or kprio drain) recorded, and a partition added by hand in the UI names no "
                "offsets to drain. Pick an existing partition of drained_batch.")) from None
        except NothingToDo as done:
            self.log.info(str(done))
            yield from self._checks_of(self.ledger.get(self.batch_id))
            return
        topic = self.config.topic(batch.logical_topic)
        with Heartbeat(self.ledger_url, self.batch_id, self.owner, self.config.recovery.lease_s) as heartbeat:
            yield from self._work(batch, topic, heartbeat)
        self._release()  # a batch left in flight (waiting to commit) is free for whoever moves it next

    def _work(self, batch: Batch, topic: TopicSettings, heartbeat: Heartbeat) -> Iterator:
        """Drain, check, publish and commit as far as the batch's state asks; any failure fails the batch."""
        try:
            if batch.state in (BatchState.PLANNED, BatchState.DRAINED):
                yield from self.drain_and_check(batch, topic, heartbeat)
            else:
                yield from self._checks_of(batch)  # only the commit is left: its output passed these
            if self.ledger.get(self.batch_id).state is BatchState.CHECKED:
                yield from self.commit(topic, heartbeat)
        except _BatchFailed as failed:
            self._fail(failed.reason, transient=transient_cause(failed.reason) and failed.report is None)
            raise dg.Failure(description=f"{self.batch_id} failed: {failed.reason}") from None
        except (KprioError, OSError) as err:
            reason = one_line(f"{err} [{err.code}]" if isinstance(err, KprioError) else f"{type(err).__name__}: {err}")
            self._fail(reason, transient=transient_error(err, reason))
            raise dg.Failure(description=f"{self.batch_id} failed: {reason}") from err
        except dg.Failure:
            raise
        except Exception as err:
            reason = one_line(f"{type(err).__name__}: {err}")
            self._fail(reason, transient=transient_error(err, reason))
            raise
        except BaseException:
            # Interrupted (SIGTERM, a terminated run): leave the batch where it is for the next run.
            self._release()
            raise

    def _checks_of(self, batch: Batch) -> Iterator:
        """The check results of the batch's published output, when it has some (a run that drains nothing
        reports these); none yet (another run is on it, or it failed) leaves the optional check outputs out."""
        if batch.checks is not None:
            yield from check_results(batch.checks, DRAINED)

    def _fail(self, reason: str, *, transient: bool) -> None:
        """Mark the batch failed (it holds its partitions; retried after a backoff) unless it moved on."""
        batch = self.ledger.get(self.batch_id)
        if not batch.in_flight or (batch.lease is not None and batch.lease.owner != self.owner):
            return
        self.ledger.mark_failed(self.batch_id, reason, retry_at=self._retry_at(batch.attempts), transient=transient)
        from spark_jobs.drain import discard

        if batch.drain is not None:
            discard(batch.drain, output_root=self.config.drain.output_path,
                    dead_letter_root=self.config.drain.dead_letter_path)

    def _release(self) -> None:
        try:
            self.ledger.release(self.batch_id, self.owner)
        except KprioError:
            pass


def one_line(text: str, limit: int = 500) -> str:
    """A failure's message as one line (Spark and gRPC errors span pages), cut at ``limit`` characters."""
    first = next((line.strip() for line in text.splitlines() if line.strip()), text)
    return first if len(first) <= limit else first[: limit - 3] + "..."


def transient_error(err: BaseException, reason: str) -> bool:
    """Whether an exception's cause passes by itself: the output's storage, the broker, Spark itself."""
    from kprio_core.errors import BrokerUnreachable, LeaseLost, OutputUnavailable

    if isinstance(err, BrokerUnreachable | OutputUnavailable | LeaseLost | OSError):
        return True
    return transient_cause(f"{reason} {err!r}")


class _BatchFailed(Exception):
    def __init__(self, reason: str, *, report: CheckReport | None = None) -> None:
        super().__init__(reason)
        self.reason, self.report = reason, report


def _now() -> datetime:
    return datetime.now(UTC)


@dg.multi_asset(
    name="drain_batch",
    specs=[
        dg.AssetSpec(
            DRAINED, partitions_def=batch_partitions, group_name=GROUP, owners=OWNERS,
            kinds={"spark", "kafka", "parquet"}, skippable=True,
            description="One batch drained with Spark: exactly the ledger's offset ranges of the batch, read from "
            "Kafka, ordered per lane, passed to the handler; valid records to the output, invalid ones to the "
            "dead letters, published only after the blocking checks passed (a rerun replaces its files).",
        ),
        dg.AssetSpec(
            COMMITTED, deps=[DRAINED], partitions_def=batch_partitions, group_name=GROUP, owners=OWNERS,
            kinds={"kafka"}, skippable=True,
            description="The batch's offsets committed to each priority's consumer group, only after its checks "
            "passed and its output was published; offsets never move backwards (a re-drain commits nothing new).",
        ),
    ],
    check_specs=check_specs(DRAINED),
    partitions_def=batch_partitions,
    can_subset=True,  # a selection of either asset runs all of it once (see selected_only)
    pool=DRAIN_POOL,
    description="Drain, check, publish and commit one batch (the partition is its ledger id). Materializing either "
    "asset runs all of it once: a re-drain of a committed batch replaces its output and commits nothing new.",
)
def drain_batch_assets(
    context: dg.AssetExecutionContext,
    spark: SparkResource,
    kafka: KafkaResource,
    ledger: LedgerResource,
    kprio: KprioSettings,
) -> Iterator:
    work = BatchWork(context, spark, kafka, ledger.ledger, ledger.url, kprio.config(kafka))
    yield from selected_only(context, work.run())


def selected_only(context: dg.AssetExecutionContext, events: Iterator) -> Iterator:
    """The run's events, its outputs narrowed to what the run selected; the rest still recorded.

    A materialization of an asset the run did not select (the commit of a backfill that selected
    ``drained_batch`` only) is logged as an event of that asset's partition; check results of an
    unselected asset were still what gated the commit, and are logged as text.
    """
    assets, checks = context.selected_asset_keys, context.selected_asset_check_keys
    for event in events:
        if isinstance(event, dg.MaterializeResult) and event.asset_key not in assets:
            context.log_event(dg.AssetMaterialization(
                asset_key=event.asset_key, partition=context.partition_key, metadata=event.metadata,
                description="done by this run's drain (the run selected only the other asset of the batch)"))
        elif isinstance(event, dg.AssetCheckResult) and dg.AssetCheckKey(event.asset_key,
                                                                          event.check_name) not in checks:
            context.log.info(f"{event.check_name}: {'passed' if event.passed else 'failed'} "
                             f"({event.description})")
        else:
            yield event
