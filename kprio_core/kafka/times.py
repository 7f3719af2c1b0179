"""Offsets for timestamps, and time windows mapped to offset ranges (for time-window replays).

Offsets-for-times answers the first offset with timestamp >= the asked time, or -1 (here the high watermark)
when no record is that late, so a window ``[start_ms, end_ms)`` is ``[offset(start_ms), offset(end_ms))``.

>>> window_range("orders-2", 0, start=None, end=None, high_watermark=40)
>>> window_range("orders-2", 0, start=12, end=None, high_watermark=40)
OffsetRange(topic='orders-2', partition=0, start=12, end=40)
>>> window_range("orders-2", 0, start=12, end=30, high_watermark=40)
OffsetRange(topic='orders-2', partition=0, start=12, end=30)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kprio_core.kafka.client import Deadline
from kprio_core.kafka.reads import list_offsets
from kprio_core.model.offsets import END_OF_LOG, OffsetRange, TopicPartitionKey


def offsets_for_time(admin: Any, partitions: Iterable[TopicPartitionKey], timestamp_ms: int,
                     deadline: Deadline) -> dict[TopicPartitionKey, int | None]:
    """First offset with timestamp >= ``timestamp_ms`` per partition (None: no record that late). One call."""
    from confluent_kafka.admin import OffsetSpec

    found = list_offsets(admin, partitions, OffsetSpec.for_timestamp(timestamp_ms), deadline,
                         f"list offsets for time {timestamp_ms}", negative_ok=True)
    return {tp: (offset if offset >= 0 else None) for tp, offset in found.items()}


def time_marks(admin: Any, asked: Mapping[TopicPartitionKey, Sequence[int]],
               deadline: Deadline) -> dict[TopicPartitionKey, tuple[tuple[int, int], ...]]:
    """Per partition, a mark ``(T, offset)`` per asked time ``T``: records below ``offset`` are at most ``T`` ms old
    (:attr:`~kprio_core.model.snapshot.PartitionLag.times`); one ListOffsets per time (a request holds a partition
    once), side by side; a time no record passes marks the whole log."""
    from concurrent.futures import ThreadPoolExecutor

    from confluent_kafka.admin import OffsetSpec

    rounds = max((len(times) for times in asked.values()), default=0)

    def one(k: int) -> dict[TopicPartitionKey, tuple[int, int]]:
        specs = {tp: OffsetSpec.for_timestamp(times[k] + 1) for tp, times in asked.items() if k < len(times)}
        found = list_offsets(admin, specs, None, deadline, "list offsets for the objectives' times", negative_ok=True)
        return {tp: (asked[tp][k], offset if offset >= 0 else END_OF_LOG) for tp, offset in found.items()}

    marks: dict[TopicPartitionKey, list[tuple[int, int]]] = {tp: [] for tp in asked}
    if rounds:
        with ThreadPoolExecutor(max_workers=rounds, thread_name_prefix="kprio-marks") as pool:
            for found in pool.map(one, range(rounds)):
                for tp, mark in found.items():
                    marks[tp].append(mark)
    return {tp: tuple(m) for tp, m in marks.items()}


def window_range(topic: str, partition: int, *, start: int | None, end: int | None,
                 high_watermark: int) -> OffsetRange | None:
    """The offsets of one partition inside a time window (None when the window holds none of them)."""
    first = high_watermark if start is None else start
    until = high_watermark if end is None else end
    if until <= first:
        return None
    return OffsetRange(topic, partition, first, until)
