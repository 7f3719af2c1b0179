"""The lanes of Arrow record batches: each row's lane, and each lane's rows in offset order.

:func:`batch_lanes` is the drain's one lane computation (:func:`kprio_core.lanes.lane_for`: partition order one
lane; key order murmur2 of the key, a null key spread by offset), used by the fused drain and, through
:func:`assign_lanes`, before the key-order shuffle. :func:`lane_segments` cuts a batch into ``(Lane, rows)``.

>>> import pyarrow as pa
>>> batch_lanes(pa.record_batch({"key": [b"21", None, b"21"], "offset": [0, 13, 2]}), Ordering.KEY, 8, {}).tolist()
[4, 5, 4]
>>> batch_lanes(pa.record_batch({"key": [b"21", None], "offset": [0, 13]}), Ordering.PARTITION, 1, {}).tolist()
[0, 0]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kprio_core.lanes import Lane, Ordering, lane_for

LANE_CACHE_KEYS = 1 << 16
"""Distinct keys whose lane a task remembers (murmur2 in Python is the cost; keys repeat)."""


def batch_lanes(batch: Any, ordering: Ordering, lanes: int, cache: dict[bytes, int]) -> Any:
    """The lane of every row (``key`` and ``offset`` columns) as an int32 numpy array; ``cache``: key -> lane."""
    import numpy as np

    n = batch.num_rows
    if ordering is Ordering.PARTITION or lanes == 1:
        return np.zeros(n, dtype=np.int32)
    keys = batch.column("key").to_pylist()
    new = {k for k in keys if k is not None and k not in cache}
    if len(cache) + len(new) > LANE_CACHE_KEYS:
        cache.clear()
    for key in new:
        cache[key] = lane_for(ordering, key, 0, lanes)
    out = np.fromiter((-1 if k is None else cache[k] for k in keys), dtype=np.int32, count=n)
    null_key = np.flatnonzero(out < 0)
    if len(null_key):
        offsets = batch.column("offset").to_numpy(zero_copy_only=False)
        out[null_key] = [lane_for(ordering, None, int(offsets[i]), lanes) for i in null_key]
    return out


def assign_lanes(ordering: Ordering, lanes: int) -> Any:
    """The ``mapInArrow`` function that adds the ``lane`` column before the key-order shuffle."""

    def assign(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        cache: dict[bytes, int] = {}
        for batch in batches:
            yield batch.append_column("lane", pa.array(batch_lanes(batch, ordering, lanes, cache), pa.int32()))

    return assign


def lane_segments(batch: Any, lanes: Any, *, regroup: bool = True) -> Iterator[tuple[Lane, Any]]:
    """``(lane, its rows in their order)`` for every run of one lane in ``batch``.

    Lanes of a topic partition interleave (fused: ``regroup`` gathers each lane's rows, order kept) or follow
    each other (sorted: taken as they come, so a lane out of place shows).

    >>> import pyarrow as pa, numpy as np
    >>> b = pa.record_batch({"topic": ["t", "t", "t", "u"], "partition": [0, 0, 0, 1], "offset": [5, 6, 7, 1]})
    >>> [(str(lane), seg.column("offset").to_pylist()) for lane, seg in lane_segments(b, np.array([1, 0, 1, 0]))]
    [('t[0]/lane0', [6]), ('t[0]/lane1', [5, 7]), ('u[1]/lane0', [1])]
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = batch.num_rows
    if n == 0:
        return
    topics, partitions = batch.column("topic"), batch.column("partition")
    change = np.zeros(max(n - 1, 0), dtype=bool)
    for column in (topics, partitions):
        change |= pc.not_equal(column.slice(1), column.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    bounds = [0, *(np.flatnonzero(change) + 1).tolist(), n]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        rows, their = batch.slice(lo, hi - lo), lanes[lo:hi]
        if regroup and len(their) > 1 and np.any(their[1:] < their[:-1]):
            order = np.argsort(their, kind="stable")  # stable: offset order kept inside each lane
            rows, their = rows.take(pa.array(order)), their[order]
        topic, partition = topics[lo].as_py(), partitions[lo].as_py()
        cuts = [0, *(np.flatnonzero(np.diff(their)) + 1).tolist(), len(their)]
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            yield Lane(topic, partition, int(their[a])), rows.slice(a, b - a)
