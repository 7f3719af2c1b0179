"""Batched admin reads: ListOffsets for many partitions in one call, OffsetFetch for one group.

The end of a partition depends on the isolation level: a ``read_uncommitted`` reader reads to
the high watermark, a ``read_committed`` one to the last stable offset (LSO), the first offset of
the oldest transaction still open there (the high watermark when none is). ListOffsets latest
with read_committed isolation answers the LSO.

Partitions are ``(topic, partition)`` pairs throughout. A group that never committed a
partition reports offset -1001 (OFFSET_INVALID): that is :data:`None` here, never a number.

>>> committed_or_none(-1001), committed_or_none(42)
(None, 42)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kprio_core.config import IsolationLevel
from kprio_core.kafka.client import Deadline, check_error
from kprio_core.offsets import TopicPartitionKey



def committed_or_none(offset: int) -> int | None:
    """A committed offset, or None for Kafka's "nothing committed" sentinels (negative offsets)."""
    return offset if offset >= 0 else None


def list_offsets(admin: Any, partitions: Iterable[TopicPartitionKey], spec: Any, deadline: Deadline,
                 what: str, *, committed_only: bool = False) -> dict[TopicPartitionKey, int]:
    """One ListOffsets call for every partition with the same OffsetSpec; offset per partition.

    ``committed_only``: read_committed isolation (latest then answers the last stable offset).
    """
    from confluent_kafka import IsolationLevel, TopicPartition

    request = {TopicPartition(t, p): spec for t, p in partitions}
    if not request:
        return {}
    isolation = IsolationLevel.READ_COMMITTED if committed_only else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=deadline.left(what))
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


def stable_offsets(admin: Any, partitions: Iterable[TopicPartitionKey],
                   deadline: Deadline) -> dict[TopicPartitionKey, int]:
    """The last stable offset of each partition: where a read_committed reader stops today."""
    from confluent_kafka.admin import OffsetSpec

    return list_offsets(admin, partitions, OffsetSpec.latest(), deadline, "list last stable offsets",
                        committed_only=True)


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


def readable_ends(admin: Any, partitions: Iterable[TopicPartitionKey], deadline: Deadline,
                  isolation: IsolationLevel) -> dict[TopicPartitionKey, int]:
    """Where a reader of ``isolation`` stops in each partition: the LSO (read_committed) or the high watermark."""
    if isolation is IsolationLevel.READ_COMMITTED:
        return stable_offsets(admin, partitions, deadline)
    return high_watermarks(admin, partitions, deadline)
