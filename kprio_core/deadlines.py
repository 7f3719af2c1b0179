"""Objective-steered planning: the budget goes first to the records closest to breaking their priority's objective.

A record's *deadline* is its timestamp + its priority's ``slo.max_age_s``, by the *time marks*
(:attr:`PartitionLag.times`): between two marks, the later one's timestamp (due by its planned deadline at the latest);
after the last, the snapshot's time; never decreasing along a partition. Earliest-deadline-first meets every objective
whenever any schedule of the budget can, and keeps the largest lateness smallest otherwise (Jackson's rule): the
planner's bound (``kprio simulate``'s ``edf``). The rules (:func:`deadline_targets`, in
:func:`kprio_core.planner.plan_batch`'s order):

1. a priority without an objective keeps its minimum share (no starvation);
2. when every priority with backlog has an objective, the whole budget goes by deadline (ties: more urgent first);
3. otherwise the records that must go now (:func:`must_go_now`: what later batches of the budget, one every
   ``every_ms``, could not drain in time) go first, then today's split, each timed priority's by deadline.

Priority 0 (6 s objective): 3 records 5 s old, 3 new; priority 2 (60 s): 10 records 30 s old. 8 records: all six
of priority 0 (due within 6 s), then priority 2's two most due.

>>> from kprio_core.model.snapshot import PartitionLag
>>> now = 100_000
>>> p0 = Slot(PartitionLag("o-0", 0, 0, 0, 6, 0, times=((95_000, 3), (100_000, 6))), 0, 6)
>>> p2 = Slot(PartitionLag("o-2", 0, 2, 0, 10, 0, times=((70_000, 10),)), 0, 10)
>>> shares = {0: DeadlineShare([p0], 6_000, now), 2: DeadlineShare([p2], 60_000, now)}
>>> shares[0].levels, shares[2].levels
([(101000, 3), (106000, 3)], [(130000, 10)])
>>> grants = edf_targets(shares, 8)
>>> grants
{2: 2, 0: 6}
>>> due_reasons(shares, grants, now)
{2: '2 records due within 30 s of their objective', 0: '6 records due within 6 s of their objective'}
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kprio_core.model.priority import Priority
from kprio_core.shares import FairShare, Share, Slot, estimate_bytes


@dataclass(frozen=True)
class Objectives:
    """``slo.max_age_s`` as the planner steers by it, and ``every_ms`` between a priority's batches (simulator: 1 tick).

    >>> Objectives.of({2: 10, 0: 3600}, every_s=2).max_age_ms
    {2: 10000, 0: 3600000}
    """

    max_age_ms: Mapping[Priority, int] = field(default_factory=dict)
    every_ms: int = 1000

    @classmethod
    def of(cls, max_age_s: Mapping[Priority, float], every_s: float = 1.0) -> Objectives:
        return cls({p: math.ceil(s * 1000) for p, s in max_age_s.items()}, max(1, math.ceil(every_s * 1000)))


MARK_STEP = 4
"""Each time mark a tick reads is this many times further from now than the one before it: a few requests for
any objective (0, 1, 4, 16, 64, 256, 1,024 batch intervals), fine where deadlines are near, coarse where far."""


def mark_times(objectives: Objectives, now_ms: int) -> dict[Priority, list[int]]:
    """Per priority with an objective, the times a tick reads offsets of: records that old break it now, in 1, 4, ...
    batches (:data:`MARK_STEP`).

    >>> mark_times(Objectives({2: 10_000, 0: 3_000}, every_ms=1_000), now_ms=100_000)
    {2: [90000, 91000, 94000], 0: [97000, 98000]}
    """
    horizons, h = [0], objectives.every_ms
    while h < max(objectives.max_age_ms.values(), default=0):
        horizons.append(h)
        h *= MARK_STEP
    return {p: [now_ms + h - age for h in horizons if h < age] for p, age in objectives.max_age_ms.items()}


def segments(slot: Slot, objective_ms: int, now_ms: int) -> list[tuple[int, int]]:
    """``(deadline, records)`` of a partition's plannable records in offset order, deadlines never decreasing.

    >>> from kprio_core.model.snapshot import PartitionLag
    >>> part = PartitionLag("o-0", 0, 0, 0, 9, 2, oldest_pending_ms=500, times=((4_000, 6), (1_000, 4)))
    >>> segments(Slot(part, 2, 7), objective_ms=10_000, now_ms=9_000)
    [(10500, 1), (11000, 1), (14000, 2), (19000, 3)]
    """
    part = slot.part
    start, end = slot.start, slot.start + slot.capacity
    marks = list(part.times)
    if part.oldest_pending_ms is not None:
        marks.insert(0, (part.oldest_pending_ms, part.next_offset + 1))  # the record at the committed offset
    out: list[list[int]] = []
    at = start
    for ts, offset in sorted(marks, key=lambda m: m[1]):
        if offset > at and at < end:
            cut = min(offset, end)
            out.append([ts + objective_ms, cut - at])
            at = cut
    if at < end:
        out.append([now_ms + objective_ms, end - at])
    for k in range(len(out) - 2, -1, -1):  # due no later than any record behind it
        out[k][0] = min(out[k][0], out[k + 1][0])
    merged: list[tuple[int, int]] = []
    for deadline, count in out:
        if merged and merged[-1][0] == deadline:
            merged[-1] = (deadline, merged[-1][1] + count)
        else:
            merged.append((deadline, count))
    return merged


class DeadlineShare(Share):
    """A priority's records over its partitions in deadline order; at one deadline, max-min fair.

    >>> from kprio_core.model.snapshot import PartitionLag
    >>> a = Slot(PartitionLag("o-0", 0, 0, 0, 4, 0, times=((1_000, 2), (5_000, 4))), 0, 4)
    >>> b = Slot(PartitionLag("o-0", 1, 0, 0, 6, 0, times=((5_000, 6),)), 0, 6)
    >>> share = DeadlineShare([a, b], objective_ms=10_000, now_ms=6_000)
    >>> share.levels, share.counts(3), share.counts(7)
    ([(11000, 2), (15000, 8)], [2, 1], [4, 3])
    """

    def __init__(self, slots: Sequence[Slot], objective_ms: int, now_ms: int) -> None:
        self.slots = list(slots)
        self.capacity = sum(s.capacity for s in self.slots)
        self._avgs = [s.part.avg_record_bytes for s in self.slots]
        self._sized = any(a > 0 for a in self._avgs)
        at: dict[int, list[tuple[int, int]]] = {}
        for i, slot in enumerate(self.slots):
            for deadline, count in segments(slot, objective_ms, now_ms):
                at.setdefault(deadline, []).append((i, count))
        self._at = [at[d] for d in sorted(at)]
        self.levels = [(d, sum(c for _, c in at[d])) for d in sorted(at)]
        """``(deadline, records)`` of the priority, earliest first."""
        self._cum: list[int] = []
        for _, count in self.levels:
            self._cum.append((self._cum[-1] if self._cum else 0) + count)
        self._memo: dict[int, list[int]] = {}

    def counts(self, total: int) -> list[int]:
        """Records per slot for the ``total`` most due records."""
        total = min(total, self.capacity)
        if total in self._memo:
            return self._memo[total]
        whole = bisect_right(self._cum, total)
        counts = [0] * len(self.slots)
        for level in self._at[:whole]:
            for i, count in level:
                counts[i] += count
        rest = total - (self._cum[whole - 1] if whole else 0)
        if rest:
            level = self._at[whole]
            split = FairShare([Slot(self.slots[i].part, 0, count) for i, count in level]).counts(rest)
            for (i, _), count in zip(level, split):
                counts[i] += count
        self._memo[total] = counts
        return counts

    def bytes_for(self, total: int) -> int:
        if not self._sized or total <= 0:
            return 0
        return sum(estimate_bytes(c, a) for c, a in zip(self.counts(total), self._avgs))

    def deadline_of(self, nth: int) -> int | None:
        """The deadline of the ``nth`` most due record (1-based), None beyond the backlog."""
        k = bisect_left(self._cum, nth)
        return self.levels[k][0] if nth > 0 and k < len(self.levels) else None


def _merged(shares: Mapping[Priority, DeadlineShare]) -> list[tuple[int, int, int]]:
    """Every level of every priority as ``(deadline, -priority, records)``, earliest first, more urgent first."""
    return sorted((d, -p, c) for p, share in shares.items() for d, c in share.levels)


def edf_targets(shares: Mapping[Priority, DeadlineShare], records: int) -> dict[Priority, int]:
    """Records per priority of the ``records`` most due ones (earliest deadline first; ties: more urgent first)."""
    out = {p: 0 for p in sorted(shares, reverse=True)}
    left = records
    for _, neg, count in _merged(shares):
        if left <= 0:
            break
        take = min(count, left)
        out[-neg] += take
        left -= take
    return out


def must_go_now(shares: Mapping[Priority, DeadlineShare], records: int, now_ms: int, every_ms: int) -> int:
    """The most due records this batch must take (at most ``records``) so that later batches, ``records`` every
    ``every_ms``, drain the pending rest in time (arrivals aside).

    10 records due now and 25 due within 2 batches, 10 a batch: 10 now would leave 25 for 2 batches: 15 now.

    >>> from kprio_core.model.snapshot import PartitionLag
    >>> part = PartitionLag("o-0", 0, 0, 0, 35, 0, times=((0, 10), (2_000, 35)))
    >>> must_go_now({0: DeadlineShare([Slot(part, 0, 35)], 1_000, 1_000)}, 10, 1_000, 1_000)
    10
    >>> must_go_now({0: DeadlineShare([Slot(part, 0, 35)], 1_000, 1_000)}, 12, 1_000, 1_000)
    11
    """
    need = cum = 0
    for deadline, _, count in _merged(shares):
        cum += count
        need = max(need, cum - records * max(0, (deadline - now_ms) // every_ms))
    return min(need, records)


def deadline_targets(shares: Mapping[Priority, DeadlineShare], floors: Mapping[Priority, int], records: int,
                     objectives: Objectives, now_ms: int, *, every_priority: bool) -> dict[Priority, int]:
    """Rule 2, or rule 3's first half: what timed priorities take first (``floors``: the others' minimum shares)."""
    room = records - sum(floors.values())
    if every_priority:
        return edf_targets(shares, room)
    return edf_targets(shares, must_go_now(shares, room, now_ms, objectives.every_ms))


def due_reasons(shares: Mapping[Priority, DeadlineShare], granted: Mapping[Priority, int],
                now_ms: int) -> dict[Priority, str]:
    """Per priority with an objective and records in the plan, how close to breaking it they are."""
    out = {}
    for p, share in sorted(shares.items(), reverse=True):
        n = granted.get(p, 0)
        last = share.deadline_of(n)
        if last is None:
            continue
        late = sum(c for d, c in share.levels if d < now_ms)
        head, their = (f"{n:,} records", "their") if n > 1 else ("1 record", "its")
        if last < now_ms:
            out[p] = f"{head} past {their} objective"
            continue
        within = math.ceil((last - now_ms) / 1000)
        # A deadline of now is the earliest time mark's: those records are at their objective or past it.
        due = f"due within {within:,} s of {their} objective" if within else f"at or past {their} objective"
        out[p] = f"{head} {due}" + (
            f" ({min(n, late):,} past it)" if late else "")
    return out
