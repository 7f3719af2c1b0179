"""Session building: kprio's defaults, the configured overrides, the data source registered; every setting acts."""

from __future__ import annotations

import os
import sys

import pytest

from kprio_core.config import KprioConfig, SparkSettings
from spark_jobs.session import session_conf
from spark_jobs.source import KafkaSource, source_options

WHERE_EACH_SETTING_ACTS = {
    "master": "the session's master (test_the_session_runs_this_interpreter_in_utc_with_the_source_registered)",
    "remote": "a Spark Connect session (test_connect.py)",
    "reader": "python source or Spark's kafka source (test_native.py: the native reader drives the drain)",
    "conf": "session_conf, below",
    "fetch_max_bytes": "source options, below",
    "max_partition_fetch_bytes": "source options, below",
    "queued_max_messages_kbytes": "source options, below",
    "arrow_batch_records": "session_conf and source options (batches, Parquet row groups), below",
    "connect_port": "the Spark Connect server `kprio spark start` runs (orchestration.services), not a session",
    "connect_dir": "the Spark Connect server `kprio spark start` runs (orchestration.services), not a session",
}


def test_every_spark_setting_is_accounted_for_and_reaches_where_it_acts():
    assert set(SparkSettings.model_fields) == set(WHERE_EACH_SETTING_ACTS)
    changed = SparkSettings(conf={"spark.sql.session.timeZone": "Europe/Paris"}, arrow_batch_records=123,
                            fetch_max_bytes=2048, max_partition_fetch_bytes=1025, queued_max_messages_kbytes=3)
    conf = session_conf(changed)
    assert conf["spark.sql.session.timeZone"] == "Europe/Paris"  # configured settings win over kprio's defaults
    assert conf["spark.sql.execution.arrow.maxRecordsPerBatch"] == "123"
    settings = KafkaSource(source_options(KprioConfig(spark=changed), [])).reader(None).settings  # a task's
    assert (settings.spark.arrow_batch_records, settings.spark.fetch_max_bytes, settings.spark.max_partition_fetch_bytes,
            settings.spark.queued_max_messages_kbytes) == (123, 2048, 1025, 3)
    assert settings.spark == changed


@pytest.mark.spark
def test_the_session_runs_this_interpreter_in_utc_with_the_source_registered(spark):
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert spark.sparkContext.master == "local[2]"
    assert spark.conf.get("spark.sql.session.timeZone") == "UTC"
    # Registered: an unknown option error comes from our source, not "data source not found".
    with pytest.raises(Exception, match="option 'splits' is required"):
        spark.read.format("kprio-kafka").option("kafka.bootstrap.servers", "127.0.0.1:1").load().count()


def test_a_classic_session_gets_the_connector_jars_only_when_they_are_cached(tmp_path, monkeypatch):
    from kprio_core.jar_cache import ENV_CACHE, cached
    from spark_jobs.connector import artifact_of, pyspark_jars_dir, spark_kafka_connector

    from spark_jobs.session import classic_conf, connector_jars

    jars = connector_jars()
    assert jars, "Spark's Kafka connector is not in the jar cache: run `bash scripts/setup.sh`"
    resolved = {artifact_of(j.name) for j in cached(spark_kafka_connector())}
    shipped = {artifact_of(j.name) for j in pyspark_jars_dir().glob("*.jar")}
    # Only what pyspark lacks: the resolved set's scala-library, lz4, snappy, slf4j ... stay out.
    assert {artifact_of(j.rsplit("/", 1)[-1]) for j in jars} == resolved - shipped
    assert {"scala-library", "slf4j-api"} <= resolved & shipped and "kafka-clients" in resolved - shipped
    mine = SparkSettings(conf={"spark.jars": "/opt/udf.jar"})
    assert classic_conf(mine)["spark.jars"].split(",") == ["/opt/udf.jar", *jars]
    # An empty cache: the session builds without the connector (only the native reader then fails).
    monkeypatch.setenv(ENV_CACHE, str(tmp_path))
    assert connector_jars() == [] and "spark.jars" not in classic_conf(SparkSettings())
    assert classic_conf(mine)["spark.jars"] == "/opt/udf.jar"


def test_kprios_spark_connect_server_gets_the_connector_jars():
    from orchestration.services.spark_connect import server_conf

    from spark_jobs.session import connector_jars

    args = server_conf(SparkSettings(), 15002)
    confs = dict(a.split("=", 1) for a in args[1::2])
    assert confs["spark.jars"].split(",") == connector_jars()
    assert confs["spark.redaction.regex"] == session_conf(SparkSettings())["spark.redaction.regex"]


def test_a_local_spark_connect_server_of_the_python_reader_gets_the_lean_driver_jvm():
    from orchestration.services.spark_connect import server_conf

    def java_options(settings: SparkSettings) -> list[str]:
        confs = dict(a.split("=", 1) for a in server_conf(settings, 15002)[1::2])
        return confs.get("spark.driver.extraJavaOptions", "").split()

    assert java_options(SparkSettings(master="local[2]")) == ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
    assert java_options(SparkSettings(master="local[2]", reader="native")) == []
    mine = {"spark.driver.extraJavaOptions": "-XX:+UseParallelGC"}
    assert java_options(SparkSettings(master="local[2]", conf=mine)) == ["-XX:+UseParallelGC",
                                                                         "-XX:TieredStopAtLevel=1"]


@pytest.mark.spark
def test_a_local_sessions_jvm_and_python_workers_keep_two_malloc_arenas(spark):
    """glibc's arenas, two instead of eight per core, reach the driver JVM and the Python workers it starts."""
    import psutil

    expected = os.environ["MALLOC_ARENA_MAX"]  # build_session set it, unless this environment already did
    seen = spark.sparkContext.parallelize([0], 1).map(lambda _: __import__("os").environ.get("MALLOC_ARENA_MAX"))
    assert seen.collect() == [expected]
    driver = psutil.Process(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # this session's JVM
    assert driver.name() == "java" and driver.environ().get("MALLOC_ARENA_MAX") == expected


def test_a_local_spark_connect_server_keeps_two_malloc_arenas_unless_told_otherwise(monkeypatch):
    from orchestration.services.spark_connect import server_env

    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert server_env(SparkSettings(master="local[2]"))["MALLOC_ARENA_MAX"] == "2"
    assert "MALLOC_ARENA_MAX" not in server_env(SparkSettings(master="spark://elsewhere:7077"))
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert server_env(SparkSettings(master="local[2]"))["MALLOC_ARENA_MAX"] == "4"


@pytest.mark.spark
def test_a_local_session_maps_the_class_data_archive_the_setup_built(spark):
    """scripts/setup.sh builds the archive of this Java and Spark; kprio's local sessions (the test session is
    built as kprio builds one) start their driver JVM mapping it: its file is in the JVM's memory map."""
    from pathlib import Path

    from spark_jobs.class_archive import archive_path

    archive = archive_path()
    assert archive is not None and archive.is_file(), f"no class-data archive at {archive}: run scripts/setup.sh"
    assert f"-XX:SharedArchiveFile={archive}" in spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    jvm = spark.sparkContext._gateway.proc.pid
    assert str(archive) in Path(f"/proc/{jvm}/maps").read_text()


def test_the_class_data_archive_is_added_only_where_it_fits(tmp_path, monkeypatch):
    """Mapped by a local session only, when it exists for this Java, and never over the user's own options."""
    from spark_jobs.class_archive import archive_path, with_class_archive
    from spark_jobs.session import classic_conf

    archive = tmp_path / "spark.jsa"
    archive.write_bytes(b"archive")
    key = "spark.driver.extraJavaOptions"
    assert with_class_archive({}, archive)[key] == f"-XX:SharedArchiveFile={archive}"
    assert with_class_archive({key: "-Xmx1g"}, archive)[key] == f"-Xmx1g -XX:SharedArchiveFile={archive}"
    for own in ("-XX:SharedArchiveFile=/mine.jsa", "-XX:ArchiveClassesAtExit=/x.jsa", "-Xshare:off"):
        assert with_class_archive({key: own}, archive)[key] == own
    assert key not in with_class_archive({}, tmp_path / "missing.jsa")

    monkeypatch.setattr("spark_jobs.class_archive.archive_path", lambda: archive)
    assert f"-XX:SharedArchiveFile={archive}" in classic_conf(SparkSettings(master="local[2]"))[key]
    assert key not in classic_conf(SparkSettings(master="spark://elsewhere:7077"))  # its driver may be elsewhere
    monkeypatch.undo()

    # Another Java build has another archive (an archive maps only into the JVM build that wrote it).
    other = tmp_path / "jdk" / "bin" / "java"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"not this java")
    mine = archive_path()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert archive_path() not in (None, mine)


def test_a_local_python_reader_session_compiles_with_c1_only_unless_told_otherwise():
    """The python reader's JVM does little per record: C1 only (C2's threads took the workers' cores); Spark's own
    kafka source works in the JVM and keeps both compilers; the user's compiler options are left alone."""
    from spark_jobs.session import classic_conf

    key = "spark.driver.extraJavaOptions"
    assert "-XX:TieredStopAtLevel=1" in classic_conf(SparkSettings(master="local[2]"))[key]
    assert "TieredStopAtLevel" not in classic_conf(SparkSettings(master="local[2]", reader="native")).get(key, "")
    assert "TieredStopAtLevel" not in classic_conf(SparkSettings(master="spark://elsewhere:7077")).get(key, "")
    mine = SparkSettings(master="local[2]", conf={key: "-XX:TieredStopAtLevel=4"})
    assert classic_conf(mine)[key].split().count("-XX:TieredStopAtLevel=4") == 1
    assert "-XX:TieredStopAtLevel=1" not in classic_conf(mine)[key]


def test_a_local_python_reader_session_collects_with_the_serial_gc_unless_told_otherwise():
    """The python reader's JVM heap holds planning and stats, not records: the serial collector (G1's structures
    took 170 MiB more RSS); Spark's own kafka source and the user's collector are left alone."""
    from spark_jobs.session import classic_conf

    key = "spark.driver.extraJavaOptions"
    assert "-XX:+UseSerialGC" in classic_conf(SparkSettings(master="local[2]"))[key].split()
    assert "UseSerialGC" not in classic_conf(SparkSettings(master="local[2]", reader="native")).get(key, "")
    assert "UseSerialGC" not in classic_conf(SparkSettings(master="spark://elsewhere:7077")).get(key, "")
    for chosen in ("-XX:+UseG1GC", "-XX:+UseParallelGC", "-XX:-UseSerialGC"):
        options = classic_conf(SparkSettings(master="local[2]", conf={key: f"-Xmx1g {chosen}"}))[key].split()
        assert chosen in options and "-XX:+UseSerialGC" not in options, chosen


@pytest.mark.spark
def test_a_provider_reuses_the_active_session_and_leaves_it_running(spark):
    """A driver's provider in a process that has a session (the tests', one a caller started) starts nothing,
    hands that session out, and does not stop it."""
    from spark_jobs.session import SparkProvider, session_running
    from tests.fixtures.spark import TEST_SPARK

    provider = SparkProvider(TEST_SPARK, app_name="kprio-tests")
    assert provider.start_in_background() is False  # a session is active: nothing to start
    assert provider.session() is spark and provider.session() is spark
    provider.stop()
    assert session_running() and spark.range(3).count() == 3
    assert provider.session() is spark  # a stopped provider hands the active session out again
    provider.stop()


PROVIDER_CHILD = """
import json, sys
from kprio_core.config import SparkSettings
from spark_jobs.session import SparkProvider, session_running

settings = SparkSettings.model_validate(json.loads(sys.argv[1]))
provider = SparkProvider(settings, app_name="kprio-provider-test")
seen = {"started": provider.start_in_background(), "again": provider.start_in_background()}
session = provider.session()  # waits for the background start, then reuses its session
seen.update(same=provider.session() is session, count=session.range(3).count(), running=session_running())
provider.stop()
seen["running_after_stop"] = session_running()
print(json.dumps(seen))
"""


@pytest.mark.spark
def test_a_provider_starts_its_session_in_the_background_and_stops_only_what_it_started(child_spark_conf):
    """In a process with no session (a child: the tests' session must stay up), the provider starts one on a
    thread, hands out that one session, and stops it."""
    import json
    import subprocess

    from tests.fixtures.spark import REPO_ROOT, TEST_SPARK

    settings = TEST_SPARK.model_copy(update={"master": "local[1]", "conf": {**TEST_SPARK.conf, **child_spark_conf}})
    child = subprocess.run([sys.executable, "-c", PROVIDER_CHILD, settings.model_dump_json()], cwd=REPO_ROOT,
                           env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True, text=True,
                           timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    seen = json.loads(child.stdout.strip().splitlines()[-1])
    assert seen == {"started": True, "again": False, "same": True, "count": 3, "running": True,
                    "running_after_stop": False}
