"""How a priority's records are spread over its partitions, within a record count and the byte budget.

A *share* says which partitions give a priority's granted records, each contiguous from its plan start:
:class:`FairShare` max-min fair (the default), :class:`~kprio_core.deadlines.DeadlineShare` by deadline.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from kprio_core.model.snapshot import PartitionLag


def estimate_bytes(count: int, avg_record_bytes: float) -> int:
    """Estimated bytes of ``count`` records: ``ceil(count * avg)`` (0 when the size is unknown).

    >>> estimate_bytes(3, 100.5), estimate_bytes(10, 0.0)
    (302, 0)
    """
    if count <= 0 or avg_record_bytes <= 0:
        return 0
    return math.ceil(count * avg_record_bytes)


@dataclass(frozen=True, slots=True)
class Slot:
    """One partition of a priority as a plan sees it: where the plan may start and how many records it may take."""

    part: PartitionLag
    start: int
    capacity: int


def _tie_break(slot: Slot) -> tuple[bool, int, int, str, int]:
    """Oldest backlog first: known oldest timestamps first, then the longest backlog."""
    ts = slot.part.oldest_pending_ms
    return (ts is None, ts or 0, -slot.capacity, slot.part.topic, slot.part.partition)


class Share:
    """How a priority's grant is spread over its partitions: ``counts(total)`` per slot, ``bytes_for(total)``
    (monotone in ``total``), ``slots`` and ``capacity``; the byte search is common to every way of spreading."""

    slots: list[Slot]
    capacity: int
    _sized: bool

    def counts(self, total: int) -> list[int]:
        raise NotImplementedError

    def bytes_for(self, total: int) -> int:
        raise NotImplementedError

    def most_within_bytes(self, base: int, want: int, byte_room: int) -> int:
        """Largest ``t <= want`` such that ``total base + t`` costs at most ``byte_room`` more bytes."""
        if not self._sized:
            return want
        before = self.bytes_for(base)
        limit = before + byte_room
        hi_bytes = self.bytes_for(base + want)
        if hi_bytes <= limit:
            return want
        # Invariant: t = lo fits, t = hi does not. Bytes grow almost linearly with records, so
        # interpolate; every other step bisects, which bounds the steps at twice a binary search.
        lo, hi, lo_bytes = 0, want, before
        bisect = False
        while hi - lo > 1:
            guess = (lo + hi) // 2
            if not bisect:
                guess = lo + (hi - lo) * (limit - lo_bytes) // (hi_bytes - lo_bytes)
                guess = min(max(guess, lo + 1), hi - 1)
            bisect = not bisect
            b = self.bytes_for(base + guess)
            if b <= limit:
                lo, lo_bytes = guess, b
            else:
                hi, hi_bytes = guess, b
        return lo


class FairShare(Share):
    """Max-min fair split of a priority's records over its partitions: each gets one level or its whole backlog, the
    leftovers one each to the oldest backlogs, so a skewed partition cannot take the quota while others wait.

    >>> parts = [PartitionLag("t", i, 0, 0, hw, 0) for i, hw in enumerate([1000, 3, 1000])]
    >>> FairShare([Slot(p, 0, p.backlog) for p in parts]).counts(20)
    [9, 3, 8]
    """

    def __init__(self, slots: Sequence[Slot]) -> None:
        self.slots = list(slots)
        self.capacity = sum(s.capacity for s in self.slots)
        self._by_capacity = sorted(range(len(self.slots)), key=lambda i: self.slots[i].capacity)
        self._caps = [self.slots[i].capacity for i in self._by_capacity]
        self._rank = [0] * len(self.slots)
        for r, i in enumerate(self._by_capacity):
            self._rank[i] = r
        self._by_age = sorted(range(len(self.slots)), key=lambda i: _tie_break(self.slots[i]))
        self._avgs = [s.part.avg_record_bytes for s in self.slots]
        self._sized = any(a > 0 for a in self._avgs)
        self._full_bytes: list[int] = []  # filled on first use: only a byte budget needs it
        self._bytes_memo: dict[int, int] = {}

    def _split(self, total: int) -> tuple[int, int, int]:
        """``(k, level, extra)``: the k smallest backlogs are taken whole, the others get ``level``
        records and ``extra`` of them (oldest backlog first) one more."""
        caps = self._caps
        remaining, left, k = min(total, self.capacity), len(caps), 0
        while k < len(caps) and caps[k] <= remaining // left:
            remaining -= caps[k]
            left -= 1
            k += 1
        if left == 0:
            return k, 0, 0
        level, extra = divmod(remaining, left)
        return k, level, extra

    def _extras(self, k: int, extra: int) -> list[int]:
        """Slots (not among the k saturated) that get one record above the level."""
        out: list[int] = []
        rank = self._rank
        for i in self._by_age:
            if len(out) == extra:
                break
            if rank[i] >= k:
                out.append(i)
        return out

    def counts(self, total: int) -> list[int]:
        """Records per slot (in slot order) for ``total`` records, ``0 <= total <= capacity``."""
        k, level, extra = self._split(total)
        counts = [0] * len(self.slots)
        for r, i in enumerate(self._by_capacity):
            counts[i] = self._caps[r] if r < k else level
        for i in self._extras(k, extra):
            counts[i] += 1
        return counts

    def bytes_for(self, total: int) -> int:
        """Estimated bytes of the split of ``total`` records (monotone in ``total``)."""
        if not self._sized or total <= 0:
            return 0
        memo = self._bytes_memo.get(total)
        if memo is not None:
            return memo
        if not self._full_bytes:
            # bytes of the k smallest partitions taken whole, in capacity order
            self._full_bytes = [0]
            for i in self._by_capacity:
                self._full_bytes.append(self._full_bytes[-1] + estimate_bytes(self.slots[i].capacity, self._avgs[i]))
        k, level, extra = self._split(total)
        avgs = self._avgs
        result = self._full_bytes[k]
        if level:
            result += sum(math.ceil(level * avgs[i]) for i in self._by_capacity[k:] if avgs[i] > 0)
        for i in self._extras(k, extra):
            a = avgs[i]
            if a > 0:
                result += math.ceil((level + 1) * a) - math.ceil(level * a)
        self._bytes_memo[total] = result
        return result
