"""Plans for the drain tests: whole partitions as the cluster has them right now."""

from __future__ import annotations

from collections.abc import Mapping

from kprio_core.config import KafkaSettings, TopicSettings
from kprio_core.model.drain_plan import DrainPlan, PlannedRange
from kprio_core.model.offsets import OffsetRange


def watermarks(kafka: KafkaSettings, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """``{partition: (log start, high watermark)}`` of one topic."""
    import confluent_kafka as ck

    consumer = ck.Consumer({**kafka.client_config(), "group.id": "kprio-test-watermarks"})
    try:
        return {p: consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=kafka.timeout_s)
                for p in range(partitions)}
    finally:
        consumer.close()


def plan_of(topic: TopicSettings, ranges: Mapping[int, list[OffsetRange]] | list[PlannedRange]) -> DrainPlan:
    """A plan holding exactly ``ranges`` (budgets sized to fit)."""
    planned = ranges if isinstance(ranges, list) else [PlannedRange(p, r) for p, rs in ranges.items() for r in rs]
    total = sum(r.range.count for r in planned) or 1
    quotas = {p: 0 for p in range(topic.priorities)}
    for r in planned:
        quotas[r.priority] += r.range.count
    return DrainPlan(logical_topic=topic.name, mode="lag-aware", record_budget=total, byte_budget=None,
                     quotas=quotas, grants=quotas, ranges=tuple(planned))


def whole_plan(kafka: KafkaSettings, topic: TopicSettings, start_at: Mapping[int, int] | None = None) -> DrainPlan:
    """Everything from the log start (or ``start_at[priority]``) to the high watermark of every partition."""
    planned = []
    for priority, name in sorted(topic.priority_topics().items(), reverse=True):
        for partition, (low, high) in watermarks(kafka, name, topic.partitions or 1).items():
            start = max(low, (start_at or {}).get(priority, low))
            if high > start:
                planned.append(PlannedRange(priority, OffsetRange(name, partition, start, high)))
    return plan_of(topic, planned)
