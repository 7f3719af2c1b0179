"""One SparkSession per run: ``local[*]`` by default, a ``spark.master`` URL, or a Spark Connect remote.

The session has the ``kprio-kafka`` data source registered (:func:`spark_jobs.source.register`).
Where each :class:`~kprio_core.config.SparkSettings` field acts:

- ``master`` / ``remote``: the session built here (``remote`` wins: a Spark Connect session);
- ``conf``: applied to the session after kprio's defaults (over Spark Connect only runtime
  settings take: static ones are the server's);
- ``arrow_batch_records``: the session's ``spark.sql.execution.arrow.maxRecordsPerBatch`` here, and
  the source's ``arrowBatchRecords`` and the Parquet row groups (:func:`spark_jobs.source.source_options`);
- ``reader``, ``fetch_max_bytes``, ``max_partition_fetch_bytes``, ``queued_max_messages_kbytes``: the
  drain's reader and the executors' consumers (:mod:`spark_jobs.drain`, :mod:`spark_jobs.source`);
- ``connect_port``, ``connect_dir``: the Spark Connect server kprio starts (``kprio spark start``),
  not a session.

Executors of a local or classic session run the driver's own interpreter (``PYSPARK_PYTHON`` =
``sys.executable`` unless set), so the data source and the handler import the same kprio and
the same libraries on both sides. A real cluster's workers, and a Spark Connect server's Python
workers, need kprio installed (or on their ``PYTHONPATH``) too.

>>> from kprio_core.config import SparkSettings
>>> session_conf(SparkSettings(conf={"spark.sql.shuffle.partitions": "8"}))["spark.sql.shuffle.partitions"]
'8'
>>> session_conf(SparkSettings(arrow_batch_records=123))["spark.sql.execution.arrow.maxRecordsPerBatch"]
'123'
>>> session_conf(SparkSettings())["spark.sql.session.timeZone"]
'UTC'
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

    from spark_jobs.source import register

    builder = SparkSession.builder.appName(app_name)
    if settings.remote:
        builder = builder.remote(settings.remote)
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = builder.master(settings.master).config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    for key, value in session_conf(settings).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
