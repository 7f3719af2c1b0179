"""One SparkSession per run: ``local[*]`` by default, a ``spark.master`` URL, or a Spark Connect remote.

The session has the ``kprio-kafka`` data source registered. Executors run the driver's own
interpreter (``PYSPARK_PYTHON`` = ``sys.executable`` unless set), so the Python data source and
the handler import the same kprio and the same libraries on both sides. A real cluster's
workers need kprio installed in that interpreter too.

>>> from kprio_core.config import SparkSettings
>>> session_conf(SparkSettings(conf={"spark.sql.shuffle.partitions": "8"}))["spark.sql.shuffle.partitions"]
'8'
>>> session_conf(SparkSettings())["spark.sql.session.timeZone"]
'UTC'
>>> session_conf(SparkSettings(conf={"spark.sql.parquet.compression.codec": "snappy"}))["spark.sql.parquet.compression.codec"]
'snappy'
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from kprio_core.config import SparkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_CONF = {
    # Kafka timestamps are UTC instants; a UTC session shows them unshifted.
    "spark.sql.session.timeZone": "UTC",
    # A drain job has a handful of lanes, not 200: keep shuffles small unless configured.
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "10000",
    # The drain writes one directory per priority; by default Spark sorts the whole output by
    # the partition columns first. Concurrent writers (one open file per priority in a task)
    # skip that sort: it needs the planned-write rule off, which would otherwise add the sort.
    "spark.sql.optimizer.plannedWrite.enabled": "false",
    "spark.sql.maxConcurrentOutputFileWriters": "16",
    # Drained Kafka payloads (JSON, text) shrink several times more with zstd than with Spark's
    # default snappy, for about the same write cost: the write's CPU goes into turning rows into
    # Parquet columns, not into the codec (measured with benchmarks/drain_bench.py).
    "spark.sql.parquet.compression.codec": "zstd",
    # Parquet's own timestamp type instead of Spark's default legacy INT96: what other readers
    # expect, exact for Spark's microseconds, and no Julian-day conversion per value on write.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}


def session_conf(settings: SparkSettings) -> dict[str, str]:
    """Spark settings of the session: kprio's defaults, then the configured ones."""
    conf = dict(DEFAULT_CONF)
    conf["spark.sql.execution.arrow.maxRecordsPerBatch"] = str(settings.arrow_batch_records)
    conf.update(settings.conf)
    return conf


def build_session(settings: SparkSettings, app_name: str = "kprio") -> SparkSession:
    """The run's SparkSession (created, or the active one reused) with the data source registered."""
    from pyspark.sql import SparkSession

    from spark_jobs.datasource import KafkaRangeDataSource

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if settings.remote:
        builder = builder.remote(settings.remote)
    else:
        builder = builder.master(settings.master).config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    for key, value in session_conf(settings).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.dataSource.register(KafkaRangeDataSource)
    return spark
