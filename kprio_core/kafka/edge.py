"""KafkaEdge: the one object per process through which kprio reads and moves offsets.

Its AdminClient is built lazily; each public operation gets one deadline of ``KafkaSettings.timeout_s`` and
answers or raises a typed error (BrokerUnreachable, TopicMissing, AuthorizationFailed, ...) in time.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from kprio_core.config import KafkaSettings, TopicSettings
from kprio_core.errors import KafkaOperationFailed, KprioError
from kprio_core.kafka.client import Deadline, check_error, cluster_metadata, new_admin
from kprio_core.kafka.commit import CommitReport, decide_commits, group_of, write_fenced
from kprio_core.kafka.lag import SnapshotAsk, raise_if_lost, take_snapshot, take_snapshots
from kprio_core.kafka.reads import GroupOffsets, log_starts, readable_ends, shared_group_offsets
from kprio_core.kafka.times import offsets_for_time, window_range
from kprio_core.kafka.topics import (
    TopicMismatch,
    create_missing,
    ensure_topics,
    find_mismatches,
    topic_ids,
    verify_topics,
)
from kprio_core.model.offsets import OffsetRange, TopicPartitionKey
from kprio_core.model.priority import Priority
from kprio_core.model.snapshot import LagSnapshot


class KafkaEdge:
    """Lag snapshots, monotonic commits, time windows as offset ranges and priority topics of one cluster."""

    def __init__(self, kafka: KafkaSettings) -> None:
        self.kafka = kafka
        self._admin: Any = None
        self._view = threading.local()
        """The cluster's metadata within :meth:`one_view` (per thread: a run's commit in another thread asks anew)."""

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap_servers

    @property
    def admin(self) -> Any:
        if self._admin is None:
            self._admin = new_admin(self.kafka)
        return self._admin

    @property
    def groups(self) -> GroupOffsets:
        """The consumers that read the priority groups' committed offsets, kept by the process for every edge."""
        return shared_group_offsets(self.kafka)

    def deadline(self) -> Deadline:
        """One operation's deadline, serving the admin client's events (:class:`~kprio_core.kafka.client.Deadline`)."""
        return Deadline(self.kafka.timeout_s, self.kafka.bootstrap_servers, client=self.admin)

    @contextmanager
    def one_view(self) -> Iterator[None]:
        """Within it, this thread's lag snapshots share one metadata request (one per topic, each listing all: n^2)."""
        outer = getattr(self._view, "active", False)
        self._view.active = True
        try:
            yield
        finally:
            if not outer:
                self._view.active, self._view.metadata = False, None

    def _metadata(self, deadline: Deadline) -> Any:
        """The cluster's metadata: asked once within :meth:`one_view`, else every time."""
        if not getattr(self._view, "active", False):
            return cluster_metadata(self.admin, deadline)
        if getattr(self._view, "metadata", None) is None:
            self._view.metadata = cluster_metadata(self.admin, deadline)
        return self._view.metadata

    def close(self) -> None:
        # AdminClient has no close(); dropping the last reference stops its threads.
        self._admin = None

    def __enter__(self) -> KafkaEdge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ------------------------------------------------------------------------------

    def partitions(self, topic: TopicSettings) -> dict[Priority, list[TopicPartitionKey]]:
        """Every (topic, partition) per priority, as the cluster reports them (verified)."""
        return self._verified(topic, self.deadline())

    def snapshot(self, topic: TopicSettings, *, now_ms: int, avg_record_bytes: Mapping[str, float] | None = None,
                 with_age: bool = False, strict: bool = False, deleted_ok: Collection[str] = ()) -> LagSnapshot:
        """Lag of every partition of every priority topic; ``strict`` raises DataLostToRetention on gaps.

        ``avg_record_bytes``: per priority topic, from earlier batches (others sampled); ``deleted_ok``: topics
        drained before, listed in ``deleted`` (not an error) when gone; ``with_age`` fills the ages.
        """
        deadline = self.deadline()
        snap = take_snapshot(self.admin, self.kafka, topic, deadline, now_ms=now_ms,
                             avg_record_bytes=avg_record_bytes, with_age=with_age, groups=self.groups,
                             deleted_ok=deleted_ok, metadata=self._metadata(deadline))
        if strict:
            raise_if_lost(snap)
        return snap

    def snapshots(self, asks: Iterable[SnapshotAsk], *, now_ms: int) -> dict[str, LagSnapshot | KprioError]:
        """Each asked logical topic's lag snapshot, or the typed error that prevented it, by name; requests batched."""
        deadline = self.deadline()
        return take_snapshots(self.admin, self.kafka, list(asks), deadline, now_ms=now_ms, groups=self.groups,
                              metadata=self._metadata(deadline))

    def ends(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """Where a reader stops in each partition now (``kafka.isolation_level``): one ListOffsets request."""
        return readable_ends(self.admin, sorted(partitions), self.deadline(), self.kafka.isolation_level)

    def topic_ids(self, names: Iterable[str]) -> dict[str, str | None]:
        """Each topic's Kafka topic id now (one DescribeTopics); None: topic gone, or a cluster without ids."""
        return topic_ids(self.admin, names, self.deadline())

    def committed(self, topic: TopicSettings) -> dict[TopicPartitionKey, int | None]:
        """Committed offset of each priority group on its topic's partitions (None: nothing committed)."""
        deadline = self.deadline()
        out: dict[TopicPartitionKey, int | None] = {}
        for p, parts in self._verified(topic, deadline).items():
            out.update(self.groups.fetch(topic.priority_group(p), parts, deadline))
        return out

    # -- committing ---------------------------------------------------------------------------

    def commit(self, topic: TopicSettings, ranges: Iterable[OffsetRange], *,
               before_write: Callable[[], None] | None = None) -> CommitReport:
        """Commit each range's end to its priority's group, never backwards, only contiguous prefixes; fenced per
        group (:func:`~kprio_core.kafka.commit.write_fenced`), ``before_write`` the caller's last check before each."""
        deadline = self.deadline()
        ranges = list(ranges)
        groups = {r.topic: group_of(topic, r.topic) for r in ranges}
        parts_of: dict[str, set[TopicPartitionKey]] = defaultdict(set)
        for r in ranges:
            parts_of[groups[r.topic]].add(r.topic_partition)
        moved: dict[TopicPartitionKey, tuple[int | None, int]] = {}
        skipped: dict[TopicPartitionKey, str] = {}
        for group, parts in sorted(parts_of.items()):
            mine = [r for r in ranges if groups[r.topic] == group]
            decided: list = []  # the last read's decision (a fenced try reads and decides again)

            def decide(current: dict[TopicPartitionKey, int | None], mine=mine, decided=decided
                       ) -> dict[TopicPartitionKey, int]:
                decided[:] = decide_commits(current, log_starts(self.admin, sorted(current), deadline), mine)
                return {tp: new for tp, (_, new) in decided[0].items()}

            write_fenced(self.kafka, self.groups, group, parts, decide, deadline, before_write=before_write)
            moved.update(decided[0])
            skipped.update(decided[1])
        return CommitReport.of(moved, skipped)

    def set_committed(self, topic: TopicSettings, offsets: Mapping[TopicPartitionKey, int], *,
                      expect: Mapping[TopicPartitionKey, int | None] | None = None,
                      before_write: Callable[[], None] | None = None) -> None:
        """Write these committed offsets as is, backwards too (a recorded reset or restore), fenced as :meth:`commit`;
        KafkaOperationFailed, writing nothing to it, when a group moved since ``expect`` (the offsets decided on)."""
        deadline = self.deadline()
        by_group: dict[str, dict[TopicPartitionKey, int]] = defaultdict(dict)
        for tp, offset in offsets.items():
            by_group[group_of(topic, tp[0])][tp] = offset
        for group, chosen in sorted(by_group.items()):

            def decide(current: dict[TopicPartitionKey, int | None], chosen=chosen) -> dict[TopicPartitionKey, int]:
                moved = {tp: current.get(tp) for tp in chosen if expect is not None and tp in expect
                         and current.get(tp) != expect[tp]}
                if moved:
                    said = ", ".join(f"{t}[{p}] stands at {o} (decided on {expect[(t, p)]})"
                                     for (t, p), o in sorted(moved.items()))
                    raise KafkaOperationFailed(f"commit offsets of group {group}: the group moved since the "
                                               f"decision: {said}; nothing written, the next tick decides again")
                return dict(chosen)

            write_fenced(self.kafka, self.groups, group, chosen, decide, deadline, before_write=before_write)

    # -- time ---------------------------------------------------------------------------------

    def window_ranges(self, topic: TopicSettings, start_ms: int, end_ms: int) -> dict[Priority, list[OffsetRange]]:
        """Offsets of records with timestamps in ``[start_ms, end_ms)`` per priority (empty list: none)."""
        if end_ms < start_ms:
            raise ValueError(f"{topic.name}: time window end {end_ms} is before its start {start_ms}")
        deadline = self.deadline()
        parts_of = self._verified(topic, deadline)
        every = [tp for parts in parts_of.values() for tp in parts]
        starts = offsets_for_time(self.admin, every, start_ms, deadline)
        ends = offsets_for_time(self.admin, every, end_ms, deadline)
        # Replays read what the drain reads: up to the last stable offset under read_committed.
        highs = readable_ends(self.admin, every, deadline, self.kafka.isolation_level)
        out: dict[Priority, list[OffsetRange]] = {}
        for p, parts in parts_of.items():
            found = (window_range(t, q, start=starts[(t, q)], end=ends[(t, q)], high_watermark=highs[(t, q)])
                     for t, q in parts)
            out[p] = [r for r in found if r is not None]
        return out

    # -- topics and retention -----------------------------------------------------------------

    def ensure_topics(self, topic: TopicSettings, partitions: int | None = None, *,
                      config: Mapping[str, str] | None = None) -> dict[Priority, int]:
        """Create missing priority topics (``partitions`` each, default ``topic.partitions``; ``config``, default
        ``topic.topic_config``; replicas ``topic.replication_factor``, None: the broker's) and verify all."""
        wanted = partitions if partitions is not None else _partitions_to_create(topic)
        return ensure_topics(self.admin, topic, wanted, self.deadline(),
                             topic.topic_config if config is None else config,
                             replication_factor=topic.replication_factor)

    def create_topics(self, topic: TopicSettings) -> list[str]:
        """Create the priority topics the cluster lacks, as configured; the names created (existing ones kept)."""
        return create_missing(self.admin, topic, _partitions_to_create(topic), self.deadline(),
                              replication_factor=topic.replication_factor, config=topic.topic_config)

    def topic_mismatches(self, topics: Iterable[TopicSettings]) -> list[TopicMismatch]:
        """Every way the cluster's priority topics differ from ``topics`` (missing, partitions, replicas)."""
        return find_mismatches(self.admin, topics, self.deadline())

    def delete_records(self, before: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """Delete records below the given offsets (as retention would); the new log start per partition."""
        from confluent_kafka import TopicPartition

        deadline = self.deadline()
        what = "delete records"
        request = [TopicPartition(t, p, o) for (t, p), o in sorted(before.items())]
        if not request:
            return {}
        futures = self.admin.delete_records(request, request_timeout=deadline.left(what),
                                            operation_timeout=deadline.left(what))
        out: dict[TopicPartitionKey, int] = {}
        for tp, future in futures.items():
            check_error(tp.error, what=what, bootstrap=self.bootstrap, timeout_s=self.kafka.timeout_s, topic=tp.topic)
            deleted = deadline.result(future, f"{what} of {tp.topic}[{tp.partition}]")
            out[(tp.topic, tp.partition)] = deleted.low_watermark
        return out

    def _verified(self, topic: TopicSettings, deadline: Deadline) -> dict[Priority, list[TopicPartitionKey]]:
        counts = verify_topics(self.admin, topic, deadline)
        return {p: [(topic.priority_topic(p), q) for q in range(n)] for p, n in counts.items()}


def _partitions_to_create(topic: TopicSettings) -> int:
    if topic.partitions is None:
        raise ValueError(
            f"topics[{topic.name}].partitions is not set: say how many partitions each priority topic gets "
            "(e.g. partitions: 6) to create them"
        )
    return topic.partitions
