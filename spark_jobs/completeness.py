"""Is an offset range complete? Track what a read saw and name exactly what is missing.

A read of ``[start, end)`` must return every offset once. Compacted topics and transaction
markers legitimately skip offsets and retention deletes them; all of these show up as gaps.
Without ``allow_data_loss`` a gap fails the read; with it, the gap is recorded.

>>> from kprio_core.offsets import OffsetRange
>>> t = RangeTracker(OffsetRange("orders-2", 0, 10, 20))
>>> t.observe([10, 11, 12]); t.observe([15, 16])
>>> [str(g) for g in t.missing()]
['orders-2[0]@[13,15)', 'orders-2[0]@[17,20)']
>>> [str(g) for g in missing_offsets(OffsetRange("orders-2", 0, 10, 20), [(8, 12), (15, 16)])]
['orders-2[0]@[13,15)', 'orders-2[0]@[17,20)']
>>> str(incomplete_error(OffsetRange("orders-2", 0, 10, 20), t.missing(), "end of partition at 17"))
'range orders-2[0]@[10,20) is incomplete: 5 of 10 offsets missing: [13,15) [17,20) (end of partition at 17)'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kprio_core.errors import RangeIncomplete
from kprio_core.offsets import OffsetRange

MAX_GAPS_NAMED = 8
"""Gaps spelled out in an error message; the count of the rest follows."""


class RangeTracker:
    """Offsets seen so far of one range, read in increasing order; gaps found as they appear."""

    def __init__(self, rng: OffsetRange) -> None:
        self.range = rng
        self.records = 0
        self.last: int | None = None
        self._gaps: list[OffsetRange] = []

    def observe(self, offsets: Sequence[int]) -> None:
        """Record a chunk of offsets, each inside the range and above every offset seen before."""
        import numpy as np

        if not len(offsets):
            return
        expected = self.range.start if self.last is None else self.last + 1
        seen = np.asarray(offsets, dtype=np.int64)
        steps = np.diff(seen, prepend=expected - 1)
        if (steps <= 0).any():
            at = int(np.flatnonzero(steps <= 0)[0])
            raise ValueError(f"{self.range}: offset {seen[at]} seen after {expected - 1 if at == 0 else seen[at - 1]}")
        for at in np.flatnonzero(steps > 1).tolist():  # gaps: rare, one entry each
            before = expected if at == 0 else int(seen[at - 1]) + 1
            self._gaps.append(OffsetRange(self.range.topic, self.range.partition, before, int(seen[at])))
        self.records += len(seen)
        self.last = int(seen[-1])

    def skip_to(self, offset: int) -> None:
        """The log starts at ``offset`` now (retention): everything before it is a gap."""
        expected = self.range.start if self.last is None else self.last + 1
        if offset > expected:
            end = min(offset, self.range.end)
            self._gaps.append(OffsetRange(self.range.topic, self.range.partition, expected, end))
            self.last = end - 1

    def missing(self) -> tuple[OffsetRange, ...]:
        """Gaps so far plus the tail not (yet) read."""
        tail_start = self.range.start if self.last is None else self.last + 1
        tail = (
            (OffsetRange(self.range.topic, self.range.partition, tail_start, self.range.end),)
            if tail_start < self.range.end
            else ()
        )
        return tuple(self._gaps) + tail

    @property
    def complete(self) -> bool:
        return not self.missing()


def missing_offsets(rng: OffsetRange, runs: Iterable[tuple[int, int]]) -> tuple[OffsetRange, ...]:
    """Offsets of ``rng`` not covered by ``runs`` (inclusive ``(first, last)`` runs of present offsets)."""
    missing: list[OffsetRange] = []
    expected = rng.start
    for first, last in sorted(runs):
        first, last = max(first, rng.start), min(last, rng.end - 1)
        if first > last:
            continue
        if first > expected:
            missing.append(OffsetRange(rng.topic, rng.partition, expected, first))
        expected = max(expected, last + 1)
    if expected < rng.end:
        missing.append(OffsetRange(rng.topic, rng.partition, expected, rng.end))
    return tuple(missing)


def describe_gaps(gaps: Sequence[OffsetRange]) -> str:
    """``[13,15) [17,20)``, at most MAX_GAPS_NAMED of them, then how many more."""
    named = " ".join(f"[{g.start},{g.end})" for g in gaps[:MAX_GAPS_NAMED])
    more = len(gaps) - MAX_GAPS_NAMED
    return named + (f" and {more} more gaps" if more > 0 else "")


def incomplete_error(rng: OffsetRange, gaps: Sequence[OffsetRange], reason: str) -> RangeIncomplete:
    """The error a short or gapped range fails with: topic, partition and the missing offsets."""
    lost = sum(g.count for g in gaps)
    return RangeIncomplete(
        f"range {rng} is incomplete: {lost} of {rng.count} offsets missing: {describe_gaps(gaps)} ({reason})"
    )
