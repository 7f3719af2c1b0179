"""Monotonic commits: a batch's ``until`` offsets move each priority group forward, never backwards.

Only a contiguous prefix is committed: from where the group stands (its committed offset, or the
log start when nothing is committed or retention deleted the rest), the ranges of a partition
must follow on without a hole. A replay of an old batch, or a batch whose predecessor is not
committed yet, commits nothing for that partition and says why.

>>> from kprio_core.offsets import OffsetRange as R
>>> moved, skipped = decide_commits(
...     current={("o-2", 0): 10, ("o-2", 1): 30, ("o-2", 2): None, ("o-2", 3): 5},
...     log_start={("o-2", 0): 0, ("o-2", 1): 0, ("o-2", 2): 0, ("o-2", 3): 0},
...     ranges=[R("o-2", 0, 10, 20), R("o-2", 0, 20, 25), R("o-2", 1, 10, 20), R("o-2", 2, 0, 7),
...             R("o-2", 3, 9, 12)])
>>> moved
{('o-2', 0): (10, 25), ('o-2', 2): (None, 7)}
>>> skipped[("o-2", 1)]
'already committed at 30, the batch ends at 20 (replay of an older batch)'
>>> skipped[("o-2", 3)]
'gap: the group stands at 5 but the batch starts at 9 (an earlier batch is not committed yet)'
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from kprio_core.config import KafkaSettings, TopicSettings
from kprio_core.errors import BrokerUnreachable, KafkaOperationFailed
from kprio_core.kafka.client import Deadline, check_error, kafka_failure, new_consumer
from kprio_core.offsets import OffsetRange, TopicPartitionKey
from kprio_core.results import CommitReport

__all__ = ["CommitReport", "decide_commits", "group_of", "write_commits"]


def decide_commits(current: Mapping[TopicPartitionKey, int | None], log_start: Mapping[TopicPartitionKey, int],
                   ranges: Iterable[OffsetRange]) -> tuple[dict[TopicPartitionKey, tuple[int | None, int]],
                                                           dict[TopicPartitionKey, str]]:
    """Per partition, the offset to commit (old, new) or the reason to commit nothing."""
    by_partition: dict[TopicPartitionKey, list[OffsetRange]] = defaultdict(list)
    for r in ranges:
        if r.count:
            by_partition[r.topic_partition].append(r)
    moved: dict[TopicPartitionKey, tuple[int | None, int]] = {}
    skipped: dict[TopicPartitionKey, str] = {}
    for tp, rs in sorted(by_partition.items()):
        rs.sort()
        old = current.get(tp)
        # Where the group stands: records below the log start are gone, so the batch may start there.
        stands = max(old if old is not None else 0, log_start.get(tp, 0))
        if rs[0].start > stands:
            at = old if old is not None else f"the log start {stands} (nothing committed)"
            skipped[tp] = (f"gap: the group stands at {at} but the batch starts at {rs[0].start} "
                           "(an earlier batch is not committed yet)")
            continue
        end = stands
        for r in rs:
            if r.start > end:
                break  # a hole inside the batch: commit only the contiguous prefix
            end = max(end, r.end)
        if old is not None and end <= old:
            skipped[tp] = f"already committed at {old}, the batch ends at {rs[-1].end} (replay of an older batch)"
        elif end <= stands:
            skipped[tp] = f"nothing new: the batch ends at {rs[-1].end}, at or below the log start {stands}"
        else:
            moved[tp] = (old, end)
    return moved, skipped


def write_commits(admin: Any, kafka: KafkaSettings, group: str, offsets: Mapping[TopicPartitionKey, int],
                  deadline: Deadline) -> None:
    """Commit ``offsets`` to ``group`` with AlterConsumerGroupOffsets; a simple consumer if the broker lacks it."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition

    if not offsets:
        return
    what = f"commit offsets of group {group}"
    tps = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
    futures = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)],
                                                 request_timeout=deadline.left(what))
    try:
        result = futures[group].result(timeout=deadline.left(what))
    except KafkaException as exc:
        if exc.args[0].code() in (KafkaError.UNSUPPORTED_VERSION, KafkaError._UNSUPPORTED_FEATURE):
            commit_with_consumer(kafka, group, offsets, deadline)
            return
        raise kafka_failure(exc, what=what, bootstrap=deadline.bootstrap, timeout_s=deadline.timeout_s) from None
    except TimeoutError:
        raise BrokerUnreachable(deadline.bootstrap, deadline.timeout_s, f"{what} did not finish in time") from None
    for tp in result.topic_partitions:
        check_error(tp.error, what=f"{what} ({tp.topic}[{tp.partition}])", bootstrap=deadline.bootstrap,
                    timeout_s=deadline.timeout_s, topic=tp.topic)


def commit_with_consumer(kafka: KafkaSettings, group: str, offsets: Mapping[TopicPartitionKey, int],
                         deadline: Deadline) -> None:
    """Commit through a consumer of ``group`` that never subscribes (OffsetCommit with generation -1)."""
    from confluent_kafka import KafkaException, TopicPartition

    what = f"commit offsets of group {group}"
    consumer = new_consumer(kafka, group, socket_timeout_ms=max(10, int(deadline.left(what) * 1000)))
    try:
        result = consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())],
                                 asynchronous=False)
    except KafkaException as exc:
        raise kafka_failure(exc, what=what, bootstrap=deadline.bootstrap, timeout_s=deadline.timeout_s) from None
    finally:
        consumer.close()
    for tp in result or []:
        check_error(tp.error, what=f"{what} ({tp.topic}[{tp.partition}])", bootstrap=deadline.bootstrap,
                    timeout_s=deadline.timeout_s, topic=tp.topic)


def group_of(topic: TopicSettings, name: str) -> str:
    """The consumer group of a priority topic; KafkaOperationFailed for a topic not of ``topic``."""
    try:
        return topic.priority_group(topic.priority_of_topic(name))
    except KeyError:
        raise KafkaOperationFailed(
            f"cannot commit {name}: it is not a priority topic of {topic.name!r} "
            f"({sorted(topic.priority_topics().values())})"
        ) from None
