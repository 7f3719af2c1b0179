"""One tick for every driver: gather the inputs once, ask the core rules, carry the actions out.

:func:`gather` reads, once per tick and logical topic, what :func:`kprio_core.lifecycle.decide_tick`
decides from: the ledger's view of the topic, the lag snapshot (or the typed error that prevented
it), the Dagster runs of its batches, the lease and claim owners known dead, and the clock.
:func:`apply` is the one applier, used by the sensor, ``kprio drain`` and the tests alike; in order:

- marks failed the Dagster runs of batches whose run died (their lease expired or their process is
  gone), so the UI tells the truth;
- carries out what was decided about changes of the log (``orchestration.log_changes``);
- claims each launch in the ledger (``Ledger.claim_launch``: one driver launches a run key, a second
  ``kprio drain`` or the sensor deciding the same launch does not) and turns it into a run request,
  with a deterministic run key per attempt, the attempt and why as tags, and one tag per priority
  slot the batch takes (the shipped ``dagster.yaml`` limits those to ``planner.max_in_flight``);
- records a new plan in the ledger (its ``kprio_batches`` partition is the driver's to add) and
  requests its run.

Why a tick writes to the ledger and fails dead runs (Dagster sensors are best without side effects of
their own): recording the plan *is* step 2 of docs/architecture.md's data flow and must happen
before the run exists so two batches never reserve the same offsets; failing a run whose process is
gone only records what already happened; a claim makes a launch decided by two drivers one run. All
are idempotent: a plan recorded on a tick whose result was lost is a planned batch without a run,
launched on the next tick with the same run key (its claim is this driver's, or expired, or of a
dead owner).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import dagster as dg

from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.errors import KprioError, RangeConflict
from kprio_core.ledger import Batch, BatchState, Ledger
from kprio_core.lifecycle import (
    BatchRuns,
    CarryOutLogChanges,
    Decision,
    FailDeadRun,
    Launch,
    LedgerView,
    RecordPlan,
    RunState,
    RunSummary,
    TickInputs,
    Why,
    decide_tick,
    needs_committed,
    rate_window,
)
from orchestration.adoption import ensure_adopted
from orchestration.leases import owner_dead, this_owner
from orchestration.log_changes import carry_out
from orchestration.partitions import BATCH_PARTITIONS_NAME
from orchestration.tags import ATTEMPT_TAG, PARTITION_TAG, RUN_KEY_TAG, RUNNER_TAG, TOPIC_TAG, WHY_TAG, slot_tags

RUNS_PER_BATCH = 10
"""Newest runs read per batch (enough to see the active one and the latest outcome)."""
WILL_RETRY_TAG = "dagster/will_retry"
"""Dagster's run-retry daemon sets it to "true" on a failed run it is about to retry."""


# --- gathering the inputs ---------------------------------------------------------------------


def read_view(ledger: Ledger, config: KprioConfig, topic: TopicSettings, now: datetime) -> LedgerView:
    """Everything the rules read from the ledger about ``topic`` (committed batches come with :func:`gather`)."""
    name, planner = topic.name, config.planner
    return LedgerView(
        logical_topic=name,
        in_flight=tuple(ledger.in_flight(name)),
        failed=tuple(ledger.batches(name, states=[BatchState.FAILED])),
        ready_to_commit=tuple(ledger.ready_to_commit(name)),
        holds=tuple(ledger.holds(name, max_attempts=config.recovery.max_attempts)),
        superseded=tuple(ledger.superseded(name)),
        beliefs=ledger.beliefs(name),
        reserved=tuple(ledger.reserved_ranges(name)),
        throughput=ledger.throughput(name),
        poll_history=ledger.poll_history(name, topic.priorities, planner.window_size, planner.maxed_out_threshold),
        avg_record_bytes=ledger.avg_record_bytes(name),
        rate_samples=tuple(ledger.drained_since(name, now - rate_window(config))),
        claims=ledger.launch_claims(name),
    )


def with_committed(view: LedgerView, ledger: Ledger, partitions: Iterable[tuple[str, int]]) -> LedgerView:
    """The view with the committed batches of ``partitions`` (oldest first), which rule 7 reads."""
    wanted = set(partitions)
    if not wanted:
        return view
    committed = ledger.batches(view.logical_topic, states=[BatchState.COMMITTED])[::-1]
    return replace(view, committed={tp: tuple(b for b in committed if tp in b.partitions) for tp in wanted})


def run_summary(run: dg.DagsterRun) -> RunSummary:
    """A Dagster run as the rules see it; one a killed kprio process executed in process is ``orphaned``."""
    tags = dict(run.tags)
    runner = tags.get(RUNNER_TAG)
    orphaned = not run.is_finished and runner is not None and owner_dead(runner)
    return RunSummary(run.run_id, RunState(run.status.value), tags.get(RUN_KEY_TAG), runner,
                      will_retry=tags.get(WILL_RETRY_TAG) == "true", orphaned=orphaned)


def existing_runs(instance: dg.DagsterInstance, batches: Iterable[Batch]) -> BatchRuns:
    """The runs of each batch (any job: found by partition tag), newest first."""
    runs = {}
    for batch in batches:
        records = instance.get_run_records(filters=dg.RunsFilter(tags={PARTITION_TAG: batch.batch_id}),
                                           limit=RUNS_PER_BATCH)
        runs[batch.batch_id] = tuple(run_summary(r.dagster_run) for r in records)
    return BatchRuns(runs)


def dead_owners(instance: dg.DagsterInstance | None, view: LedgerView) -> frozenset[str]:
    """The lease and launch-claim owners of the view that certainly no longer work (run ended, process gone)."""
    owners = {b.lease.owner for b in view.in_flight if b.lease is not None}
    owners |= {c.owner for c in view.claims.values()}
    return frozenset(o for o in owners if owner_dead(o, instance))


def gather(instance: dg.DagsterInstance | None, edge, ledger: Ledger, config: KprioConfig, topic: TopicSettings,
           *, now: datetime, driver: str | None = None) -> TickInputs:
    """The tick's inputs for ``topic``, each read once: ledger, lag snapshot, runs, dead owners, clock."""
    view = read_view(ledger, config, topic, now)
    try:
        lag = edge.snapshot(topic, now_ms=int(now.timestamp() * 1000), avg_record_bytes=dict(view.avg_record_bytes),
                            deleted_ok={b.topic for b in view.beliefs.values()})
    except KprioError as err:  # an unreachable broker or a missing topic is a reason, not a crash
        lag = err
    else:
        view = with_committed(view, ledger, needs_committed(lag, view, config))
    runs = existing_runs(instance, view.watched()) if instance is not None else BatchRuns()
    return TickInputs(view, lag, runs, dead_owners(instance, view), now, driver or this_owner(""))


def decide(instance: dg.DagsterInstance | None, edge, ledger: Ledger, config: KprioConfig, topic: TopicSettings,
           *, now_s: float | None = None, **narrow) -> Decision:
    """What a tick decides for ``topic`` now, without doing it (``kprio plan``, ``plan_batch_job``)."""
    now = datetime.fromtimestamp(time.time() if now_s is None else now_s, UTC)
    return decide_tick(config, topic, gather(instance, edge, ledger, config, topic, now=now), **narrow)


# --- carrying the actions out -----------------------------------------------------------------


@dataclass(frozen=True)
class Applied:
    """What the applier did for one topic: runs to request, batches recorded, and why nothing more."""

    requests: tuple[dg.RunRequest, ...] = ()
    recorded: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    contended: bool = False
    """Another driver got a plan or a launch first: tick again soon (the work is under way elsewhere)."""


def run_request(launch: Launch) -> dg.RunRequest:
    batch = launch.batch
    return dg.RunRequest(
        run_key=launch.run_key,
        partition_key=batch.batch_id,
        tags={TOPIC_TAG: batch.logical_topic, ATTEMPT_TAG: str(launch.attempt), WHY_TAG: launch.why.value,
              **slot_tags(batch.logical_topic, batch.priorities)},
    )


def fail_dead_runs(instance: dg.DagsterInstance, action: FailDeadRun) -> list[str]:
    """Mark failed the unfinished Dagster runs of a batch whose run died; their ids."""
    failed = []
    for run_id in action.run_ids:
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            continue
        instance.report_engine_event(f"kprio: the run of batch {action.batch.batch_id} died: {action.why}; a new "
                                     "attempt takes over with the same ranges", run)
        instance.report_run_failed(run)
        failed.append(run_id)
    return failed


def claim(ledger: Ledger, config: KprioConfig, launch: Launch, inputs: TickInputs) -> str | None:
    """Claim ``launch`` for this driver; None when claimed, else who launches it instead."""
    held = ledger.claim_launch(launch.batch.batch_id, launch.run_key, inputs.driver, config.recovery.lease_s,
                               take_over=inputs.dead)
    return None if held.owner == inputs.driver else f"{launch.describe()} is launched by {held.owner}"


def apply(instance: dg.DagsterInstance, edge, ledger: Ledger, config: KprioConfig, topic: TopicSettings,
          decision: Decision, inputs: TickInputs, *, log=None, several_topics: bool = False) -> Applied:
    """Carry ``decision``'s actions out in their order (see the module docstring)."""
    name = topic.name
    launches: list[Launch] = []
    reasons: list[str] = []
    recorded: list[str] = []
    contended = False
    for action in decision.actions:
        if isinstance(action, FailDeadRun):
            for run_id in fail_dead_runs(instance, action):
                _info(log, f"{name}: run {run_id[:8]} of {action.batch.batch_id} marked failed: {action.why}")
        elif isinstance(action, CarryOutLogChanges):
            try:
                carry_out(edge, ledger, topic, action, log=log, max_in_flight=config.planner.max_in_flight)
            except KprioError as err:  # nothing launched or planned on a decision that could not be carried out
                done = ", ".join(d.describe() for d in action.decided)
                return Applied(reasons=(f"{name}: could not carry out {done}: {err}",))
        elif isinstance(action, Launch):
            launches.append(action)
        elif isinstance(action, RecordPlan):
            try:
                batch = ledger.record_plan(with_log_changes(ledger, action.plan),
                                           max_in_flight=config.planner.max_in_flight)
            except RangeConflict as err:  # another planner (a second kprio drain, the manual job) got there first
                reasons.append(f"{name}: {err}")
                contended = True
                continue
            recorded.append(batch.batch_id)
            launches.append(Launch(batch, Why.NEW, batch.attempts))
    requests = []
    for launch in launches:
        elsewhere = claim(ledger, config, launch, inputs)
        if elsewhere is not None:
            reasons.append(f"{name}: {elsewhere}")
            contended = True
            continue
        _info(log, f"{name}: {launch.describe()} -> drain_job")
        requests.append(run_request(launch))
    if not requests:
        reasons.append(decision.describe() if several_topics else decision.summary())
    return Applied(tuple(requests), tuple(recorded), tuple(reasons), contended)


def with_log_changes(ledger: Ledger, plan):
    """The plan with every log change recorded since the topic's newest batch (its metadata shows them).

    The rules fill the plan's changes with this tick's decisions (what ``kprio plan`` previews); the
    batch records what the ledger holds, which also covers changes of ticks that planned nothing.
    """
    newest = ledger.batches(plan.logical_topic, limit=1)
    since = newest[0].created_at if newest else None
    recent = tuple(e.line() for e in ledger.log_events(plan.logical_topic) if since is None or e.at > since)
    return replace(plan, log_changes=recent) if recent else plan


def still_launchable(instance: dg.DagsterInstance, ledger: Ledger, config: KprioConfig,
                     request: dg.RunRequest, driver: str | None = None) -> bool:
    """Just before executing a request decided earlier: its claim is still this driver's (renewed) and no
    run of its run key exists (another driver may have launched it after the claim expired)."""
    driver = driver or this_owner("")
    held = ledger.claim_launch(request.partition_key, request.run_key, driver, config.recovery.lease_s)
    if held.owner != driver:
        return False
    return not instance.get_run_records(filters=dg.RunsFilter(tags={RUN_KEY_TAG: request.run_key}), limit=1)


def missing_partitions(instance: dg.DagsterInstance, keys: Iterable[str]) -> list[str]:
    """Batch partitions not yet in the instance (a batch recorded by another driver a moment ago)."""
    return sorted({k for k in keys if not instance.has_dynamic_partition(BATCH_PARTITIONS_NAME, k)})


# --- one tick over every topic ----------------------------------------------------------------


@dataclass(frozen=True)
class Tick:
    """One evaluation over every logical topic: the decisions, the runs to request, the partitions added."""

    decisions: tuple[Decision, ...]
    requests: tuple[dg.RunRequest, ...]
    partitions: tuple[str, ...]
    reasons: tuple[str, ...]
    contended: bool = False
    """Another driver got a plan or a launch first this tick."""

    @property
    def skip_reason(self) -> str:
        return "; ".join(self.reasons) or "no logical topic configured"


def tick(instance: dg.DagsterInstance, edge, ledger: Ledger, config: KprioConfig, *, now_s: float | None = None,
         log=None, driver: str | None = None) -> Tick:
    """Evaluate every topic at ``now_s``: gather, decide, apply; the runs to request."""
    now = datetime.fromtimestamp(time.time() if now_s is None else now_s, UTC)
    ensure_adopted(instance, ledger, edge, config, log=log)
    decisions, requests, partitions, reasons, contended = [], [], [], [], False
    for topic in config.topics:
        inputs = gather(instance, edge, ledger, config, topic, now=now, driver=driver)
        decision = decide_tick(config, topic, inputs)
        done = apply(instance, edge, ledger, config, topic, decision, inputs, log=log,
                     several_topics=len(config.topics) > 1)
        decisions.append(decision)
        requests += done.requests
        partitions += done.recorded
        reasons += done.reasons
        contended = contended or done.contended
    return Tick(tuple(decisions), tuple(requests), tuple(partitions), tuple(reasons), contended)


def _info(log, message: str) -> None:
    if log is not None:
        log.info(message)
