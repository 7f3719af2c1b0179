"""The ``kprio-kafka`` Python data source: read explicit Kafka offset ranges on the executors.

Registered under its own name, not ``kafka``: Spark's built-in source of that name would win.
One Spark input partition per planned split; each task reads its ``[start, end)`` with
confluent-kafka (see :mod:`spark_jobs.range_reader`) and yields Arrow record batches in the
schema of Spark's Kafka source (:mod:`spark_jobs.kafka_schema`).

Options (all strings, names case-insensitive):

- ``splits``: JSON list of ``{"topic", "partition", "start", "end", "priority"}``;
- ``kafka.<setting>``: librdkafka settings, ``kafka.bootstrap.servers`` required (secrets may
  travel here; the source never logs or prints its options);
- ``fetchMaxBytes``, ``maxPartitionFetchBytes``, ``queuedMaxMessagesKbytes``: fetch limits;
- ``arrowBatchRecords``: records per Arrow batch;
- ``allowDataLoss``: ``true`` records gaps instead of failing;
- ``stallTimeoutSeconds``: a range read gives up after this long without a record.

>>> from kprio_core.config import KprioConfig
>>> from kprio_core.offsets import OffsetRange
>>> from kprio_core.drain_plan import PlannedRange
>>> opts = reader_options(KprioConfig(), [PlannedRange(2, OffsetRange("demo-2", 0, 0, 50))])
>>> opts["splits"], opts["kafka.bootstrap.servers"], opts["allowDataLoss"]
('[{"topic":"demo-2","partition":0,"start":0,"end":50,"priority":2}]', '127.0.0.1:9092', 'false')
>>> parse_splits(opts["splits"])
(RangePartition(topic='demo-2', partition=0, start=0, end=50, priority=2),)
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from kprio_core.config import KprioConfig
from kprio_core.errors import ConfigError
from kprio_core.drain_plan import PlannedRange
from spark_jobs.range_reader import FetchSettings, ReadSettings

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

FORMAT = "kprio-kafka"


@dataclass(frozen=True)
class RangePartition(InputPartition):
    """One planned split, sent to the executor that reads it."""

    topic: str
    partition: int
    start: int
    end: int
    priority: int


def reader_options(
    config: KprioConfig, splits: Sequence[PlannedRange], *, allow_data_loss: bool | None = None
) -> dict[str, str]:
    """The data source options for ``splits`` (secrets included: never log the result)."""
    spark = config.spark
    loss = config.drain.allow_data_loss if allow_data_loss is None else allow_data_loss
    opts = {
        "splits": json.dumps(
            [
                {"topic": s.range.topic, "partition": s.range.partition, "start": s.range.start,
                 "end": s.range.end, "priority": s.priority}
                for s in splits
            ],
            separators=(",", ":"),
        ),
        "fetchMaxBytes": str(spark.fetch_max_bytes),
        "maxPartitionFetchBytes": str(spark.max_partition_fetch_bytes),
        "queuedMaxMessagesKbytes": str(spark.queued_max_messages_kbytes),
        "arrowBatchRecords": str(spark.arrow_batch_records),
        "allowDataLoss": str(loss).lower(),
        "stallTimeoutSeconds": str(max(config.kafka.timeout_s, 1.0)),
    }
    opts.update({f"kafka.{k}": _text(v) for k, v in config.kafka.client_config().items()})
    return opts


def _text(value: object) -> str:
    # librdkafka spells booleans in lower case.
    return str(value).lower() if isinstance(value, bool) else str(value)


def read_ranges(
    spark: SparkSession, config: KprioConfig, splits: Sequence[PlannedRange], *, allow_data_loss: bool | None = None
) -> DataFrame:
    """A DataFrame of exactly the records of ``splits`` (Spark's Kafka schema)."""
    return spark.read.format(FORMAT).options(**reader_options(config, splits, allow_data_loss=allow_data_loss)).load()


def parse_splits(text: str) -> tuple[RangePartition, ...]:
    """The ``splits`` option back into partitions; ConfigError naming the bad entry otherwise."""
    try:
        items = json.loads(text)
        return tuple(
            RangePartition(str(i["topic"]), int(i["partition"]), int(i["start"]), int(i["end"]), int(i["priority"]))
            for i in items
        )
    except (ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"{FORMAT}: option 'splits' is not a list of ranges: {err}") from None


def settings_of(opts: Mapping[str, str]) -> ReadSettings:
    """The read settings from lower-cased options; ConfigError naming a bad number."""
    try:
        return ReadSettings(
            fetch=FetchSettings(
                int(opts.get("fetchmaxbytes", 16 << 20)),
                int(opts.get("maxpartitionfetchbytes", 4 << 20)),
                int(opts.get("queuedmaxmessageskbytes", 16 << 10)),
            ),
            batch_records=int(opts.get("arrowbatchrecords", 10_000)),
            allow_data_loss=opts.get("allowdataloss", "false").lower() == "true",
            stall_timeout_s=float(opts.get("stalltimeoutseconds", 30.0)),
        )
    except ValueError as err:
        raise ConfigError(f"{FORMAT}: bad numeric option: {err}") from None


class KafkaRangeDataSource(DataSource):
    """``spark.read.format("kprio-kafka")``: exact offset ranges, Spark's Kafka schema."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        from spark_jobs.kafka_schema import kafka_struct

        return kafka_struct()

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = {k.lower(): v for k, v in self.options.items()}
        if "splits" not in opts:
            raise ConfigError(f"{FORMAT}: option 'splits' is required")
        client = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
        if "bootstrap.servers" not in client:
            raise ConfigError(f"{FORMAT}: option 'kafka.bootstrap.servers' is required")
        return KafkaRangeReader(parse_splits(opts["splits"]), client, settings_of(opts), schema)


class KafkaRangeReader(DataSourceReader):
    """Plans one input partition per split; reads a split with confluent-kafka."""

    def __init__(
        self, splits: tuple[RangePartition, ...], client: dict[str, str], settings: ReadSettings, schema: StructType
    ) -> None:
        self.splits = splits
        self.client = client
        self.settings = settings
        self.schema = schema

    def __repr__(self) -> str:
        # Never the client settings: they may hold credentials.
        return f"KafkaRangeReader({len(self.splits)} splits)"

    def partitions(self) -> list[InputPartition]:
        return list(self.splits)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        from kprio_core.offsets import OffsetRange
        from spark_jobs.kafka_schema import arrow_schema_of
        from spark_jobs.range_reader import read_range

        if not isinstance(partition, RangePartition):
            return  # no splits: Spark still plans one empty partition
        rng = OffsetRange(partition.topic, partition.partition, partition.start, partition.end)
        yield from read_range(rng, self.client, self.settings, arrow_schema_of(self.schema))
