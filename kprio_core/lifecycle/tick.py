"""What to do for one logical topic right now: which batches need a run, what to plan next, and what waits.

One small rule per question, each a function from one immutable :class:`~kprio_core.lifecycle.decision.TickState`
to the next. :func:`decide_tick` runs :data:`RULES` in order until one settles the verdict, then rule 12. Why this
order: recorded batches first, so a crash or failure heals before new work is added; cheap ledger facts before the
lag snapshot; changes under kprio decided before anything is planned; the plan last, seeing only what is left:

1. :func:`resume_dead` — a batch in flight whose run died gets a new attempt with the same ranges;
   1b. :func:`fail_untaken` — a run that ended before taking its batch spent that attempt: transient failure;
2. :func:`launch_unlaunched` — a planned batch no run was ever requested for gets its run;
3. :func:`launch_commits` — a checked batch whose earlier batches committed gets a commit run;
4. :func:`retry_due` — a failed batch is retried when :func:`retry_failed` says, taking its slots before the plan;
5. :func:`ledger_holds` — every failed batch holds its partitions from its failed range's start;
6. :func:`need_snapshot` — an unreachable broker or a missing topic is a reason, not a crash;
7. changes of the log kprio did not make (:mod:`kprio_core.lifecycle.log_rules`);
8. :func:`backlog_left` (none outside the holds: held or idle), :func:`free_slots` (a full priority sits out)
   and 8b :func:`bulk_lane` (the warm workers' bulk lane is full);
9. :func:`not_throttled` — a priority over its rate quota sits this plan out;
10-11. :func:`plan_the_rest` — the budget and the planner's plan of what is left, one batch or two;
12. :func:`launch_here` — last, over every launch above: one another run or driver holds waits.

No I/O: the driver gathers :class:`~kprio_core.lifecycle.view.TickInputs` once and carries the decision out.

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
>>> taken = replace(view, claims={"b-000005": claim("b-000005", "@b:2", now)})
>>> d = decide_tick(config, config.topics[0], TickInputs(taken, lag, now=now, driver="@a:1"))
>>> str(d.verdict), d.launch, d.waiting
('idle', (), ('b-000005 (new, attempt 1) is launched by @b:2',))
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
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
    Decision,
    FailDeadRun,
    FailUntaken,
    TickState,
    Verdict,
)
from kprio_core.lifecycle.holds import held_partitions
from kprio_core.lifecycle.log_rules import (
    decide_changes,
    hold_what_changed,
    incarnations,
    moved_back,
    no_run_on_a_deleted_topic,
    no_run_on_another_log,
    redrain_moved,
    wait_for_the_loss_decision,
    waits_for_the_group,
)
from kprio_core.lifecycle.run import retry_at
from kprio_core.lifecycle.runs import (
    BatchRuns,
    Launch,
    LaunchReason,
    RunState,
    RunSummary,
    attempt_of_key,
    run_key_of,
)
from kprio_core.lifecycle.view import TickInputs, passing_cause
from kprio_core.log_changes import Outcome
from kprio_core.model.drain_plan import DrainPlan
from kprio_core.model.offsets import TopicPartitionKey
from kprio_core.model.priority import Priority
from kprio_core.model.records import Batch, batch_number
from kprio_core.model.recovery import may_retry, parse_owner
from kprio_core.model.states import BatchState
from kprio_core.planner import plan_batch

Why = LaunchReason


# --- the rules, in their order ------------------------------------------------------------------


def resume_dead(state: TickState) -> TickState:
    """1. A batch in flight whose run died (:func:`resume_stuck`) gets a new attempt, same ranges; its runs fail."""
    inputs = state.inputs
    stuck = resume_stuck(inputs.view.in_flight, inputs.runs, now=inputs.now, dead=inputs.dead)
    return replace(state, dead_runs=tuple(dead_runs(b, why, inputs.runs) for b, why in stuck),
                   launches=tuple(Launch(b, Why.RESUME, b.attempts + 1) for b, _ in stuck))


def fail_untaken(state: TickState) -> TickState:
    """1b. A batch whose run for its next attempt ended before taking it (worker, code or ledger could not start it)
    spent that attempt: it fails, transient (the cause is not its records), and rule 4 retries it under a new run
    key, at once the first time, then backing off. Launched again, it would wait for ever on the ended run key."""
    inputs, recovery = state.inputs, state.config.recovery
    gone = {s.batch_id for s in inputs.view.superseded}
    batches = [b for b in (*inputs.view.in_flight, *inputs.view.failed) if b.batch_id not in gone]
    ready = {b.batch_id for b in inputs.view.ready_to_commit}
    found = (FailUntaken(b, attempt, why, retry_at(attempt, recovery, inputs.now, transient=True,
                                                   streak=b.transient_streak + 1))
             for b, attempt, why in untaken(batches, inputs.runs, now=inputs.now, ready=ready))
    return replace(state, untaken=tuple(found))


def launch_unlaunched(state: TickState) -> TickState:
    """2. A planned batch whose current attempt never got a run requested gets one (those of rule 1b wait for 4)."""
    runs, launched = state.inputs.runs, {x.batch.batch_id for x in (*state.launches, *state.untaken)}
    new = (Launch(b, Why.NEW, b.attempts) for b in state.inputs.view.in_flight
           if b.batch_id not in launched and b.state is BatchState.PLANNED and b.lease is None
           and runs.active(b.batch_id) is None and run_key_of(b.batch_id, Why.NEW, b.attempts) not in runs.run_keys)
    return replace(state, launches=(*state.launches, *new))


def launch_commits(state: TickState) -> TickState:
    """3. A checked batch whose earlier batches committed, with no run of its own under way, gets a commit run."""
    runs, launched = state.inputs.runs, {x.batch.batch_id for x in (*state.launches, *state.untaken)}
    due = (Launch(b, Why.COMMIT, b.attempts) for b in state.inputs.view.ready_to_commit
           if b.batch_id not in launched and b.lease is None and runs.active(b.batch_id) is None
           and run_key_of(b.batch_id, Why.COMMIT, b.attempts) not in runs.run_keys)
    return replace(state, launches=(*state.launches, *due))


def retry_due(state: TickState) -> TickState:
    """4. A failed batch with attempts left (or transient), and rule 1b's, is retried when :func:`retry_failed` says;
    it takes its slots at once, so the oldest work of a priority goes first and no later plan takes its slot. A retry
    an earlier tick launched keeps them until its run takes the batch (:func:`retry_under_way`). A batch superseded
    on a partition (:func:`kprio_core.log_changes.superseded`) never runs again."""
    inputs, view = state.inputs, state.inputs.view
    spent = {x.batch.batch_id: x.as_failed() for x in state.untaken}
    gone = {s.batch_id for s in view.superseded} | set(spent)
    state = replace(state, slots={p: tuple(i for i in ids if i not in spent) for p, ids in state.slots.items()})
    under_way = [b for b in view.failed if b.batch_id not in gone and retry_under_way(b, inputs.runs, inputs.now)]
    state = replace(state, slots=state.taking((b.batch_id, b.priorities) for b in under_way))
    retries, waiting = retry_failed([*(b for b in view.failed if b.batch_id not in gone), *spent.values()],
                                    inputs.runs, now=inputs.now, max_attempts=state.config.recovery.max_attempts,
                                    full=state.full, fresh_start=inputs.fresh_start, cause=passing_cause(inputs),
                                    in_flight={b.batch_id for b in view.in_flight},
                                    behind=moved_back(inputs.lag, view.believed()))
    return replace(state, launches=(*state.launches, *retries), waiting=(*state.waiting, *waiting),
                   slots=state.taking((x.batch.batch_id, x.batch.priorities) for x in retries))


def ledger_holds(state: TickState) -> TickState:
    """5. Every failed batch holds its partitions from its failed range's start; all else keeps draining. A superseded
    batch holds nothing, so the new incarnation drains on."""
    return replace(state, holds=tuple(state.inputs.view.holds))


def need_snapshot(state: TickState) -> TickState:
    """6. No plan without the lag snapshot: a broker or topic missing blocks it with a reason (recorded batches
    still get their runs), not a crash."""
    lag = state.inputs.lag
    if isinstance(lag, BrokerUnreachable):
        return state.ends(Verdict.BLOCKED, f"broker unreachable: {lag}", error=lag)
    if isinstance(lag, KprioError):
        return state.ends(Verdict.BLOCKED, f"cannot take the lag snapshot: {lag} [{lag.code}]", error=lag)
    return replace(state, snapshot=lag)


def backlog_left(state: TickState) -> TickState:
    """8. The backlog outside the batches in flight and the holds; none left: held (backlog only held) or idle."""
    view, snapshot = state.inputs.view, state.snapshot
    reserved = (*view.reserved, *held_partitions(state.holds))
    backlog = open_backlog(snapshot, reserved)
    if with_backlog := frozenset(p for p in state.wanted if backlog.get(p)):
        return replace(state, reserved=reserved, backlog=backlog, free=with_backlog)
    out_of_log = any(h.batch_id is None and h.exhausted for h in state.log.holds)
    if state.holds and (any(snapshot.backlog_by_priority().values()) or out_of_log):
        return state.ends(Verdict.HELD, "no backlog outside held partitions")
    return state.ends(Verdict.IDLE, "no backlog outside the batches in flight" if view.in_flight else "no backlog")


def free_slots(state: TickState) -> TickState:
    """8. A priority whose ``planner.max_in_flight`` slots are taken sits this plan out, so urgent work never waits
    for a bulk batch of another priority."""
    full = state.full
    free = free_priorities(state.free, full)
    return replace(state, free=frozenset(free), waiting=(*state.waiting, *(
        f"priority {p} waits for its slot ({', '.join(full[p])} in flight)" for p in sorted(state.free - free,
                                                                                             reverse=True))))


def bulk_lane(state: TickState) -> TickState:
    """8b. While the bulk lane has no free worker (:func:`bulk_lane_free`), only the most urgent priority is planned."""
    count, running, urgent = state.config.workers.count, state.inputs.bulk_running, state.topic.priorities - 1
    if bulk_lane_free(count, running):
        return state
    return replace(state, free=state.free & {urgent}, waiting=(*state.waiting, *(
        f"priority {p} waits for a worker of the bulk lane ({running} bulk batches run, workers.count {count})"
        for p in sorted(state.free - {urgent}, reverse=True))))


def not_throttled(state: TickState) -> TickState:
    """9. A priority over its rate quota sits out; none left: throttled for the shortest wait, or busy (no slot)."""
    throttled = throttled_priorities(rate_tracker(state.config, state.inputs.view.rate_samples), state.backlog,
                                     state.free, state.inputs.now.timestamp())
    if usable := state.free - set(throttled):
        return replace(state, free=usable, throttled=throttled)
    if throttled:
        p, wait = min(throttled.items(), key=lambda item: item[1])
        return state.ends(Verdict.THROTTLED, f"throttled for {wait:.1f} s on priority {p}", throttled=throttled,
                          retry_in_s=wait)
    return state.ends(Verdict.BUSY, "; ".join(state.waiting))


def plan_the_rest(state: TickState) -> TickState:
    """10-11. The record budget (:func:`batch_budget`) and the plan of what is left: one batch, or two when
    :func:`split_caught_up` plans caught-up priorities apart (an urgent trickle never waits for a bulk batch). A
    person's plan (narrowed priorities or budget) is the one batch asked for."""
    config, view = state.config, state.inputs.view
    budget = batch_budget(config, view.throughput, state.record_budget,
                          backlog=sum(state.backlog.get(p, 0) for p in state.free), fixed_cost_s=view.fixed_cost_s)
    plan = as_seen(plan_batch(only(state.snapshot, state.free), budget, mode=config.planner.mode,
                              distribution=config.planner.distribution, history=view.poll_history,
                              reserved=state.reserved, objectives=batch_objectives(config)), state)
    if plan.is_empty:  # only the byte budget keeps an open backlog out of a plan (the planner never exceeds it)
        return state.ends(Verdict.BUSY, f"planner.byte_budget ({budget.bytes} bytes) is smaller than one record of "
                                        "every partition with backlog: raise it")
    plans = [plan] if state.manual else split_caught_up(plan, state.backlog, view.throughput)
    return state.ends(Verdict.PLAN, plans=tuple(plans))


def launch_here(state: TickState) -> TickState:
    """12. Last: a launch another live run or driver holds (:func:`launched_elsewhere`) waits, saying for whom."""
    found = [(x, launched_elsewhere(x, state.inputs)) for x in state.launches]
    return replace(state, launches=tuple(x for x, elsewhere in found if elsewhere is None),
                   waiting=(*state.waiting, *(elsewhere for _, elsewhere in found if elsewhere is not None)))


RULES: tuple[Callable[[TickState], TickState], ...] = (
    # The batches recorded first (1-5): a crash or a failure heals before new work is added, a retry before a plan.
    resume_dead, fail_untaken, launch_unlaunched, launch_commits, retry_due, ledger_holds,
    need_snapshot,  # 6: the ledger's facts need no broker; what follows does
    # 7: the log as kprio will leave it, before anything is planned on it (kprio_core.lifecycle.log_rules's order).
    decide_changes, no_run_on_a_deleted_topic, no_run_on_another_log, wait_for_the_loss_decision, hold_what_changed,
    redrain_moved,
    # 8-11: what no rule above holds or takes, narrowed cheapest first, then planned.
    backlog_left, free_slots, bulk_lane, not_throttled, plan_the_rest,
)
"""The tick's rules, in their order (the module docstring says why); rule 12 follows whatever ended them."""


def decide_tick(config: KprioConfig, topic: TopicSettings, inputs: TickInputs, *,
                priorities: Collection[Priority] | None = None, record_budget: int | None = None) -> Decision:
    """:data:`RULES` in order until one settles the verdict, then rule 12 (:func:`launch_here`).

    ``priorities`` / ``record_budget`` narrow the plan (the manual plan job); None: all, the configured budget.
    """
    state = TickState.start(config, topic, inputs, priorities=priorities, record_budget=record_budget)
    for rule in RULES:
        state = rule(state)
        if state.verdict is not None:
            break
    return launch_here(state).decision()


def as_seen(plan: DrainPlan, state: TickState) -> DrainPlan:
    """The plan with what its tick saw: the whole backlog, retention gaps drained past, incarnations, log changes."""
    decided = state.log.decided
    return replace(plan, backlog_before=state.snapshot.backlog_by_priority(),
                   lost=plan.lost if state.config.drain.allow_data_loss else (),
                   incarnations=incarnations(state.inputs.view.believed(), decided),
                   log_changes=tuple(d.describe() for d in decided if d.outcome not in (Outcome.HOLD, Outcome.WAIT)),
                   topic_ids=planned_topic_ids(plan, state.snapshot))


# --- what the rules ask -------------------------------------------------------------------------


def resume_stuck(in_flight: Iterable[Batch], runs: BatchRuns, *, now: datetime,
                 dead: Collection[str] = ()) -> list[tuple[Batch, str]]:
    """Batches in flight whose run died: lease expired or owner gone (in ``dead``), or no live run can move them.

    Not stuck: one waiting for its first run, one with a live lease, one another run is about to take over.

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
        if batch.state is BatchState.PLANNED and not latest.orphaned:
            continue  # never requested (launch_unlaunched's case), or ended before it took the batch (fail_untaken's)
        if batch.state is BatchState.CHECKED:
            continue  # waits for earlier batches to commit: launch_commits' case
        if latest.orphaned:
            why = (f"its run {latest.run_id[:8]} is {latest.state.value} but the process running it "
                   f"({latest.runner}) is gone")
        else:
            why = f"its last run {latest.run_id[:8]} ended {latest.state.value} without finishing it"
        stuck.append((batch, why))
    return stuck


def untaken(batches: Iterable[Batch], runs: BatchRuns, *, now: datetime,
            ready: Collection[str] = ()) -> list[tuple[Batch, int, str]]:
    """Batches nobody holds whose latest run ended without taking them (no other run coming), with its attempt
    and why. A checked batch counts only once ``ready`` (a run that took it would have left it committed or failed).

    >>> from datetime import UTC, datetime
    >>> from kprio_core.lifecycle.examples import batch
    >>> from kprio_core.lifecycle.runs import RunState, RunSummary
    >>> now, planned = datetime(2026, 1, 1, tzinfo=UTC), batch("b-000004")
    >>> resumed = BatchRuns({"b-000004": (RunSummary("r2abcdef9", RunState.FAILURE, run_key="b-000004.attempt-2"),
    ...                                   RunSummary("r1abcdef9", RunState.FAILURE, run_key="b-000004"))})
    >>> untaken([planned], resumed, now=now)[0][1:]
    (2, 'its run r2abcdef (attempt 2) ended FAILURE before it took the batch')
    >>> untaken([batch("b-000004", attempts=3)], resumed, now=now)   # a run of an earlier attempt: not this one's
    []
    >>> failed = batch("b-000004", state=BatchState.FAILED)   # its retry (attempt 2) ended: spent
    >>> [a for _, a, _ in untaken([failed, replace(failed, attempts=2)], resumed, now=now)]
    [2]
    >>> checked = batch("b-000004", state=BatchState.CHECKED)
    >>> committing = BatchRuns({"b-000004": (RunSummary("r3abcdef9", RunState.FAILURE, run_key="b-000004.commit-1"),)})
    >>> untaken([checked], committing, now=now), untaken([checked], committing, now=now, ready={"b-000004"})[0][1:]
    ([], (1, 'its commit run r3abcdef (attempt 1) ended FAILURE before it took the batch'))
    """
    found = []
    for batch in batches:
        latest = runs.latest(batch.batch_id)
        if (batch.lease is not None or latest is None or latest.active or latest.orphaned
                or runs.will_retry(batch.batch_id, now)):
            continue
        attempt = _attempt_not_taken(batch, latest, batch.batch_id in ready)
        if attempt is not None:
            run = "commit run" if batch.state is BatchState.CHECKED else "run"
            ended = f"ended {latest.state.value} before it took the batch"
            found.append((batch, attempt, f"its {run} {latest.run_id[:8]} (attempt {attempt}) {ended}"))
    return found


def _attempt_not_taken(batch: Batch, latest: RunSummary, ready: bool) -> int | None:
    """The attempt of the ended run ``latest`` if it cannot have taken ``batch`` (a run that took it moved it on).

    A checked batch's commit run counts only when it failed: one that succeeded found it committed by its
    predecessor's run, or about to be (``_commit_successors``)."""
    if batch.state is BatchState.CHECKED:
        own = latest.run_key == run_key_of(batch.batch_id, Why.COMMIT, batch.attempts)
        return batch.attempts if ready and own and latest.state is not RunState.SUCCESS else None
    if batch.state not in (BatchState.PLANNED, BatchState.FAILED):
        return None
    attempt = attempt_of_key(batch.batch_id, latest.run_key) or batch.attempts
    ours = attempt > batch.attempts or (attempt == batch.attempts and batch.state is BatchState.PLANNED)
    return attempt if ours else None


def dead_runs(batch: Batch, why: str, runs: BatchRuns) -> FailDeadRun:
    """The runs to mark failed for a stuck batch: the one that held its lease, and orphaned ones."""
    owner = parse_owner(batch.lease.owner) if batch.lease else None
    ids = [owner.run_id] if owner and owner.run_id else []
    ids += [r.run_id for r in runs.orphaned(batch.batch_id) if r.run_id not in ids]
    return FailDeadRun(batch, why, tuple(ids))


def retry_failed(failed: Iterable[Batch], runs: BatchRuns, *, now: datetime, max_attempts: int,
                 full: Mapping[Priority, Sequence[str]], fresh_start: bool = False,
                 cause: str | None = None, in_flight: Collection[str] = (),
                 behind: Mapping[TopicPartitionKey, int] | None = None) -> tuple[list[Launch], list[str]]:
    """Failed batches to retry now, oldest first, and why the others that may be retried still wait.

    A transient failure waits while a probe sees ``cause`` (it would fail alike), then retries when due
    (:func:`~kprio_core.lifecycle.run.retry_at`), or early on a ``fresh_start``. A split-off batch waits while its
    parent drains: a dying Python worker can fail a batch beside it (Spark hands it on while its last task still
    reads), so the kept, most urgent part drains alone. Any waits for its group's re-drain: :func:`waits_for_the_group`.

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
        if retry_under_way(b, runs, now):
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
        if busy := sorted(p for p in b.priorities if p in full):
            waiting.append(f"{b.batch_id} waits for a slot of priority {', '.join(map(str, busy))}")
            continue
        launches.append(Launch(b, Why.RETRY, b.attempts + 1, early=early))
    return launches, waiting


def retry_under_way(batch: Batch, runs: BatchRuns, now: datetime) -> bool:
    """A failed batch's retry is launched (a run of it is active, or the orchestrator retries its run) and has not
    taken it yet. Its priorities' slots are the retry's: were a later plan to take one, the retry's run would wait
    for that batch while holding its worker, which that batch may need (one bulk worker: neither would ever run).

    >>> from kprio_core.lifecycle.examples import T0, batch
    >>> from kprio_core.lifecycle.runs import RunSummary, RunState
    >>> failed = batch("b-000001", state=BatchState.FAILED)
    >>> waiting = BatchRuns({"b-000001": (RunSummary("r2", RunState.QUEUED, run_key="b-000001.attempt-2"),)})
    >>> retry_under_way(failed, waiting, T0), retry_under_way(failed, BatchRuns(), T0)
    (True, False)
    """
    return runs.active(batch.batch_id) is not None or runs.will_retry(batch.batch_id, now)


def launched_elsewhere(launch: Launch, inputs: TickInputs) -> str | None:
    """Why ``launch`` is not this driver's (rule 12): another live run holds the lease, or another driver's claim of
    the run key is live (not expired, owner not dead); None: it is."""
    lease, now = launch.batch.lease, inputs.now
    if lease is not None and not lease.expired(now) and lease.owner not in inputs.dead:
        return f"{launch.describe()} is worked on by {lease.owner}"
    claim = inputs.view.claims.get(launch.run_key)
    if claim is not None and claim.owner != inputs.driver and claim.live(now, inputs.dead):
        return f"{launch.describe()} is launched by {claim.owner}"
    return None
