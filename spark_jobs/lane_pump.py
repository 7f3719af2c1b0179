"""Drive one handler call per lane by pushing each lane's frames into it as they arrive.

A handler is a generator over its lane's frames (:mod:`spark_jobs.handler_contract`). A task's lanes arrive
interleaved, and pulling one lane to its end would buffer the others, so each lane's handler call runs in its
own greenlet: :meth:`LanePump.push` resumes it until it asks for the next frame, collecting its answers.
Memory holds what the handlers hold, never a lane.

Each answer is matched to the oldest frame the handler took (:func:`conform`). A handler that raises fails
some record, not its lane: the frames it had taken are bisected through fresh calls down to single records,
which get the exception as their ``error`` (dead letters); the rest are answered and the lane goes on with a
fresh call. One that raises on every record of a lane (or before taking any) is broken: its range fails
(:class:`~kprio_core.errors.HandlerError`), and so does a range whose every record it raised on, lane by lane
(:meth:`LanePump.raised_in`: key lanes of one record each never see a second record). Records never answered (it
stopped early) get an ``error``; a frame answered with another number of rows fails the batch
(:class:`~kprio_core.errors.HandlerError`), as do offsets not strictly increasing within a lane
(:class:`~kprio_core.errors.LaneOrderBroken`).

>>> import pyarrow as pa
>>> from spark_jobs.handler_contract import LaneContext
>>> schema = pa.schema([("offset", pa.int64()), ("value", pa.binary()), ("error", pa.string()), ("n", pa.int64())])
>>> pump = LanePump("spark_jobs.handlers:decode_json", schema)
>>> lane0, lane1 = (LaneContext("t", "t-0", 0, lane, 0, "b", (("n", "long"),)) for lane in (0, 1))
>>> outs = [*pump.push(lane0, pa.record_batch({"offset": [3], "value": [b'{"n": 1}']})),
...         *pump.push(lane1, pa.record_batch({"offset": [4], "value": [b'[1]']})),
...         *pump.push(lane0, pa.record_batch({"offset": [5], "value": [b'{"n": 2}']}))]
>>> [row for out in [*outs, *pump.end_all()] for row in out.to_pylist()]  # doctest: +NORMALIZE_WHITESPACE
[{'offset': 3, 'value': b'{"n": 1}', 'error': None, 'n': 1},
 {'offset': 4, 'value': b'[1]', 'error': 'value is a JSON list, not an object', 'n': None},
 {'offset': 5, 'value': b'{"n": 2}', 'error': None, 'n': 2}]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from kprio_core.errors import HandlerError, KprioError, LaneOrderBroken
from kprio_core.lanes import Lane
from spark_jobs.columns import ERROR_COLUMN, INPUT_COLUMNS
from spark_jobs.handler_contract import LaneContext, arrow_form, resolve_handler

NO_ROW = "the handler returned no row for this record"

_NEED = object()  # the handler asks for its next frame
_END = object()  # resume value: the lane has no more frames


class LanePump:
    """One handler call per lane, fed segment by segment; yields output batches in ``out_schema``."""

    def __init__(self, handler_spec: str, out_schema: Any) -> None:
        handler = resolve_handler(handler_spec)
        arrow = arrow_form(handler)
        self._handler = arrow or handler
        self._takes_arrow = arrow is not None
        self._spec = handler_spec
        self._schema = out_schema
        self._lanes: dict[Lane, _Lane] = {}
        self._raised: dict[tuple[str, int], list[tuple[int, str, int]]] = {}
        """Per topic partition, (offset, error, lane) of each record the handler raised on alone, in every lane."""

    def raised_in(self, rng: Any) -> list[tuple[int, str, int]]:
        """(offset, error, lane) of the records of ``rng`` (an offset range) the handler raised on alone."""
        return [r for r in self._raised.get((rng.topic, rng.partition), ()) if rng.start <= r[0] < rng.end]

    def push(self, ctx: LaneContext, segment: Any) -> list[Any]:
        """Give ``segment`` (an Arrow batch of one lane, in offset order) to its lane's handler."""
        lane = self._lanes.get(ctx.key)
        if lane is None:
            lane = self._lanes[ctx.key] = _Lane(self, ctx)
        return lane.push(segment)

    def end(self, key: Lane) -> list[Any]:
        """The lane has no more records: let its handler finish; keep what it did not answer."""
        lane = self._lanes.pop(key, None)
        return lane.end() if lane is not None else []

    def end_all(self) -> Iterator[Any]:
        for key in list(self._lanes):
            yield from self.end(key)

    def conform(self, seg: Any, out: Any, ctx: LaneContext, error: str | None = None) -> Any:
        if out is not None and len(out) != seg.num_rows:
            raise HandlerError(
                f"handler {self._spec!r} answered a frame of {seg.num_rows} records with {len(out)} rows ({ctx}): "
                "it must return one row per record, in order"
            )
        return conform(seg, out, self._schema, self._spec, error)


class _Lane:
    """One lane's handler call, suspended in a greenlet between frames."""

    def __init__(self, pump: LanePump, ctx: LaneContext) -> None:
        from greenlet import greenlet

        self.pump = pump
        self.ctx = ctx
        self.waiting: deque[Any] = deque()  # pushed, not yet taken by the handler
        self.fed: deque[Any] = deque()  # taken by the handler, not yet answered
        self.last = -1  # last offset pushed
        self.failure: str | None = None  # once set (it stopped early), the handler answers nothing more
        self.answered = 0  # records the handler answered, in the lane's call or a bisection's
        self.raised: list[tuple[int, str]] = []  # (offset, error) of each record the handler raised on alone
        self.glet = greenlet(self._run)

    # -- inside the greenlet ------------------------------------------------------------
    def _frames(self) -> Iterator[Any]:
        while True:
            if not self.waiting and self.glet.parent.switch(_NEED) is _END:
                return
            if self.waiting:
                seg = self.waiting.popleft()
                self.fed.append(seg)
                yield seg if self.pump._takes_arrow else seg.to_pandas()

    def _run(self, *_: object) -> None:  # the first switch's value starts it
        for out in self.pump._handler(self._frames(), self.ctx):
            self.glet.parent.switch(out)

    # -- in the caller ------------------------------------------------------------------
    def push(self, seg: Any) -> list[Any]:
        self._check_order(seg)
        if self.failure is not None:
            return [self.pump.conform(seg, None, self.ctx, self.failure)]
        self.waiting.append(seg)
        return self._resume(None)

    def end(self) -> list[Any]:
        outs = self._resume(_END) if self.failure is None else []
        outs += self._keep_unanswered(self.failure or NO_ROW)
        if len(self.raised) > 1 and not self.answered:
            offset, error = self.raised[0]
            raise HandlerError(f"handler {self.pump._spec!r} raised on every record of {self.ctx} "
                               f"({len(self.raised)} records; at offset {offset}: {error}): the handler fails, "
                               "not the records")
        return outs

    def _resume(self, value: object) -> list[Any]:
        outs = []
        try:
            while True:
                answer = self.glet.switch(value)
                value = None
                if self.glet.dead:  # the handler returned: nothing more will be answered
                    self.failure = NO_ROW
                    return outs + self._keep_unanswered(NO_ROW)
                if answer is _NEED:
                    return outs
                if not self.fed:
                    raise HandlerError(f"handler {self.pump._spec!r} yielded a frame it was not given ({self.ctx})")
                seg = self.fed.popleft()
                outs.append(self.pump.conform(seg, answer, self.ctx))
                self.answered += seg.num_rows
        except KprioError:
            raise
        except Exception as err:  # noqa: BLE001 - some record failed the handler: find which, go on
            return outs + self._isolate(err)

    def _isolate(self, err: Exception) -> list[Any]:
        """The lane's call raised: answer the frames it had taken by bisection, then go on with a fresh call."""
        from greenlet import greenlet

        if not self.fed:  # it raised before taking a record: no record is to blame
            raise HandlerError(f"handler {self.pump._spec!r} failed before reading a record of {self.ctx}: "
                               f"{type(err).__name__}: {err}") from err
        taken = list(self.fed)
        self.fed.clear()
        outs = [out for seg in taken for out in self._bisect(seg)]
        self.glet = greenlet(self._run)
        return outs + (self._resume(None) if self.waiting else [])

    def _bisect(self, seg: Any) -> list[Any]:
        """``seg`` answered by a fresh call, or split in halves until the records the handler raises on stand alone."""
        try:
            return [self._alone(seg)]
        except KprioError:
            raise
        except Exception as err:  # noqa: BLE001 - the handler's failure on this slice
            if seg.num_rows > 1:
                half = seg.num_rows // 2
                return self._bisect(seg.slice(0, half)) + self._bisect(seg.slice(half))
            error = f"handler failed: {type(err).__name__}: {err}"
            offset = int(seg.column("offset")[0].as_py())
            self.raised.append((offset, error))
            raised = self.pump._raised.setdefault((self.ctx.topic, self.ctx.partition), [])
            raised.append((offset, error, self.ctx.lane))
            return [self.pump.conform(seg, None, self.ctx, error)]

    def _alone(self, seg: Any) -> Any:
        """One fresh handler call over ``seg`` only: its one answer, conformed."""
        frame = seg if self.pump._takes_arrow else seg.to_pandas()
        answers = list(self.pump._handler(iter([frame]), self.ctx))
        if len(answers) > 1:
            raise HandlerError(f"handler {self.pump._spec!r} yielded a frame it was not given ({self.ctx})")
        out = self.pump.conform(seg, answers[0] if answers else None, self.ctx, None if answers else NO_ROW)
        self.answered += seg.num_rows if answers else 0
        return out

    def _keep_unanswered(self, error: str) -> list[Any]:
        kept = [self.pump.conform(seg, None, self.ctx, error) for seg in (*self.fed, *self.waiting)]
        self.fed.clear()
        self.waiting.clear()
        return kept

    def _check_order(self, seg: Any) -> None:
        import numpy as np

        offsets = seg.column("offset").to_numpy()
        if len(offsets) and (offsets[0] <= self.last or np.any(np.diff(offsets) <= 0)):
            raise LaneOrderBroken(f"{self.ctx}: offsets not strictly increasing after {self.last}")
        if len(offsets):
            self.last = int(offsets[-1])


def conform(seg: Any, out: Any, out_schema: Any, spec: str, error: str | None = None) -> Any:
    """The output batch: input columns from ``seg``, the rest from ``out`` (pandas or Arrow; None: ``error``)."""
    import pyarrow as pa

    n = seg.num_rows
    names = set(_names(out)) if out is not None else set()
    arrays = []
    for field in out_schema:
        name = field.name
        if name in INPUT_COLUMNS:
            arrays.append(seg.column(name))
        elif name not in names:
            if name == ERROR_COLUMN and error is not None:
                arrays.append(pa.array([error] * n, type=field.type))
            else:
                arrays.append(pa.nulls(n, type=field.type))
        else:
            arrays.append(_column(out[name], field, spec))
    return pa.RecordBatch.from_arrays(arrays, schema=out_schema)


def _names(out: Any) -> list[str]:
    names = getattr(out, "column_names", None)  # pyarrow
    return list(out.columns if names is None else names)


def _column(values: Any, field: Any, spec: str) -> Any:
    import pyarrow as pa

    try:
        if isinstance(values, pa.Array | pa.ChunkedArray):
            arr = values if values.type == field.type else values.cast(field.type, safe=False)
            return arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
        if pa.types.is_string(field.type):
            missing = values.isna().to_numpy()
            return pa.array([None if gone else str(v) for v, gone in zip(values.tolist(), missing, strict=True)],
                            type=field.type)
        return pa.array(values, from_pandas=True).cast(field.type, safe=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as err:
        raise HandlerError(f"handler {spec!r}: column {field.name!r} is not {field.type}: {err}") from None
