"""Run the handler over a Spark task's records, one lane at a time, in offset order.

The task's rows arrive sorted by ``(topic, partition, lane, offset)`` (the drain sorts them, or
they come straight from one split already in order). :func:`lane_runner` cuts the stream into
lanes, hands each lane's frames to the handler (see :mod:`spark_jobs.handler_contract`),
matches every output frame to the input frame it answers, and builds the output rows: the
drain's columns from the input, ``error`` and the decoded fields from the handler. Records
the handler did not return are kept with an error. Memory holds a few frames, not a lane.

>>> import pyarrow as pa
>>> b = pa.record_batch({"topic": ["t", "t", "t", "u"], "partition": [0, 0, 1, 1], "lane": [0, 0, 0, 0]})
>>> lane_bounds(b)
[(0, 2), (2, 3), (3, 4)]
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kprio_core.errors import HandlerError, KprioError, LaneOrderBroken
from spark_jobs.columns import ERROR_COLUMN, INPUT_COLUMNS
from spark_jobs.handler_contract import LaneContext, resolve_handler

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
    """The ``mapInArrow`` function of the drain (picklable closure over plain values)."""
    schema_items = tuple(schema.items())

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        from spark_jobs.kafka_schema import arrow_schema_of

        handler = resolve_handler(handler_spec)
        out_schema = arrow_schema_of(out_struct)
        seen_lanes: set[LaneKey] = set()
        for key, group in itertools.groupby(_segments(batches), key=lambda item: item[0]):
            if key in seen_lanes:
                raise LaneOrderBroken(f"lane {key[0]}[{key[1]}]/lane{key[2]} came back after another lane")
            seen_lanes.add(key)
            segments = (seg for _, seg in group)
            first = next(segments)
            ctx = LaneContext(logical_topic, key[0], key[1], key[2],
                              first.column("priority")[0].as_py(), first.column("batch_id")[0].as_py(), schema_items)
            yield from run_lane(handler, handler_spec, ctx, itertools.chain([first], segments), out_schema)

    return run


def run_lane(handler: Any, spec: str, ctx: LaneContext, segments: Iterator[Any], out_schema: Any) -> Iterator[Any]:
    """Call the handler on one lane's segments; yield output Arrow batches for every input row."""
    fed: deque[Any] = deque()
    last = [-1]

    def frames() -> Iterator[Any]:
        for seg in segments:
            _check_order(seg, last, ctx)
            fed.append(seg)
            yield seg.to_pandas()

    failure = "the handler returned no row for this record"
    try:
        for out in handler(frames(), ctx):
            if not fed:
                raise HandlerError(f"handler {spec!r} yielded a frame it was not given ({ctx})")
            seg = fed.popleft()
            if len(out) != seg.num_rows:
                raise HandlerError(
                    f"handler {spec!r} answered a frame of {seg.num_rows} records with {len(out)} rows ({ctx}): "
                    "it must return one row per record, in order"
                )
            yield conform(seg, out, out_schema, spec)
    except KprioError:
        raise
    except Exception as err:  # noqa: BLE001 - the handler's failure becomes the records' error
        failure = f"handler failed: {type(err).__name__}: {err}"
    # Whatever the handler did not answer, including records it never pulled, is kept.
    while fed:
        yield conform(fed.popleft(), None, out_schema, spec, error=failure)
    for seg in segments:
        _check_order(seg, last, ctx)
        yield conform(seg, None, out_schema, spec, error=failure)


def _check_order(seg: Any, last: list[int], ctx: LaneContext) -> None:
    import numpy as np

    offsets = seg.column("offset").to_numpy()
    if len(offsets) and (offsets[0] <= last[0] or np.any(np.diff(offsets) <= 0)):
        raise LaneOrderBroken(f"{ctx}: offsets not strictly increasing after {last[0]}")
    if len(offsets):
        last[0] = int(offsets[-1])


def conform(seg: Any, out: Any, out_schema: Any, spec: str, error: str | None = None) -> Any:
    """The output batch: input columns from ``seg``; ``error`` and decoded fields from ``out``."""
    import pyarrow as pa

    n = seg.num_rows
    arrays = []
    for field in out_schema:
        name = field.name
        if name in INPUT_COLUMNS:
            arrays.append(seg.column(name))
        elif name == ERROR_COLUMN and (out is None or name not in out):
            arrays.append(pa.array([error] * n, type=field.type))
        elif out is None or name not in out:
            arrays.append(pa.nulls(n, type=field.type))
        else:
            arrays.append(_column(out[name], field, spec))
    return pa.RecordBatch.from_arrays(arrays, schema=out_schema)


def _column(series: Any, field: Any, spec: str) -> Any:
    import pyarrow as pa

    try:
        if pa.types.is_string(field.type):
            missing = series.isna().to_numpy()
            values = [None if gone else str(v) for v, gone in zip(series.tolist(), missing, strict=True)]
            return pa.array(values, type=field.type)
        return pa.array(series, from_pandas=True).cast(field.type, safe=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as err:
        raise HandlerError(f"handler {spec!r}: column {field.name!r} is not {field.type}: {err}") from None


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
