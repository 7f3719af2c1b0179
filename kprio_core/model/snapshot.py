"""Lag snapshot: where every partition of every priority topic stands right now.

"Nothing committed" is explicit (``committed is None``): draining starts at the log start, as
``auto.offset.reset=earliest`` would. Undrained offsets below the log start (never committed: from 0) were deleted by
retention: that gap is reported, never silently skipped.

>>> p = PartitionLag("orders-2", 0, priority=2, log_start=10, high_watermark=50, committed=4)
>>> p.next_offset, p.backlog
(10, 40)
>>> p.lost_to_retention
OffsetRange(topic='orders-2', partition=0, start=4, end=10)
>>> PartitionLag("orders-0", 1, priority=0, log_start=0, high_watermark=7, committed=None).backlog
7
>>> PartitionLag("orders-0", 2, priority=0, log_start=3, high_watermark=7, committed=None).lost_to_retention
OffsetRange(topic='orders-0', partition=2, start=0, end=3)

A committed offset beyond the high watermark (truncated log, recreated topic) is never clamped to it, which would
skip every record below it silently: the backlog is 0 and ``kprio_core.log_changes`` holds it with a reason:

>>> a = PartitionLag("orders-2", 1, priority=2, log_start=0, high_watermark=30, committed=500)
>>> a.next_offset, a.backlog, a.ahead_of_log
(500, 0, True)

A transaction open at offset 40 (the last stable offset) ends a ``read_committed`` backlog there; the 10 records
behind it wait for the transaction to end, holding nothing else back:

>>> t = PartitionLag("orders-2", 0, priority=2, log_start=0, high_watermark=50, committed=4, stable_offset=40)
>>> t.readable_end, t.backlog, t.behind_open_transaction
(40, 36, 10)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kprio_core.model.offsets import OffsetRange
from kprio_core.model.priority import Priority


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One partition of one priority topic: log start, high watermark, committed offset."""

    topic: str
    partition: int
    priority: Priority
    log_start: int
    high_watermark: int
    committed: int | None
    avg_record_bytes: float = 0.0
    oldest_pending_ms: int | None = None
    """Timestamp of the record at ``next_offset``, when known: the planner's fairness tie-break."""
    stable_offset: int | None = None
    """Last stable offset (``read_committed``): oldest open transaction's start, else (or None) the high watermark."""
    open_transaction_ms: int | None = None
    """Timestamp of the first record of the transaction open at :attr:`stable_offset`, when read."""
    times: tuple[tuple[int, int], ...] = ()
    """Time marks ``(timestamp_ms, offset)``: records below ``offset`` are at most that old (for the deadlines)."""

    @property
    def readable_end(self) -> int:
        """Where a read of this partition ends today: the last stable offset, else the high watermark."""
        if self.stable_offset is None:
            return self.high_watermark
        return min(self.stable_offset, self.high_watermark)

    @property
    def behind_open_transaction(self) -> int:
        """Offsets past the backlog that wait for an open transaction to end (0 when none is open)."""
        return max(0, self.high_watermark - max(self.readable_end, self.next_offset))

    @property
    def next_offset(self) -> int:
        """The first offset a drain reads: the committed offset (never clamped), or the log start if none or lost."""
        if self.committed is None:
            return self.log_start
        return max(self.committed, self.log_start)

    @property
    def ahead_of_log(self) -> bool:
        """The committed offset is beyond the high watermark (truncation, a recreated topic)."""
        return self.committed is not None and self.committed > self.high_watermark

    @property
    def backlog(self) -> int:
        """Offsets ready to be drained, up to :attr:`readable_end` (never negative)."""
        return max(0, self.readable_end - self.next_offset)

    @property
    def pending(self) -> OffsetRange:
        """The whole backlog as one range."""
        return OffsetRange(self.topic, self.partition, self.next_offset, self.next_offset + self.backlog)

    @property
    def lost_to_retention(self) -> OffsetRange | None:
        """Offsets that retention deleted before they were drained, if any (never committed: from 0)."""
        since = 0 if self.committed is None else self.committed
        if since >= self.log_start:
            return None
        return OffsetRange(self.topic, self.partition, since, self.log_start)


@dataclass(frozen=True)
class LagSnapshot:
    """Every partition of every priority topic of one logical topic, taken at ``taken_at_ms``."""

    logical_topic: str
    n_priorities: int
    partitions: tuple[PartitionLag, ...]
    taken_at_ms: int = 0
    oldest_pending_ms: Mapping[Priority, int | None] = field(default_factory=dict)
    """Timestamp of the oldest pending record per priority (None: nothing pending or unknown)."""
    topic_ids: Mapping[str, str | None] = field(default_factory=dict)
    """The Kafka topic id of each priority topic (None: the cluster reports none)."""
    deleted: tuple[str, ...] = ()
    """Priority topics kprio drained before that the cluster no longer has (they have no partitions here)."""

    @classmethod
    def of(
        cls,
        logical_topic: str,
        n_priorities: int,
        partitions: Iterable[PartitionLag],
        taken_at_ms: int = 0,
    ) -> LagSnapshot:
        return cls(logical_topic, n_priorities, tuple(partitions), taken_at_ms)

    def of_priority(self, priority: Priority) -> tuple[PartitionLag, ...]:
        return tuple(p for p in self.partitions if p.priority == priority)

    def backlog_by_priority(self) -> dict[Priority, int]:
        """Total backlog per priority, every priority present (0 when idle)."""
        totals = {p: 0 for p in range(self.n_priorities)}
        for part in self.partitions:
            totals[part.priority] += part.backlog
        return totals

    @property
    def total_backlog(self) -> int:
        return sum(p.backlog for p in self.partitions)

    def lost_to_retention(self) -> tuple[OffsetRange, ...]:
        return tuple(r for p in self.partitions if (r := p.lost_to_retention) is not None)
