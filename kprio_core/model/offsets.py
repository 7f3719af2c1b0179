"""The one half-open offset range type used by the planner, Spark options and commits.

``end`` is the next offset to read, which is exactly what Kafka commits.

>>> r = OffsetRange("orders-2", 0, 100, 150)
>>> r.count
50
>>> r.overlaps(OffsetRange("orders-2", 0, 149, 200))
True
>>> r.overlaps(OffsetRange("orders-2", 0, 150, 200))
False
"""

from __future__ import annotations

from dataclasses import dataclass

TopicPartitionKey = tuple[str, int]
"""``(topic, partition)``: the one key of partition-level state."""


@dataclass(frozen=True, order=True, slots=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.partition < 0:
            raise ValueError(f"{self.topic}: partition must be >= 0, got {self.partition}")
        if not 0 <= self.start <= self.end:
            raise ValueError(
                f"{self.topic}[{self.partition}]: need 0 <= start <= end, got [{self.start}, {self.end})"
            )

    @property
    def count(self) -> int:
        """Number of offsets in the range."""
        return self.end - self.start

    @property
    def topic_partition(self) -> TopicPartitionKey:
        return (self.topic, self.partition)

    def overlaps(self, other: OffsetRange) -> bool:
        """True when both ranges hold at least one common offset of the same partition."""
        return (
            self.topic_partition == other.topic_partition
            and self.start < other.end
            and other.start < self.end
        )

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]@[{self.start},{self.end})"


END_OF_LOG = (1 << 63) - 1
"""The largest Kafka offset: a reservation that ends here holds the rest of the partition."""


def held_range(topic: str, partition: int, start: int) -> OffsetRange:
    """The reservation of a partition held by a failed batch, from its failed range's start on: nothing later is planned
    there (it could not be committed past it); other partitions drain on.

    >>> held_range("t", 0, 10).end == END_OF_LOG
    True
    """
    return OffsetRange(topic, partition, start, END_OF_LOG)
