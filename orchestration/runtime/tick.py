"""One tick for every driver: gather the inputs once, ask the core rules, carry the actions out.

:func:`gather_all` reads, once per tick and logical topic, what :func:`kprio_core.lifecycle.decide_tick` decides
from: the ledger's view, the lag snapshot (or the typed error that prevented it; all topics' in one set of broker
requests), the runs of its batches (through :class:`orchestration.runtime.runs.Runs`, so nothing here speaks an
orchestrator's API), the lease and claim owners known dead, and the clock. :func:`apply` is the one applier, used
by every driver and the tests; in order it:

- marks failed the runs that died (lease expired, process gone), so the orchestrator's UI tells the truth; fails
  the batches whose run ended before taking them (``fail_untaken``: that attempt is spent, transient);
- carries out what was decided about changes of the log (``orchestration.runtime.log_changes``);
- claims each launch (``ledger.launches.claim``: one driver launches a run key, a second deciding the same launch
  does not), ends the backoff of an early retry (``ledger.attempts.retry_now``) and turns it into a
  :class:`~orchestration.runtime.runs.RunOrder` with a deterministic run key per attempt, and its tags;
- records a new plan (its ``kprio_batches`` partition is the driver's to add) and requests its run.

Why a tick has side effects (Dagster sensors are best without): recording the plan *is* step 2 of
docs/architecture.md's data flow and must precede the run, so two batches never reserve the same offsets; failing
a dead run only records what happened; a claim makes a launch decided by two drivers one run. All are idempotent:
a plan recorded on a tick whose result was lost is launched on the next tick with the same run key.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.errors import KprioError, RangeConflict
from kprio_core.kafka.lag import SnapshotAsk
from kprio_core.ledger import Batch, BatchState, LaunchClaim
from kprio_core.lifecycle import (
    CarryOutLogChanges,
    Decision,
    FailDeadRun,
    FailUntaken,
    Launch,
    LedgerView,
    RecordPlan,
    TickInputs,
    Why,
    batch_fixed_cost,
    batch_objectives,
    decide_tick,
    drain_rate,
    needs_committed,
    rate_window,
)
from kprio_core.model.drain_plan import DrainPlan
from orchestration.runtime.adoption import ensure_adopted
from orchestration.runtime.faults import crash_point
from orchestration.runtime.leases import this_owner
from orchestration.runtime.log_changes import carry_out
from orchestration.runtime.ports import Edge, LedgerPort
from orchestration.runtime.runs import NoRuns, RunOrder, Runs
from orchestration.runtime.tags import ATTEMPT_TAG, TOPIC_TAG, WHY_TAG, lane_tag, slot_tags

# --- gathering the inputs ---------------------------------------------------------------------


def read_view(ledger: LedgerPort, config: KprioConfig, topic: TopicSettings, now: datetime) -> LedgerView:
    """Everything the rules read from the ledger about ``topic`` (committed batches come with :func:`gather_all`)."""
    name, planner = topic.name, config.planner
    samples = ledger.samples.drains(name)
    return LedgerView(
        logical_topic=name,
        in_flight=tuple(ledger.batches.in_flight(name)),
        failed=tuple(ledger.batches.find(name, states=[BatchState.FAILED])),
        ready_to_commit=tuple(ledger.batches.ready_to_commit(name)),
        holds=tuple(ledger.batches.holds(name, max_attempts=config.recovery.max_attempts)),
        superseded=tuple(ledger.batches.superseded(name)),
        beliefs=ledger.beliefs.of(name),
        reserved=tuple(ledger.batches.reserved_ranges(name)),
        throughput=drain_rate(samples),
        fixed_cost_s=batch_fixed_cost(samples),
        poll_history=ledger.samples.poll_history(name, topic.priorities, planner.window_size,
                                                 planner.maxed_out_threshold),
        avg_record_bytes=ledger.samples.avg_record_bytes(name),
        rate_samples=tuple(ledger.samples.drained_since(name, now - rate_window(config))),
        claims=ledger.launches.claims(name),
        open_holds=ledger.beliefs.open_holds(name),
        last_changes=ledger.beliefs.last_changes(name),
    )


def with_committed(view: LedgerView, ledger: LedgerPort, partitions: Iterable[tuple[str, int]]) -> LedgerView:
    """The view with ``partitions``' committed batches and failed re-drains (oldest first), which rule 7 re-drains."""
    wanted = set(partitions)
    if not wanted:
        return view
    drained = ledger.batches.find(view.logical_topic, states=[BatchState.COMMITTED, BatchState.FAILED])[::-1]
    committed = [b for b in drained if b.state is BatchState.COMMITTED or b.replay_of_committed]
    return replace(view, committed={tp: tuple(b for b in committed if tp in b.partitions) for tp in wanted})


def dead_owners(runs: Runs, batches: Iterable[Batch], claims: Iterable[LaunchClaim]) -> frozenset[str]:
    """The owners of ``batches``' leases and of ``claims`` that certainly no longer work (run ended, process gone)."""
    owners = {b.lease.owner for b in batches if b.lease is not None} | {c.owner for c in claims}
    return frozenset(o for o in owners if runs.owner_dead(o))


def gather_all(runs: Runs | None, edge: Edge, ledger: LedgerPort, config: KprioConfig, topics: Sequence[TopicSettings],
               *, now: datetime, driver: str | None = None, fresh_start: bool = False,
               cause: str | None = None) -> list[TickInputs]:
    """The tick's inputs for each of ``topics``, each read once: runs and dead owners, then ledger, then every
    topic's lag snapshot together (one set of broker requests), then the clock.

    The order matters. A run writes to the ledger before it ends, so a ledger read after the runs holds every
    write of each run seen ended (the other way round, a run that committed and ended in between would look dead
    with its batch in flight, and be resumed needlessly). The batches whose runs are read are listed just before
    (one recorded in between has no runs yet, as a moment earlier). The snapshots follow every ledger view: a batch
    committed in between is committed in Kafka too, never planned again from an older offset.
    """
    runs = runs or NoRuns()
    read = []
    for topic in topics:
        watched = (*ledger.batches.in_flight(topic.name), *ledger.batches.find(topic.name, states=[BatchState.FAILED]))
        seen, dead = runs.of(watched), dead_owners(runs, watched, ledger.launches.claims(topic.name).values())
        read.append((topic, seen, dead, read_view(ledger, config, topic, now)))
    asks = [SnapshotAsk(topic, dict(view.avg_record_bytes), {b.topic for b in view.beliefs.values()},
                        batch_objectives(config)) for topic, _, _, view in read]
    try:
        lags = edge.snapshots(asks, now_ms=int(now.timestamp() * 1000))
    except KprioError as err:  # an unreachable broker or a missing topic is a reason, not a crash
        lags = {topic.name: err for topic in topics}
    bulk = sum(1 for topic, _, _, view in read for b in view.in_flight if topic.priorities - 1 not in b.priorities)
    out = []
    for topic, seen, dead, view in read:
        lag = lags[topic.name]
        if not isinstance(lag, KprioError):
            view = with_committed(view, ledger, needs_committed(lag, view, config))
        out.append(TickInputs(view, lag, seen, dead, now, driver or this_owner(""), fresh_start, cause, bulk))
    return out


def decide(runs: Runs | None, edge: Edge, ledger: LedgerPort, config: KprioConfig, topic: TopicSettings,
           *, now_s: float | None = None, **narrow) -> Decision:
    """What a tick decides for ``topic`` now, without doing it (``plan_batch_job``)."""
    return decide_all(runs, edge, ledger, config, [topic], now_s=now_s, **narrow)[0]


def decide_all(runs: Runs | None, edge: Edge, ledger: LedgerPort, config: KprioConfig, topics: Sequence[TopicSettings],
               *, now_s: float | None = None, **narrow) -> list[Decision]:
    """What a tick decides for each of ``topics`` now, without doing it (``kprio plan``, Airflow's trigger)."""
    now = ledger.now() if now_s is None else datetime.fromtimestamp(now_s, UTC)
    every = gather_all(runs, edge, ledger, config, topics, now=now)
    return [decide_tick(config, topic, inputs, **narrow) for topic, inputs in zip(topics, every, strict=True)]


# --- carrying the actions out -----------------------------------------------------------------


@dataclass(frozen=True)
class Applied:
    """What the applier did for one topic: runs to request, batches recorded, and why nothing more."""

    requests: tuple[RunOrder, ...] = ()
    recorded: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    contended: bool = False
    """Another driver got a plan or a launch first: tick again soon (the work is under way elsewhere)."""


def run_order(launch: Launch, priorities: int) -> RunOrder:
    """The run of ``launch``: run key, batch, attempt and why, slot tags, lane (``priorities``: its topic's levels)."""
    batch = launch.batch
    return RunOrder(
        run_key=launch.run_key,
        partition_key=batch.batch_id,
        tags={TOPIC_TAG: batch.logical_topic, ATTEMPT_TAG: str(launch.attempt), WHY_TAG: launch.why.value,
              **slot_tags(batch.logical_topic, batch.priorities), **lane_tag(batch.priorities, priorities)},
    )


def claim(ledger: LedgerPort, config: KprioConfig, launch: Launch, inputs: TickInputs) -> str | None:
    """Claim ``launch`` for this driver; None when claimed, else who launches it instead."""
    held = ledger.launches.claim(launch.batch.batch_id, launch.run_key, inputs.driver, config.recovery.lease_s,
                                 take_over=inputs.dead)
    return None if held.owner == inputs.driver else f"{launch.describe()} is launched by {held.owner}"


def apply(runs: Runs, edge: Edge, ledger: LedgerPort, config: KprioConfig, topic: TopicSettings,
          decision: Decision, inputs: TickInputs, *, log=None, several_topics: bool = False) -> Applied:
    """Carry ``decision``'s actions out in their order (see the module docstring)."""
    name = topic.name
    launches: list[Launch] = []
    reasons: list[str] = []
    recorded: list[str] = []
    contended = False
    put_back: dict[str, Batch] = {}
    moved_on: set[str] = set()  # rule 1b's batches a run took meanwhile: no retry, and the tick is contended
    for action in decision.actions:
        if isinstance(action, FailDeadRun):
            _fail_dead_runs(runs, action, log, name)
        elif isinstance(action, FailUntaken) and not _spend_attempt(ledger, action, log, name):
            moved_on.add(action.batch.batch_id)
        elif isinstance(action, CarryOutLogChanges):
            try:
                put_back = carry_out(edge, ledger, topic, action, log=log, max_in_flight=config.planner.max_in_flight)
            except KprioError as err:  # nothing launched or planned on a decision that could not be carried out
                done = ", ".join(d.describe() for d in action.decided)
                return Applied(reasons=(f"{name}: could not carry out {done}: {err}",))
        elif isinstance(action, Launch) and action.batch.batch_id not in moved_on:
            if action.why is Why.REDRAIN and action.batch.batch_id in put_back:  # the batch carry_out put back
                again = put_back[action.batch.batch_id]
                action = Launch(again, Why.REDRAIN, again.attempts)
            launches.append(action)
        elif isinstance(action, RecordPlan):
            try:
                batch = ledger.batches.record_plan(with_log_changes(ledger, action.plan),
                                                   max_in_flight=config.planner.max_in_flight)
            except RangeConflict as err:  # another planner (a second kprio drain, the manual job) got there first
                reasons.append(f"{name}: {err}")
                contended = True
                continue
            recorded.append(batch.batch_id)
            launches.append(Launch(batch, Why.NEW, batch.attempts))
    reasons += [f"{name}: {batch_id} moved on before this tick could fail it" for batch_id in sorted(moved_on)]
    requests = []
    for launch in launches:
        if (elsewhere := claim(ledger, config, launch, inputs)) is not None:
            reasons.append(f"{name}: {elsewhere}")
            contended = True
            continue
        if launch.early:  # a fresh driver retries a transient failure now: its run must not wait the backoff out
            ledger.attempts.retry_now(launch.batch.batch_id)
        _info(log, f"{name}: {launch.describe()}: run requested")
        requests.append(run_order(launch, topic.priorities))
    if not requests:
        reasons.append(decision.describe() if several_topics else decision.summary())
    return Applied(tuple(requests), tuple(recorded), tuple(reasons), contended or bool(moved_on))


def _fail_dead_runs(runs: Runs, action: FailDeadRun, log, name: str) -> None:
    """Mark failed the runs of a batch whose run died, so the orchestrator's UI tells the truth."""
    for run_id in runs.fail(action.batch.batch_id, action.run_ids, action.why):
        _info(log, f"{name}: run {run_id[:8]} of {action.batch.batch_id} marked failed: {action.why}")


def _spend_attempt(ledger: LedgerPort, action: FailUntaken, log, name: str) -> bool:
    """Fail the batch at the attempt its run did not take; False when it moved on meanwhile (a run took it)."""
    if ledger.attempts.fail_untaken(action.batch.batch_id, action.attempt, reason=action.why,
                                    retry_at=action.retry_at) is None:
        return False
    _info(log, f"{name}: {action.batch.batch_id} failed at attempt {action.attempt}: {action.why}")
    return True


def with_log_changes(ledger: LedgerPort, plan: DrainPlan) -> DrainPlan:
    """The plan with every log change recorded since the topic's newest batch (its metadata shows them), those of
    ticks that planned nothing too (the rules fill in only this tick's decisions, as ``kprio plan`` previews)."""
    newest = ledger.batches.find(plan.logical_topic, limit=1)
    since = newest[0].created_at if newest else None
    recent = tuple(e.line() for e in ledger.beliefs.log_events(plan.logical_topic) if since is None or e.at > since)
    return replace(plan, log_changes=recent) if recent else plan


def still_launchable(runs: Runs, ledger: LedgerPort, config: KprioConfig, request: RunOrder,
                     driver: str | None = None) -> bool:
    """Just before executing a request decided earlier: its claim is still this driver's (renewed) and no
    run of its run key exists (another driver may have launched it after the claim expired)."""
    driver = driver or this_owner("")
    held = ledger.launches.claim(request.partition_key, request.run_key, driver, config.recovery.lease_s)
    if held.owner != driver:
        return False
    return not runs.launched(request.run_key)


# --- one tick over every topic ----------------------------------------------------------------


@dataclass(frozen=True)
class Tick:
    """One evaluation over every logical topic: the decisions, the runs to request, the partitions added."""

    decisions: tuple[Decision, ...]
    requests: tuple[RunOrder, ...]
    partitions: tuple[str, ...]
    reasons: tuple[str, ...]
    contended: bool = False
    """Another driver got a plan or a launch first this tick."""

    @property
    def skip_reason(self) -> str:
        return "; ".join(self.reasons) or "no logical topic configured"


def tick(runs: Runs, edge: Edge, ledger: LedgerPort, config: KprioConfig, *, now_s: float | None = None,
         log=None, driver: str | None = None, fresh_start: bool = False, cause: str | None = None) -> Tick:
    """Evaluate every topic at ``now_s``: gather, decide, apply; the runs to request (``fresh_start``, ``cause``:
    :class:`~kprio_core.lifecycle.view.TickInputs`; ``fresh_start`` also on the tick after a seen cause passed)."""
    # The ledger's clock (the database's): leases, backoffs and claims are judged by one clock on every host.
    now = ledger.now() if now_s is None else datetime.fromtimestamp(now_s, UTC)
    ensure_adopted(runs.batch_ids(), ledger, edge, config, log=log)
    decisions, requests, partitions, reasons, contended = [], [], [], [], False
    with edge.one_view():  # the cluster's metadata once (a log change carried out may read it again)
        every = gather_all(runs, edge, ledger, config, config.topics, now=now, driver=driver,
                           fresh_start=fresh_start, cause=cause)
        for topic, inputs in zip(config.topics, every, strict=True):
            crash_point("after-snapshot", topic.name)
            decision = decide_tick(config, topic, inputs)
            done = apply(runs, edge, ledger, config, topic, decision, inputs, log=log,
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
