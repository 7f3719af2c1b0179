"""What to do for one logical topic right now: which batches need a run, what to plan next, and what waits.

One small rule per question, combined in :func:`decide_tick` in this order (why: batches already
recorded come first, so a crash or a failure is healed before new work is added; the cheap
ledger facts come before the lag snapshot; the plan is the last step, and it only sees what no
earlier rule holds):

1. :func:`resume_stuck` — a batch in flight whose run died (lease expired, owner gone, run
   ended without moving it) gets a new attempt with the same ranges;
2. :func:`launch_unlaunched` — a planned batch no run was ever requested for gets its run;
3. :func:`launch_commits` — a checked batch whose earlier batches committed gets a commit run;
4. :func:`retry_failed` — a failed batch with attempts left gets a retry once its backoff is
   over and its priorities have a free slot; a transient failure (a passing cause) never while a
   probe sees its cause, and then at once when it is the first of a streak, on a driver's first
   tick (``kprio drain`` restarted after the disk or the broker was fixed), or once a cause the
   driver saw has passed; never while a group it commits to stands below it, moved back outside kprio
   (:func:`~kprio_core.lifecycle.holds.waits_for_the_group`: the move's re-drain comes first); the retry
   takes those slots
   at once, so the plan of the same tick (rule 8) leaves them to it: the oldest work of a priority
   is served first, and no retry run finds its slot taken by a batch planned after it;
5. the ledger's holds — every failed batch holds its partitions from its failed range's
   start (only those partitions wait: every other partition and priority keeps draining);
   a batch *superseded* on a partition (planned on an earlier incarnation of it than the one
   kprio drains now, :func:`kprio_core.log_changes.superseded`) never runs again (no retry,
   resume or launch) and holds nothing, so the new incarnation drains on;
6. the lag snapshot (an unreachable broker or a missing topic is a reason, not a crash);
7. :func:`~kprio_core.lifecycle.log_rules.log_decisions` — changes of the log kprio did not make
   (see :mod:`kprio_core.lifecycle.log_rules`; each decided once, when first seen; a hold that asked a
   person stands until a person or the configured policy decides; a group moved back is re-drained step
   by step, only the ranges of the partitions it moved, each step in a free slot of the moved priority); a batch with ranges only on a deleted priority topic, or only on
   topics recreated since it was planned (their topic ids changed), gets no run and holds nothing of its own
   there (the change's hold says why, for a person);
   :func:`~kprio_core.lifecycle.holds.lost_partitions` — offsets deleted by retention before
   they were drained hold their partition (or are drained past and recorded when ``drain.allow_data_loss``);
   a failed batch whose partition lost offsets so is not retried into the gap until that setting is made
   (:func:`_wait_for_the_loss_decision`);
8. :func:`free_priorities` — a priority whose ``planner.max_in_flight`` slots are taken sits
   this plan out, so urgent work never waits for a bulk batch of another priority; and while the warm
   workers' bulk lane runs as many batches as it has workers (:func:`bulk_lane_free`), only the most urgent
   priority is planned: the pool's size and the slots agree on what runs at once;
9. :func:`throttled_priorities` — a priority over its rate quota sits this plan out;
10. :func:`batch_budget` — the record budget, sized to ``planner.target_batch_s`` from the
    throughput the ledger measured;
11. the planner's plan of what is left, as one batch, or two when :func:`split_caught_up` takes the
    priorities whose whole backlog it plans apart from a bulk rest (a trickle of urgent records then
    never waits for a bulk batch to end);
12. :func:`launched_elsewhere` — last, over every launch above: a batch whose lease another live
    run holds, or whose run key another driver claimed (a second ``kprio drain``, the sensor),
    is not launched here; it waits, and says for whom.

Nothing here reads or writes anything: the driver gathers the inputs once
(:class:`~kprio_core.lifecycle.view.TickInputs`) and carries the decision's actions out.

A planned batch nobody launched yet gets its run; one another driver claimed waits:

>>> from datetime import UTC, datetime
>>> from kprio_core.config import KprioConfig
>>> from kprio_core.lifecycle.examples import batch, claim, snapshot
>>> from kprio_core.lifecycle.view import LedgerView, TickInputs
>>> config = KprioConfig.model_validate({"topics": [{"name": "orders", "priorities": 3}]})
>>> now = datetime(2026, 1, 1, tzinfo=UTC)
>>> planned = batch("b-000005")
>>> lag = snapshot(backlog={2: 10})   # its 10 records, nothing else
>>> view = LedgerView("orders", in_flight=(planned,), reserved=tuple(planned.plan.offset_ranges()))
>>> d = decide_tick(config, config.topics[0], TickInputs(view, lag, now=now, driver="@a:1"))
>>> str(d.verdict), [x.run_key for x in d.launch], d.reason
('launch', ['b-000005'], 'no backlog outside the batches in flight')
>>> taken = dataclasses.replace(view, claims={"b-000005": claim("b-000005", "@b:2", now)})
>>> d = decide_tick(config, config.topics[0], TickInputs(taken, lag, now=now, driver="@a:1"))
>>> str(d.verdict), d.launch, d.waiting
('idle', (), ('b-000005 (new, attempt 1) is launched by @b:2',))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.errors import BrokerUnreachable, KprioError
from kprio_core.lifecycle.budget import (
    batch_budget,
    batch_objectives,
    bulk_lane_free,
    free_priorities,
    only,
    open_backlog,
    planned_topic_ids,
    rate_tracker,
    split_caught_up,
    throttled_priorities,
)
from kprio_core.lifecycle.decision import (
    CarryOutLogChanges,
    Decision,
    FailDeadRun,
    RecordPlan,
    Skip,
    TickAction,
    Verdict,
)
from kprio_core.lifecycle.holds import held_partitions, lost_partitions, moved_back, waits_for_the_group
from kprio_core.lifecycle.log_rules import after_decisions, incarnations, log_decisions
from kprio_core.lifecycle.runs import BatchRuns, Launch, LaunchReason, run_key_of
from kprio_core.lifecycle.view import TickInputs
from kprio_core.log_changes import Outcome, Superseded
from kprio_core.model.drain_plan import DrainPlan
from kprio_core.model.offsets import TopicPartitionKey
from kprio_core.model.priority import Priority
from kprio_core.model.records import Batch, Hold, batch_number
from kprio_core.model.recovery import may_retry, parse_owner
from kprio_core.model.snapshot import LagSnapshot
from kprio_core.model.states import BatchState
from kprio_core.planner import plan_batch

Why = LaunchReason


# --- rules about recorded batches -------------------------------------------------------------


def resume_stuck(in_flight: Iterable[Batch], runs: BatchRuns, *, now: datetime,
                 dead: Collection[str] = ()) -> list[tuple[Batch, str]]:
    """Batches in flight whose run died: lease expired or owner gone (in ``dead``), or no live run can move them.

    A batch waiting for its first run (planned, never launched) is not stuck; nor is one with a
    live lease, or one another run (the orchestrator's own retry, say) is about to take over.

    >>> from datetime import UTC, datetime
    >>> from kprio_core.lifecycle.examples import batch
    >>> from kprio_core.lifecycle.runs import RunState, RunSummary
    >>> now = datetime(2026, 1, 1, tzinfo=UTC)
    >>> gone = batch("b-000003", owner="r1@h:7", until=now)
    >>> [why for _, why in resume_stuck([gone], BatchRuns(), now=now)]
    ['its lease (held by r1@h:7) expired at 00:00:00 UTC']
    >>> ended = batch("b-000004", state=BatchState.DRAINED)
    >>> [why for _, why in resume_stuck([ended], BatchRuns({"b-000004": (RunSummary("r2abcdef9", RunState.FAILURE),)}),
    ...                                 now=now)]
    ['its last run r2abcdef ended FAILURE without finishing it']
    """
    stuck = []
    for batch in in_flight:
        lease = batch.lease
        owner = parse_owner(lease.owner) if lease is not None else None
        owner_run = owner.run_id if owner is not None else None
        others = [r for r in runs.of(batch.batch_id) if r.active and r.run_id != owner_run]
        if others or runs.will_retry(batch.batch_id, now):
            continue  # another run is on its way to take it over
        if lease is not None:
            if lease.expired(now):
                stuck.append((batch, f"its lease (held by {lease.owner}) expired at {lease.until:%H:%M:%S} UTC"))
            elif lease.owner in dead:
                stuck.append((batch, f"the process holding its lease ({lease.owner}) is gone"))
            continue
        latest = runs.latest(batch.batch_id)
        if latest is None or latest.active:
            continue
        if batch.state is BatchState.PLANNED and run_key_of(batch.batch_id, Why.NEW, batch.attempts) not in runs.run_keys:
            continue  # the run of this attempt was never requested: launch_unlaunched's case
        if batch.state is BatchState.CHECKED:
            continue  # waits for earlier batches to commit: launch_commits' case
        if latest.orphaned:
            why = (f"its run {latest.run_id[:8]} is {latest.state.value} but the process running it "
                   f"({latest.runner}) is gone")
        else:
            why = f"its last run {latest.run_id[:8]} ended {latest.state.value} without finishing it"
        stuck.append((batch, why))
    return stuck


def dead_runs(batch: Batch, why: str, runs: BatchRuns) -> FailDeadRun:
    """The runs to mark failed for a stuck batch: the one that held its lease, and orphaned ones."""
    owner = parse_owner(batch.lease.owner) if batch.lease else None
    ids = [owner.run_id] if owner and owner.run_id else []
    ids += [r.run_id for r in runs.orphaned(batch.batch_id) if r.run_id not in ids]
    return FailDeadRun(batch, why, tuple(ids))


def launch_unlaunched(in_flight: Iterable[Batch], runs: BatchRuns) -> list[Launch]:
    """Planned batches whose current attempt never got a run requested."""
    return [
        Launch(b, Why.NEW, b.attempts)
        for b in in_flight
        if b.state is BatchState.PLANNED and b.lease is None and runs.active(b.batch_id) is None
        and run_key_of(b.batch_id, Why.NEW, b.attempts) not in runs.run_keys
    ]


def launch_commits(ready: Iterable[Batch], runs: BatchRuns) -> list[Launch]:
    """Checked batches whose earlier batches committed, with no run of their own under way."""
    return [
        Launch(b, Why.COMMIT, b.attempts)
        for b in ready
        if b.lease is None and runs.active(b.batch_id) is None
        and run_key_of(b.batch_id, Why.COMMIT, b.attempts) not in runs.run_keys
    ]


def _wait_for_the_loss_decision(draft: _Draft, snapshot: LagSnapshot) -> None:
    """No retry of a failed batch into offsets retention deleted under it: the read would fail alike (each retry
    an attempt spent, then a person's ``kprio retry``). The batch waits for the one decision the loss's hold asks
    for (``drain.allow_data_loss``), then is retried by itself. That hold says so for its lost partitions; its
    others (if any) wait for the same person."""
    lost = {(r.topic, r.partition): r for r in snapshot.lost_to_retention()}
    gaps = {h.batch_id: lost[(h.topic, h.partition)] for h in draft.holds
            if h.batch_id is not None and (h.topic, h.partition) in lost}
    for x in [x for x in draft.launches if x.why is Why.RETRY and x.batch.batch_id in gaps]:
        draft.launches.remove(x)
        gap = gaps[x.batch.batch_id]
        draft.waiting.append(f"{x.batch.batch_id} waits for drain.allow_data_loss: offsets "
                             f"[{gap.start},{gap.end}) of {gap.topic}[{gap.partition}] were lost to retention")
    draft.holds = tuple(dataclasses.replace(h, exhausted=True) if h.batch_id in gaps else h for h in draft.holds
                        if h.batch_id not in gaps or (h.topic, h.partition) not in lost)


def retry_failed(failed: Iterable[Batch], runs: BatchRuns, *, now: datetime, max_attempts: int,
                 full: Mapping[Priority, Sequence[str]], fresh_start: bool = False,
                 cause: str | None = None, in_flight: Collection[str] = (),
                 behind: Mapping[TopicPartitionKey, int] | None = None) -> tuple[list[Launch], list[str]]:
    """Failed batches to retry now, oldest first, and why the others that may be retried still wait.

    A transient failure waits while a probe sees a passing cause (``cause``: an output root that
    takes no file, the broker unreachable): its retry would fail alike. Once the probes pass, it is
    retried when due (the first of a streak at once, :func:`~kprio_core.lifecycle.run.retry_at`), and
    before its backoff on a driver's ``fresh_start`` (a driver just started, or a cause it saw passed).
    A batch split off another waits while that one drains (``in_flight``, or retried here): split off to
    find the cause of a drain that died, it may die again, and a Python worker that dies can fail the
    tasks of a batch draining beside it (Spark hands a worker on to the next task while the task it
    served still reads from it), so the part kept (the most urgent records) drains first, alone.
    Any failed batch waits while a group it commits to stands below it, moved back outside kprio
    (``behind``, :func:`waits_for_the_group`): the re-drain of the move comes first.

    >>> from kprio_core.lifecycle.examples import T0, batch
    >>> from kprio_core.model.states import BatchState
    >>> full_disk = batch("b-000004", state=BatchState.FAILED, transient=True, retry_at=T0)
    >>> retry_failed([full_disk], BatchRuns(), now=T0, max_attempts=3, full={}, cause="the output root /o is full")
    ([], ['b-000004 waits for its cause to pass (the output root /o is full)'])
    >>> [x.run_key for x in retry_failed([full_disk], BatchRuns(), now=T0, max_attempts=3, full={})[0]]
    ['b-000004.attempt-2']
    """
    launches: list[Launch] = []
    waiting: list[str] = []
    for b in sorted(failed, key=lambda b: batch_number(b.batch_id)):  # a parent before the batches split off it
        if not b.holds or (not b.transient and not may_retry(attempts=b.attempts, max_attempts=max_attempts)):
            continue
        if runs.active(b.batch_id) is not None or runs.will_retry(b.batch_id, now):
            continue  # a run (or the orchestrator's own retry) is on it
        if b.parent is not None and (b.parent in in_flight or any(x.batch.batch_id == b.parent for x in launches)):
            waiting.append(f"{b.batch_id} waits for {b.parent}, which it was split from, to drain first")
            continue
        if b.transient and cause is not None:
            waiting.append(f"{b.batch_id} waits for its cause to pass ({cause})")
            continue
        if (group := waits_for_the_group(b, behind or {})) is not None:
            waiting.append(group)
            continue
        early = b.retry_at is not None and b.retry_at > now
        if early and not (b.transient and fresh_start):
            waiting.append(f"{b.batch_id} retries at {b.retry_at:%H:%M:%S} UTC")
            continue
        busy = sorted(p for p in b.priorities if p in full)
        if busy:
            waiting.append(f"{b.batch_id} waits for a slot of priority {', '.join(map(str, busy))}")
            continue
        launches.append(Launch(b, Why.RETRY, b.attempts + 1, early=early))
    return launches, waiting


def passing_cause(inputs: TickInputs) -> str | None:
    """What a probe sees now that fails a transient retry alike: the outputs' probe, or an unreachable broker."""
    if inputs.cause is not None:
        return inputs.cause
    if isinstance(inputs.lag, BrokerUnreachable):
        return f"the broker is unreachable: {inputs.lag}"
    return None


def launched_elsewhere(launch: Launch, inputs: TickInputs) -> str | None:
    """Why ``launch`` is not this driver's to make (rule 12), or None.

    Another live run holds the batch's lease, or another driver claimed the run key and its claim
    holds (not expired, its owner not known dead). This driver's own claim does not stop it.
    """
    lease, now = launch.batch.lease, inputs.now
    if lease is not None and not lease.expired(now) and lease.owner not in inputs.dead:
        return f"{launch.describe()} is worked on by {lease.owner}"
    claim = inputs.view.claims.get(launch.run_key)
    if claim is not None and claim.owner != inputs.driver and claim.live(now, inputs.dead):
        return f"{launch.describe()} is launched by {claim.owner}"
    return None


# --- the rules combined -----------------------------------------------------------------------


@dataclass
class _Draft:
    """A decision in the making: what rules 1-7 found, finished by :meth:`done` (rule 12 and the verdict)."""

    topic: str
    inputs: TickInputs
    stuck: list[FailDeadRun]
    launches: list[Launch]
    waiting: list[str]
    holds: tuple[Hold, ...]
    superseded: tuple[Superseded, ...]
    more: dict = field(default_factory=dict)

    def done(self, verdict: Verdict, reason: str | None = None, plan: DrainPlan | None = None,
             more_plans: Sequence[DrainPlan] = (), **more) -> Decision:
        """The decision: a plan-less verdict becomes LAUNCH when runs are to be requested (not when blocked)."""
        launches = []
        for x in self.launches:
            elsewhere = launched_elsewhere(x, self.inputs)
            if elsewhere is None:
                launches.append(x)
            else:
                self.waiting.append(elsewhere)
        if plan is not None:
            verdict = Verdict.LAUNCH if launches else Verdict.PLAN
        elif launches and verdict is not Verdict.BLOCKED:
            verdict = Verdict.LAUNCH
        fields = {**self.more, **more}
        actions: list[TickAction] = [*self.stuck]
        if fields.get("changes") or fields.get("decided") or self.superseded:
            actions.append(CarryOutLogChanges(fields.get("changes", ()), fields.get("decided", ()), self.superseded))
        actions += launches
        if plan is not None:
            actions += [RecordPlan(p) for p in (plan, *more_plans)]
        if not launches and plan is None:
            actions.append(Skip(reason or str(verdict)))
        return Decision(topic=self.topic, verdict=verdict, actions=tuple(actions), holds=self.holds,
                        waiting=tuple(self.waiting), reason=reason, superseded=self.superseded, **fields)


def decide_tick(config: KprioConfig, topic: TopicSettings, inputs: TickInputs, *,
                priorities: Collection[Priority] | None = None, record_budget: int | None = None) -> Decision:
    """Apply the rules of the module docstring to ``topic`` with ``inputs`` (gathered once by the driver).

    ``priorities`` / ``record_budget`` narrow the plan (the manual plan job); by default every
    priority and the configured budget. A narrowed plan is the one batch a person asked for: it is
    never split (:func:`split_caught_up`).
    """
    view, runs, now = inputs.view, inputs.runs, inputs.now
    max_in_flight, recovery = config.planner.max_in_flight, config.recovery

    in_flight = list(view.in_flight)
    stuck = resume_stuck(in_flight, runs, now=now, dead=inputs.dead)  # 1
    launch = [Launch(b, Why.RESUME, b.attempts + 1) for b, _ in stuck]
    stuck_ids = {b.batch_id for b, _ in stuck}
    launch += launch_unlaunched([b for b in in_flight if b.batch_id not in stuck_ids], runs)  # 2
    launch += launch_commits([b for b in view.ready_to_commit if b.batch_id not in stuck_ids], runs)  # 3
    slots = view.slots()
    full = {p: ids for p, ids in slots.items() if len(ids) >= max_in_flight}
    gone = {s.batch_id for s in view.superseded}  # failed on an earlier incarnation: no run, no hold (the ledger's)
    retries, waiting = retry_failed([b for b in view.failed if b.batch_id not in gone], runs, now=now,  # 4
                                    max_attempts=recovery.max_attempts, full=full, fresh_start=inputs.fresh_start,
                                    cause=passing_cause(inputs), in_flight={b.batch_id for b in in_flight},
                                    behind=moved_back(inputs.lag, view.believed()))
    launch += retries
    for b in (x.batch for x in retries):  # a retry is older work: it takes its priorities' slots before any plan
        for p in b.priorities:
            slots.setdefault(p, []).append(b.batch_id)
    full = {p: ids for p, ids in slots.items() if len(ids) >= max_in_flight}
    draft = _Draft(view.logical_topic, inputs, [dead_runs(b, why, runs) for b, why in stuck], launch, waiting,
                   tuple(view.holds), tuple(view.superseded))  # 5
    draft.more["cause"] = passing_cause(inputs)

    snapshot = inputs.lag  # 6
    if isinstance(snapshot, BrokerUnreachable):
        return draft.done(Verdict.BLOCKED, f"broker unreachable: {snapshot}", error=snapshot)
    if isinstance(snapshot, KprioError):
        return draft.done(Verdict.BLOCKED, f"cannot take the lag snapshot: {snapshot} [{snapshot.code}]",
                          error=snapshot)

    log = log_decisions(config, view, snapshot, now=now)  # 7
    if snapshot.deleted:
        # A batch with ranges only on a deleted priority topic cannot run (its retries would fail alike until
        # the loop gives up): no run for it, and its partitions wait under the topic-deleted hold, for a person.
        deleted = set(snapshot.deleted)
        only_gone = {b.batch_id for b in [*in_flight, *view.failed]
                     if (on := {r.topic for r in b.plan.offset_ranges() if r.count}) and on <= deleted}
        draft.launches = [x for x in draft.launches if x.batch.batch_id not in only_gone]
        draft.holds = tuple(h for h in draft.holds if h.topic not in deleted)
    # A batch whose every range is on a log recreated since it was planned cannot succeed: no run for it; the
    # recreation's hold (rule 7) says what a person decides, and the reset supersedes the batch. (A batch with
    # other ranges runs: it splits those off before it publishes.)
    other_log = {b.batch_id: changed for b in [*in_flight, *view.failed]
                 if (changed := b.plan.changed_logs(snapshot.topic_ids))
                 and {r.topic for r in b.plan.offset_ranges() if r.count} <= set(changed)}
    if other_log:
        draft.waiting += [f"{x.describe()} waits: it was planned on another log of "
                          + ", ".join(f"{t} ({why})" for t, why in sorted(other_log[x.batch.batch_id].items()))
                          for x in draft.launches if x.batch.batch_id in other_log]
        draft.launches = [x for x in draft.launches if x.batch.batch_id not in other_log]
        # Nor does it hold those partitions for a retry that never comes: the change's hold does, for a person.
        draft.holds = tuple(h for h in draft.holds
                            if h.batch_id not in other_log or h.topic not in other_log[h.batch_id])
    redrains = [r for d in log.decided for r in d.redrain]
    if redrains:  # a re-drain takes its ranges' priorities' slots like any batch: the plan below sees them taken
        for r in redrains:
            for p in r.priorities:
                slots.setdefault(p, []).append(r.batch.batch_id)
        full = {p: ids for p, ids in slots.items() if len(ids) >= max_in_flight}
    snapshot = after_decisions(snapshot, log.decided)
    if not config.drain.allow_data_loss:
        _wait_for_the_loss_decision(draft, snapshot)
    draft.holds += log.holds + lost_partitions(snapshot, config.drain.allow_data_loss)
    draft.more.update(changes=log.changes, decided=log.decided, snapshot=snapshot)
    # The batch a re-drain runs is the one the driver puts back: this one (a replay), or its ranges split off it.
    draft.launches += [Launch(r.batch, Why.REDRAIN, r.batch.attempts + 1) for r in redrains]
    reserved = [*view.reserved, *held_partitions(draft.holds)]
    backlog = open_backlog(snapshot, reserved)
    wanted = set(range(topic.priorities)) if priorities is None else set(priorities)
    with_backlog = {p for p in wanted if backlog.get(p)}
    if not with_backlog:
        out_of_log = any(h.batch_id is None and h.exhausted for h in log.holds)
        verdict = (Verdict.HELD if draft.holds and (any(snapshot.backlog_by_priority().values()) or out_of_log)
                   else Verdict.IDLE)
        reason = "no backlog outside held partitions" if verdict is Verdict.HELD else "no backlog"
        if in_flight and verdict is Verdict.IDLE:
            reason = "no backlog outside the batches in flight"
        return draft.done(verdict, reason)

    free = free_priorities(with_backlog, full)  # 8
    draft.waiting += [f"priority {p} waits for its slot ({', '.join(full[p])} in flight)"
                      for p in sorted(with_backlog - free, reverse=True)]
    if not bulk_lane_free(config.workers.count, inputs.bulk_running):  # 8b: only the urgent lane has a worker
        draft.waiting += [f"priority {p} waits for a worker of the bulk lane ({inputs.bulk_running} bulk batches run, "
                          f"workers.count {config.workers.count})" for p in sorted(free - {topic.priorities - 1},
                                                                                    reverse=True)]
        free &= {topic.priorities - 1}
    throttled = throttled_priorities(rate_tracker(config, view.rate_samples), backlog, free, now.timestamp())  # 9
    usable = free - set(throttled)
    if not usable:
        if throttled:
            p, wait = min(throttled.items(), key=lambda item: item[1])
            return draft.done(Verdict.THROTTLED, f"throttled for {wait:.1f} s on priority {p}", throttled=throttled,
                              retry_in_s=wait)
        return draft.done(Verdict.BUSY, "; ".join(draft.waiting))

    budget = batch_budget(config, view.throughput, record_budget, backlog=sum(backlog.get(p, 0) for p in usable),
                          fixed_cost_s=view.fixed_cost_s)  # 10
    plan = plan_batch(only(snapshot, usable), budget, mode=config.planner.mode,  # 11
                      distribution=config.planner.distribution, history=view.poll_history, reserved=reserved,
                      objectives=batch_objectives(config))
    # The plan saw excluded priorities as idle; its record of the backlog must not.
    plan = dataclasses.replace(plan, backlog_before=snapshot.backlog_by_priority(),
                               lost=() if not config.drain.allow_data_loss else plan.lost,
                               incarnations=incarnations(view.believed(), log.decided),
                               log_changes=tuple(d.describe() for d in log.decided
                                                 if d.outcome not in (Outcome.HOLD, Outcome.WAIT)),
                               topic_ids=planned_topic_ids(plan, snapshot))
    if plan.is_empty:
        # Only the byte budget can keep an open backlog out of the plan (the planner never exceeds it).
        reason = (f"planner.byte_budget ({budget.bytes} bytes) is smaller than one record of every partition "
                  "with backlog: raise it")
        return draft.done(Verdict.BUSY, reason, throttled=throttled)
    manual = priorities is not None or record_budget is not None
    plans = [plan] if manual else split_caught_up(plan, backlog, view.throughput)
    return draft.done(Verdict.PLAN, plan=plans[0], more_plans=plans[1:], throttled=throttled)  # 12 (in done)
