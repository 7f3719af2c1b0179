"""The ``kprio-kafka`` Python data source: exact Kafka offset ranges, read on the executors.

Registered under its own name, not ``kafka`` (Spark's built-in source would win). Each task reads with
confluent-kafka (:mod:`spark_jobs.range_reader`). Two modes:

- **records** (no ``drain`` option): the records in Spark's Kafka schema (:mod:`spark_jobs.kafka_schema`),
  one input partition per split so plain reads and the key-order shuffle read in parallel;
- **drain** (option ``drain``: a :class:`~spark_jobs.drain_task.DrainSpec`): one task per topic partition
  reads its splits in offset order and drains them (:func:`spark_jobs.drain_task.drain_partition`), yielding
  only stats rows (:func:`spark_jobs.range_counts.stats_struct`): a few hundred bytes per task through the JVM.
  ``drainTasks`` packs topic partitions into that many input partitions, balanced by planned records (a Python
  data source task costs ~0.1 s fixed); without it, one per topic partition.

Options (all strings, names case-insensitive):

- ``splits``: JSON list of ``{"topic", "partition", "start", "end", "priority"}``;
- ``settings``: :meth:`ReadSettings.to_option <spark_jobs.range_reader.ReadSettings.to_option>`, secrets
  included (a classic session's plans show no option of a Python data source; Spark Connect's plan text does, and
  :mod:`spark_jobs.session`'s ``spark.sql.redaction.string.regex`` masks its secrets); validated once when planned,
  then pickled to every task. Left out, every setting has its default and ``kafka.bootstrap.servers`` is required;
- ``kafka.<setting>``: librdkafka settings for a direct read, added to those of ``settings`` (never logged or shown);
- ``drain``: the drain spec (JSON), for the drain mode;
- ``drainTasks``: at most this many input partitions in drain mode.

>>> from kprio_core.config import KprioConfig
>>> opts = source_options(KprioConfig(), [PlannedRange(2, OffsetRange("demo-2", 0, 0, 50))])
>>> opts["splits"], sorted(opts)
('[{"topic":"demo-2","partition":0,"start":0,"end":50,"priority":2}]', ['settings', 'splits'])
>>> reader = KafkaSource(opts).reader(None)
>>> reader.settings == ReadSettings.of(KprioConfig()), reader.client["bootstrap.servers"]
(True, '127.0.0.1:9092')
>>> splits = parse_splits('[{"topic":"o-2","partition":0,"start":0,"end":5,"priority":2},'
...     '{"topic":"o-0","partition":1,"start":9,"end":12,"priority":0},'
...     '{"topic":"o-2","partition":0,"start":5,"end":8,"priority":2}]')
>>> [[(r.topic, r.partition, r.splits) for r in t.reads] for t in input_partitions(splits, by_topic_partition=True)]
[[('o-0', 1, ((9, 12),))], [('o-2', 0, ((0, 5), (5, 8)))]]
>>> [[(r.topic, r.partition) for r in t.reads] for t in input_partitions(splits, by_topic_partition=True, tasks=1)]
[[('o-0', 1), ('o-2', 0)]]
>>> len(input_partitions(splits, by_topic_partition=False))
3
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from kprio_core.errors import ConfigError, KprioError
from kprio_core.model.drain_plan import PlannedRange
from kprio_core.model.offsets import OffsetRange
from spark_jobs.range_reader import ReadSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from kprio_core.config import KprioConfig
    from spark_jobs.drain_task import DrainSpec

FORMAT = "kprio-kafka"


@dataclass(frozen=True, slots=True)
class PartitionReads:
    """Splits of one topic partition, read in this order by one task."""

    topic: str
    partition: int
    splits: tuple[tuple[int, int], ...]

    @property
    def records(self) -> int:
        return sum(end - start for start, end in self.splits)


@dataclass(frozen=True)
class TaskReads(InputPartition):
    """What one Spark task reads: whole topic partitions (drain), or one split (records)."""

    reads: tuple[PartitionReads, ...]


def source_options(config: KprioConfig, splits: Sequence[PlannedRange], *, drain: DrainSpec | None = None,
                   tasks: int | None = None, allow_data_loss: bool | None = None) -> dict[str, str]:
    """The data source options for ``splits`` (secrets included: never log the result)."""
    opts = {
        "splits": json.dumps(
            [{"topic": s.range.topic, "partition": s.range.partition, "start": s.range.start, "end": s.range.end,
              "priority": s.priority} for s in splits],
            separators=(",", ":"),
        ),
        "settings": ReadSettings.of(config, allow_data_loss=allow_data_loss).to_option(),
    }
    if drain is not None:
        opts["drain"] = drain.to_json()
    if tasks is not None:
        opts["drainTasks"] = str(tasks)
    return opts


def register(spark: SparkSession) -> None:
    """Make ``kprio-kafka`` known to ``spark`` (cheap; classic and Spark Connect sessions alike).

    On a shared Spark Connect session a simultaneous registration may be refused with
    ``DATA_SOURCE_ALREADY_EXISTS``: the other client's, of the same source, is in place, so that is no error.
    """
    from pyspark.errors import AnalysisException

    try:
        spark.dataSource.register(KafkaSource)
    except AnalysisException as err:
        if err.getCondition() != "DATA_SOURCE_ALREADY_EXISTS":
            raise


def read_records(spark: SparkSession, config: KprioConfig, splits: Sequence[PlannedRange], *,
                 allow_data_loss: bool | None = None) -> DataFrame:
    """A DataFrame of exactly the records of ``splits`` (Spark's Kafka schema)."""
    register(spark)
    return spark.read.format(FORMAT).options(**source_options(config, splits, allow_data_loss=allow_data_loss)).load()


def drain_stats(spark: SparkSession, config: KprioConfig, splits: Sequence[PlannedRange], spec: DrainSpec, *,
                tasks: int | None = None) -> DataFrame:
    """The stats rows of draining ``splits`` (at most ``tasks`` Spark tasks); the drain runs when collected."""
    register(spark)
    return spark.read.format(FORMAT).options(**source_options(config, splits, drain=spec, tasks=tasks)).load()


def parse_splits(text: str) -> tuple[PlannedRange, ...]:
    """The ``splits`` option back into ranges; ConfigError naming the bad entry otherwise."""
    try:
        return tuple(
            PlannedRange(int(i["priority"]), OffsetRange(str(i["topic"]), int(i["partition"]), int(i["start"]),
                                                         int(i["end"])))
            for i in json.loads(text)
        )
    except (ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"{FORMAT}: option 'splits' is not a list of ranges: {err}") from None


def input_partitions(splits: Sequence[PlannedRange], *, by_topic_partition: bool,
                     tasks: int | None = None) -> list[TaskReads]:
    """Whole topic partitions (splits in offset order) packed into ``tasks`` tasks, or one task per split.

    Greedy and deterministic: largest partition first onto the least loaded task (within 4/3 of the best balance).
    """
    if not by_topic_partition:
        return [TaskReads((PartitionReads(s.range.topic, s.range.partition, ((s.range.start, s.range.end),)),))
                for s in splits]
    groups: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for s in splits:
        groups.setdefault(s.range.topic_partition, []).append((s.range.start, s.range.end))
    reads = [PartitionReads(topic, partition, tuple(sorted(spans)))
             for (topic, partition), spans in sorted(groups.items())]
    n = len(reads) if tasks is None else max(1, min(tasks, len(reads)))
    bins: list[list[PartitionReads]] = [[] for _ in range(n)]
    load = [0] * n
    for r in sorted(reads, key=lambda r: -r.records):
        i = load.index(min(load))
        bins[i].append(r)
        load[i] += r.records
    tasks_reads = [tuple(sorted(b, key=lambda r: (r.topic, r.partition))) for b in bins if b]
    return [TaskReads(t) for t in sorted(tasks_reads, key=lambda t: (t[0].topic, t[0].partition))]


class KafkaSource(DataSource):
    """``spark.read.format("kprio-kafka")``: exact offset ranges as records, or drained into stats rows."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _opts(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.options.items()}

    def schema(self) -> StructType:
        if "drain" in self._opts():
            from spark_jobs.range_counts import stats_struct

            return stats_struct()
        from spark_jobs.kafka_schema import kafka_struct

        return kafka_struct()

    def reader(self, schema: StructType) -> DataSourceReader:
        from spark_jobs.drain_task import DrainSpec

        opts = self._opts()
        if "splits" not in opts:
            raise ConfigError(f"{FORMAT}: option 'splits' is required")
        extra = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
        if "settings" not in opts and "bootstrap.servers" not in extra:
            raise ConfigError(f"{FORMAT}: option 'kafka.bootstrap.servers' is required (or 'settings')")
        settings = ReadSettings.of_option(opts["settings"], f"{FORMAT} option 'settings'") if "settings" in opts \
            else ReadSettings()
        try:
            spec = DrainSpec.from_json(opts["drain"]) if "drain" in opts else None
        except ValueError as err:
            raise ConfigError(f"{FORMAT}: option 'drain' is not a drain spec: {err}") from None
        try:
            tasks = int(opts["draintasks"]) if "draintasks" in opts else None
        except ValueError as err:
            raise ConfigError(f"{FORMAT}: bad numeric option: {err}") from None
        parts = input_partitions(parse_splits(opts["splits"]), by_topic_partition=spec is not None, tasks=tasks)
        return KafkaReader(parts, {**settings.client(), **extra}, settings, spec)


class KafkaReader(DataSourceReader):
    """Plans the input partitions; reads (records mode) or drains (drain mode) one of them."""

    def __init__(self, parts: list[TaskReads], client: Mapping[str, object], settings: ReadSettings,
                 spec: DrainSpec | None) -> None:
        self.parts = parts
        self.client = client
        self.settings = settings
        self.spec = spec

    def __repr__(self) -> str:
        # Never the client settings: they may hold credentials.
        mode = "records" if self.spec is None else repr(self.spec)
        return f"KafkaReader({len(self.parts)} partitions, {mode})"

    def partitions(self) -> list[InputPartition]:
        return list(self.parts)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, TaskReads):
            return  # no splits: Spark still plans one empty partition
        if self.spec is not None:
            from spark_jobs.drain_task import drain_partition
            from spark_jobs.range_counts import stats_batch

            rows = [row for reads in partition.reads
                    for row in drain_partition(reads, self.client, self.settings, self.spec)]
            yield stats_batch(rows)
            return
        from spark_jobs.kafka_schema import arrow_schema_of, kafka_struct
        from spark_jobs.range_reader import read_range
        from spark_jobs.remote_errors import note_failure

        schema = arrow_schema_of(kafka_struct())
        for reads in partition.reads:
            for start, end in reads.splits:
                rng = OffsetRange(reads.topic, reads.partition, start, end)
                try:
                    yield from read_range(rng, self.client, self.settings, schema)
                except KprioError as err:
                    # Spark keeps only this error's text: its typed record (and the range) travels as its note.
                    raise note_failure(err, rng)
