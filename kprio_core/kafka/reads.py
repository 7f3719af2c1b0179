"""Batched admin reads: ListOffsets for many partitions in one call, OffsetFetch for one group.

Partitions are ``(topic, partition)`` pairs throughout. A group that never committed a
partition reports offset -1001 (OFFSET_INVALID): that is :data:`None` here, never a number.

>>> committed_or_none(-1001), committed_or_none(42)
(None, 42)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kprio_core.kafka.client import Deadline, check_error
from kprio_core.offsets import TopicPartitionKey



def committed_or_none(offset: int) -> int | None:
    """A committed offset, or None for Kafka's "nothing committed" sentinels (negative offsets)."""
    return offset if offset >= 0 else None


def list_offsets(admin: Any, partitions: Iterable[TopicPartitionKey], spec: Any, deadline: Deadline,
                 what: str) -> dict[TopicPartitionKey, int]:
    """One ListOffsets call for every partition with the same OffsetSpec; offset per partition."""
    from confluent_kafka import TopicPartition

    request = {TopicPartition(t, p): spec for t, p in partitions}
    if not request:
        return {}
    futures = admin.list_offsets(request, request_timeout=deadline.left(what))
    out: dict[TopicPartitionKey, int] = {}
    for tp, future in futures.items():
        info = deadline.result(future, f"{what} ({tp.topic}[{tp.partition}])")
        out[(tp.topic, tp.partition)] = info.offset
    return out


def log_starts(admin: Any, partitions: Iterable[TopicPartitionKey], deadline: Deadline) -> dict[TopicPartitionKey, int]:
    from confluent_kafka.admin import OffsetSpec

    return list_offsets(admin, partitions, OffsetSpec.earliest(), deadline, "list earliest offsets")


def high_watermarks(admin: Any, partitions: Iterable[TopicPartitionKey], deadline: Deadline) -> dict[TopicPartitionKey, int]:
    from confluent_kafka.admin import OffsetSpec

    return list_offsets(admin, partitions, OffsetSpec.latest(), deadline, "list latest offsets")


def group_offsets(admin: Any, group: str, partitions: Iterable[TopicPartitionKey],
                  deadline: Deadline) -> dict[TopicPartitionKey, int | None]:
    """One OffsetFetch of ``group`` for ``partitions``: committed offset or None per partition."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    wanted = [TopicPartition(t, p) for t, p in partitions]
    if not wanted:
        return {}
    what = f"fetch committed offsets of group {group}"
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, wanted)], request_timeout=deadline.left(what)
    )
    result = deadline.result(futures[group], what)
    out: dict[TopicPartitionKey, int | None] = {}
    for tp in result.topic_partitions:
        check_error(tp.error, what=f"{what} ({tp.topic}[{tp.partition}])", bootstrap=deadline.bootstrap,
                    timeout_s=deadline.timeout_s, topic=tp.topic)
        out[(tp.topic, tp.partition)] = committed_or_none(tp.offset)
    return out
