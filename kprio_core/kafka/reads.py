"""Batched reads: ListOffsets for many partitions in one admin call, OffsetFetch for one group by its consumer.

A ``read_uncommitted`` reader ends at the high watermark, a ``read_committed`` one at the last stable offset
(LSO: the oldest open transaction's first offset, else the high watermark), which ListOffsets latest answers
under read_committed.

A group that never committed a partition reports offset -1001 (OFFSET_INVALID): None here, never a number.

>>> committed_or_none(-1001), committed_or_none(42)
(None, 42)
"""

from __future__ import annotations

import atexit
import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from kprio_core.config import IsolationLevel, KafkaSettings
from kprio_core.errors import BrokerUnreachable
from kprio_core.kafka.client import Deadline, check_error
from kprio_core.model.offsets import TopicPartitionKey


def committed_or_none(offset: int) -> int | None:
    """A committed offset, or None for Kafka's "nothing committed" sentinels (negative offsets)."""
    return offset if offset >= 0 else None


OFFSET_INVALID = -1001
"""librdkafka's ``RD_KAFKA_OFFSET_INVALID``: ListOffsets' answer, with no error, for a partition no leader serves
(its only replica's node down, a leader being elected)."""

LEADER_MOVING = frozenset({"NOT_LEADER_FOR_PARTITION", "LEADER_NOT_AVAILABLE", "FENCED_LEADER_EPOCH",
                           "UNKNOWN_LEADER_EPOCH", "NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS",
                           "COORDINATOR_NOT_AVAILABLE", "REQUEST_TIMED_OUT", "_TRANSPORT"})
"""Errors of a partition whose leader is being elected: asked again until the deadline, never a failure of their own."""

RETRY_PAUSE_S = 0.1

COLD_FETCH_THREADS = 32
"""Groups whose consumers are made side by side: 300 new consumers took 0.82 s in 300 threads, 0.54 s in 32."""

LIST_OFFSETS_CHUNK = 1000
"""Partitions per ListOffsets request, all sent before any answer: librdkafka matches an answer's partitions one by
one (19,200 partitions in one request: 1.6 s; in 20: 0.2 s)."""

def list_offsets(admin: Any, partitions: Iterable[TopicPartitionKey] | Mapping[TopicPartitionKey, Any], spec: Any,
                 deadline: Deadline, what: str, *, committed_only: bool = False,
                 negative_ok: bool = False) -> dict[TopicPartitionKey, int]:
    """The offset per partition for ``spec`` (or each partition's own, when ``partitions`` maps them), in chunks.

    ``committed_only``: read_committed (latest answers the LSO). Partitions whose leader moves or is missing
    (:data:`LEADER_MOVING`, :data:`OFFSET_INVALID`) are asked again until ``deadline``, then BrokerUnreachable names
    the partition: an offset is never made up. ``negative_ok``: -1 is an answer (a time no record reaches).
    """
    import concurrent.futures
    import time

    from confluent_kafka import IsolationLevel, KafkaException, TopicPartition

    from kprio_core.kafka.client import error_name

    own = partitions if isinstance(partitions, Mapping) else dict.fromkeys(partitions, spec)
    todo = {TopicPartition(t, p): own[(t, p)] for t, p in own}
    isolation = IsolationLevel.READ_COMMITTED if committed_only else IsolationLevel.READ_UNCOMMITTED
    out: dict[TopicPartitionKey, int] = {}
    while todo:
        futures = _ask_in_chunks(admin, todo, isolation, deadline, what)
        again: dict[Any, Any] = {}
        for tp, future in futures.items():
            name = f"{what} ({tp.topic}[{tp.partition}])"
            try:
                offset = future.result(timeout=deadline.left(name)).offset
                if offset == OFFSET_INVALID or (offset < 0 and not negative_ok):
                    # No leader answered (librdkafka leaves the offset unset, no error): never a log bound.
                    if deadline.remaining() <= RETRY_PAUSE_S:
                        raise BrokerUnreachable(deadline.bootstrap, deadline.timeout_s,
                                                f"{name}: no leader of the partition answered (it has none now)")
                    again[TopicPartition(tp.topic, tp.partition)] = own[(tp.topic, tp.partition)]
                    continue
                out[(tp.topic, tp.partition)] = offset
            except KafkaException as exc:
                if error_name(exc) not in LEADER_MOVING or deadline.remaining() <= RETRY_PAUSE_S:
                    deadline.result(future, name)  # raises kprio's error for it
                again[TopicPartition(tp.topic, tp.partition)] = own[(tp.topic, tp.partition)]
            except concurrent.futures.TimeoutError:
                deadline.result(future, name)  # BrokerUnreachable naming the call
        todo = again
        if todo:
            time.sleep(RETRY_PAUSE_S)
    return out


def _ask_in_chunks(admin: Any, todo: Mapping[Any, Any], isolation: Any, deadline: Deadline, what: str) -> dict:
    """Send ``todo``'s ListOffsets requests in chunks, all before any answer is awaited; each partition's future."""
    asked = list(todo.items())
    futures = {}
    for start in range(0, len(asked), LIST_OFFSETS_CHUNK):
        futures.update(admin.list_offsets(dict(asked[start:start + LIST_OFFSETS_CHUNK]),
                                          isolation_level=isolation, request_timeout=deadline.left(what)))
    return futures


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


class GroupOffsets:
    """Committed offsets of consumer groups, each asked by a kept consumer of the group (a new one costs a lookup).

    A consumer that never joins, not the admin client: its ListConsumerGroupOffsets dereferences a null group handle
    on NOT_COORDINATOR (librdkafka issue 5040: the process dies in a broker failover), where a consumer looks the
    coordinator up again. :func:`shared_group_offsets` keeps one per cluster per process.
    """

    def __init__(self, kafka: KafkaSettings) -> None:
        self.kafka = kafka
        self._consumers: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _consumer(self, group: str) -> Any:
        from kprio_core.kafka.client import new_consumer

        with self._lock:
            consumer = self._consumers.get(group)
            if consumer is None:
                consumer = self._consumers[group] = new_consumer(self.kafka, group)
            return consumer

    def metadata(self, group: str) -> Any:
        """The group's metadata a transaction's offsets name (a consumer that never joins: no generation)."""
        return self._consumer(group).consumer_group_metadata()

    def fetch(self, group: str, partitions: Iterable[TopicPartitionKey],
              deadline: Deadline) -> dict[TopicPartitionKey, int | None]:
        """One OffsetFetch of ``group`` for ``partitions``: committed offset or None per partition."""
        from confluent_kafka import KafkaException, TopicPartition

        from kprio_core.kafka.client import kafka_failure

        wanted = [TopicPartition(t, p) for t, p in partitions]
        if not wanted:
            return {}
        what = f"fetch committed offsets of group {group}"
        consumer = self._consumer(group)
        try:
            result = consumer.committed(wanted, timeout=deadline.left(what))
        except KafkaException as exc:
            raise kafka_failure(exc, what=what, bootstrap=deadline.bootstrap, timeout_s=deadline.timeout_s) from None
        out: dict[TopicPartitionKey, int | None] = {}
        for tp in result:
            check_error(tp.error, what=f"{what} ({tp.topic}[{tp.partition}])", bootstrap=deadline.bootstrap,
                        timeout_s=deadline.timeout_s, topic=tp.topic)
            out[(tp.topic, tp.partition)] = committed_or_none(tp.offset)
        return out

    def fetch_all(self, partitions_of: Mapping[str, Iterable[TopicPartitionKey]],
                  deadline: Deadline) -> dict[TopicPartitionKey, int | None]:
        """:meth:`fetch` per group: groups without a consumer yet (a coordinator lookup each) side by side in up to
        :data:`COLD_FETCH_THREADS` threads; warm ones one after the other (a thread costs more than the round trip)."""
        from concurrent.futures import ThreadPoolExecutor

        out: dict[TopicPartitionKey, int | None] = {}
        with self._lock:
            cold = [group for group in partitions_of if group not in self._consumers]
        if len(cold) < 2:
            for group, parts in partitions_of.items():
                out.update(self.fetch(group, parts, deadline))
            return out
        workers = min(len(partitions_of), COLD_FETCH_THREADS)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kprio-offset-fetch") as pool:
            for offsets in pool.map(lambda item: self.fetch(item[0], item[1], deadline), partitions_of.items()):
                out.update(offsets)
        return out

    def close(self) -> None:
        with self._lock:
            consumers, self._consumers = self._consumers, {}
        for consumer in consumers.values():
            consumer.close()


_SHARED: dict[str, GroupOffsets] = {}
_SHARED_LOCK = threading.Lock()


def shared_group_offsets(kafka: KafkaSettings) -> GroupOffsets:
    """The process's :class:`GroupOffsets` for the cluster and client settings of ``kafka`` (closed at exit)."""
    key = json.dumps(kafka.consumer_config(), sort_keys=True, default=str)
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is None:
            if not _SHARED:
                atexit.register(close_shared_group_offsets)
            found = _SHARED[key] = GroupOffsets(kafka)
        return found


def close_shared_group_offsets() -> None:
    """Close every consumer :func:`shared_group_offsets` keeps (at exit, or before a cluster goes away)."""
    with _SHARED_LOCK:
        shared = list(_SHARED.values())
        _SHARED.clear()
    for groups in shared:
        groups.close()


def readable_ends(admin: Any, partitions: Iterable[TopicPartitionKey], deadline: Deadline,
                  isolation: IsolationLevel) -> dict[TopicPartitionKey, int]:
    """Where a reader of ``isolation`` stops in each partition: the LSO (read_committed) or the high watermark."""
    if isolation is IsolationLevel.READ_COMMITTED:
        return stable_offsets(admin, partitions, deadline)
    return high_watermarks(admin, partitions, deadline)
