"""Drive Spark's own ``kafka`` source (the ``native`` reader) with the same plan.

The plan's ranges (adjacent splits merged back, :func:`kprio_core.splits.spark_offsets_json`) become
``assign`` / ``startingOffsets`` / ``endingOffsets``; ``maxRecordsPerPartition`` cuts them as kprio's split
settings would. Option names are those of Spark's ``KafkaSourceProvider`` (Spark 4.2, case-insensitive).

Client settings pass as ``kafka.*`` (:func:`~kprio_core.kafka.java_client.java_client_config`: the Java client's
translation of kprio's librdkafka settings, secrets included), except those Spark manages and refuses
(:data:`SPARK_MANAGED`). ``kafka.isolation.level`` is kprio's (``read_committed`` unless configured; the Java
default would read aborted transactions). A consumer call waits at most ``kafka.timeout_s``
(``kafkaConsumer.pollTimeoutMs``; Spark's default is two minutes). The session redacts the secret options
(:data:`spark_jobs.session.DEFAULT_CONF`).

>>> from kprio_core.config import KprioConfig
>>> from kprio_core.model.offsets import OffsetRange
>>> from kprio_core.model.drain_plan import PlannedRange
>>> opts = native_options(KprioConfig(), [PlannedRange(2, OffsetRange("demo-2", 0, 5, 9))])
>>> opts["assign"], opts["startingOffsets"], opts["endingOffsets"], opts["failOnDataLoss"]
('{"demo-2":[0]}', '{"demo-2":{"0":5}}', '{"demo-2":{"0":9}}', 'true')
>>> opts["kafka.isolation.level"], opts["kafkaConsumer.pollTimeoutMs"]
('read_committed', '10000')
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from kprio_core.config import KprioConfig
from kprio_core.errors import KprioError, RangeIncomplete
from kprio_core.kafka.java_client import java_client_config
from kprio_core.model.drain_plan import PlannedRange
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import ErrorRecord
from kprio_core.splits import spark_offsets_json
from spark_jobs.kafka_schema import KAFKA_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PROVIDER_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"

SPARK_MANAGED = frozenset({"enable.auto.commit", "auto.offset.reset", "key.deserializer", "value.deserializer",
                           "interceptor.classes"})
"""Client settings Spark's Kafka source sets itself: passing one as ``kafka.*`` fails the read."""


class NativeReaderUnavailable(KprioError):
    """Spark's Kafka source is not on the session's classpath (the ``native`` reader cannot run)."""

    code = "native_reader_unavailable"


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
        "kafkaConsumer.pollTimeoutMs": str(int(config.kafka.timeout_s * 1000)),
        "groupIdPrefix": "kprio-native",
    }
    for key, value in java_client_config(config.kafka).items():
        if key.lower() not in SPARK_MANAGED:
            opts[f"kafka.{key}"] = value
    opts["kafka.isolation.level"] = config.kafka.isolation_level.value
    # Spark's admin client waits 60 s a try, three tries, for a silent broker (e.g. another security protocol's
    # listener): kafka.timeout_s a try instead (a request's timeout may not be longer), unless configured.
    if "kafka.default.api.timeout.ms" not in opts and "kafka.request.timeout.ms" not in opts:
        wait_ms = str(int(config.kafka.timeout_s * 1000))
        opts.update({"kafka.default.api.timeout.ms": wait_ms, "kafka.request.timeout.ms": wait_ms})
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


def connector_missing_message(spark_version: str) -> str:
    """What to tell when Spark cannot find its ``kafka`` source.

    >>> connector_missing_message("4.2.0")  # doctest: +ELLIPSIS
    "spark.reader 'native' needs Spark's Kafka connector, which this Spark session does not have: ...
    """
    return (f"spark.reader 'native' needs Spark's Kafka connector, which this Spark session does not have: "
            f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version} with kafka-clients, commons-pool2 and "
            f"spark-token-provider-kafka-0-10_2.13:{spark_version} are not on its classpath. Run "
            f"`bash scripts/setup.sh` (it resolves them into ~/.cache/kprio/jars/spark-sql-kafka-{spark_version}) "
            f"and start a new session (or restart the Spark Connect server), or set spark.reader: python")


def read_native(
    spark: SparkSession, config: KprioConfig, ranges: Sequence[PlannedRange], *, allow_data_loss: bool | None = None
) -> DataFrame:
    """The records of ``ranges`` through Spark's Kafka source (kprio-kafka's columns); else NativeReaderUnavailable."""
    opts = native_options(config, ranges, allow_data_loss=allow_data_loss)
    try:
        frame = spark.read.format("kafka").options(**opts).load().select(*KAFKA_COLUMNS)
        frame.schema  # noqa: B018 - a Spark Connect client resolves the source only when asked
    except Exception as err:
        if "DATA_SOURCE_NOT_FOUND" not in str(err) and "Failed to find the data source: kafka" not in str(err):
            raise
        import pyspark

        raise NativeReaderUnavailable(connector_missing_message(pyspark.__version__)) from None
    return frame


LOST_OFFSETS = "KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE"
"""Spark's Kafka source failing a read under ``failOnDataLoss``; its message parameters name the range."""

def lost_read_in(exc: BaseException) -> ErrorRecord | None:
    r"""Spark's "could not read records" error (offsets the log no longer holds) as kprio's record, ``where`` its range.

    None for any other error. The range comes from the error's condition and message parameters, never its text
    (:func:`spark_lost_range` over Spark Connect, :func:`jvm_lost_range` in a classic session).

    >>> from pyspark.errors.exceptions.connect import UnknownException
    >>> connect = UnknownException("(org.apache.spark.sql.kafka010.KafkaIllegalStateException) Some data may have "
    ...     "been lost ...", errorClass=LOST_OFFSETS, messageParameters={"topicPartition": "orders-2-0",
    ...     "startOffset": "4", "endOffset": "30", "groupId": "kprio-native-0b6f-executor"})
    >>> record = lost_read_in(connect)
    >>> print(record.where, "|", record.message)  # doctest: +NORMALIZE_WHITESPACE
    orders-2[0]@[4,30) | range orders-2[0]@[4,30) is incomplete: Spark's Kafka source could not read it: the log no
    longer holds some of its offsets (deleted by retention, or the partition ends below them) and
    drain.allow_data_loss is false
    >>> lost_read_in(RuntimeError("Could not read records in offset [4, 30) for topic partition orders-2-0")) is None
    True
    """
    rng = spark_lost_range(exc) or jvm_lost_range(exc)
    if rng is None:
        return None
    error = RangeIncomplete(f"range {rng} is incomplete: Spark's Kafka source could not read it: the log no longer "
                            "holds some of its offsets (deleted by retention, or the partition ends below them) and "
                            "drain.allow_data_loss is false")
    return ErrorRecord.of(error, where=rng)


def spark_lost_range(exc: BaseException) -> OffsetRange | None:
    """The range of a :data:`LOST_OFFSETS` error PySpark raised (Spark Connect) on ``exc``'s chain, or None."""
    for error in _chain(exc):
        condition = getattr(error, "getCondition", None)
        if callable(condition) and condition() == LOST_OFFSETS:
            return _range_of(dict(error.getMessageParameters() or {}))
    return None


def _range_of(params: Mapping[str, str]) -> OffsetRange:
    topic, _, partition = params["topicPartition"].rpartition("-")  # Kafka's TopicPartition.toString
    return OffsetRange(topic, int(partition), int(params["startOffset"]), int(params["endOffset"]))


def jvm_lost_range(exc: BaseException) -> OffsetRange | None:
    """The range in the parameters of a :data:`LOST_OFFSETS` error on the JVM exception's cause chain, or None."""
    java = next((getattr(e, "java_exception", None) for e in _chain(exc) if hasattr(e, "java_exception")), None)
    seen = 0
    while java is not None and seen < 20:  # a cause chain is short; never loop on a cyclic one
        seen += 1
        try:
            condition = java.getCondition() if _has_method(java, "getCondition") else None
            if condition == LOST_OFFSETS:
                return _range_of(dict(java.getMessageParameters()))
            java = java.getCause()
        except Exception:  # noqa: BLE001 - the gateway gone, a field missing: no range named (all fail)
            return None
    return None


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the exceptions it was raised from or during (PySpark raises its own ``from None``)."""
    out: list[BaseException] = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def _has_method(java: object, name: str) -> bool:
    from py4j.java_gateway import JavaObject

    if not isinstance(java, JavaObject):
        return False
    try:
        return name in dir(java)
    except Exception:  # noqa: BLE001
        return False
