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

Over Spark Connect every kprio process joins ONE shared server-side session (a session id
derived from the remote URL, unless the URL names one): a run process then finds the data source
registered and the server's Python workers warm, instead of paying several seconds for a new
session's workers on its first query. Closing a run's client never releases that session; if the
server has closed it (idle timeout, ``ReleaseSession``), the next id of the same sequence is used,
so all processes meet on the same one again.

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
>>> shared_remote("sc://spark:15002")
'sc://spark:15002/;session_id=...'
>>> shared_remote("sc://spark:15002/;session_id=mine")
'sc://spark:15002/;session_id=mine'
"""

from __future__ import annotations

import os
import sys
import uuid
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


SHARED_SESSION_TRIES = 8
"""Ids of the shared Spark Connect session tried in turn when the server closed the earlier ones."""


def shared_remote(remote: str, generation: int = 0) -> str:
    """``remote`` with the shared session's id (generation ``n`` of its sequence), unless it names one."""
    if "session_id=" in remote:
        return remote
    session_id = uuid.uuid5(uuid.NAMESPACE_URL, f"kprio-shared-session:{remote}:{generation}")
    base = remote if "/;" in remote else remote.rstrip("/") + "/"
    return f"{base};session_id={session_id}"


def build_session(settings: SparkSettings, app_name: str = "kprio") -> SparkSession:
    """The run's SparkSession (created, or the active one reused) with the data source registered."""
    from pyspark.sql import SparkSession

    from spark_jobs.source import register

    if settings.remote:
        return _remote_session(settings, app_name)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(settings.master)
    builder = builder.config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    for key, value in session_conf(settings).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def _remote_session(settings: SparkSettings, app_name: str) -> SparkSession:
    """The shared Spark Connect session (see the module docstring), with kprio's runtime settings."""
    from pyspark.errors import PySparkException
    from pyspark.sql import SparkSession

    from spark_jobs.source import register

    last: Exception | None = None
    for generation in range(SHARED_SESSION_TRIES):
        spark = SparkSession.builder.appName(app_name).remote(shared_remote(settings.remote, generation)).getOrCreate()
        spark.release_session_on_close = False  # stop() only closes this client: others share the session
        try:
            # Only runtime settings can change on a live session; the static ones are the server's.
            for key, value in session_conf(settings).items():
                if key.startswith("spark.sql."):
                    spark.conf.set(key, value)
            register(spark)
            return spark
        except PySparkException as err:
            if "SESSION_CLOSED" not in str(err) and "SESSION_NOT_FOUND" not in str(err):
                raise
            last = err
            spark.stop()
    raise RuntimeError(f"{settings.remote}: the server closed every shared kprio session tried: {last}")
