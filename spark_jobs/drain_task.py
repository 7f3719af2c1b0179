"""One drain task, on an executor: records -> lanes -> handler -> valid / invalid -> staged Parquet -> stats.

A task receives records of one or more topic partitions, each lane's in offset order, and:

1. gives every record its lane (:func:`spark_jobs.lane_batches.batch_lanes`, the one lane rule
   :func:`kprio_core.lanes.lane_for`) and adds ``priority``, ``batch_id``, ``lane``;
2. pushes each lane's records into that lane's one handler call (:class:`~spark_jobs.lane_pump.LanePump`);
3. decodes the keys of every answered frame (:mod:`spark_jobs.keys`) and splits valid from invalid rows
   (:class:`~spark_jobs.validity.Validity`);
4. writes valid rows to the output, invalid to the dead letters, one staged Parquet file per planned range
   and root (:class:`~spark_jobs.staged_writer.StagedWriter`, names from :mod:`spark_jobs.layout`);
5. counts exactly those rows per planned range (:class:`~spark_jobs.range_counts.RangeCount`) and returns
   one stats row per planned range it touched.

Two ways in (:mod:`spark_jobs.drain`): **fused** (:func:`drain_partition`: lanes interleaved) and **shuffled**
(:func:`drain_sorted`: a lane ends when the next begins, one coming back is :class:`~kprio_core.errors.LaneOrderBroken`;
files carry the Spark partition number as their part). Either way a range's files close when the task's lanes have
ended: until a lane ends, its handler may still prove broken (:mod:`spark_jobs.lane_pump`), which fails its ranges.

A failure (read error or short range, handler contract breach, lane out of order, writer ``OSError``...) does
not fail the Spark job: it becomes the ``failure`` (one line: range and cause) and typed ``error`` record
(:mod:`kprio_core.errors` class, message, where, passes by itself?) of every range not completely written,
which the driver turns back into the error without parsing text; their staged files stay for discard.
Memory holds fetch buffers, what handlers hold, one row group per open file and a byte per planned offset,
never a range's records.

>>> from kprio_core.model.offsets import OffsetRange
>>> spec = DrainSpec("b-1", 2, "orders", "spark_jobs.handlers:decode_json", (("n", "long"),), Validity(),
...                  Ordering.KEY, 4, (PlannedRange(2, OffsetRange("orders-2", 0, 0, 100)),), "/o", "/d", 1000)
>>> spec, DrainSpec.from_json(spec.to_json()) == spec
(DrainSpec(b-1.2 of 'orders', 1 ranges, key order x4), True)
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter

from kprio_core.errors import DrainOutputInvalid, KprioError, LaneOrderBroken, TaskFailed
from kprio_core.lanes import Lane, Ordering
from kprio_core.model.drain_plan import PlannedRange
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import ErrorRecord
from kprio_core.values.avro import ValueDecoding
from spark_jobs.keys import KeyDecoding
from spark_jobs.lane_batches import batch_lanes, lane_segments
from spark_jobs.layout import DEAD_LETTERS, OUTPUT
from spark_jobs.validity import Validity

if TYPE_CHECKING:
    from spark_jobs.range_reader import ReadSettings
    from spark_jobs.source import PartitionReads


@dataclass(frozen=True)
class DrainSpec:
    """What a drain task needs besides its records (small, picklable, JSON in the source's options)."""

    batch_id: str
    attempt: int
    logical_topic: str
    handler: str
    schema: tuple[tuple[str, str], ...]
    validity: Validity
    ordering: Ordering
    lanes: int
    ranges: tuple[PlannedRange, ...]
    """The planned ranges (not the splits): a file and a stats row per planned range."""
    output_staging: str
    dead_letter_staging: str
    row_group_records: int
    incarnations: tuple[tuple[str, int], ...] = ()
    """Incarnation of each partition (``topic[partition]``) above 1 (part of the file names, see spark_jobs.layout)."""
    values: ValueDecoding | None = None
    """Avro values: the registry (secrets too: never log the spec) and reader schemas, for the handler's context."""
    keys: KeyDecoding | None = None
    """Keys to decode into ``decoded_key`` (``topics[].key_format``; None: raw, nothing decoded), after the handler."""

    def __repr__(self) -> str:
        # No paths: an object-store URI may carry credentials.
        return (f"DrainSpec({self.batch_id}.{self.attempt} of {self.logical_topic!r}, {len(self.ranges)} ranges, "
                f"{self.ordering.value} order x{self.lanes})")

    def to_json(self) -> str:
        return _SPEC.dump_json(self).decode()

    @classmethod
    def from_json(cls, text: str) -> DrainSpec:
        return _SPEC.validate_json(text)


_SPEC: TypeAdapter[DrainSpec] = TypeAdapter(DrainSpec)


class _RangeWrite:
    """One planned range in one task: its count and its two staged files (listed in the count once complete)."""

    def __init__(self, planned: PlannedRange, part: int | None) -> None:
        from spark_jobs.range_counts import RangeCount

        self.planned = planned
        self.count = RangeCount(planned.range, part)
        self.writers: dict[str, Any] = {}  # root kind -> StagedWriter
        self.pushed = 0  # records handed to the handlers
        self.read_done = False
        self.closed = False

    @property
    def range(self) -> OffsetRange:
        return self.planned.range


class DrainTask:
    """Everything one task does after reading; see the module docstring."""

    def __init__(self, spec: DrainSpec, *, part: int | None = None, sorted_lanes: bool = False) -> None:
        from spark_jobs.columns import dead_letter_struct, drain_struct
        from spark_jobs.kafka_schema import arrow_schema_of
        from spark_jobs.keys import KeyDecoder, output_columns
        from spark_jobs.layout import filesystem

        self.spec = spec
        self.part = part
        self.sorted_lanes = sorted_lanes
        self.out_schema = arrow_schema_of(drain_struct(dict(output_columns(spec.schema, spec.keys))))
        self.keys = KeyDecoder(spec.keys) if spec.keys is not None else None
        self.dead_schema = arrow_schema_of(dead_letter_struct())
        self._pump: Any = None
        self.roots = {OUTPUT: filesystem(spec.output_staging), DEAD_LETTERS: filesystem(spec.dead_letter_staging)}
        self.priority = {r.range.topic: r.priority for r in spec.ranges}
        self.planned: dict[tuple[str, int], list[PlannedRange]] = {}
        for r in sorted(spec.ranges, key=lambda r: r.range):
            self.planned.setdefault(r.range.topic_partition, []).append(r)
        self.writes: dict[tuple[str, int], list[_RangeWrite]] = {}
        self.cache: dict[bytes, int] = {}
        self.lane: Lane | None = None  # sorted input: the lane being fed
        self.ended: set[Lane] = set()
        self.first_fed: float | None = None
        """When the first record came (``time.monotonic()``): the time on records starts there."""

    @property
    def pump(self) -> Any:
        """The lanes' handler calls, made at the first record (loading the handler may fail: a range failure)."""
        from spark_jobs.lane_pump import LanePump

        if self._pump is None:
            self._pump = LanePump(self.spec.handler, self.out_schema)
        return self._pump

    # -- input -----------------------------------------------------------------------------
    def expect(self, topic: str, partition: int) -> None:
        """Report every planned range of this topic partition, even one that gets no row."""
        self._writes((topic, partition))

    def feed(self, batch: Any) -> None:
        """Records (Kafka columns, optionally ``lane``), each lane's in offset order."""
        import pyarrow as pa

        from spark_jobs.kafka_schema import KAFKA_COLUMNS

        if batch.num_rows == 0:
            return
        if self.first_fed is None:
            self.first_fed = time.monotonic()
        if "lane" in batch.schema.names:
            lanes = batch.column("lane").to_numpy(zero_copy_only=False)
            batch = batch.select(list(KAFKA_COLUMNS))
        else:
            lanes = batch_lanes(batch, self.spec.ordering, self.spec.lanes, self.cache)
        for lane, seg in lane_segments(batch, lanes, regroup=not self.sorted_lanes):
            if self.sorted_lanes:
                self._switch_to(lane)
            offsets = seg.column("offset")
            writes, idx = self._attribute(lane.topic, lane.partition, offsets)
            for i, k in zip(*_counts(idx), strict=True):
                writes[i].pushed += k
                writes[i].count.found(offsets.to_numpy(zero_copy_only=False)[idx == i])
            n = seg.num_rows
            priority = self.priority[lane.topic]
            seg = pa.RecordBatch.from_arrays(
                [*seg.columns, pa.repeat(pa.scalar(priority, pa.int32()), n),
                 pa.repeat(pa.scalar(self.spec.batch_id, pa.string()), n),
                 pa.repeat(pa.scalar(lane.lane, pa.int32()), n)],
                names=[*seg.schema.names, "priority", "batch_id", "lane"],
            )
            self._write_all(self.pump.push(self._context(lane, priority), seg))

    def read_done(self, rng: OffsetRange, lost: tuple[OffsetRange, ...] = ()) -> None:
        """Every record of this split was fed: its planned range is read once its last split is.

        ``lost``: offsets the log no longer held (read with ``allow_data_loss``)."""
        for w in self._writes(rng.topic_partition):
            if lost and w.range.overlaps(rng):
                w.count.lose(lost)
            if w.range.start <= rng.start < w.range.end and rng.end >= w.range.end:
                w.read_done = True

    def read_failed(self, rng: OffsetRange, err: BaseException) -> None:
        """Reading this split raised: its planned range and every later one of the partition fail."""
        cause, error = failure_text(err), ErrorRecord.of(err, where=rng)
        for w in self._writes(rng.topic_partition):
            if w.range.end > rng.start and w.count.failure is None:
                w.count.fail(f"{w.range}: {cause}" if w.range.start <= rng.start
                             else f"{w.range}: not read, an earlier range of the partition failed: {cause}", error)

    def finish(self) -> None:
        """Let every handler finish, write what it answered, close every file."""
        if self._pump is not None:
            self._write_all(self._pump.end_all())
        for writes in self.writes.values():
            for w in writes:
                w.read_done = True
                self._close(w)

    def fail(self, err: BaseException) -> None:
        """The task cannot go on: every range not completely written fails with ``err``."""
        cause = failure_text(err)
        for writes in self.writes.values():
            for w in writes:
                if not w.closed and w.count.failure is None:
                    w.count.fail(f"{w.range}: {cause}", ErrorRecord.of(err, where=w.range))
                if not w.closed:
                    for writer in w.writers.values():
                        writer.abort()

    def refuse(self, batch: Any) -> None:
        """After a failure: the ranges of records still to come fail too (none may pass as unread)."""
        first = next((w.count for ws in self.writes.values() for w in ws if w.count.failure), None)
        cause = first.failure if first is not None else ""
        error = first.error if first is not None and first.error is not None else ErrorRecord.of(
            TaskFailed("the task failed before these records"))
        for tp in set(zip(batch.column("topic").to_pylist(), batch.column("partition").to_pylist(), strict=True)):
            for w in self._writes(tp):
                if w.count.failure is None:
                    w.count.fail(f"{w.range}: not drained, the task failed before it: {cause}", error)

    def rows(self) -> list[dict[str, Any]]:
        """One stats row per planned range this task touched."""
        return [w.count.row() for writes in self.writes.values() for w in writes]

    # -- output ----------------------------------------------------------------------------
    def _write_all(self, outs: Any) -> None:
        for out in outs:
            self._write(out)

    def _write(self, out: Any) -> None:
        """One answered frame (one lane, offset order): valid rows to the output, invalid to the dead letters."""
        if out.num_rows == 0:
            return
        if self.keys is not None:  # a key that does not decode makes its record invalid, as a bad value
            out = self.keys.apply(out)
        valid, dead = self.spec.validity.split(out)
        topic, partition = out.column("topic")[0].as_py(), out.column("partition")[0].as_py()
        for kind, rows in ((OUTPUT, valid), (DEAD_LETTERS, dead)):
            if rows is None or rows.num_rows == 0:
                continue
            if kind == DEAD_LETTERS:
                rows = rows.select(self.dead_schema.names)
            writes, idx = self._attribute(topic, partition, rows.column("offset"))
            for w, piece in _pieces(writes, idx, rows):
                self._count(w, kind, piece)
                self._writer(w, kind).write(piece)

    def _count(self, w: _RangeWrite, kind: str, rows: Any) -> None:
        if kind == DEAD_LETTERS:
            w.count.count(rows, dead=True)
        else:
            rules = self.spec.validity
            w.count.count(rows, dead=False, invalid=rules.invalid_count(rows), nulls=rules.null_counts(rows))

    def _writer(self, w: _RangeWrite, kind: str) -> Any:
        from spark_jobs.layout import ATTEMPT_KEY, BATCH_KEY, RANGE_KEY, RangeFile, relative_path
        from spark_jobs.staged_writer import StagedWriter

        writer = w.writers.get(kind)
        if writer is None:
            fs, base = self.roots[kind]
            r = w.range
            rel = relative_path(self.spec.logical_topic, w.planned.priority,
                                RangeFile(r.topic, r.partition, r.start, r.end, self.part,
                                          dict(self.spec.incarnations).get(f"{r.topic}[{r.partition}]", 1)))
            writer = w.writers[kind] = StagedWriter(
                fs, f"{base}/{rel}", rel, self.out_schema if kind == OUTPUT else self.dead_schema,
                row_group_records=self.spec.row_group_records,
                metadata={BATCH_KEY: self.spec.batch_id, ATTEMPT_KEY: str(self.spec.attempt), RANGE_KEY: str(r)},
            )
        return writer

    def _close(self, w: _RangeWrite) -> None:
        if w.closed:
            return
        self._count_raised(w)
        if w.count.failure is not None:
            for writer in w.writers.values():
                writer.abort()
        else:
            for kind, writer in w.writers.items():
                writer.close()
                w.count.files.append(f"{kind}/{writer.relative}")
        w.closed = True

    def _count_raised(self, w: _RangeWrite) -> None:
        """The records of the range the handler raised on, in every lane of this task (the driver fails a range whose
        every record it raised on: :func:`spark_jobs.range_counts.merge_counts`)."""
        if self._pump is not None:
            w.count.raised_on(self._pump.raised_in(w.range))

    # -- lanes and ranges ------------------------------------------------------------------
    def _context(self, lane: Lane, priority: int) -> Any:
        from spark_jobs.handler_contract import LaneContext

        return LaneContext(self.spec.logical_topic, lane.topic, lane.partition, lane.lane, priority,
                           self.spec.batch_id, self.spec.schema, self.spec.values)

    def _switch_to(self, lane: Lane) -> None:
        """Sorted input: a new lane ends the previous one; a lane seen before is out of order."""
        if lane == self.lane:
            return
        if lane in self.ended:
            raise LaneOrderBroken(f"lane {lane} came back after another lane")
        if self.lane is not None:
            self.ended.add(self.lane)
            self._write_all(self.pump.end(self.lane))
        self.lane = lane

    def _writes(self, tp: tuple[str, int]) -> list[_RangeWrite]:
        writes = self.writes.get(tp)
        if writes is None:
            planned = self.planned.get(tp)
            if not planned:
                raise DrainOutputInvalid(f"records of {tp[0]}[{tp[1]}], which the plan does not hold")
            writes = self.writes[tp] = [_RangeWrite(p, self.part) for p in planned]
        return writes

    def _attribute(self, topic: str, partition: int, offsets: Any) -> tuple[list[_RangeWrite], Any]:
        """The partition's ranges and each row's range index (a row in none: the one before, counted ``outside``)."""
        import numpy as np

        writes = self._writes((topic, partition))
        starts = np.array([w.range.start for w in writes], dtype=np.int64)
        idx = np.searchsorted(starts, offsets.to_numpy(zero_copy_only=False), side="right") - 1
        return writes, np.clip(idx, 0, len(writes) - 1)


def _counts(idx: Any) -> tuple[list[int], list[int]]:
    import numpy as np

    values, counts = np.unique(idx, return_counts=True)
    return values.tolist(), counts.tolist()


def _pieces(writes: list[_RangeWrite], idx: Any, rows: Any) -> Iterator[tuple[_RangeWrite, Any]]:
    """Rows cut where their planned range changes (rows of a lane are in offset order)."""
    import numpy as np

    if idx[0] == idx[-1]:
        yield writes[int(idx[0])], rows
        return
    cuts = [0, *(np.flatnonzero(np.diff(idx)) + 1).tolist(), len(idx)]
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        yield writes[int(idx[a])], rows.slice(a, b - a)


def failure_text(err: BaseException) -> str:
    """The cause of a range's failure, one line: ``No space left on device: <path>``, a kprio error's text.

    >>> failure_text(OSError(28, "No space left on device", "/out/_staging/b-1.1/o/priority=0/f.parquet"))
    'No space left on device: /out/_staging/b-1.1/o/priority=0/f.parquet'
    >>> from kprio_core.errors import HandlerError
    >>> failure_text(HandlerError("handler 'h' answered a frame of 2 records with 1 rows"))
    "handler 'h' answered a frame of 2 records with 1 rows"
    """
    from spark_jobs.staged_writer import os_error_text

    if isinstance(err, OSError):
        text = os_error_text(err)
    elif isinstance(err, KprioError):
        text = str(err)
    else:
        text = f"{type(err).__name__}: {err}"
    return " ".join(text.split())


def drain_partition(reads: PartitionReads, client: Mapping[str, Any], settings: ReadSettings,
                    spec: DrainSpec) -> list[dict[str, Any]]:
    """The fused drain of one topic partition, its stats rows; a failure here fails this partition's ranges only."""
    import contextlib

    from spark_jobs.completeness import RangeTracker
    from spark_jobs.kafka_schema import arrow_schema_of, kafka_struct
    from spark_jobs.range_reader import read_range

    kafka_schema = arrow_schema_of(kafka_struct())
    try:
        task = DrainTask(spec)
    except Exception as err:  # noqa: BLE001 - e.g. a staging URI this executor cannot open
        from spark_jobs.range_counts import failed_row

        cause = failure_text(err)
        return [failed_row(r.range, f"{r.range}: {cause}", ErrorRecord.of(err, where=r.range)) for r in spec.ranges
                if r.range.topic_partition == (reads.topic, reads.partition)]
    try:
        task.expect(reads.topic, reads.partition)
        for start, end in reads.splits:
            rng = OffsetRange(reads.topic, reads.partition, start, end)
            tracker = RangeTracker(rng)
            with contextlib.closing(read_range(rng, client, settings, kafka_schema, tracker=tracker)) as batches:
                if not _read_into(task, rng, batches):
                    break
            task.read_done(rng, tracker.lost())
        task.finish()
    except Exception as err:  # noqa: BLE001 - the failure goes to the ranges' stats, not to Spark
        task.fail(err)
    ended = time.monotonic()
    return timed(task.rows(), ended - (task.first_fed or ended))


def timed(rows: list[dict[str, Any]], seconds: float) -> list[dict[str, Any]]:
    """``rows`` with ``seconds`` (a partition's time from first record to last write) shared by range sizes.

    >>> [r["seconds"] for r in timed([{"start": 0, "end": 30}, {"start": 30, "end": 40}], 2.0)]
    [1.5, 0.5]
    """
    total = sum(r["end"] - r["start"] for r in rows)
    for r in rows:
        r["seconds"] = seconds * (r["end"] - r["start"]) / total if total else seconds / len(rows)
    return rows


def _read_into(task: DrainTask, rng: OffsetRange, batches: Iterator[Any]) -> bool:
    """Feed one split's records to the task; False when reading raised (the task then knows why)."""
    while True:
        try:
            batch = next(batches, None)
        except Exception as err:  # noqa: BLE001 - a read failure is the range's, told apart from the drain's
            task.read_failed(rng, err)
            return False
        if batch is None:
            return True
        task.feed(batch)


def drain_sorted(spec: DrainSpec) -> Any:
    """The ``mapInArrow`` function of the shuffle option: rows sorted by topic, partition, lane, offset."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        from pyspark import TaskContext

        from spark_jobs.range_counts import stats_batch

        context = TaskContext.get()
        task = DrainTask(spec, part=context.partitionId() if context is not None else 0, sorted_lanes=True)
        batch = None
        try:
            for batch in batches:
                task.feed(batch)
            batch = None
            task.finish()
        except Exception as err:  # noqa: BLE001 - the failure goes to the ranges' stats, not to Spark
            task.fail(err)
            # The rest of the input, from the batch it failed in (a lane's end inside it: the next partition's
            # records in it were never counted, and a range no task reports reads as offsets with no record):
            # every range it holds fails too.
            for rest in (*([batch] if batch is not None else []), *batches):
                task.refuse(rest)
        yield stats_batch(task.rows())

    return run
