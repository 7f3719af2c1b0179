"""Drive Spark's own ``kafka`` source with the same plan (where its connector jar is available).

The plan's ranges (adjacent splits of a partition merged back, see
:func:`kprio_core.splits.spark_offsets_json`) become ``startingOffsets`` / ``endingOffsets``;
``maxRecordsPerPartition`` cuts them into input splits as kprio's split settings would.
``kafka.*`` options pass the client settings through unchanged: Spark's connector uses the Java
client, so only settings both clients share (``security.protocol``, ``sasl.mechanism``, ...)
mean the same thing there.

>>> from kprio_core.config import KprioConfig
>>> from kprio_core.offsets import OffsetRange
>>> from kprio_core.drain_plan import PlannedRange
>>> opts = native_options(KprioConfig(), [PlannedRange(2, OffsetRange("demo-2", 0, 5, 9))])
>>> opts["assign"], opts["startingOffsets"], opts["endingOffsets"], opts["failOnDataLoss"]
('{"demo-2":[0]}', '{"demo-2":{"0":5}}', '{"demo-2":{"0":9}}', 'true')
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kprio_core.config import KprioConfig
from kprio_core.drain_plan import PlannedRange
from kprio_core.splits import spark_offsets_json
from spark_jobs.kafka_schema import KAFKA_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PROVIDER_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def native_options(
    config: KprioConfig, ranges: Sequence[PlannedRange], *, allow_data_loss: bool | None = None
) -> dict[str, str]:
    """Options of ``spark.read.format("kafka")`` for exactly ``ranges`` (secrets included: never log)."""
    loss = config.drain.allow_data_loss if allow_data_loss is None else allow_data_loss
    offsets = [r.range for r in ranges if r.range.count]
    starting, ending = spark_offsets_json(offsets)
    assign: dict[str, list[int]] = {}
    for topic, parts in json.loads(starting).items():
        assign[topic] = sorted(int(p) for p in parts)
    opts = {
        "assign": json.dumps(assign, separators=(",", ":")),
        "startingOffsets": starting,
        "endingOffsets": ending,
        "maxRecordsPerPartition": str(config.splits.max_records),
        "failOnDataLoss": str(not loss).lower(),
        "includeHeaders": "true",
    }
    for key, value in config.kafka.client_config().items():
        opts[f"kafka.{key}"] = str(value).lower() if isinstance(value, bool) else str(value)
    return opts


def connector_available(spark: SparkSession) -> bool:
    """True when the JVM can load Spark's Kafka source (its jar is on the classpath)."""
    return class_available(spark, PROVIDER_CLASS)


def class_available(spark: SparkSession, name: str) -> bool:
    """True when the driver's JVM resolves the class ``name`` (a Spark Connect client has no JVM to ask: False)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return False
    try:
        jvm = spark.sparkContext._jvm
        jvm.java.lang.Class.forName(name, False, jvm.java.lang.Thread.currentThread().getContextClassLoader())
    except Exception:  # noqa: BLE001 - Py4JJavaError(ClassNotFoundException) or no JVM at all
        return False
    return True


def read_native(
    spark: SparkSession, config: KprioConfig, ranges: Sequence[PlannedRange], *, allow_data_loss: bool | None = None
) -> DataFrame:
    """The records of ``ranges`` through Spark's Kafka source, in the same columns as kprio-kafka."""
    opts = native_options(config, ranges, allow_data_loss=allow_data_loss)
    return spark.read.format("kafka").options(**opts).load().select(*KAFKA_COLUMNS)
