"""What a tick may plan for one logical topic: rules 8 to 11 of :func:`~kprio_core.lifecycle.tick.decide_tick`
(free slots, rate quotas, the record budget, caught-up priorities split off). Pure: measurements passed in."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import timedelta

from kprio_core.config import KprioConfig
from kprio_core.deadlines import Objectives
from kprio_core.model.drain_plan import DrainPlan, PlanMode
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.priority import Priority
from kprio_core.model.records import DrainedSample, DrainSample
from kprio_core.model.snapshot import LagSnapshot
from kprio_core.planner import Budget, fair_shares
from kprio_core.rate import RateQuotaTracker

MIN_TARGET_RECORDS = 100
"""Smallest batch the target duration may size: below it a batch is all fixed cost."""
UNMEASURED_RECORDS = 50_000
"""Most records of a batch sized to ``planner.target_batch_s`` before any throughput was measured."""


# --- rules about the snapshot -----------------------------------------------------------------


def free_priorities(wanted: Collection[Priority], full: Mapping[Priority, Sequence[str]]) -> set[Priority]:
    """Priorities with a free slot (``planner.max_in_flight`` per priority).

    >>> sorted(free_priorities({0, 1, 2}, {0: ["b-000003"]}))
    [1, 2]
    """
    return {p for p in wanted if p not in full}


def bulk_lane_free(workers: int, bulk_running: int) -> bool:
    """Whether a batch without the most urgent priority may start: one warm worker is kept for the urgent lane,
    so the bulk lane takes ``workers - 1`` (a lone worker takes either); beyond, it would wait holding its slots.

    >>> bulk_lane_free(2, 0), bulk_lane_free(2, 1), bulk_lane_free(1, 0), bulk_lane_free(3, 1)
    (True, False, True, True)
    """
    return bulk_running < max(1, workers - 1)


def throttled_priorities(tracker: RateQuotaTracker, backlog: Mapping[Priority, int], wanted: Collection[Priority],
                         now_s: float) -> dict[Priority, float]:
    """Priorities with backlog that are over their rate quota, with the seconds they must wait."""
    return {p: t for p in wanted if backlog.get(p) and (t := tracker.throttle_time(p, now_s)) > 0}


def batch_budget(config: KprioConfig, throughput: float | None, record_budget: int | None = None, *,
                 backlog: int | None = None, fixed_cost_s: float | None = None) -> Budget:
    """The plan's budget: the record budget, cut to ``planner.target_batch_s`` of measured throughput.

    Unmeasured: at most :data:`UNMEASURED_RECORDS`, so a first commit does not wait on a cold Spark. A batch takes
    the ``backlog``'s rest when it drains in under ``fixed_cost_s`` (no tail batch costing more than its records),
    so it drains at most twice ``planner.target_batch_s``.

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


def batch_objectives(config: KprioConfig) -> Objectives | None:
    """The objectives that steer a lag-aware plan (``slo.max_age_s``; none: the quotas alone), with a priority's
    batches about one tick and one batch apart (``sensor.interval_s`` + ``planner.target_batch_s``).

    >>> batch_objectives(KprioConfig.model_validate({"slo": {"max_age_s": {2: 10}}}))
    Objectives(max_age_ms={2: 10000}, every_ms=4000)
    >>> batch_objectives(KprioConfig()) is None
    True
    """
    if not config.slo.max_age_s or config.planner.mode is not PlanMode.LAG_AWARE:
        return None
    return Objectives.of(config.slo.max_age_s, config.sensor.interval_s + (config.planner.target_batch_s or 0))


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
"""How much longer than the smallest recent batch one must drain for :func:`drain_rate` to read a slope."""


def drain_rate(samples: Sequence[DrainSample]) -> float | None:
    """The rate a bulk batch drains at, from recent batches' (records, drain seconds, records' seconds); None without.

    A drain is a fixed cost plus records at a rate. Best is its own measure (``record_seconds``): even a cold first
    batch tells it. Else the smallest batch measures the fixed cost and each one twice as big and
    :data:`MIN_SLOPE_S` longer the slope beyond it. The best of those and plain ``records / seconds`` (alone, it
    undershoots by the fixed cost: batches grew over a ramp of five).

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

    A batch holds its slots until it commits, so a caught-up priority's trickle must not wait for a bulk batch:
    when the rest drains at least :data:`SPLIT_MIN_S`, the caught-up ranges become a batch of their own, recorded
    first; the two run side by side. All caught up: the bulk is those draining :data:`SPLIT_MIN_S` or longer.

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
                                                              if t in {r.range.topic for r in part}},
                                due={p: why for p, why in plan.due.items() if p in {r.priority for r in part}})
            for part in parts]


def planned_topic_ids(plan: DrainPlan, snapshot: LagSnapshot) -> dict[str, str]:
    """The topic id of each priority topic ``plan`` reads, as planned (where the cluster reports ids): the log a
    batch must still be reading when it publishes and commits.

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
    """The snapshot with every other priority's backlog zeroed: the planner still sees them (base quotas keep
    their meaning), and an excluded priority's quota flows to the others."""
    parts = tuple(
        p if p.priority in priorities else dataclasses.replace(p, high_watermark=p.next_offset, stable_offset=None)
        for p in snapshot.partitions
    )
    return dataclasses.replace(snapshot, partitions=parts)


def open_backlog(snapshot: LagSnapshot, reserved: Sequence[OffsetRange]) -> dict[Priority, int]:
    """Backlog per priority outside every reservation (what a plan could take)."""
    return {p: share.capacity for p, share in fair_shares(snapshot, reserved).items()}
