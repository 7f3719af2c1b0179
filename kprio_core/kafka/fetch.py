"""Bounded peeks at records: the first few records from given offsets, for sizes and ages.

One consumer is assigned every asked partition at once (no group join, no commit); a partition
is paused as soon as it delivered what was asked, and the whole read ends by the deadline.

>>> expected_counts({("t", 0): 5, ("t", 1): 9}, {("t", 0): 7, ("t", 1): 9}, per_partition=3)
{('t', 0): 2}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from kprio_core.config import KafkaSettings
from kprio_core.kafka.client import Deadline, kafka_failure, new_consumer
from kprio_core.model.offsets import TopicPartitionKey

CONSUME_SLICE_S = 0.05
"""Longest single consume() wait: where records are fewer than offsets (transaction markers, aborted or compacted
records) librdkafka's consume waits its whole timeout, even past the partition's end."""

PEEK_GROUP = "kprio-peek"
"""group.id of peek consumers: required by the client, never joined and never committed."""


class Peeked(NamedTuple):
    offset: int
    timestamp_ms: int | None
    size: int
    """Key plus value bytes."""


def expected_counts(starts: Mapping[TopicPartitionKey, int], ends: Mapping[TopicPartitionKey, int],
                    per_partition: int) -> dict[TopicPartitionKey, int]:
    """How many records each partition can deliver from ``start`` before ``end`` (partitions with none left out)."""
    counts = {tp: min(per_partition, ends[tp] - start) for tp, start in starts.items()}
    return {tp: n for tp, n in counts.items() if n > 0}


def peek(kafka: KafkaSettings, starts: Mapping[TopicPartitionKey, int], ends: Mapping[TopicPartitionKey, int],
         per_partition: int, deadline: Deadline, what: str, *,
         uncommitted: bool = False) -> dict[TopicPartitionKey, list[Peeked]]:
    """Up to ``per_partition`` records per partition from start to end; ``uncommitted`` reads open transactions too."""
    from confluent_kafka import KafkaError, TopicPartition

    need = expected_counts(starts, ends, per_partition)
    got: dict[TopicPartitionKey, list[Peeked]] = {tp: [] for tp in need}
    if not need:
        return got
    isolation = {"isolation_level": "read_uncommitted"} if uncommitted else {}
    consumer = new_consumer(kafka, PEEK_GROUP, auto_offset_reset="earliest", fetch_wait_max_ms=100,
                            enable_partition_eof=True, **isolation)
    try:
        consumer.assign([TopicPartition(t, p, starts[(t, p)]) for t, p in need])
        while any(len(got[tp]) < n for tp, n in need.items()):
            wanted = sum(n - len(got[tp]) for tp, n in need.items())
            for msg in consumer.consume(num_messages=wanted, timeout=min(CONSUME_SLICE_S, deadline.left(what))):
                if msg.error() is not None:
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        # Fewer records than offsets (compaction, transaction markers): take what is there.
                        eof = (msg.topic(), msg.partition())
                        if eof in need:
                            need[eof] = len(got[eof])
                        continue
                    raise kafka_failure(msg.error(), what=what, bootstrap=deadline.bootstrap,
                                        timeout_s=deadline.timeout_s, topic=msg.topic())
                tp = (msg.topic(), msg.partition())
                if tp not in need or len(got[tp]) >= need[tp]:
                    continue
                ts_type, ts = msg.timestamp()
                size = len(msg.key() or b"") + len(msg.value() or b"")
                got[tp].append(Peeked(msg.offset(), ts if ts_type != 0 else None, size))
                if len(got[tp]) >= need[tp]:
                    consumer.pause([TopicPartition(*tp)])
    finally:
        consumer.close()
    return got
