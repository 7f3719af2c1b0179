"""The record handler contract: what a handler is given, what it must return, how it is loaded.

A handler is named ``"module:function"`` (``config.drain.handler``) and called once per lane
(one ``(topic, partition, lane)``) of a batch (again for the rest of a lane after it raised)::

    def handler(frames: Iterator[pandas.DataFrame], context: LaneContext) -> Iterator[pandas.DataFrame]

- ``frames`` are the lane's records in offset order, a few thousand rows per frame, with the
  columns ``topic, partition, offset, timestamp, timestampType, key, value, headers, priority,
  batch_id, lane`` (``key``/``value`` are ``bytes`` or ``None``);
- for every frame it reads, the handler yields one frame with the same rows in the same order
  (one output row per input row), carrying any of the topic's schema fields and ``error``
  (a string saying why the record could not be processed, else null). Other columns it returns
  are ignored: the drain's own columns always come from the input, so a handler cannot lose
  or invent records; ``decoded_key`` (``topics[].key_format``) is the drain's too, decoded from the raw
  ``key`` after the handler answered (:mod:`spark_jobs.keys`).
- A record is never dropped, and one record's failure is that record's: if the handler raises,
  kprio gives the frames it had taken to fresh calls of the handler, in halves down to single
  records, so only the records it raises on are kept with the exception as their ``error``
  (they go to the dead letters); the lane then goes on with a fresh call. So a handler may be
  called more than once per lane after it raised: state it keeps across records starts again.
  A handler that raises on every record of a lane (or before taking one) is broken, and its
  range fails with :class:`HandlerError`. A frame of another length than its input is a
  contract breach and fails the batch with :class:`HandlerError`.

The handler is loaded (:func:`resolve_handler`, :mod:`kprio_core.handler_spec`) when the configuration
loads and again on the driver, so a wrong name or signature fails before any Spark job runs.

A handler may also carry an Arrow form as its ``arrow`` attribute: the same contract with
``pyarrow.RecordBatch`` frames in and ``RecordBatch`` (or ``Table``) answers out. The drain
then skips the pandas conversion of every frame (:func:`arrow_form`); both forms must give the
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
    """A topic with ``value_format: avro``: the registry and the batch's reader schemas (the handler decodes the
    values with ``values.decoder(schema)``); None for JSON and raw values."""

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
