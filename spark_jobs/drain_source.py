"""The ``kprio-drain`` Python data source: read, lanes and handler in one pass on the executors.

The drain's fused path. One Spark input partition per topic partition of the plan: its task
reads every planned split of that partition one after the other, in offset order, with
confluent-kafka (:mod:`spark_jobs.range_reader`), adds ``priority``, ``batch_id`` and ``lane``
(murmur2 of the key, :mod:`kprio_core.lanes`), and pushes each lane's records into that lane's
one handler call (:class:`~spark_jobs.lane_pump.LanePump`). The JVM receives the final rows
(:func:`~spark_jobs.columns.drain_struct`) and only writes them: no second trip through Python,
no shuffle, no sort. Because one task holds a whole partition, every lane's handler call sees
all of the lane's records of the batch, in offset order.

The task also counts what it hands on per read split (:class:`~spark_jobs.stats.RangeCounter`)
and puts the counts on its last row, in one extra column (:data:`~spark_jobs.columns.STATS_COLUMN`)
that the drain observes and drops before the write (:func:`spark_jobs.stats.observe_counted`).

Memory stays bounded by the fetch limits and ``arrowBatchRecords`` (plus what a handler keeps),
however long the ranges: batches are handled and handed on as they are read.

Options: those of ``kprio-kafka`` (:func:`spark_jobs.datasource.reader_options`) plus ``drain``,
JSON ``{"handler", "logicalTopic", "schema": [[field, kind], ...], "lanes", "batchId"}``.

>>> parts = partition_reads(parse_splits(
...     '[{"topic":"o-2","partition":0,"start":0,"end":5,"priority":2},'
...     '{"topic":"o-0","partition":1,"start":9,"end":12,"priority":0},'
...     '{"topic":"o-2","partition":0,"start":5,"end":8,"priority":2}]'))
>>> [(p.topic, p.partition, p.ranges) for p in parts]
[('o-0', 1, ((9, 12),)), ('o-2', 0, ((0, 5), (5, 8)))]
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.errors import ConfigError
from kprio_core.drain_plan import PlannedRange
from spark_jobs.datasource import RangePartition, parse_splits, reader_options, settings_of
from spark_jobs.range_reader import ReadSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

FORMAT = "kprio-drain"


@dataclass(frozen=True)
class PartitionReads(InputPartition):
    """Every planned split of one topic partition, read in this order by one task."""

    topic: str
    partition: int
    priority: int
    ranges: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class DrainSpec:
    """What the executors need to know besides the ranges: handler, schema, lanes, batch."""

    handler: str
    logical_topic: str
    schema: tuple[tuple[str, str], ...]
    lanes: int
    batch_id: str

    def to_json(self) -> str:
        return json.dumps({"handler": self.handler, "logicalTopic": self.logical_topic,
                           "schema": [list(f) for f in self.schema], "lanes": self.lanes, "batchId": self.batch_id})

    @classmethod
    def from_json(cls, text: str) -> DrainSpec:
        try:
            d = json.loads(text)
            return cls(str(d["handler"]), str(d["logicalTopic"]), tuple((str(n), str(k)) for n, k in d["schema"]),
                       int(d["lanes"]), str(d["batchId"]))
        except (ValueError, KeyError, TypeError) as err:
            raise ConfigError(f"{FORMAT}: option 'drain' is not a drain spec: {err}") from None


def partition_reads(splits: Sequence[RangePartition]) -> list[PartitionReads]:
    """Group splits by topic partition, each group's ranges in offset order."""
    groups: dict[tuple[str, int], list[RangePartition]] = {}
    for s in splits:
        groups.setdefault((s.topic, s.partition), []).append(s)
    return [
        PartitionReads(topic, partition, group[0].priority, tuple(sorted((s.start, s.end) for s in group)))
        for (topic, partition), group in sorted(groups.items())
    ]


def drain_rows(spark: SparkSession, config: KprioConfig, topic: TopicSettings, batch_id: str,
               splits: Sequence[PlannedRange], lanes: int) -> DataFrame:
    """The batch's output rows (``drain_struct`` plus ``STATS_COLUMN``) read, laned and handled in one pass."""
    spark.dataSource.register(KafkaDrainDataSource)  # cheap; a session not built by kprio works too
    spec = DrainSpec(config.drain.handler, topic.name, tuple(topic.schema_.items()), lanes, batch_id)
    opts = {**reader_options(config, splits), "drain": spec.to_json()}
    return spark.read.format(FORMAT).options(**opts).load()


class KafkaDrainDataSource(DataSource):
    """``spark.read.format("kprio-drain")``: a batch's drained rows, one task per topic partition."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _spec(self) -> DrainSpec:
        opts = {k.lower(): v for k, v in self.options.items()}
        if "drain" not in opts:
            raise ConfigError(f"{FORMAT}: option 'drain' is required")
        return DrainSpec.from_json(opts["drain"])

    def schema(self) -> StructType:
        from pyspark.sql.types import StructType

        from spark_jobs.columns import drain_struct, stats_field

        return StructType([*drain_struct(dict(self._spec().schema)).fields, stats_field()])

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = {k.lower(): v for k, v in self.options.items()}
        if "splits" not in opts:
            raise ConfigError(f"{FORMAT}: option 'splits' is required")
        client = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
        if "bootstrap.servers" not in client:
            raise ConfigError(f"{FORMAT}: option 'kafka.bootstrap.servers' is required")
        return KafkaDrainReader(partition_reads(parse_splits(opts["splits"])), client, settings_of(opts),
                                self._spec(), schema)


class KafkaDrainReader(DataSourceReader):
    """Plans one input partition per topic partition; reads, lanes and handles it."""

    def __init__(self, parts: list[PartitionReads], client: dict[str, str], settings: ReadSettings,
                 spec: DrainSpec, schema: StructType) -> None:
        self.parts = parts
        self.client = client
        self.settings = settings
        self.spec = spec
        self.schema = schema

    def __repr__(self) -> str:
        # Never the client settings: they may hold credentials.
        return f"KafkaDrainReader({len(self.parts)} partitions, batch {self.spec.batch_id!r})"

    def partitions(self) -> list[InputPartition]:
        return list(self.parts)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, PartitionReads):
            return  # no splits: Spark still plans one empty partition
        yield from drain_partition(partition, self.client, self.settings, self.spec, self.schema)


def drain_partition(part: PartitionReads, client: Mapping[str, Any], settings: ReadSettings, spec: DrainSpec,
                    out_struct: Any) -> Iterator[Any]:
    """Output Arrow batches of one topic partition's ranges: read, laned, handled, counted (runs on an executor).

    ``out_struct`` is the source's schema: the drain's columns, then ``STATS_COLUMN``, null
    except on the task's last row, which carries the task's :class:`~spark_jobs.stats.RangeCounter`.
    """
    import pyarrow as pa

    from spark_jobs.kafka_schema import arrow_schema_of
    from spark_jobs.stats import RangeCounter

    schema = arrow_schema_of(out_struct)
    stats_type = schema.field(len(schema) - 1).type
    counter = RangeCounter(part.topic, part.partition, part.ranges)
    held = None  # the latest batch, held back so the last one can carry the counts
    for batch in _handled(part, client, settings, spec, schema.remove(len(schema) - 1)):
        if batch.num_rows == 0:
            continue
        counter.observe(batch)
        if held is not None:
            yield pa.RecordBatch.from_arrays([*held.columns, pa.nulls(held.num_rows, stats_type)], schema=schema)
        held = batch
    if held is not None:
        n = held.num_rows
        carrier = pa.array([None] * (n - 1) + [counter.entries()], type=stats_type)
        yield pa.RecordBatch.from_arrays([*held.columns, carrier], schema=schema)


def _handled(part: PartitionReads, client: Mapping[str, Any], settings: ReadSettings, spec: DrainSpec,
             out_schema: Any) -> Iterator[Any]:
    """The drain's rows (``out_schema``) of one topic partition's ranges, read in order, laned and handled."""
    import pyarrow as pa

    from kprio_core.offsets import OffsetRange
    from spark_jobs.columns import input_struct
    from spark_jobs.handler_contract import LaneContext
    from spark_jobs.kafka_schema import arrow_schema_of, kafka_struct
    from spark_jobs.lane_pump import LanePump
    from spark_jobs.range_reader import read_range

    kafka_schema = arrow_schema_of(kafka_struct())
    input_schema = arrow_schema_of(input_struct())
    pump = LanePump(spec.handler, out_schema)
    contexts = [LaneContext(spec.logical_topic, part.topic, part.partition, lane, part.priority, spec.batch_id,
                            spec.schema) for lane in range(spec.lanes)]
    cache: dict[bytes, int] = {}
    for start, end in part.ranges:
        rng = OffsetRange(part.topic, part.partition, start, end)
        for batch in read_range(rng, client, settings, kafka_schema):
            n = batch.num_rows
            lanes = _lanes(batch, spec.lanes, cache)
            laned = pa.RecordBatch.from_arrays(
                [*batch.columns, pa.repeat(pa.scalar(part.priority, pa.int32()), n),
                 pa.repeat(pa.scalar(spec.batch_id, pa.string()), n), pa.array(lanes, pa.int32())],
                schema=input_schema,
            )
            for lane, segment in _by_lane(laned, lanes, spec.lanes):
                yield from pump.push(contexts[lane], segment)
    yield from pump.end_all()


LANE_CACHE_KEYS = 1 << 16
"""Distinct keys whose lane a task remembers (murmur2 in Python is the cost; keys repeat)."""


def _lanes(batch: Any, lanes: int, cache: dict[bytes, int]) -> Any:
    """The lane of every row: :func:`kprio_core.lanes.lane_of`, each distinct key hashed once per task."""
    import numpy as np

    from kprio_core.lanes import lane_of

    n = batch.num_rows
    if lanes == 1:
        return np.zeros(n, dtype=np.int32)
    keys = batch.column("key").to_pylist()
    new = {k for k in keys if k is not None and k not in cache}
    if len(cache) + len(new) > LANE_CACHE_KEYS:
        cache.clear()
    for key in new:
        cache[key] = lane_of(key, 0, lanes)
    out = np.fromiter((-1 if k is None else cache[k] for k in keys), dtype=np.int32, count=n)
    null_key = out < 0
    if null_key.any():  # no key, no order to keep: spread by offset, as lane_of does
        out[null_key] = batch.column("offset").to_numpy()[null_key] % lanes
    return out


def _by_lane(batch: Any, lanes: Any, count: int) -> Iterator[tuple[int, Any]]:
    """``(lane, rows of that lane in offset order)`` for every lane present in ``batch``."""
    import numpy as np

    if count == 1:
        yield 0, batch
        return
    order = np.argsort(lanes, kind="stable")  # stable: offset order kept inside each lane
    ordered = batch.take(order)
    sorted_lanes = lanes[order]
    cuts = np.flatnonzero(np.diff(sorted_lanes)) + 1
    for start, stop in zip([0, *cuts.tolist()], [*cuts.tolist(), len(lanes)], strict=True):
        yield int(sorted_lanes[start]), ordered.slice(start, stop - start)
