"""Lag snapshots from the cluster: offsets, committed positions, record sizes and oldest pending age.

Calls per snapshot, whatever the number of partitions: one metadata, ListOffsets earliest and latest (and last
stable under read_committed), one DescribeTopics (a recreated topic has a new id), one OffsetFetch per priority
group; plus a bounded peek for record sizes or ages (and one reading uncommitted for open transactions' ages).
:func:`take_snapshots` makes these calls once for many logical topics, all sent at once.

>>> from kprio_core.model.snapshot import PartitionLag, LagSnapshot
>>> snap = LagSnapshot("orders", 2, (
...     PartitionLag("orders-1", 0, 1, log_start=0, high_watermark=10, committed=4),
...     PartitionLag("orders-0", 0, 0, log_start=6, high_watermark=9, committed=2),
... ), taken_at_ms=60_000, oldest_pending_ms={1: 15_000, 0: None})
>>> oldest_pending_age_ms(snap, now_ms=60_000)
{0: None, 1: 45000}
>>> raise_if_lost(snap)
Traceback (most recent call last):
...
kprio_core.errors.DataLostToRetention: offsets lost to retention before kprio drained them (4 records): orders-0[0]@[2,6)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

from kprio_core.config import IsolationLevel, KafkaSettings, TopicSettings
from kprio_core.deadlines import Objectives, mark_times
from kprio_core.errors import DataLostToRetention, KprioError
from kprio_core.kafka.client import Deadline, cluster_metadata
from kprio_core.kafka.fetch import peek
from kprio_core.kafka.reads import GroupOffsets, high_watermarks, log_starts, stable_offsets
from kprio_core.kafka.times import time_marks
from kprio_core.kafka.topics import snapshot_counts, topic_ids, topic_sizes
from kprio_core.model.offsets import TopicPartitionKey
from kprio_core.model.priority import Priority
from kprio_core.model.snapshot import LagSnapshot, PartitionLag

SAMPLE_RECORDS = 5
"""Records read at the tail of one partition to estimate a topic's record size."""


class SnapshotAsk(NamedTuple):
    """One logical topic's lag snapshot, as :func:`take_snapshots` is asked for it."""

    topic: TopicSettings
    avg_record_bytes: Mapping[str, float] = {}
    """Average record size per priority topic, known from earlier batches; the others are sampled."""
    deleted_ok: Collection[str] = ()
    """Priority topics kprio drained before: one the cluster no longer has is listed in ``deleted``."""
    objectives: Objectives | None = None
    """The objectives that steer the plan: the partitions of their priorities get time marks (Kafka's time index)."""


Shaped = tuple[SnapshotAsk, dict[Priority, list[TopicPartitionKey]], tuple[str, ...]]
"""A topic to snapshot: what was asked, its partitions per present priority, its deleted priority topics."""


def take_snapshot(admin: Any, kafka: KafkaSettings, topic: TopicSettings, deadline: Deadline, *, now_ms: int,
                  avg_record_bytes: Mapping[str, float] | None = None, with_age: bool = False,
                  groups: GroupOffsets | None = None, deleted_ok: Collection[str] = (),
                  metadata: Any = None) -> LagSnapshot:
    """Where every partition of every priority topic of ``topic`` stands (``groups``, ``metadata``: made if None);
    a gone topic of ``deleted_ok`` is listed in ``deleted``, not failed (its partitions held, others drain on)."""
    ask = SnapshotAsk(topic, avg_record_bytes or {}, deleted_ok)
    found = take_snapshots(admin, kafka, [ask], deadline, now_ms=now_ms, groups=groups, metadata=metadata)[topic.name]
    if isinstance(found, KprioError):
        raise found
    if with_age:
        lags, oldest = _with_oldest_pending(kafka, list(found.partitions), topic.priorities, deadline)
        found = dataclasses.replace(found, partitions=tuple(lags), oldest_pending_ms=oldest)
    return found


def take_snapshots(admin: Any, kafka: KafkaSettings, asks: Sequence[SnapshotAsk], deadline: Deadline, *,
                   now_ms: int, groups: GroupOffsets | None = None,
                   metadata: Any = None) -> dict[str, LagSnapshot | KprioError]:
    """The lag snapshot (or typed error) of each asked logical topic by name, every request batched over all topics;
    a topic missing or shrunk gets its own error, and a failed batched call is asked again topic by topic."""
    metadata = cluster_metadata(admin, deadline) if metadata is None else metadata
    sizes_of = topic_sizes(metadata)
    out: dict[str, LagSnapshot | KprioError] = {}
    shaped: dict[str, Shaped] = {}
    for ask in asks:
        try:
            counts, deleted = snapshot_counts(ask.topic, sizes_of, bootstrap=deadline.bootstrap,
                                              deleted_ok=ask.deleted_ok)
        except KprioError as err:
            out[ask.topic.name] = err
            continue
        parts_of = {p: [(ask.topic.priority_topic(p), q) for q in range(n)] for p, n in counts.items()}
        shaped[ask.topic.name] = (ask, parts_of, deleted)
    own = groups is None
    groups = GroupOffsets(kafka) if groups is None else groups
    try:
        try:
            found = _batched(admin, kafka, list(shaped.values()), deadline, now_ms=now_ms, groups=groups)
        except KprioError as err:
            if len(shaped) < 2:
                out.update((name, err) for name in shaped)
                return out
            found = {}
            for name, one in shaped.items():  # each topic alone: the failure is the topic's that caused it
                try:
                    found.update(_batched(admin, kafka, [one], deadline, now_ms=now_ms, groups=groups))
                except KprioError as alone:
                    found[name] = alone
        out.update(found)
    finally:
        if own:
            groups.close()
    return {ask.topic.name: out[ask.topic.name] for ask in asks}


def _batched(admin: Any, kafka: KafkaSettings, shaped: Sequence[Shaped], deadline: Deadline, *, now_ms: int,
             groups: GroupOffsets) -> dict[str, LagSnapshot]:
    """The snapshots of ``shaped``, every request made once for all of them (raises the first failure)."""
    from concurrent.futures import ThreadPoolExecutor

    if not shaped:
        return {}
    every = [tp for _, parts_of, _ in shaped for parts in parts_of.values() for tp in parts]
    committed_only = kafka.isolation_level is IsolationLevel.READ_COMMITTED
    by_group = {ask.topic.priority_group(p): parts for ask, parts_of, _ in shaped for p, parts in parts_of.items()}
    # Independent requests sent at once overlap their round trips (and a first tick's coordinator connections).
    with ThreadPoolExecutor(max_workers=6, thread_name_prefix="kprio-snapshot") as pool:
        asked_starts = pool.submit(log_starts, admin, every, deadline)
        asked_highs = pool.submit(high_watermarks, admin, every, deadline)
        asked_stables = pool.submit(stable_offsets, admin, every, deadline) if committed_only else None
        asked_committed = pool.submit(groups.fetch_all, by_group, deadline)
        asked_ids = pool.submit(topic_ids, admin, [ask.topic.priority_topic(p) for ask, parts_of, _ in shaped
                                                   for p in parts_of], deadline)
        starts, highs, committed = asked_starts.result(), asked_highs.result(), asked_committed.result()
        stables = asked_stables.result() if asked_stables is not None else {}
        ids = asked_ids.result()
        lag_of = {(t, q): PartitionLag(t, q, priority=p, log_start=starts[(t, q)], high_watermark=highs[(t, q)],
                                       committed=committed.get((t, q)), stable_offset=stables.get((t, q)))
                  for _, parts_of, _ in shaped for p, parts in parts_of.items() for t, q in parts}
        # The time marks of the partitions with backlog, beside the sample of record sizes.
        asked_marks = pool.submit(time_marks, admin, _mark_times(shaped, lag_of, now_ms), deadline)
        sizes: dict[str, float] = {}
        unknown = []
        for ask, _, _ in shaped:
            sizes.update(ask.avg_record_bytes)
            unknown += [name for name in ask.topic.priority_topics().values() if name not in ask.avg_record_bytes]
        # A read_committed reader sees nothing past the last stable offset: sample below it.
        ends = {tp: min(stables.get(tp, high), high) for tp, high in highs.items()}
        sizes.update(sample_record_bytes(kafka, unknown, starts, ends, deadline))
        marks = asked_marks.result()
    out = {}
    for ask, parts_of, deleted in shaped:
        topic = ask.topic
        lags = tuple(dataclasses.replace(lag_of[tp], avg_record_bytes=float(sizes.get(tp[0], 0.0)),
                                         times=marks.get(tp, ()))
                     for parts in parts_of.values() for tp in parts)
        mine = {name: ids[name] for name in (topic.priority_topic(p) for p in parts_of)}
        out[topic.name] = LagSnapshot(topic.name, topic.priorities, lags, taken_at_ms=now_ms, topic_ids=mine,
                                      deleted=deleted)
    return out


def _mark_times(shaped: Sequence[Shaped], lag_of: Mapping[TopicPartitionKey, PartitionLag],
                now_ms: int) -> dict[TopicPartitionKey, list[int]]:
    """The times each partition with backlog of a priority with an objective is asked for (:func:`mark_times`)."""
    out = {}
    for ask, parts_of, _ in shaped:
        if ask.objectives is not None:
            times = mark_times(ask.objectives, now_ms)
            out.update((tp, times[p]) for p, parts in parts_of.items() if p in times for tp in parts
                       if lag_of[tp].backlog)
    return out


def sample_record_bytes(kafka: KafkaSettings, topics: list[str], starts: Mapping[tuple[str, int], int],
                        highs: Mapping[tuple[str, int], int], deadline: Deadline) -> dict[str, float]:
    """Average key+value bytes of the last few records of each topic's fullest partition (0.0 when empty);
    ``highs``: where readable records end (the LSO under read_committed)."""
    chosen: dict[tuple[str, int], int] = {}
    for name in topics:
        parts = [tp for tp in highs if tp[0] == name]
        fullest = max(parts, key=lambda tp: highs[tp] - starts[tp], default=None)
        if fullest is not None and highs[fullest] > starts[fullest]:
            chosen[fullest] = max(starts[fullest], highs[fullest] - SAMPLE_RECORDS)
    peeked = peek(kafka, chosen, highs, SAMPLE_RECORDS, deadline, "sample record sizes")
    sizes = {name: 0.0 for name in topics}
    for (name, _), records in peeked.items():
        if records:
            sizes[name] = sum(r.size for r in records) / len(records)
    return sizes


def _with_oldest_pending(kafka: KafkaSettings, lags: list[PartitionLag], n_priorities: int,
                         deadline: Deadline) -> tuple[list[PartitionLag], dict[Priority, int | None]]:
    """Fill each partition's oldest pending timestamp (the record at its next offset) and the per-priority minimum."""
    pending = {(lag.topic, lag.partition): lag.next_offset for lag in lags if lag.backlog > 0}
    ends = {(lag.topic, lag.partition): lag.readable_end for lag in lags}
    heads = peek(kafka, pending, ends, 1, deadline, "read oldest pending records")
    oldest: dict[Priority, int | None] = {p: None for p in range(n_priorities)}
    filled = []
    for lag in lags:
        first = heads.get((lag.topic, lag.partition)) or []
        ts = first[0].timestamp_ms if first else None
        if ts is not None:
            current = oldest[lag.priority]
            oldest[lag.priority] = ts if current is None else min(current, ts)
        filled.append(dataclasses.replace(lag, oldest_pending_ms=ts))
    return _with_open_transactions(kafka, filled, deadline), oldest


def _with_open_transactions(kafka: KafkaSettings, lags: list[PartitionLag], deadline: Deadline) -> list[PartitionLag]:
    """Fill when the transaction open at each stalled partition's last stable offset began (its first record)."""
    stalled = {(lag.topic, lag.partition): lag.readable_end for lag in lags if lag.behind_open_transaction}
    highs = {(lag.topic, lag.partition): lag.high_watermark for lag in lags}
    heads = peek(kafka, stalled, highs, 1, deadline, "read the first record of open transactions", uncommitted=True)
    out = []
    for lag in lags:
        first = heads.get((lag.topic, lag.partition)) or []
        out.append(dataclasses.replace(lag, open_transaction_ms=first[0].timestamp_ms) if first else lag)
    return out


def oldest_pending_age_ms(snapshot: LagSnapshot, now_ms: int) -> dict[Priority, int | None]:
    """Age of the oldest pending record per priority (None: nothing pending or age not taken)."""
    return {
        p: (None if (ts := snapshot.oldest_pending_ms.get(p)) is None else max(0, now_ms - ts))
        for p in range(snapshot.n_priorities)
    }


def raise_if_lost(snapshot: LagSnapshot) -> None:
    """DataLostToRetention naming every range that retention deleted before it was drained."""
    lost = snapshot.lost_to_retention()
    if lost:
        total = sum(r.count for r in lost)
        raise DataLostToRetention(
            f"offsets lost to retention before kprio drained them ({total} records): "
            + ", ".join(str(r) for r in lost)
        )
