"""What order a drain keeps, and a lane: one ordered sub-stream of one partition (values; the rules that pick a
record's lane are in :mod:`kprio_core.lanes`)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Ordering(StrEnum):
    """What order a drain keeps (``ordering.mode``): the whole partition's, or only each key's (more parallelism)."""

    PARTITION = "partition"
    """One lane per partition: the handler sees the partition in offset order."""
    KEY = "key"
    """``ordering.lanes`` lanes per partition by key hash: each key in offset order."""


@dataclass(frozen=True, slots=True, order=True)
class Lane:
    """One lane of one topic partition."""

    topic: str
    partition: int
    lane: int

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]/lane{self.lane}"
