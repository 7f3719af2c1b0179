"""Write the class-data archive of a local Spark driver JVM (:mod:`spark_jobs.class_archive` says what maps it).

Run once by ``scripts/setup.sh``: a session as kprio's runs a job through Python workers, Arrow and Parquet, and
its JVM writes the archive as it exits (~25 s). Apart from :mod:`spark_jobs.class_archive` because starting a
session (:func:`spark_jobs.session.build_session`) maps the archive: the two would import each other.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

from kprio_core.config import SparkSettings
from spark_jobs.class_archive import JAVA_OPTIONS, archive_path


def scratch_of(archive: Path, pid: int | None = None) -> Path:
    """Where the JVM of process ``pid`` (this one by default) writes ``archive`` before it is moved into place.

    >>> scratch_of(Path("/cache/class-data/spark-driver-1a2b.jsa"), pid=4242).name
    'spark-driver-1a2b.jsa.4242.tmp'
    """
    return archive.with_name(f"{archive.name}.{os.getpid() if pid is None else pid}.tmp")


def build(archive: Path, settings: SparkSettings | None = None) -> Path:
    """Write the archive of a session of ``settings`` (default: ``local[2]``), moved into place once whole."""
    from pyspark.sql import functions as F

    from spark_jobs.session import build_session

    settings = settings or SparkSettings(master="local[2]")
    archive.parent.mkdir(parents=True, exist_ok=True)
    scratch = scratch_of(archive)
    conf = {**settings.conf, "spark.ui.showConsoleProgress": "false",
            # The dump warns of every class it leaves out (signed jars, generated classes): quiet.
            JAVA_OPTIONS: f"{settings.conf.get(JAVA_OPTIONS, '')} -XX:ArchiveClassesAtExit={scratch} "
                          "-Xlog:cds=off".strip()}
    session = build_session(settings.model_copy(update={"conf": conf}), app_name="kprio-class-archive")
    jvm = session.sparkContext._gateway.proc  # the JVM writes the archive when it exits
    try:
        frame = session.range(2000).withColumn("k", F.col("id") % 7)
        frame.mapInArrow(lambda batches: batches, frame.schema).groupBy("k").count().collect()
        frame.write.mode("overwrite").parquet(str(scratch.with_suffix(".parquet")))
    finally:
        session.stop()
        jvm.stdin.close()  # the gateway exits on end of input
        jvm.wait(timeout=300)
        shutil.rmtree(scratch.with_suffix(".parquet"), ignore_errors=True)
    if jvm.returncode != 0 or not scratch.is_file() or not scratch.stat().st_size:
        scratch.unlink(missing_ok=True)
        raise RuntimeError(f"the Spark driver JVM wrote no class-data archive (exit {jvm.returncode})")
    scratch.replace(archive)
    return archive


def main() -> int:
    """Build the archive of this Java and Spark unless the cache has it; one line either way."""
    archive = archive_path()
    if archive is None:
        print("kprio: no java found; the Spark driver's class-data archive is not built", file=sys.stderr)
        return 1
    if archive.is_file():
        print(f"kprio: the Spark driver's class-data archive is in place: {archive}")
        return 0
    started = time.monotonic()
    build(archive)
    print(f"kprio: built the Spark driver's class-data archive in {time.monotonic() - started:.0f} s: {archive}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
