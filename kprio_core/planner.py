"""The planner: a lag snapshot + a budget -> the offset ranges of the next batch.

Two modes share the same frame (start offsets, per-priority fair share over partitions, both
budgets); they differ only in how many records each priority is granted:

- ``lag-aware`` (default) sees the exact backlog, so quota a priority cannot use flows at once to
  the others, most urgent first (water-filling), after every priority with backlog got its
  minimum share;
- ``flipkart`` grants what flipkart's window rule gives (base quota + burst from the poll
  history, :mod:`kprio_core.burst`), capped by backlog, with no redistribution.

With freshness objectives, a ``lag-aware`` plan gives the budget first to the records closest to
breaking their priority's objective, a priority's partitions in deadline order
(:mod:`kprio_core.deadlines`); without any, it is the quotas' alone.

3 priorities, 50 records (quotas 29/14/7), priority 1 has only 4 records waiting: its 10 unused
records go to priority 2.

>>> from kprio_core.model.snapshot import LagSnapshot, PartitionLag
>>> snap = LagSnapshot.of("orders", 3, [
...     PartitionLag("orders-2", 0, 2, log_start=0, high_watermark=100, committed=0),
...     PartitionLag("orders-1", 0, 1, log_start=0, high_watermark=4, committed=0),
...     PartitionLag("orders-0", 0, 0, log_start=0, high_watermark=100, committed=None),
... ])
>>> plan = plan_batch(snap, Budget(records=50))
>>> plan.quotas, plan.grants
({2: 29, 1: 14, 0: 7}, {2: 39, 1: 4, 0: 7})
>>> [str(r.range) for r in plan.ranges]
['orders-2[0]@[0,39)', 'orders-1[0]@[0,4)', 'orders-0[0]@[0,7)']
>>> plan_batch(snap, Budget(records=50), mode=PlanMode.FLIPKART).grants
{2: 29, 1: 14, 0: 7}

Byte estimates: a range of ``count`` records on a partition whose average record size is ``avg``
is ``ceil(count * avg)`` bytes. When ``avg_record_bytes`` is 0 (unknown) the partition's
records are estimated at 0 bytes, so the byte budget cannot bind on it: set a record budget
that is safe on its own, or let the Kafka edge measure sizes. A byte budget smaller than one
record of every partition with backlog gives an empty plan (the budget is never exceeded).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kprio_core.burst import PollHistory, burst_capacities
from kprio_core.deadlines import DeadlineShare, Objectives, deadline_targets, due_reasons
from kprio_core.errors import QuotaError
from kprio_core.model.drain_plan import BurstDecision, DrainPlan, PlanMode, PlannedRange
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.priority import Priority, most_urgent_first
from kprio_core.model.snapshot import LagSnapshot, PartitionLag
from kprio_core.quota import Distribution, base_quotas
from kprio_core.shares import FairShare, Share, Slot, estimate_bytes


@dataclass(frozen=True)
class Budget:
    """Limits of one batch: records, optional estimated bytes, and ``min_share`` (0: off): in ``lag-aware`` every
    priority with backlog gets ``max(1, floor(min_share * records))`` records, or its whole backlog if smaller.

    >>> min_share_records(Budget(records=50))
    2
    """

    records: int
    bytes: int | None = None
    min_share: float = 0.05

    def __post_init__(self) -> None:
        if self.records < 1:
            raise QuotaError(f"record budget must be >= 1, got {self.records}")
        if self.bytes is not None and self.bytes < 1:
            raise QuotaError(f"byte budget must be >= 1 (or None for no byte budget), got {self.bytes}")
        if not 0.0 <= self.min_share <= 1.0:
            raise QuotaError(f"min_share must be within [0, 1], got {self.min_share}")


def min_share_records(budget: Budget) -> int:
    """Records guaranteed to each priority with backlog (before its backlog caps it)."""
    if budget.min_share <= 0:
        return 0
    return max(1, math.floor(budget.min_share * budget.records))


# --- where each partition starts ---------------------------------------------------------------


def reserved_ends(reserved: Iterable[OffsetRange]) -> dict[tuple[str, int], int]:
    """Per topic partition, the end of the furthest range held by a batch in flight.

    >>> reserved_ends([OffsetRange("t", 0, 0, 10), OffsetRange("t", 0, 10, 25)])
    {('t', 0): 25}
    """
    ends: dict[tuple[str, int], int] = {}
    for r in reserved:
        key = r.topic_partition
        ends[key] = max(ends.get(key, r.end), r.end)
    return ends


def plan_start(part: PartitionLag, reserved_end: int | None) -> int:
    """First offset this batch may plan: after the committed offset and every reservation (ranges stay contiguous).

    >>> p = PartitionLag("t", 0, 0, log_start=0, high_watermark=100, committed=10)
    >>> plan_start(p, None), plan_start(p, 40), plan_start(p, 5)
    (10, 40, 10)

    A partition held by a failed batch (:func:`~kprio_core.model.offsets.held_range`) plans nothing:

    >>> from kprio_core.model.offsets import held_range
    >>> plan_start(p, reserved_ends([held_range("t", 0, 10)])[("t", 0)]) >= p.high_watermark
    True
    """
    start = part.next_offset
    if reserved_end is not None and reserved_end > start:
        start = reserved_end
    return start


# --- grant rules: one small pure function each --------------------------------------------------


def min_share_targets(available: Mapping[Priority, int], budget: Budget) -> dict[Priority, int]:
    """Stage 1 target: the guaranteed minimum of every priority with backlog.

    >>> min_share_targets({2: 100, 1: 1, 0: 0}, Budget(records=100))
    {2: 5, 1: 1, 0: 0}
    """
    floor_ = min_share_records(budget)
    return {p: min(a, floor_) for p, a in available.items()}


def quota_targets(
    available: Mapping[Priority, int],
    quotas: Mapping[Priority, int],
    floors: Mapping[Priority, int],
    records: int,
) -> dict[Priority, int]:
    """Stage 2 target: the base quota capped by backlog, never below the stage-1 floor; an overflow of the budget is
    given back by the most urgent (largest) quotas, down to their floor.

    >>> quota_targets({2: 100, 1: 4, 0: 100}, {2: 29, 1: 14, 0: 7}, {2: 2, 1: 2, 0: 2}, 50)
    {2: 29, 1: 4, 0: 7}
    >>> quota_targets({4: 99, 3: 99, 2: 99, 1: 99, 0: 99}, {4: 54, 3: 25, 2: 12, 1: 6, 0: 3},
    ...               {4: 5, 3: 5, 2: 5, 1: 5, 0: 5}, 100)
    {4: 52, 3: 25, 2: 12, 1: 6, 0: 5}
    """
    targets = {p: max(floors[p], min(a, quotas[p])) for p, a in available.items()}
    overflow = sum(targets.values()) - records
    for p in sorted(targets, reverse=True):
        if overflow <= 0:
            break
        cut = min(overflow, targets[p] - floors[p])
        targets[p] -= cut
        overflow -= cut
    return targets


def water_fill_targets(available: Mapping[Priority, int]) -> dict[Priority, int]:
    """Stage 3 target: the whole backlog (what is left of the budget goes most urgent first)."""
    return dict(available)


def window_rule_targets(available: Mapping[Priority, int], capacities: Mapping[Priority, int]) -> dict[Priority, int]:
    """Flipkart mode's burst stage: the window rule's capacity, capped by backlog.

    >>> window_rule_targets({2: 100, 1: 3, 0: 100}, {2: 33, 1: 14, 0: 7})
    {2: 33, 1: 3, 0: 7}
    """
    return {p: min(a, capacities[p]) for p, a in available.items()}


def fill_stages(
    stages: Sequence[Mapping[Priority, int]],
    shares: Mapping[Priority, Share],
    budget: Budget,
) -> dict[Priority, int]:
    """Raise each priority toward each stage's target, stage by stage, most urgent first, within both budgets."""
    granted = {p: 0 for p in sorted(shares, reverse=True)}
    records_left = budget.records
    bytes_left = budget.bytes
    for targets in stages:
        for p in sorted(targets, reverse=True):
            want = min(targets[p] - granted[p], records_left)
            if want <= 0:
                continue
            if bytes_left is not None:
                share = shares[p]
                want = share.most_within_bytes(granted[p], want, bytes_left)
                bytes_left -= share.bytes_for(granted[p] + want) - share.bytes_for(granted[p])
            granted[p] += want
            records_left -= want
    return granted


# --- the planner --------------------------------------------------------------------------------


def plan_batch(
    snapshot: LagSnapshot,
    budget: Budget,
    *,
    mode: PlanMode | str = PlanMode.LAG_AWARE,
    distribution: Distribution | str = Distribution.EXP,
    history: PollHistory | None = None,
    reserved: Iterable[OffsetRange] = (),
    objectives: Objectives | None = None,
) -> DrainPlan:
    """Plan the next batch: contiguous ranges from each partition's start, within both budgets. ``grants``: in
    ``lag-aware`` mode the records each priority takes; in ``flipkart`` the window rule's capacity, of which a priority
    takes at most its backlog and, for the burst, what the others left. ``history`` (``flipkart`` only; empty: no
    burst): the caller records each batch, ``history.record(drained, plan.quotas)``."""
    n = snapshot.n_priorities
    mode = _plan_mode(mode, budget, n)
    quotas = base_quotas(n, budget.records, distribution)
    shares: Mapping[Priority, Share] = fair_shares(snapshot, reserved)
    available = {p: shares[p].capacity for p in most_urgent_first(n)}
    due: dict[Priority, str] = {}
    if mode is PlanMode.FLIPKART:
        granted, grants, burst = _flipkart_grants(snapshot, budget, quotas, shares, available, history)
    else:
        shares, granted, burst, due = _lag_aware_grants(snapshot, budget, quotas, shares, available, objectives)
        grants = granted
    return DrainPlan(
        logical_topic=snapshot.logical_topic,
        mode=mode,
        record_budget=budget.records,
        byte_budget=budget.bytes,
        quotas=quotas,
        grants=dict(grants),
        ranges=_ranges(shares, granted),
        burst=burst,
        lost=snapshot.lost_to_retention(),
        backlog_before=snapshot.backlog_by_priority(),
        snapshot_taken_at_ms=snapshot.taken_at_ms,
        due=due,
    )


def _plan_mode(mode: PlanMode | str, budget: Budget, n: int) -> PlanMode:
    """The plan mode named, and the budget it can keep: n minimum shares must fit in the whole budget."""
    try:
        mode = PlanMode(mode)
    except ValueError:
        raise QuotaError(f"unknown plan mode {mode!r}: use one of {', '.join(PlanMode)}") from None
    if mode is PlanMode.LAG_AWARE and budget.min_share * n > 1.0:
        raise QuotaError(
            f"min_share {budget.min_share} x {n} priorities exceeds the whole budget: use at most {1 / n:.4f}"
        )
    return mode


def _flipkart_grants(
    snapshot: LagSnapshot, budget: Budget, quotas: Mapping[Priority, int], shares: Mapping[Priority, Share],
    available: Mapping[Priority, int], history: PollHistory | None,
) -> tuple[dict[Priority, int], Mapping[Priority, int], BurstDecision | None]:
    """``flipkart`` mode: (records granted, the window rule's capacities, the burst) from the poll history."""
    n = snapshot.n_priorities
    history = history if history is not None else PollHistory(n)
    if history.n_priorities != n:
        raise QuotaError(
            f"poll history has {history.n_priorities} priorities, snapshot of "
            f"{snapshot.logical_topic!r} has {n}"
        )
    capacities, burst = burst_capacities(quotas, history)
    # Order: base quotas (they sum to the budget: always fit), then the burst, priced on the others' *expected*
    # unused capacity: when they use it, the budget caps the burst (flipkart's client overshoots max.poll.records).
    no_floors = {p: 0 for p in available}
    stages = [
        quota_targets(available, quotas, no_floors, budget.records),
        window_rule_targets(available, capacities),
    ]
    return fill_stages(stages, shares, budget), capacities, burst


def _lag_aware_grants(
    snapshot: LagSnapshot, budget: Budget, quotas: Mapping[Priority, int], shares: Mapping[Priority, Share],
    available: Mapping[Priority, int], objectives: Objectives | None,
) -> tuple[Mapping[Priority, Share], dict[Priority, int], BurstDecision | None, dict[Priority, str]]:
    """``lag-aware`` mode: (the shares, deadline-ordered where timed; records granted; the burst; why due)."""
    # Order: minimum shares (no priority with backlog starves), base quotas (urgency decides when all are busy), the
    # rest most urgent first (no budget wasted); with objectives, timed priorities' most due records come first.
    floors = min_share_targets(available, budget)
    now = snapshot.taken_at_ms
    timed = deadline_shares(shares, objectives, now) if objectives else {}
    every_priority = bool(timed) and not any(a for p, a in available.items() if p not in timed)
    if timed:
        floors = {p: 0 if p in timed else f for p, f in floors.items()}
        first = deadline_targets(timed, floors, budget.records, objectives, now, every_priority=every_priority)
        floors = {p: max(f, first.get(p, 0)) for p, f in floors.items()}
        shares = {**shares, **timed}
    stages = [
        floors,
        quota_targets(available, quotas, floors, budget.records),
        water_fill_targets(available),
    ]
    granted = fill_stages(stages, shares, budget)
    burst = None if every_priority else water_fill_decision(quotas, granted, available)
    return shares, granted, burst, due_reasons(timed, granted, now)


def water_fill_decision(
    quotas: Mapping[Priority, int], granted: Mapping[Priority, int], available: Mapping[Priority, int]
) -> BurstDecision | None:
    """Who got more than its base quota in lag-aware mode (the most urgent one), and why.

    >>> water_fill_decision({2: 29, 1: 14, 0: 7}, {2: 39, 1: 4, 0: 7}, {2: 100, 1: 4, 0: 100})
    BurstDecision(priority=2, extra=10, reason='water-filling: 1 left 10 of its quota unused (backlog 4); 2 took 10 more')
    """
    gainers = {p: granted[p] - quotas[p] for p in sorted(quotas, reverse=True) if granted[p] > quotas[p]}
    if not gainers:
        return None
    donors = {p: quotas[p] - granted[p] for p in sorted(quotas, reverse=True) if granted[p] < quotas[p]}
    donor_text = "; ".join(
        f"{p} left {d} of its quota unused ("
        + (f"backlog {available[p]}" if available[p] <= granted[p] else "byte budget")
        + ")"
        for p, d in donors.items()
    ) or "minimum share raised low quotas"
    gain_text = ", ".join(f"{p} took {g} more" for p, g in gainers.items())
    top = next(iter(gainers))
    return BurstDecision(top, gainers[top], f"water-filling: {donor_text}; {gain_text}")


def fair_shares(snapshot: LagSnapshot, reserved: Iterable[OffsetRange] = ()) -> dict[Priority, FairShare]:
    """Per priority, its partitions from their plan start to :attr:`PartitionLag.readable_end` (last stable offset)."""
    ends = reserved_ends(reserved)
    slots: dict[Priority, list[Slot]] = {p: [] for p in range(snapshot.n_priorities)}
    for part in snapshot.partitions:
        if part.priority not in slots:
            raise QuotaError(
                f"{part.topic}[{part.partition}] has priority {part.priority}, outside 0..{snapshot.n_priorities - 1}"
            )
        start = plan_start(part, ends.get((part.topic, part.partition)))
        slots[part.priority].append(Slot(part, start, max(0, part.readable_end - start)))
    return {p: FairShare(s) for p, s in slots.items()}


def deadline_shares(shares: Mapping[Priority, Share], objectives: Objectives, now_ms: int) -> dict[Priority, Share]:
    """The partitions of each priority with an objective, in deadline order (:class:`DeadlineShare`)."""
    return {p: DeadlineShare(shares[p].slots, age, now_ms) for p, age in objectives.max_age_ms.items() if p in shares}


def _ranges(shares: Mapping[Priority, Share], granted: Mapping[Priority, int]) -> tuple[PlannedRange, ...]:
    out: list[PlannedRange] = []
    for p in sorted(shares, reverse=True):
        share = shares[p]
        for count, slot in zip(share.counts(granted[p]), share.slots):
            if count > 0:
                part = slot.part
                rng = OffsetRange(part.topic, part.partition, slot.start, slot.start + count)
                out.append(PlannedRange(p, rng, estimate_bytes(count, part.avg_record_bytes)))
    out.sort(key=lambda r: (-r.priority, r.range.topic, r.range.partition))
    return tuple(out)
