"""Per-range counts of the rows a drain wrote, and their merge into RangeStats: the conservation proof.

The one place that says whether a planned range was drained exactly once.

- **On the executors**, a :class:`RangeCount` counts, per planned range, exactly the rows its task handed
  to the Parquet writers (output, dead letters, key + value bytes, rows outside the range, invalid rows and
  null required fields in the output) with bitmaps of the offsets written, the offsets found by the read,
  and the offsets the read lost; it becomes one stats row (:func:`stats_struct`).
- **On the driver**, :func:`merge_counts` merges each range's rows (several on the shuffle path) into one
  :class:`~kprio_core.model.results.RangeStats`: counts summed, bitmaps OR-ed, so an offset written twice
  shows as ``written > distinct``. Offsets absent from the union are gaps: ``lost`` with
  ``drain.allow_data_loss``, else the range fails with :class:`~kprio_core.errors.RangeIncomplete`'s text.

A bitmap costs a byte per planned offset in the task and travels as one bit per offset, zlib-compressed.

Offsets 10..15 found but 13 (a transaction marker), written by two tasks (one of them the dead
letter of 15); the read lost [18,20) to a truncated log, and 16, 17 held no record:

>>> import pyarrow as pa
>>> from kprio_core.model.offsets import OffsetRange
>>> from kprio_core.model.drain_plan import PlannedRange
>>> planned = PlannedRange(2, OffsetRange("o-2", 0, 10, 20))
>>> a, b = RangeCount(planned.range), RangeCount(planned.range, part=1)
>>> a.found([10, 11, 12, 14]); b.found([15]); b.lose([OffsetRange("o-2", 0, 18, 20)])
>>> a.count(pa.record_batch({"key": [b"k"] * 4, "value": [b"vv"] * 4, "offset": [10, 11, 12, 14]}), dead=False)
>>> b.count(pa.record_batch({"key": [None], "value": [b"bad"], "offset": [15]}), dead=True)
>>> stats_batch([a.row(), b.row()]).num_rows
2
>>> [s] = merge_counts([a.row(), b.row()], [planned], allow_data_loss=True)
>>> (s.output, s.dead, s.distinct, s.first, s.last, s.bytes, s.no_record), [str(g) for g in s.lost]
((4, 1, 5, 10, 15, 15, 3), ['o-2[0]@[18,20)'])
>>> s.complete
True
>>> merge_counts([a.row()], [planned], allow_data_loss=False)[0].complete
True
>>> a.found([16]); merge_counts([a.row()], [planned], allow_data_loss=False)[0].failure
'range o-2[0]@[10,20) is incomplete: 1 of 10 offsets missing: [16,17) (found by the read, missing from the drained output)'
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from kprio_core.errors import DrainOutputInvalid, HandlerError
from kprio_core.model.drain_plan import PlannedRange
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import ErrorRecord, RangeStats
from spark_jobs.completeness import incomplete_error

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


def stats_struct() -> StructType:
    """The shape of a stats row: what the drain's Spark job returns, one row per task and planned range."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        BooleanType,
        DoubleType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    longs = ("start", "end")
    counts = ("output", "dead", "bytes", "outside", "invalid_in_output", "raised")
    null_count = StructType([StructField("field", StringType()), StructField("count", LongType())])
    gap = StructType([StructField("start", LongType()), StructField("end", LongType())])
    error = StructType([StructField("kind", StringType()), StructField("message", StringType()),
                        StructField("transient", BooleanType()), StructField("topic", StringType()),
                        StructField("partition", IntegerType()), StructField("start", LongType()),
                        StructField("end", LongType())])
    return StructType(
        [StructField("topic", StringType()), StructField("partition", IntegerType())]
        + [StructField(name, LongType()) for name in longs]
        + [StructField("part", IntegerType())]
        + [StructField(name, LongType()) for name in counts]
        + [StructField("nulls", ArrayType(null_count)), StructField("offsets", BinaryType()),
           StructField("found", BinaryType()), StructField("lost", ArrayType(gap)),
           StructField("failure", StringType()), StructField("error", error),
           StructField("files", ArrayType(StringType())), StructField("seconds", DoubleType()),
           StructField("raised_first", StringType())]
    )


def stats_batch(rows: Sequence[Mapping[str, Any]]) -> Any:
    """Stats rows as one Arrow record batch of :func:`stats_struct` (what a drain task yields)."""
    import pyarrow as pa

    from spark_jobs.kafka_schema import arrow_schema_of

    return pa.RecordBatch.from_pylist(list(rows), schema=arrow_schema_of(stats_struct()))


class RangeCount:
    """What one task wrote of one planned range (executor side)."""

    def __init__(self, rng: OffsetRange, part: int | None = None) -> None:
        self.range = rng
        self.part = part
        self.output = 0
        self.dead = 0
        self.bytes = 0
        self.outside = 0
        self.invalid_in_output = 0
        self.nulls: dict[str, int] = {}
        self.present = np.zeros(rng.count, dtype=bool)
        self.seen = np.zeros(rng.count, dtype=bool)
        self.lost: list[OffsetRange] = []
        self.failure: str | None = None
        self.error: ErrorRecord | None = None
        """The failure's cause, typed (:class:`~kprio_core.model.results.ErrorRecord`): what the driver acts on."""
        self.files: list[str] = []
        self.raised = 0
        """Records of the range the handler raised on (dead letters with the exception as their error)."""
        self.raised_first: str | None = None
        """The first of them: ``at offset N: <error>``."""
        self.seconds = 0.0
        """The task's time on this range's records (its read, handler and writes): the drain's own rate."""

    @property
    def written(self) -> int:
        return self.output + self.dead

    def found(self, offsets: Any) -> None:
        """Offsets of records the read found and handed to the task (before the handler)."""
        at = np.asarray(offsets, dtype=np.int64) - self.range.start
        self.seen[at[(at >= 0) & (at < self.range.count)]] = True

    def lose(self, gaps: Iterable[OffsetRange]) -> None:
        """Offsets the read lost (below the log start, beyond its end), recorded with allow_data_loss."""
        for gap in gaps:
            start, end = max(gap.start, self.range.start), min(gap.end, self.range.end)
            if start < end:
                self.lost.append(OffsetRange(self.range.topic, self.range.partition, start, end))

    def count(self, batch: Any, *, dead: bool, invalid: int = 0,
              nulls: Iterable[tuple[str, int]] = ()) -> None:
        """Count rows about to be written, to the dead letters or not (``invalid``, ``nulls``: output rows' only)."""
        import pyarrow.compute as pc

        n = batch.num_rows
        if dead:
            self.dead += n
        else:
            self.output += n
            self.invalid_in_output += invalid
            for name, k in nulls:
                self.nulls[name] = self.nulls.get(name, 0) + k
        size = 0
        for name in ("key", "value"):
            column = batch.column(name)
            if column.null_count < n:
                size += pc.sum(pc.binary_length(column)).as_py() or 0
        self.bytes += size
        offsets = batch.column("offset").to_numpy(zero_copy_only=False) - self.range.start
        inside = (offsets >= 0) & (offsets < self.range.count)
        if not inside.all():
            self.outside += int((~inside).sum())
            offsets = offsets[inside]
        self.present[offsets] = True

    def raised_on(self, records: Sequence[tuple[int, str, int]]) -> None:
        """The records (offset, error, lane) of the range the handler raised on, in this task."""
        self.raised = len(records)
        if records:
            offset, error, _ = min(records)
            self.raised_first = f"at offset {offset}: {error}"

    def row(self) -> dict[str, Any]:
        """The stats row (:func:`stats_struct`) of this count."""
        packed = np.packbits(self.present, bitorder="little").tobytes()
        found = np.packbits(self.seen, bitorder="little").tobytes()
        return {
            "topic": self.range.topic, "partition": self.range.partition, "start": self.range.start,
            "end": self.range.end, "part": self.part, "output": self.output, "dead": self.dead,
            "bytes": self.bytes, "outside": self.outside, "invalid_in_output": self.invalid_in_output,
            "nulls": [{"field": k, "count": v} for k, v in sorted(self.nulls.items())],
            "offsets": zlib.compress(packed, 1), "found": zlib.compress(found, 1),
            "lost": [{"start": g.start, "end": g.end} for g in self.lost],
            "failure": self.failure, "error": error_row(self.error), "files": list(self.files),
            "seconds": self.seconds, "raised": self.raised, "raised_first": self.raised_first,
        }

    def fail(self, failure: str, error: ErrorRecord) -> None:
        """This range failed: ``failure`` is its one line for people, ``error`` the typed cause."""
        self.failure, self.error = failure, error


def failed_row(rng: OffsetRange, failure: str, error: ErrorRecord) -> dict[str, Any]:
    """The stats row of a range that failed before anything of it was written."""
    count = RangeCount(rng)
    count.fail(failure, error)
    return count.row()


def error_row(error: ErrorRecord | None) -> dict[str, Any] | None:
    """An error record as the stats row's ``error`` struct (and back: :func:`error_of`).

    >>> from kprio_core.errors import BrokerUnreachable
    >>> rec = ErrorRecord.of(BrokerUnreachable("b:9092", 5), where=OffsetRange("o-2", 0, 5, 9))
    >>> error_of(error_row(rec)) == rec
    True
    """
    if error is None:
        return None
    where = error.where
    return {"kind": error.kind, "message": error.message, "transient": error.transient,
            "topic": where.topic if where else None, "partition": where.partition if where else None,
            "start": where.start if where else None, "end": where.end if where else None}


def error_of(row: Mapping[str, Any] | None) -> ErrorRecord | None:
    if row is None:
        return None
    where = (OffsetRange(row["topic"], row["partition"], row["start"], row["end"])
             if row.get("topic") is not None else None)
    return ErrorRecord(row["kind"], row["message"], bool(row["transient"]), where)


def merge_counts(rows: Iterable[Mapping[str, Any]], ranges: Sequence[PlannedRange], *,
                 allow_data_loss: bool, every_range_reported: bool = True,
                 log_bounds: Mapping[tuple[str, int], tuple[int, int]] | None = None) -> tuple[RangeStats, ...]:
    """One RangeStats per planned range from the tasks' stats rows (driver side).

    ``every_range_reported`` (the fused path): a range nobody reported failed unseen; on the shuffle path a
    range lost whole to retention has no row. ``log_bounds`` (shuffle path, ``allow_data_loss``): ``(log start,
    readable end)`` per partition; offsets nobody found outside them are lost. A row naming a range the plan
    does not hold is a drain bug: DrainOutputInvalid.
    """
    by_range = _rows_by_range(rows, ranges)
    stats = []
    for planned in ranges:
        rng = planned.range
        parts = sorted(by_range[rng], key=lambda r: -1 if r["part"] is None else r["part"])
        present, found = _bits(parts, "offsets", rng.count), _bits(parts, "found", rng.count)
        lost = _lost_bits(rng, parts, (log_bounds or {}).get(rng.topic_partition), found | present)
        written = np.flatnonzero(present)
        failure, error = _range_failure(rng, parts, _gaps(rng, found & ~present), lost,
                                        allow_data_loss=allow_data_loss, every_range_reported=every_range_reported)
        nulls = _null_counts(parts)
        stats.append(RangeStats(
            planned.priority, rng,
            output=sum(r["output"] for r in parts), dead=sum(r["dead"] for r in parts), distinct=len(written),
            first=int(written[0]) + rng.start if len(written) else None,
            last=int(written[-1]) + rng.start if len(written) else None,
            bytes=sum(r["bytes"] for r in parts), outside=sum(r["outside"] for r in parts),
            invalid_in_output=sum(r["invalid_in_output"] for r in parts), nulls=tuple(sorted(nulls.items())),
            lost=_gaps(rng, lost) if allow_data_loss else (),
            no_record=int((~(found | present | lost)).sum()), failure=failure, error=error,
            files=tuple(f for r in parts for f in r["files"] or ()),
        ))
    return tuple(stats)


def _rows_by_range(rows: Iterable[Mapping[str, Any]],
                   ranges: Sequence[PlannedRange]) -> dict[OffsetRange, list[Mapping[str, Any]]]:
    """The stats rows of each planned range; a row naming a range the plan does not hold is a drain bug."""
    by_range: dict[OffsetRange, list[Mapping[str, Any]]] = {p.range: [] for p in ranges}
    for row in rows:
        rng = OffsetRange(row["topic"], row["partition"], row["start"], row["end"])
        if rng not in by_range:
            raise DrainOutputInvalid(f"a drain task reported {rng}, which is not a planned range")
        by_range[rng].append(row)
    return by_range


def _range_failure(rng: OffsetRange, parts: Sequence[Mapping[str, Any]], missing: Any, lost: Any, *,
                   allow_data_loss: bool, every_range_reported: bool) -> tuple[str | None, ErrorRecord | None]:
    """Why a range failed (text, error record) or (None, None); first of: a task's failure, no task reporting it,
    records found but ``missing`` from the output, records ``lost`` before the read (unless allowed), a handler
    that raised on every record (:func:`broken_handler`)."""
    failed = next((r for r in parts if r["failure"]), None)
    failure, error = (failed["failure"], error_of(failed.get("error"))) if failed else (None, None)
    if failure is None and not parts and rng.count and every_range_reported:
        failure = f"{rng}: no drain task reported this range"
        error = ErrorRecord.of(DrainOutputInvalid(failure), where=rng)
    if failure is None and missing:
        gap = incomplete_error(rng, missing, "found by the read, missing from the drained output")
        failure, error = str(gap), ErrorRecord.of(gap, where=rng)
    if failure is None and lost.any() and not allow_data_loss:
        gap = incomplete_error(rng, _gaps(rng, lost), "lost before the read")
        failure, error = str(gap), ErrorRecord.of(gap, where=rng)
    if failure is None and (broken := broken_handler(rng, parts)) is not None:
        failure, error = str(broken), ErrorRecord.of(broken, where=rng)
    return failure, error


def broken_handler(rng: OffsetRange, parts: Sequence[Mapping[str, Any]]) -> HandlerError | None:
    """The handler raised on every record of the range written (more than one), in whichever lanes and tasks: it is
    broken, not the records, so the range fails instead of quarantining them all (key lanes of a record each, or a
    shuffle that spread the range over tasks, never show a lane's every record raised on). One record it raised on
    is a bad record, as far as anyone can tell.

    >>> rng = OffsetRange("o-2", 0, 0, 10)
    >>> row = {"output": 0, "dead": 2, "raised": 2, "raised_first": "at offset 3: handler failed: KeyError: 'id'"}
    >>> print(broken_handler(rng, [row, {**row, "raised_first": "at offset 0: handler failed: KeyError: 'id'"}]))
    the handler raised on every record of o-2[0]@[0,10) (4 records; at offset 0: handler failed: KeyError: 'id'):
    the handler fails, not the records
    >>> broken_handler(rng, [row, {**row, "output": 1}]) is None, broken_handler(rng, [{**row, "dead": 1, "raised": 1}])
    (True, None)
    """
    raised = sum(r.get("raised") or 0 for r in parts)
    if raised < 2 or raised < sum(r["output"] + r["dead"] for r in parts):
        return None
    first = min((r["raised_first"] for r in parts if r.get("raised_first")), key=_offset_of)
    return HandlerError(f"the handler raised on every record of {rng} ({raised} records; {first}): the handler "
                        "fails, not the records")


def _offset_of(first: str) -> int:
    return int(first.split(":", 1)[0].removeprefix("at offset "))


def _null_counts(parts: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Null values per field, over every task's rows of a range."""
    nulls: dict[str, int] = {}
    for r in parts:
        for item in r["nulls"] or ():
            nulls[item["field"]] = nulls.get(item["field"], 0) + item["count"]
    return nulls


def _bits(parts: Sequence[Mapping[str, Any]], column: str, count: int) -> Any:
    """The union of the tasks' bitmaps in ``column`` (one bool per offset of the range)."""
    bits = np.zeros(count, dtype=bool)
    for r in parts:
        if r.get(column) is not None:
            bits |= np.unpackbits(np.frombuffer(zlib.decompress(r[column]), dtype=np.uint8),
                                  count=count, bitorder="little").astype(bool)
    return bits


def _lost_bits(rng: OffsetRange, parts: Sequence[Mapping[str, Any]], bounds: tuple[int, int] | None,
               seen: Any) -> Any:
    """Offsets of ``rng`` lost: those the reads reported, and those nobody saw outside the log's ``bounds``."""
    lost = np.zeros(rng.count, dtype=bool)
    for r in parts:
        for gap in r.get("lost") or ():
            lost[max(gap["start"], rng.start) - rng.start:max(0, min(gap["end"], rng.end) - rng.start)] = True
    if bounds is not None:
        log_start, log_end = bounds
        outside = np.ones(rng.count, dtype=bool)
        outside[max(0, log_start - rng.start):max(0, log_end - rng.start)] = False
        lost |= outside
    return lost & ~seen


def _gaps(rng: OffsetRange, bits: Any) -> tuple[OffsetRange, ...]:
    """The offsets of ``rng`` whose bit is set, as ranges."""
    at = np.flatnonzero(bits) + rng.start
    return tuple(OffsetRange(rng.topic, rng.partition, first, last + 1) for first, last in _runs(at))


def _runs(offsets: Any) -> list[tuple[int, int]]:
    """Inclusive ``(first, last)`` runs of consecutive values in a sorted array."""
    if len(offsets) == 0:
        return []
    cuts = np.flatnonzero(np.diff(offsets) != 1) + 1
    firsts = np.concatenate(([0], cuts))
    lasts = np.concatenate((cuts - 1, [len(offsets) - 1]))
    return list(zip(offsets[firsts].tolist(), offsets[lasts].tolist(), strict=True))
