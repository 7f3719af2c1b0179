"""Cut planned ranges into Spark input splits, and render ranges as Spark's Kafka offsets JSON.

A split holds at most ``max_records`` and ``max_bytes`` (estimates, prorated to sum exactly); a larger record is alone.

>>> from kprio_core.model.offsets import OffsetRange
>>> r = PlannedRange(2, OffsetRange("orders-2", 0, 100, 350), est_bytes=25_000)
>>> [(str(p.range), p.est_bytes) for p in split_ranges([r], max_records=100, max_bytes=8_000)]
[('orders-2[0]@[100,180)', 8000), ('orders-2[0]@[180,260)', 8000), ('orders-2[0]@[260,340)', 8000), ('orders-2[0]@[340,350)', 1000)]
>>> spark_offsets_json([OffsetRange("orders-2", 1, 7, 9), OffsetRange("orders-2", 0, 23, 40)])
('{"orders-2":{"0":23,"1":7}}', '{"orders-2":{"0":40,"1":9}}')
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from kprio_core.errors import RangeConflict
from kprio_core.model.drain_plan import PlannedRange
from kprio_core.model.offsets import OffsetRange


def records_per_split(count: int, est_bytes: int, max_records: int, max_bytes: int) -> int:
    """Records per piece so that a piece stays within both limits (at least 1).

    >>> records_per_split(250, 25_000, 100, 8_000), records_per_split(3, 30_000, 100, 8_000)
    (80, 1)
    """
    per = max_records
    if est_bytes > 0:
        # n records weigh at most ceil(n * est / count) once prorated: keep n * est <= max * count.
        per = min(per, max_bytes * count // est_bytes)
    return max(1, per)


def split_ranges(ranges: Iterable[PlannedRange], max_records: int, max_bytes: int) -> list[PlannedRange]:
    """Cut every range into consecutive pieces within both limits, each keeping its priority (empty ranges: dropped).

    >>> from kprio_core.model.offsets import OffsetRange
    >>> r = PlannedRange(0, OffsetRange("t", 0, 0, 10), est_bytes=10)
    >>> [(p.range.count, p.est_bytes) for p in split_ranges([r], max_records=4, max_bytes=100)]
    [(4, 4), (4, 4), (2, 2)]
    """
    if max_records < 1 or max_bytes < 1:
        raise ValueError(f"split limits must be >= 1, got max_records={max_records}, max_bytes={max_bytes}")
    out: list[PlannedRange] = []
    for planned in ranges:
        rng, est = planned.range, planned.est_bytes
        count = rng.count
        if count == 0:
            continue
        per = records_per_split(count, est, max_records, max_bytes)
        for lo in range(0, count, per):
            hi = min(count, lo + per)
            # Cumulative floors: the pieces' bytes sum to exactly ``est``.
            piece_bytes = est * hi // count - est * lo // count
            piece = OffsetRange(rng.topic, rng.partition, rng.start + lo, rng.start + hi)
            out.append(PlannedRange(planned.priority, piece, piece_bytes))
    return out


def merge_by_partition(ranges: Iterable[OffsetRange]) -> dict[tuple[str, int], OffsetRange]:
    """One range per topic partition: adjacent ranges are joined, gaps and overlaps refused.

    >>> merge_by_partition([OffsetRange("t", 0, 5, 9), OffsetRange("t", 0, 0, 5)])
    {('t', 0): OffsetRange(topic='t', partition=0, start=0, end=9)}
    """
    merged: dict[tuple[str, int], OffsetRange] = {}
    for r in sorted(ranges):
        key = r.topic_partition
        prev = merged.get(key)
        if prev is None:
            merged[key] = r
        elif prev.end == r.start:
            merged[key] = OffsetRange(r.topic, r.partition, prev.start, r.end)
        else:
            kind = "overlap" if r.start < prev.end else "leave a gap"
            raise RangeConflict(
                f"{prev} and {r} {kind}: Spark's Kafka source takes one contiguous range per partition"
            )
    return merged


def spark_offsets_json(ranges: Iterable[OffsetRange]) -> tuple[str, str]:
    """``(startingOffsets, endingOffsets)`` JSON for Spark's Kafka source: exact offsets, sorted, partitions as keys."""
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    merged = merge_by_partition(ranges)
    for (topic, partition), r in sorted(merged.items()):
        starting.setdefault(topic, {})[str(partition)] = r.start
        ending.setdefault(topic, {})[str(partition)] = r.end
    compact = (",", ":")
    return json.dumps(starting, separators=compact), json.dumps(ending, separators=compact)
