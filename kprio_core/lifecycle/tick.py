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
   driver saw has passed; the retry takes those slots
   at once, so the plan of the same tick (rule 8) leaves them to it: the oldest work of a priority
   is served first, and no retry run finds its slot taken by a batch planned after it;
5. the ledger's holds — every failed batch holds its partitions from its failed range's
   start (only those partitions wait: every other partition and priority keeps draining);
   a batch *superseded* on a partition (planned on an earlier incarnation of it than the one
   kprio drains now, :func:`kprio_core.log_changes.superseded`) never runs again (no retry,
   resume or launch) and holds nothing, so the new incarnation drains on;
6. the lag snapshot (an unreachable broker or a missing topic is a reason, not a crash);
7. :func:`~kprio_core.lifecycle.log_rules.log_decisions` — changes of the log kprio did not make
   (see :mod:`kprio_core.lifecycle.log_rules`; a hold that asked a person stands until a person or
   the configured policy decides); a batch with ranges only on a deleted priority topic, or only on
   topics recreated since it was planned (their topic ids changed), gets no run (the hold says why);
   :func:`~kprio_core.lifecycle.holds.lost_partitions` — offsets deleted by retention before
   they were drained hold their partition (or are drained past and recorded when ``drain.allow_data_loss``);
8. :func:`free_priorities` — a priority whose ``planner.max_in_flight`` slots are taken sits
   this plan out, so urgent work never waits for a bulk batch of another priority;
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
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.errors import BrokerUnreachable, KprioError
from kprio_core.lifecycle.decision import (
    CarryOutLogChanges,
    Decision,
    FailDeadRun,
    RecordPlan,
    Skip,
    TickAction,
    Verdict,
)
from kprio_core.lifecycle.holds import held_partitions, lost_partitions
from kprio_core.lifecycle.log_rules import after_decisions, incarnations, log_decisions
from kprio_core.lifecycle.runs import BatchRuns, Launch, LaunchReason, run_key_of
from kprio_core.lifecycle.view import LedgerView, TickInputs
from kprio_core.log_changes import Outcome, Superseded
from kprio_core.model.drain_plan import DrainPlan
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.priority import Priority
from kprio_core.model.records import Batch, DrainedSample, DrainSample, Hold
from kprio_core.model.recovery import may_retry, parse_owner
from kprio_core.model.snapshot import LagSnapshot
from kprio_core.model.states import BatchState
from kprio_core.planner import Budget, fair_shares, plan_batch
from kprio_core.rate import RateQuotaTracker

MIN_TARGET_RECORDS = 100
"""Smallest batch the target duration may size: below it a batch is all fixed cost."""
UNMEASURED_RECORDS = 50_000
"""Most records of a batch sized to ``planner.target_batch_s`` before any throughput was measured."""
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


def retry_failed(failed: Iterable[Batch], runs: BatchRuns, *, now: datetime, max_attempts: int,
                 full: Mapping[Priority, Sequence[str]], fresh_start: bool = False,
                 cause: str | None = None) -> tuple[list[Launch], list[str]]:
    """Failed batches to retry now, and why the others that may be retried still wait.

    A transient failure waits while a probe sees a passing cause (``cause``: an output root that
    takes no file, the broker unreachable): its retry would fail alike. Once the probes pass, it is
    retried when due (the first of a streak at once, :func:`~kprio_core.lifecycle.run.retry_at`), and
    before its backoff on a driver's ``fresh_start`` (a driver just started, or a cause it saw passed).

    >>> from kprio_core.lifecycle.examples import T0, batch
    >>> from kprio_core.model.states import BatchState
    >>> full_disk = batch("b-000004", state=BatchState.FAILED, transient=True, retry_at=T0)
    >>> retry_failed([full_disk], BatchRuns(), now=T0, max_attempts=3, full={}, cause="the output root /o is full")
    ([], ['b-000004 waits for its cause to pass (the output root /o is full)'])
    >>> [x.run_key for x in retry_failed([full_disk], BatchRuns(), now=T0, max_attempts=3, full={})[0]]
    ['b-000004.attempt-2']
    """
    launches, waiting = [], []
    for b in failed:
        if not b.holds or (not b.transient and not may_retry(attempts=b.attempts, max_attempts=max_attempts)):
            continue
        if runs.active(b.batch_id) is not None or runs.will_retry(b.batch_id, now):
            continue  # a run (or the orchestrator's own retry) is on it
        if b.transient and cause is not None:
            waiting.append(f"{b.batch_id} waits for its cause to pass ({cause})")
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


# --- rules about the snapshot -----------------------------------------------------------------


def free_priorities(wanted: Collection[Priority], full: Mapping[Priority, Sequence[str]]) -> set[Priority]:
    """Priorities with a free slot (``planner.max_in_flight`` per priority).

    >>> sorted(free_priorities({0, 1, 2}, {0: ["b-000003"]}))
    [1, 2]
    """
    return {p for p in wanted if p not in full}


def throttled_priorities(tracker: RateQuotaTracker, backlog: Mapping[Priority, int], wanted: Collection[Priority],
                         now_s: float) -> dict[Priority, float]:
    """Priorities with backlog that are over their rate quota, with the seconds they must wait."""
    return {p: t for p in wanted if backlog.get(p) and (t := tracker.throttle_time(p, now_s)) > 0}


def batch_budget(config: KprioConfig, throughput: float | None, record_budget: int | None = None, *,
                 backlog: int | None = None, fixed_cost_s: float | None = None) -> Budget:
    """The plan's budget: the record budget, cut to ``planner.target_batch_s`` of measured throughput.

    A batch of a throughput measured as 20,000 records/s aims at 2 s: 40,000 records. A topic
    with no measured throughput yet (its first batch) plans at most :data:`UNMEASURED_RECORDS`:
    that batch measures the rate, the next ones grow to the target, and a new process's first
    commit does not wait for a large batch on a cold Spark.

    A batch also takes the rest of the ``backlog`` when that rest would drain in less than a
    batch's ``fixed_cost_s`` (:func:`batch_fixed_cost`): a batch of its own would cost more in fixed
    cost than its records take. So a backlog drains in whole batches, not in batches and a tail, and
    a batch drains for at most twice ``planner.target_batch_s``.

    >>> cfg = KprioConfig.model_validate({"planner": {"record_budget": 1_000_000, "target_batch_s": 2}})
    >>> batch_budget(cfg, 20_000.0).records, batch_budget(cfg, None).records, batch_budget(cfg, 10.0).records
    (40000, 50000, 100)
    >>> batch_budget(cfg, 900_000.0).records
    1000000
    >>> [batch_budget(cfg, 300_000.0, backlog=n, fixed_cost_s=1.0).records for n in (850_000, 950_000)]
    [850000, 600000]
    >>> batch_budget(cfg, 300_000.0, backlog=1_300_000, fixed_cost_s=7.0).records  # a cold start's 7 s: 2 x 2 s
    600000
    """
    planner = config.planner
    records = record_budget or planner.record_budget
    if planner.target_batch_s is not None:
        target = UNMEASURED_RECORDS if not throughput else math.ceil(throughput * planner.target_batch_s)
        tail_s = min(fixed_cost_s or 0.0, planner.target_batch_s)
        if throughput and backlog and backlog - target <= throughput * tail_s:
            target = max(target, backlog)
        records = min(records, max(MIN_TARGET_RECORDS, target))
    return Budget(records=records, bytes=planner.byte_budget, min_share=planner.min_share)


def batch_fixed_cost(samples: Sequence[DrainSample]) -> float | None:
    """What a batch costs beside its records, from recent batches: the median of plan -> commit less the records'
    time (the run, the Spark job's fixed cost, the checks, the commit); None without a measured batch.

    >>> S = DrainSample
    >>> batch_fixed_cost([S(5, 0.3, 0.01, 0.8), S(700_000, 2.4, 1.2, 2.3), S(9, 0.3, 0.01, 0.9), S(9, 0.3)])
    0.89
    >>> batch_fixed_cost([S(5, 0.3, None, 0.8)]), batch_fixed_cost([S(5, 0.3)])
    (0.5, None)
    """
    costs = sorted(s.batch_seconds - (s.record_seconds if s.record_seconds is not None else s.seconds)
                   for s in samples if s.batch_seconds is not None)
    return costs[len(costs) // 2] if costs else None


MIN_SLOPE_S = 0.25
"""How much longer than the smallest recent batch a batch must have drained for :func:`drain_rate` to read a rate
from the difference."""


def drain_rate(samples: Sequence[DrainSample]) -> float | None:
    """The rate a bulk batch drains at, from recent batches' (records, drain seconds, records' seconds); None without.

    A drain takes a fixed cost (a Spark job: planning the read, starting its tasks) plus its records
    at a rate. The best measure of that rate is the drain's own: a fused drain records how long its
    tasks spent on records (``record_seconds``, their time over the cores they had), so even a new
    process's first batch, most of whose wall time is a cold Spark's, tells the rate of the records.
    Where no batch measured it (the key-order shuffle, a cluster of unknown size), the wall times
    give it: the smallest recent batch measures the fixed cost; each larger one, the rate of its
    records beyond it: ``(records - smallest's) / (seconds - smallest's)``, for a batch at least
    twice the smallest that drained at least :data:`MIN_SLOPE_S` longer (closer, the difference is
    the noise of two fixed costs). The best of all those, or of the plain rates (``records /
    seconds``, which count the fixed cost in) when nothing better is there. A budget sized from the
    plain rate of a small batch undershoots by its fixed cost, so the batches after a new process's
    first one grew slowly, over a ramp of five batches; the records' own rate sizes the second one.

    >>> S = DrainSample
    >>> drain_rate([S(4, 0.3), S(100_000, 0.8)]), drain_rate([S(3000, 2.0), S(1000, 2.0)]), drain_rate([])
    (199992.0, 1500.0, None)
    >>> drain_rate([S(6, 0.4), S(3000, 2.0)])  # a trickle measures the fixed cost: 2,994 records in 1.6 s
    1871.25
    >>> drain_rate([S(1, 0.64), S(18_000, 0.65)])  # 0.01 s apart: noise, not 1.8 million records/s
    27692.30769230769
    >>> drain_rate([S(50_000, 5.4, 0.2)])  # a cold first batch: 5.4 s of drain, 0.2 s of it its records
    250000.0
    """
    if not samples:
        return None
    plain = max(s.records / s.seconds for s in samples)
    small = min(samples, key=lambda s: (s.records, s.seconds))
    slopes = [(s.records - small.records) / (s.seconds - small.seconds) for s in samples
              if s.records >= 2 * small.records and s.seconds >= small.seconds + MIN_SLOPE_S]
    own = [s.records / s.record_seconds for s in samples if s.record_seconds]
    return max([plain, *slopes, *own])


SPLIT_MIN_S = 0.5
"""A plan splits its caught-up priorities off only when the rest drains at least this long (about a
batch's fixed cost): below it a second batch costs more than the wait it saves."""


def split_caught_up(plan: DrainPlan, backlog: Mapping[Priority, int], throughput: float | None) -> list[DrainPlan]:
    """The plan as one batch, or two: its caught-up priorities apart from the bulk ones.

    A batch holds the slot of every priority it drains until it commits. A priority whose whole open
    backlog the plan takes is caught up: more of its records arrive as a trickle, and they must not
    wait for a bulk batch sized to ``planner.target_batch_s`` that happened to take its last few. So
    when the rest of the plan (priorities with backlog left after it) drains for at least
    :data:`SPLIT_MIN_S` at the measured throughput, the caught-up priorities' ranges become a batch of
    their own, recorded first: same ranges, same quotas, the budget shared as the planner split it;
    the two run side by side, and the next trickle has a free slot as soon as its own small batch ends.
    When the plan catches every priority up (a batch that takes a backlog's tail, :func:`batch_budget`),
    the bulk is the priorities whose records drain for :data:`SPLIT_MIN_S` or longer, and the others
    are the caught-up batch.

    >>> from kprio_core.model.drain_plan import PlannedRange
    >>> from kprio_core.model.offsets import OffsetRange
    >>> ranges = (PlannedRange(2, OffsetRange("o-2", 0, 0, 4)), PlannedRange(0, OffsetRange("o-0", 0, 0, 400_000)))
    >>> plan = DrainPlan("o", "lag-aware", 404_004, None, {}, {}, ranges)
    >>> [p.records_by_priority() for p in split_caught_up(plan, {2: 4, 0: 900_000}, throughput=400_000.0)]
    [{2: 4}, {0: 400000}]
    >>> [len(split_caught_up(plan, {2: 4, 0: 900_000}, t)) for t in (None, 1_000_000.0)]  # unmeasured; rest too short
    [1, 1]
    >>> len(split_caught_up(plan, {2: 9, 0: 900_000}, 400_000.0))  # priority 2 not caught up: one batch
    1
    >>> [p.records_by_priority() for p in split_caught_up(plan, {2: 4, 0: 400_000}, 400_000.0)]  # all caught up
    [{2: 4}, {0: 400000}]
    """
    if not throughput:
        return [plan]
    planned = plan.records_by_priority()
    caught_up = {p for p, n in planned.items() if n and n >= backlog.get(p, 0)}
    if caught_up >= {p for p, n in planned.items() if n}:
        caught_up = {p for p in caught_up if planned[p] / throughput < SPLIT_MIN_S}
    rest = sum(n for p, n in planned.items() if p not in caught_up)
    if not caught_up or not rest or rest / throughput < SPLIT_MIN_S:
        return [plan]
    parts = [tuple(r for r in plan.ranges if (r.priority in caught_up) == first) for first in (True, False)]
    return [dataclasses.replace(plan, ranges=part, topic_ids={t: i for t, i in plan.topic_ids.items()
                                                              if t in {r.range.topic for r in part}})
            for part in parts]


def planned_topic_ids(plan: DrainPlan, snapshot: LagSnapshot) -> dict[str, str]:
    """The topic id of each priority topic ``plan`` reads, as the snapshot it was planned from saw it (where
    the cluster reports ids): the log a batch must still be reading when it publishes and commits.

    >>> from kprio_core.lifecycle.examples import snapshot
    >>> from kprio_core.model.drain_plan import PlannedRange
    >>> snap = dataclasses.replace(snapshot(backlog={2: 5}), topic_ids={"orders-2": "A", "orders-1": "B"})
    >>> plan = DrainPlan("orders", "lag-aware", 5, None, {}, {}, (PlannedRange(2, OffsetRange("orders-2", 0, 0, 5)),))
    >>> planned_topic_ids(plan, snap)
    {'orders-2': 'A'}
    """
    mine = {r.range.topic for r in plan.ranges if r.range.count}
    return {t: i for t, i in snapshot.topic_ids.items() if t in mine and i}


def rate_window(config: KprioConfig) -> timedelta:
    """How far back the rate samples go: ``rate.samples`` windows of ``rate.window_s``."""
    return timedelta(seconds=config.rate.samples * config.rate.window_s)


def rate_tracker(config: KprioConfig, samples: Iterable[DrainedSample]) -> RateQuotaTracker:
    """The topic's rate tracker under the quotas configured now, fed with what its committed batches drained.

    >>> from datetime import UTC, datetime
    >>> cfg = KprioConfig.model_validate({"rate": {"quotas": {2: {"records_per_s": 100}}, "samples": 2,
    ...                                             "window_s": 1}})
    >>> at = datetime(2026, 1, 1, tzinfo=UTC)
    >>> t = rate_tracker(cfg, [DrainedSample(at, 2, 100, 0), DrainedSample(at.replace(microsecond=500000), 2, 100, 0)])
    >>> round(t.throttle_time(2, at.timestamp() + 1.5), 3)
    0.5
    """
    quotas = config.rate.quotas
    tracker = RateQuotaTracker({p: q.records_per_s for p, q in quotas.items() if q.records_per_s},
                               {p: q.bytes_per_s for p, q in quotas.items() if q.bytes_per_s},
                               config.rate.samples, config.rate.window_s)
    for s in samples:
        tracker.record_batch(s.priority, s.records, s.bytes, s.at.timestamp())
    return tracker


def only(snapshot: LagSnapshot, priorities: Collection[Priority]) -> LagSnapshot:
    """The snapshot with the backlog of every other priority set to zero (its offsets untouched).

    The planner still sees every priority, so base quotas keep their meaning; an excluded
    priority just has nothing to drain and its quota flows to the others.
    """
    parts = tuple(
        p if p.priority in priorities else dataclasses.replace(p, high_watermark=p.next_offset, stable_offset=None)
        for p in snapshot.partitions
    )
    return dataclasses.replace(snapshot, partitions=parts)


def open_backlog(snapshot: LagSnapshot, reserved: Sequence[OffsetRange]) -> dict[Priority, int]:
    """Backlog per priority outside every reservation (what a plan could take)."""
    return {p: share.capacity for p, share in fair_shares(snapshot, reserved).items()}


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
                                    cause=passing_cause(inputs))
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

    log = log_decisions(config, view, snapshot)  # 7
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
    redrains = [b for d in log.decided for b in d.redrain]
    if redrains:  # a re-drain takes its priorities' slots like any batch: the plan below sees them taken
        for b in redrains:
            for p in b.priorities:
                slots.setdefault(p, []).append(b.batch_id)
        full = {p: ids for p, ids in slots.items() if len(ids) >= max_in_flight}
    snapshot = after_decisions(snapshot, log.decided)
    draft.holds += log.holds + lost_partitions(snapshot, config.drain.allow_data_loss)
    draft.more.update(changes=log.changes, decided=log.decided, snapshot=snapshot)
    draft.launches += [Launch(b, Why.REDRAIN, b.attempts + 1) for b in redrains]
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
                      distribution=config.planner.distribution, history=view.poll_history, reserved=reserved)
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
