"""Handlers used by the drain tests (imported by the executors through PYTHONPATH; never by production code)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from spark_jobs.handler_contract import LaneContext


def record_order(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """Sets ``seen`` to the position of each record in the order this call received them."""
    counter = itertools.count()
    for frame in frames:
        yield frame.assign(seen=[next(counter) for _ in range(len(frame))], error=None)


def fail_on_offset_five(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """Answers frames until it meets offset 5, then raises."""
    for frame in frames:
        if (frame["offset"] == 5).any():
            raise ValueError(f"cannot handle offset 5 of {context.topic}")
        yield frame.assign(error=None)


def fail_on_odd_values(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """Raises on any frame holding a record whose value is an odd digit."""
    for frame in frames:
        if frame["value"].map(lambda v: int(v) % 2 == 1).any():
            raise ValueError("an odd value")
        yield frame.assign(error=None)


def fail_on_every_record(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """Broken: raises whatever it is given."""
    for _ in frames:
        raise ValueError("no record suits me")
    yield from ()


def fail_at_start(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """Broken before it reads a record (a setup step that fails)."""
    raise RuntimeError("not configured")
    yield from frames


def kills_its_worker_on_priority_0(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """Decodes like the default handler, but its Python worker dies on a priority-0 record (as an OOM kill would)."""
    import os

    from spark_jobs.handlers import decode_json

    if context.priority == 0:
        os._exit(137)
    yield from decode_json(frames, context)


def drops_a_row(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """Breaks the contract: returns one row fewer than it was given."""
    for frame in frames:
        yield frame.iloc[1:]


def stops_early(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """Answers only the first frame of a lane."""
    for frame in frames:
        yield frame.assign(error=None)
        return


def not_a_handler(frames: Iterator[Any]) -> Iterator[Any]:
    """Wrong signature: no context."""
    yield from frames


def record_process(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """Decodes like the default handler and sets ``pid`` to the process that ran it."""
    import os

    from spark_jobs.handlers import decode_json

    for frame in decode_json(frames, context):
        yield frame.assign(pid=os.getpid())


def answers_in_pairs(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """Reads two frames before answering either (a handler that batches); the odd last one at the end."""
    taken: list[Any] = []
    for frame in frames:
        taken.append(frame.assign(error=None))
        if len(taken) == 2:
            yield from taken
            taken.clear()
    yield from taken


def decode_json_pandas_only(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """The default handler's pandas form alone (no Arrow form), to compare the two."""
    from spark_jobs.handlers import decode_json

    yield from decode_json(frames, context)


def drops_a_row_on_partition_zero(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """Decodes like the default handler, but breaks the contract on partition 0 only."""
    from spark_jobs.handlers import decode_json

    for frame in decode_json(frames, context):
        yield frame.iloc[1:] if context.partition == 0 else frame


def fails_every_record(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """A handler that cannot decode anything: every record gets an error (a broken release)."""
    for frame in frames:
        yield frame.assign(error="cannot decode: handler bug")


def slow_on_partition_0_of_priority_0(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """Decodes like the default handler, but holds its core for 8 s first on partition 0 of priority 0 (a long bulk task)."""
    import time

    from spark_jobs.handlers import decode_json

    if context.priority == 0 and context.partition == 0:
        time.sleep(8)
    yield from decode_json(frames, context)
