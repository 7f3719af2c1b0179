"""Run the handler over a shuffled Spark task's records, one lane at a time, in offset order.

The drain's shuffle path (see :mod:`spark_jobs.drain`) sorts a task's rows by ``(topic,
partition, lane, offset)``. :func:`lane_runner` cuts the stream into lanes and feeds each lane
to its own handler call through :class:`~spark_jobs.lane_pump.LanePump`, which matches every
output frame to the input frame it answers and builds the output rows: the drain's columns
from the input, ``error`` and the decoded fields from the handler. Records the handler did not
return are kept with an error. Memory holds a few frames, not a lane. :func:`lane_assigner`
fills the ``lane`` column before the shuffle.

>>> import pyarrow as pa
>>> b = pa.record_batch({"topic": ["t", "t", "t", "u"], "partition": [0, 0, 1, 1], "lane": [0, 0, 0, 0]})
>>> lane_bounds(b)
[(0, 2), (2, 3), (3, 4)]
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kprio_core.errors import LaneOrderBroken
from spark_jobs.handler_contract import LaneContext

LaneKey = tuple[str, int, int]


def lane_bounds(batch: Any) -> list[tuple[int, int]]:
    """``[start, stop)`` row slices of ``batch`` with one ``(topic, partition, lane)`` each."""
    import numpy as np
    import pyarrow.compute as pc

    n = batch.num_rows
    if n == 0:
        return []
    change = np.zeros(n - 1, dtype=bool)
    for name in ("topic", "partition", "lane"):
        col = batch.column(name)
        change |= pc.not_equal(col.slice(1), col.slice(0, n - 1)).to_numpy(zero_copy_only=False)
    cuts = [0, *(np.flatnonzero(change) + 1).tolist(), n]
    return list(zip(cuts[:-1], cuts[1:], strict=True))


def _segments(batches: Iterator[Any]) -> Iterator[tuple[LaneKey, Any]]:
    for batch in batches:
        for start, stop in lane_bounds(batch):
            seg = batch.slice(start, stop - start)
            key = (seg.column("topic")[0].as_py(), seg.column("partition")[0].as_py(), seg.column("lane")[0].as_py())
            yield key, seg


def lane_runner(
    handler_spec: str, logical_topic: str, schema: Mapping[str, str], out_struct: Any
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function of the drain's shuffle path (picklable closure over plain values)."""
    schema_items = tuple(schema.items())

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        from spark_jobs.kafka_schema import arrow_schema_of
        from spark_jobs.lane_pump import LanePump

        pump = LanePump(handler_spec, arrow_schema_of(out_struct))
        seen_lanes: set[LaneKey] = set()
        for key, group in itertools.groupby(_segments(batches), key=lambda item: item[0]):
            if key in seen_lanes:
                raise LaneOrderBroken(f"lane {key[0]}[{key[1]}]/lane{key[2]} came back after another lane")
            seen_lanes.add(key)
            ctx = None
            for _, seg in group:
                if ctx is None:
                    ctx = LaneContext(logical_topic, key[0], key[1], key[2], seg.column("priority")[0].as_py(),
                                      seg.column("batch_id")[0].as_py(), schema_items)
                yield from pump.push(ctx, seg)
            yield from pump.end(key)  # sorted input: this lane is complete

    return run


def lane_assigner(lanes: int) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function that fills the ``lane`` column: murmur2(key) % lanes (kprio_core.lanes)."""

    def assign(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        from kprio_core.lanes import lanes_of

        for batch in batches:
            lane = pa.array(lanes_of(batch.column("key"), batch.column("offset"), lanes), type=pa.int32())
            index = batch.schema.get_field_index("lane")
            yield batch.set_column(index, batch.schema.field(index), lane)

    return assign
