"""The driver JVM of a local session: Spark's classes mapped from an archive; (python reader) C1 only, serial GC.

A local session's JVM loads, parses and verifies thousands of classes from Spark's jars on every
start: about 6.5 s of a two-core machine, on the way to ``kprio drain``'s first commit. Java's
dynamic class-data sharing (JEP 350) writes the classes a JVM loaded into an archive as it exits;
a JVM given that archive maps them instead and starts in about 4 s.

``scripts/setup.sh`` builds the archive once (``python -m spark_jobs.write_class_archive``, which
starts a session as kprio's do, runs a job through Python workers, Arrow and Parquet, stops, and the
JVM writes the archive as it exits; about 25 s). Every local session kprio builds then maps it
(:func:`with_class_archive`, from :func:`spark_jobs.session.classic_conf`); without one, or with
Java options of the user's own that name an archive, a session starts as it did before.

An archive only fits the Java build and the Spark jars it was made with: its file name carries
both (:func:`archive_path`), so a new Java or Spark finds no archive and starts without one until
the setup runs again.

A local session of the python reader also compiles with C1 only (:func:`with_c1_only`) and collects
with the serial collector (:func:`with_serial_gc`): its JVM does little per record, C2's compiler
threads competed with the Python workers for the cores, and G1's own structures took memory.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from kprio_core.jar_cache import cache_dir
from kprio_core.java import find_java, java_build

JAVA_OPTIONS = "spark.driver.extraJavaOptions"
OWN_ARCHIVE_OPTIONS = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit", "-Xshare")
"""Java options that say how the user wants class-data sharing: kprio then adds none of its own."""


def archive_path() -> Path | None:
    """Where the archive of this Java and this Spark lives in kprio's cache (None: no Java found)."""
    import pyspark

    java = find_java()
    build = java_build(java) if java else None
    if build is None:
        return None
    spark_home = Path(pyspark.__file__).resolve().parent
    key = hashlib.sha256(f"{build}|{spark_home}|{pyspark.__version__}".encode()).hexdigest()[:16]
    return cache_dir() / "class-data" / f"spark-driver-{key}.jsa"


def with_class_archive(conf: Mapping[str, str], archive: Path | None = None) -> dict[str, str]:
    """``conf`` with the driver JVM mapping the archive of this Java and Spark, when there is one and
    the configured Java options say nothing of class-data sharing.

    >>> with_class_archive({"spark.app.name": "x"}, archive=Path("/nowhere/spark.jsa"))
    {'spark.app.name': 'x'}
    """
    out = dict(conf)
    archive = archive_path() if archive is None else archive
    options = out.get(JAVA_OPTIONS, "")
    if archive is None or not archive.is_file() or any(o in options for o in OWN_ARCHIVE_OPTIONS):
        return out
    out[JAVA_OPTIONS] = f"{options} -XX:SharedArchiveFile={archive}".strip()
    return out


C1_ONLY = "-XX:TieredStopAtLevel=1"
OWN_COMPILER_OPTIONS = ("TieredStopAtLevel", "TieredCompilation", "CICompilerCount")
"""Java options that say how the user wants the JIT compilers: kprio then adds none of its own."""


def with_c1_only(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` with the driver JVM compiling with C1 only, unless the configured Java options say
    how to compile. For a local session of the python reader: its JVM schedules tasks and carries
    stats while Python workers read, decode and write every record, and C2's compiler threads took
    two cores from them. Measured with ``benchmarks/drain_bench.py`` (1,000,000 records, two cores):
    the drain 1.71 s against 2.01 s, a batch of 1,000 records 0.49 s against 0.54 s, the session's
    start 0.8-1.6 s sooner. Spark's own kafka source (``spark.reader: native``) works in the JVM and
    was 16% slower so: it keeps both compilers.

    >>> with_c1_only({"spark.driver.extraJavaOptions": "-Xmx1g"})["spark.driver.extraJavaOptions"]
    '-Xmx1g -XX:TieredStopAtLevel=1'
    >>> with_c1_only({"spark.driver.extraJavaOptions": "-XX:-TieredCompilation"})["spark.driver.extraJavaOptions"]
    '-XX:-TieredCompilation'
    """
    return _with_java_option(conf, C1_ONLY, unless=lambda options: any(o in options for o in OWN_COMPILER_OPTIONS))


SERIAL_GC = "-XX:+UseSerialGC"
_OWN_COLLECTOR = re.compile(r"-XX:[+-]Use\w*GC\b")
"""A Java option that chooses a collector (``-XX:+UseG1GC``, ``-XX:+UseParallelGC``...): kprio then adds none."""


def with_serial_gc(conf: Mapping[str, str]) -> dict[str, str]:
    """``conf`` with the driver JVM collecting with the serial collector, unless the configured Java options
    choose one. For a local session of the python reader: its heap holds Spark's planning and the tasks'
    stats rows, not records, and G1's remembered sets, card tables and threads cost more memory than
    that heap's collections cost time. Measured with ``benchmarks/drain_bench.py`` (1,000,000 records,
    two cores): the JVM's peak RSS 627-634 MiB against 796-810 MiB, the drain end to end 1.85-1.89 s
    against 1.72-1.94 s, a batch of 1,000 records 0.47 s against 0.45 s.

    >>> with_serial_gc({"spark.driver.extraJavaOptions": "-Xmx1g"})["spark.driver.extraJavaOptions"]
    '-Xmx1g -XX:+UseSerialGC'
    >>> with_serial_gc({"spark.driver.extraJavaOptions": "-XX:+UseZGC"})["spark.driver.extraJavaOptions"]
    '-XX:+UseZGC'
    """
    return _with_java_option(conf, SERIAL_GC, unless=lambda options: _OWN_COLLECTOR.search(options) is not None)


def _with_java_option(conf: Mapping[str, str], option: str, *, unless: Callable[[str], bool]) -> dict[str, str]:
    """``conf`` with ``option`` added to the driver's Java options, unless ``unless(options)`` says the user chose."""
    out = dict(conf)
    options = out.get(JAVA_OPTIONS, "")
    if not unless(options):
        out[JAVA_OPTIONS] = f"{options} {option}".strip()
    return out
