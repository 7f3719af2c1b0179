"""One SparkSession per run: ``local[*]`` by default, a ``spark.master`` URL, or a Spark Connect remote.

The session has the ``kprio-kafka`` data source registered (:func:`spark_jobs.source.register`). Each driver
(``kprio drain``, a Dagster run's ``SparkResource``, an Airflow task) makes one :class:`SparkProvider`, which
starts the session on first use or in the background, reuses an active one, and stops only the one it started.
No module state. Where each :class:`~kprio_core.config.SparkSettings` field acts:

- ``master`` / ``remote``: the session built here (``remote`` wins: a Spark Connect session);
- ``conf``: applied after kprio's defaults (over Spark Connect only runtime settings take);
- ``arrow_batch_records``: ``spark.sql.execution.arrow.maxRecordsPerBatch``, the source's Arrow batches
  (:class:`spark_jobs.range_reader.ReadSettings`) and the Parquet row groups;
- ``reader``, ``fetch_max_bytes``, ``max_partition_fetch_bytes``, ``queued_max_messages_kbytes``: the
  drain's reader and the executors' consumers (:mod:`spark_jobs.drain`, :mod:`spark_jobs.source`);
- ``connect_port``, ``connect_dir``: the Spark Connect server kprio starts (``kprio spark start``), not a session.

A local or classic session gets Spark's Kafka connector jars (the ``native`` reader) in ``spark.jars`` after any
configured ones, from the jar cache ``scripts/setup.sh`` fills (:func:`connector_jars`); without them only the
native reader fails, saying what is missing. Spark Connect uses the server's classpath (given the same jars).

Spark's redaction patterns get every Kafka secret its own misses (:data:`DEFAULT_CONF`), in UI, event logs and
plans, Spark Connect's plans shown as text included.

Over Spark Connect every kprio process joins ONE shared server-side session (id derived from the remote URL
unless it names one), so a run finds the data source registered and the Python workers warm instead of paying
seconds for new ones. Closing a client never releases it; if the server closed it, the next id of the same
sequence is used, so all processes meet again.

Local sessions (driver JVM, its Python workers, the local Connect server) run with glibc's ``MALLOC_ARENA_MAX=2``
unless set (:data:`LOCAL_ENV`). Local or classic executors run the driver's interpreter (``PYSPARK_PYTHON`` =
``sys.executable`` unless set) so both sides import the same kprio; a cluster's or Connect server's workers
need kprio installed too.

>>> from kprio_core.config import SparkSettings
>>> session_conf(SparkSettings(conf={"spark.sql.shuffle.partitions": "8"}))["spark.sql.shuffle.partitions"]
'8'
>>> session_conf(SparkSettings(arrow_batch_records=123))["spark.sql.execution.arrow.maxRecordsPerBatch"]
'123'
>>> session_conf(SparkSettings())["spark.sql.session.timeZone"]
'UTC'
>>> import re
>>> [name for name in ("kafka.sasl.jaas.config", "kafka.ssl.keystore.key", "kafka.ssl.key.pem", "kafka.sasl.password",
...                    "kafka.ssl.keystore.certificate.chain", "kafka.bootstrap.servers", "kafka.ssl.keystore.location")
...  if re.search(session_conf(SparkSettings())["spark.redaction.regex"], name)]
['kafka.sasl.jaas.config', 'kafka.ssl.keystore.key', 'kafka.ssl.key.pem', 'kafka.sasl.password', 'kafka.ssl.keystore.certificate.chain']
>>> plan = r'''options { key: "settings" value: "{\\"kafka\\":{\\"secrets\\":{\\"sasl.password\\":\\"p}w\\"},\\"timeout_s\\":20}" }
... options { key: "kafka.sasl.jaas.config" value: "ScramLoginModule required password=\\"p}w\\";" }'''
>>> "p}w" in re.sub(session_conf(SparkSettings())["spark.sql.redaction.string.regex"], "*", plan)
False
>>> with_jars({"spark.jars": "/opt/udf.jar"}, ["/cache/kafka-clients-3.9.2.jar"])["spark.jars"]
'/opt/udf.jar,/cache/kafka-clients-3.9.2.jar'
>>> with_jars({}, []) == {}
True
>>> local_env(SparkSettings(master="local[2]"), {}), local_env(SparkSettings(master="local[2]"), {"MALLOC_ARENA_MAX": "8"})
({'MALLOC_ARENA_MAX': '2'}, {})
>>> local_env(SparkSettings(master="spark://elsewhere:7077"), {})
{}
>>> shared_remote("sc://spark:15002")
'sc://spark:15002/;session_id=...'
>>> shared_remote("sc://spark:15002/;session_id=mine")
'sc://spark:15002/;session_id=mine'
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from kprio_core.config import JAVA_SECRETS, MAX_PRIORITIES, SECRET_SETTINGS, SparkSettings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key"
"""Spark's own default of ``spark.redaction.regex``."""


def _redaction_regex() -> str:
    """Spark's pattern plus every Kafka secret setting it does not match (names with ``.`` as ``[.]``)."""
    missed = [name for name in SECRET_SETTINGS + JAVA_SECRETS if not re.search(SPARK_REDACTION_REGEX, name)]
    return "|".join([SPARK_REDACTION_REGEX, *(name.replace(".", "[.]") for name in missed)])


def _string_redaction_regex() -> str:
    """Text that carries a Kafka secret in a plan's string (Spark Connect shows a query's whole plan as its
    statement, call site and details): the python reader's ``secrets`` object in its ``settings`` option, and
    the value of every secret ``kafka.*`` option of the native reader."""
    names = "|".join(re.escape(name) for name in SECRET_SETTINGS + JAVA_SECRETS)
    secrets = r"secrets\W{0,8}\{(?:.*?\}(?=\W{0,8}timeout_s)|[^}]*)"
    option = r'key: \\?"kafka[.](?:' + names + r')\\?"\s*value: \\?"(?:[^"\\]|\\.)*'
    return f"(?is){secrets}|{option}"


DEFAULT_CONF = {
    # Kafka timestamps are UTC instants; a UTC session shows them unshifted.
    "spark.sql.session.timeZone": "UTC",
    # A drain job has a handful of lanes, not 200: keep shuffles small unless configured.
    "spark.sql.shuffle.partitions": "8",
    # Batches of several priorities drain at once, each in its own pool (:func:`priority_pool`): an urgent
    # batch's tasks take the next free core instead of queueing behind a bulk job's.
    "spark.scheduler.mode": "FAIR",
    # Both readers pass secrets as kafka.* options (names: UI, event log, explain; values: plans shown as text).
    "spark.redaction.regex": _redaction_regex(),
    "spark.sql.redaction.string.regex": _string_redaction_regex(),
}


LOCAL_ENV = {"MALLOC_ARENA_MAX": "2"}
"""Environment of a local session's driver JVM and of the Python workers it starts (unless already set).

glibc gives threads up to eight arenas per core, each keeping its own freed memory, and the workers
(librdkafka) and the JVM run many threads: two arenas cut peak RSS a few percent, the drain no slower."""


def local_env(settings: SparkSettings, environ: Mapping[str, str]) -> dict[str, str]:
    """What :data:`LOCAL_ENV` adds to ``environ``: nothing unless the master is local, never a variable already set."""
    if not settings.master.startswith("local"):
        return {}
    return {name: value for name, value in LOCAL_ENV.items() if name not in environ}


def session_conf(settings: SparkSettings) -> dict[str, str]:
    """Spark settings of the session: kprio's defaults, then the configured ones."""
    conf = dict(DEFAULT_CONF)
    conf["spark.sql.execution.arrow.maxRecordsPerBatch"] = str(settings.arrow_batch_records)
    conf.update(settings.conf)
    return conf


def connector_jars() -> list[str]:
    """The jars of Spark's Kafka connector for ``spark.jars``; empty when not in the jar cache (no Maven or network)."""
    from spark_jobs.connector import spark_connector_jars

    return [str(path) for path in spark_connector_jars() or ()]


def with_jars(conf: Mapping[str, str], jars: Sequence[str]) -> dict[str, str]:
    """``conf`` with ``jars`` appended to its ``spark.jars`` (jars it already names come first)."""
    out = dict(conf)
    if jars:
        named = [j for j in out.get("spark.jars", "").split(",") if j.strip()]
        out["spark.jars"] = ",".join([*named, *(j for j in jars if j not in named)])
    return out


def classic_conf(settings: SparkSettings) -> dict[str, str]:
    """Settings of a local or classic session: :func:`session_conf`, the connector's jars (when cached), kprio's
    scheduler pools unless a file is configured; for a local master, :func:`lean_driver` and the driver JVM's
    class-data archive when built (:func:`spark_jobs.class_archive.with_class_archive`)."""
    from spark_jobs.class_archive import with_class_archive

    conf = with_jars(session_conf(settings), connector_jars())
    conf.setdefault("spark.scheduler.allocation.file", str(pools_file()))
    if not settings.master.startswith("local"):
        return conf
    return lean_driver(with_class_archive(conf), settings)


def lean_driver(conf: dict[str, str], settings: SparkSettings) -> dict[str, str]:
    """``conf`` with a local python-reader driver JVM on C1 only and serial GC (:mod:`spark_jobs.class_archive`)."""
    from kprio_core.config import SparkReader
    from spark_jobs.class_archive import with_c1_only, with_serial_gc

    if not settings.master.startswith("local") or settings.reader is not SparkReader.PYTHON:
        return conf
    return with_serial_gc(with_c1_only(conf))


def pools_xml() -> str:
    """Spark's fair scheduler pools of kprio: ``kprio-p<n>`` for each priority, weight ``n + 1``.

    >>> print(pools_xml().splitlines()[2].strip())
    <pool name="kprio-p0"><schedulingMode>FIFO</schedulingMode><weight>1</weight><minShare>0</minShare></pool>
    """
    pools = "\n".join(
        f'  <pool name="kprio-p{p}"><schedulingMode>FIFO</schedulingMode><weight>{p + 1}</weight>'
        f"<minShare>0</minShare></pool>" for p in range(MAX_PRIORITIES))
    return f'<?xml version="1.0"?>\n<allocations>\n{pools}\n</allocations>\n'


def pools_file() -> Path:
    """:func:`pools_xml` in a file of the temporary directory (written when missing or different)."""
    text = pools_xml()
    path = Path(tempfile.gettempdir()) / f"kprio-spark-pools-{hashlib.sha256(text.encode()).hexdigest()[:12]}.xml"
    if not path.exists():
        scratch = path.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(text)
        scratch.replace(path)  # atomic: a concurrent session reads a whole file
    return path


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

    from spark_jobs.library_logs import forward_spark_logs, jvm_stderr
    from spark_jobs.source import register

    forward_spark_logs()
    if settings.remote:
        return _remote_session(settings, app_name)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.update(local_env(settings, os.environ))  # the JVM pyspark starts inherits it, and its workers
    builder = SparkSession.builder.appName(app_name).master(settings.master)
    builder = builder.config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
    for key, value in classic_conf(settings).items():
        builder = builder.config(key, value)
    with jvm_stderr():
        spark = builder.getOrCreate()
    register(spark)
    return spark


@contextmanager
def priority_pool(spark: SparkSession, priority: int) -> Iterator[str | None]:
    """Within it, this thread's Spark jobs go to pool ``kprio-p<priority>``; yields it (None over Spark Connect).

    Under FAIR scheduling a free core goes to the pool with the fewest running tasks per weight: an urgent
    batch starts as soon as one task of a bulk batch ends."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        yield None
        return
    context = spark.sparkContext
    before = context.getLocalProperty("spark.scheduler.pool")
    name = f"kprio-p{priority}"
    context.setLocalProperty("spark.scheduler.pool", name)
    try:
        yield name
    finally:
        context.setLocalProperty("spark.scheduler.pool", before)  # type: ignore[arg-type]


class SparkProvider:
    """The Spark session of one driver, made once and passed to whatever needs a session.

    An active session is reused and belongs to whoever started it: :meth:`stop` stops only one it started."""

    def __init__(self, settings: SparkSettings, app_name: str = "kprio") -> None:
        self.settings, self.app_name = settings, app_name
        self._lock = threading.Lock()
        """Held while the session is built: a caller meanwhile (the background start's) waits, then reuses it."""
        self._session: SparkSession | None = None
        self._created = False
        self._starting: threading.Thread | None = None

    def start_in_background(self) -> bool:
        """Start the session on a thread while the driver does other work; :meth:`session` waits for it.

        False when a session is active, held or starting. A failed start leaves no session: whoever needs one
        starts it and reports the failure where it belongs."""
        with self._lock:
            if self._session is not None or self._starting is not None or session_running():
                return False
            self._starting = threading.Thread(target=self._start, name="kprio-spark-start", daemon=True)
            self._starting.start()
            return True

    def _start(self) -> None:
        try:
            self.session()
        except Exception:  # whoever needs Spark meets the same error and reports it
            logging.getLogger("kprio.spark").debug("the background start of the Spark session failed", exc_info=True)

    def session(self) -> SparkSession:
        """The session built (or being built in the background: waited for), else built now.

        Over Spark Connect, asked for again on each call (shared session, settings and data source set again)."""
        with self._lock:
            if self._session is None:
                existed = session_running()
                self._session = build_session(self.settings, app_name=self.app_name)
                self._created = not existed
            elif self.settings.remote:
                self._session = build_session(self.settings, app_name=self.app_name)
            return self._session

    def stop(self) -> None:
        """Stop the session if this provider started it, once a background start ended; forget it either way."""
        starting = self._starting
        if starting is not None and starting is not threading.current_thread():
            starting.join()
        with self._lock:
            if self._session is not None and self._created:
                self._session.stop()
            self._session, self._created, self._starting = None, False, None


def session_running() -> bool:
    """True when this process already has an active or default SparkSession (getOrCreate reuses it)."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    try:
        SparkSession.active()
    except PySparkRuntimeError:
        return False
    return True


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
