"""Lanes: sub-streams of a partition's records that are each processed in offset order.

A keyed record's lane is ``toPositive(murmur2(key)) % lanes`` as Kafka's default partitioner (checked against its test
vectors): not ``hash``, salted per process (executors would disagree), nor ``crc32``: murmur2 picks the lane a Java
producer would, explainable with Kafka's tools. A null key has no order to keep: spread by ``offset % lanes``.

>>> murmur2(b"21"), murmur2(b"abc")
(-973932308, 479470107)
>>> lane_of(b"21", offset=0, lanes=8), lane_of(None, offset=13, lanes=8)
(4, 5)
>>> lanes_of([b"21", None, b"abc"], [0, 13, 2], lanes=8)
[4, 5, 3]
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kprio_core.model.ordering import Lane as Lane  # where the Spark drain imports it from
from kprio_core.model.ordering import Ordering

_MASK = 0xFFFFFFFF
_M = 0x5BD1E995
_SEED = 0x9747B28C


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data`` as a signed 32-bit int (as Java returns it)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    full = length - length % 4
    for i in range(0, full, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length % 4
    if tail:
        if tail == 3:
            h ^= data[full + 2] << 16
        if tail >= 2:
            h ^= data[full + 1] << 8
        h ^= data[full]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, which overflows in Java).

    >>> to_positive(-973932308)
    1173551340
    """
    return n & 0x7FFFFFFF


def lane_of(key: bytes | None, offset: int, lanes: int) -> int:
    """The lane of one record: murmur2 of the key, or the offset when the key is null."""
    if lanes < 1:
        raise ValueError(f"lanes must be >= 1, got {lanes}")
    if lanes == 1:
        return 0
    if key is None:
        return offset % lanes
    if not isinstance(key, bytes | bytearray | memoryview):
        raise TypeError(f"a record key is bytes or None, got {type(key).__name__}")
    return to_positive(murmur2(bytes(key))) % lanes


def lane_for(ordering: Ordering, key: bytes | None, offset: int, lanes: int) -> int:
    """Lane under an ordering mode: partition order keeps one lane (0), key order hashes the key.

    >>> lane_for(Ordering.PARTITION, b"21", 0, 8), lane_for(Ordering.KEY, b"21", 0, 8)
    (0, 4)
    """
    return 0 if ordering is Ordering.PARTITION else lane_of(key, offset, lanes)


def _as_list(column: Any) -> list[Any]:
    """A pyarrow Array / ChunkedArray, pandas Series, numpy array or any iterable as a list."""
    if hasattr(column, "to_pylist"):
        return column.to_pylist()
    if hasattr(column, "tolist"):
        return column.tolist()
    return list(column)


def lanes_of(keys: Iterable[bytes | None] | Any, offsets: Iterable[int] | Any, lanes: int) -> list[int]:
    """:func:`lane_of` over two columns (pyarrow, pandas, numpy or lists), keys hashed once; NaN keys are null."""
    key_list, offset_list = _as_list(keys), _as_list(offsets)
    if len(key_list) != len(offset_list):
        raise ValueError(f"{len(key_list)} keys but {len(offset_list)} offsets")
    if lanes == 1:
        return [0] * len(key_list)
    cache: dict[bytes, int] = {}
    out: list[int] = []
    for key, offset in zip(key_list, offset_list):
        if key is None or (isinstance(key, float) and key != key):
            out.append(lane_of(None, int(offset), lanes))
            continue
        if not isinstance(key, bytes):
            key = bytes(key) if isinstance(key, bytearray | memoryview) else key
        lane = cache.get(key)
        if lane is None:
            lane = cache[key] = lane_of(key, int(offset), lanes)
        out.append(lane)
    return out
