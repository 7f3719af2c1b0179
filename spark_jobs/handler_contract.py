"""The record handler contract: what a handler is given, what it must return, how it is loaded.

A handler is named ``"module:function"`` (``config.drain.handler``) and called once per lane
(one ``(topic, partition, lane)``) of a batch (again for the rest of a lane after it raised)::

    def handler(frames: Iterator[pandas.DataFrame], context: LaneContext) -> Iterator[pandas.DataFrame]

- ``frames`` are the lane's records in offset order, a few thousand rows per frame, with the
  columns ``topic, partition, offset, timestamp, timestampType, key, value, headers, priority,
  batch_id, lane`` (``key``/``value`` are ``bytes`` or ``None``);
- for every frame it reads, the handler yields one frame with the same rows in the same order, carrying
  any of the topic's schema fields and ``error`` (why the record could not be processed, else null). Other
  columns are ignored: the drain's own always come from the input, so a handler cannot lose or invent
  records; ``decoded_key`` is the drain's too, decoded after the handler (:mod:`spark_jobs.keys`).
- A record is never dropped, and one record's failure is that record's: if the handler raises, the records
  it raises on are isolated by bisection and kept with the exception as their ``error`` (dead letters;
  :mod:`spark_jobs.lane_pump`). So a handler may be called again within a lane: state it keeps starts again.
  A handler that raises on every record of a lane (or before taking one), or on every record of a range whichever
  lanes they are in, is broken: its range fails with :class:`HandlerError`. A frame of another length than its input
  fails the batch with :class:`HandlerError`.

The handler is loaded (:func:`resolve_handler`) when the configuration loads and again on the driver, so a
wrong name or signature fails before any Spark job runs.

An optional Arrow form, the handler's ``arrow`` attribute (:func:`arrow_form`), has the same contract with
``pyarrow.RecordBatch`` in and ``RecordBatch`` (or ``Table``) out, skipping pandas; both forms must give the
same rows. kprio's default JSON handler has one.

>>> resolve_handler("spark_jobs.handlers:decode_json").__name__
'decode_json'
>>> arrow_form(resolve_handler("spark_jobs.handlers:decode_json")).__name__
'decode_json_arrow'
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kprio_core.handler_spec import resolve_handler
from kprio_core.lanes import Lane
from kprio_core.values.avro import ValueDecoding

__all__ = ["Handler", "LaneContext", "arrow_form", "resolve_handler"]

Handler = Callable[[Iterator[Any], "LaneContext"], Iterator[Any]]


@dataclass(frozen=True, slots=True)
class LaneContext:
    """Where a handler call's records come from: one lane of one priority topic partition."""

    logical_topic: str
    topic: str
    partition: int
    lane: int
    priority: int
    batch_id: str
    schema: tuple[tuple[str, str], ...] = ()
    """The topic's decoded fields and their types, e.g. ``(("amount", "double"),)``."""
    values: ValueDecoding | None = None
    """``value_format: avro``: registry and reader schemas (decode with ``values.decoder(schema)``); else None."""

    @property
    def fields(self) -> Mapping[str, str]:
        return dict(self.schema)

    @property
    def key(self) -> Lane:
        """The lane these records come from."""
        return Lane(self.topic, self.partition, self.lane)

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}]/lane{self.lane} of batch {self.batch_id}"


def arrow_form(handler: Handler) -> Handler | None:
    """The handler's Arrow form (its ``arrow`` attribute, when callable), else None."""
    form = getattr(handler, "arrow", None)
    return form if callable(form) else None
