"""Is an offset range complete? Track what a read found, what it lost, and where it stopped.

A read of ``[start, end)`` is complete when the reader has **passed its end** (a record or the end of the
partition at or beyond it). Offsets skipped on the way (transaction markers, aborted or compacted records)
are normal, never a gap.

Offsets are **lost** only when the log no longer holds them: below the log start (retention) or beyond the
log's end (truncation, a recreated topic). Without ``allow_data_loss`` a loss fails the read; with it, it is
recorded. A read that stalls fails whatever ``allow_data_loss`` says.

Markers at 13 and 17, retention moved the log start to 12 while reading, then the end passed:

>>> from kprio_core.model.offsets import OffsetRange
>>> t = RangeTracker(OffsetRange("orders-2", 0, 10, 20))
>>> t.observe([10, 11]); t.skip_to(12); t.observe([12, 14, 15, 16]); t.observe([18, 19]); t.reach(20)
>>> t.records, t.passed_end, [str(g) for g in t.lost()]
(8, True, [])
>>> t = RangeTracker(OffsetRange("orders-2", 0, 10, 20))
>>> t.skip_to(13); t.observe([13, 15])
>>> [str(g) for g in t.lost()]
['orders-2[0]@[10,13)', 'orders-2[0]@[16,20)']
>>> [str(g) for g in missing_offsets(OffsetRange("orders-2", 0, 10, 20), [(8, 12), (15, 16)])]
['orders-2[0]@[13,15)', 'orders-2[0]@[17,20)']
>>> str(incomplete_error(OffsetRange("orders-2", 0, 10, 20), t.lost(), "end of partition at 16"))
'range orders-2[0]@[10,20) is incomplete: 7 of 10 offsets missing: [10,13) [16,20) (end of partition at 16)'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kprio_core.errors import RangeIncomplete, ReadStalled
from kprio_core.model.offsets import OffsetRange

MAX_GAPS_NAMED = 8
"""Gaps spelled out in an error message; the count of the rest follows."""


class RangeTracker:
    """One read of one range: records found, offsets lost, and the reader's position (see the module)."""

    def __init__(self, rng: OffsetRange) -> None:
        self.range = rng
        self.records = 0
        self.position = rng.start
        """The next offset the reader would return: every offset below it was read, skipped or lost."""
        self._lost: list[OffsetRange] = []

    def observe(self, offsets: Sequence[int]) -> None:
        """Record a chunk of offsets found, each inside the range and above every offset seen before."""
        import numpy as np

        if not len(offsets):
            return
        seen = np.asarray(offsets, dtype=np.int64)
        steps = np.diff(seen, prepend=self.position - 1)
        if (steps <= 0).any():
            at = int(np.flatnonzero(steps <= 0)[0])
            raise ValueError(f"{self.range}: offset {seen[at]} seen after "
                             f"{self.position - 1 if at == 0 else seen[at - 1]}")
        if seen[-1] >= self.range.end:
            raise ValueError(f"{self.range}: offset {seen[-1]} is beyond the range")
        self.records += len(seen)
        self.position = int(seen[-1]) + 1

    def reach(self, offset: int) -> None:
        """The reader's position moved to ``offset`` with no record between (markers, the end passed)."""
        self.position = max(self.position, min(offset, self.range.end))

    def skip_to(self, offset: int) -> None:
        """The log starts at ``offset`` now (retention): what the reader had not read below it is lost."""
        end = min(offset, self.range.end)
        if end > self.position:
            self._lost.append(OffsetRange(self.range.topic, self.range.partition, self.position, end))
            self.position = end

    @property
    def passed_end(self) -> bool:
        return self.position >= self.range.end

    def lost(self) -> tuple[OffsetRange, ...]:
        """Offsets lost so far plus the tail the reader did not pass (yet)."""
        tail = ((OffsetRange(self.range.topic, self.range.partition, self.position, self.range.end),)
                if not self.passed_end else ())
        return tuple(self._lost) + tail

    @property
    def complete(self) -> bool:
        return not self.lost()


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


def incomplete_error(rng: OffsetRange, gaps: Sequence[OffsetRange], reason: str, *,
                     stalled: bool = False) -> RangeIncomplete:
    """The error a short or gapped range fails with, naming the missing offsets.

    ``stalled``: the offsets may be there once the leader is back: :class:`~kprio_core.errors.ReadStalled` (transient).
    """
    lost = sum(g.count for g in gaps)
    return (ReadStalled if stalled else RangeIncomplete)(
        f"range {rng} is incomplete: {lost} of {rng.count} offsets missing: {describe_gaps(gaps)} ({reason})"
    )
