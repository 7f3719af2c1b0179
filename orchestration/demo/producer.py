"""Producing the demo's waves into the priority topics, and remembering which offsets each wave got.

A wave's offsets are the high watermarks before and after it (the demo is its topics' only producer), so the
report can tell in which batch each drained record arrived and in which it was drained.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.kafka import KafkaEdge, produce
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.priority import Priority
from orchestration.demo import DemoFailed
from orchestration.demo.workload import Wave, wave_records

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Arrival:
    """The offsets one wave occupies, and the first batch (1-based) that could drain them."""

    priority: Priority
    first_batch: int
    ranges: tuple[OffsetRange, ...]
    poison: int = 0
    """How many of the wave's records are malformed (they belong in the dead letters)."""

    @property
    def records(self) -> int:
        """Offsets the wave occupies (poison included)."""
        return sum(r.count for r in self.ranges)


def high_watermarks(edge: KafkaEdge, topic: TopicSettings) -> dict[TopicPartition, int]:
    """High watermark of every partition of every priority topic (one batched lag snapshot)."""
    snap = edge.snapshot(topic, now_ms=int(time.time() * 1000))
    return {(p.topic, p.partition): p.high_watermark for p in snap.partitions}


class WaveProducer:
    """Produces waves to one logical topic and records their :class:`Arrival`."""

    def __init__(self, config: KprioConfig, topic: TopicSettings, edge: KafkaEdge, *, seed: int = 7,
                 encode: Callable[[str, Any], Any] | None = None) -> None:
        self.config = config
        self.encode = encode
        """Turns a JSON order into the value produced (``--values avro``: Avro through the registry)."""
        self.topic = topic
        self.edge = edge
        self.seed = seed
        self.start = high_watermarks(edge, topic)
        """Where the demo's records begin: the high watermarks before its first wave."""
        self._last = dict(self.start)
        self.arrivals: list[Arrival] = []

    def produce(self, wave: Wave, batches_done: int) -> Arrival:
        """Produce one wave now; its records are first visible to batch ``batches_done + 1``."""
        name = self.topic.priority_topic(wave.priority)
        records = wave_records(wave, base_ts_ms=int(time.time() * 1000), partitions=len(self._partitions(name)),
                               seed=self.seed)
        if self.encode is not None:
            records = [r._replace(value=self.encode(name, r.value)) for r in records]
        sent = produce(self.config.kafka, name, records)
        after = high_watermarks(self.edge, self.topic)
        ranges = tuple(
            OffsetRange(t, q, self._last[(t, q)], hw)
            for (t, q), hw in sorted(after.items())
            if t == name and hw > self._last[(t, q)]
        )
        got = sum(r.count for r in ranges)
        if got != sent:
            # Someone else writes to the demo's topics: the waits would be wrong, so say so.
            raise DemoFailed(f"{name}: {sent} records produced but the high watermarks moved by {got}; "
                               "another producer writes to the demo topics")
        self._last.update(after)
        arrival = Arrival(wave.priority, batches_done + 1, ranges, wave.poison)
        self.arrivals.append(arrival)
        return arrival

    def _partitions(self, name: str) -> list[int]:
        return sorted(q for t, q in self.start if t == name)
