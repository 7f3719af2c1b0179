"""The driver JVM of a local session: Spark's classes mapped from an archive; (python reader) C1 only, serial GC.

Loading and verifying Spark's classes costs a local JVM ~6.5 s per start on two cores; with a dynamic
class-data sharing archive (JEP 350) it maps them and starts in ~4 s. ``scripts/setup.sh`` builds the archive
once (:mod:`spark_jobs.write_class_archive`); every local session then maps it (:func:`with_class_archive`),
unless the user's Java options name one. The archive fits only the Java build and Spark it was made with, both
in its file name (:func:`archive_path`): a new Java or Spark starts without one until the setup runs again.

A local python-reader session also uses C1 only (:func:`with_c1_only`) and the serial collector
(:func:`with_serial_gc`): its JVM does little per record, C2's threads competed with the Python workers for
cores, and G1's structures took memory.
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
    """``conf`` with the driver JVM mapping this Java and Spark's archive, if any and the Java options name none.

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
    """``conf`` with the driver JVM compiling with C1 only, unless the Java options say how to compile.

    The drain took 15% less time on two cores (C2's threads competed with the Python workers); the ``native``
    reader works in the JVM, was 16% slower so, and keeps both compilers.

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
    """``conf`` with the driver JVM on the serial collector, unless the Java options choose one.

    Its heap holds planning and stats rows, not records: G1's structures cost more memory (JVM peak RSS
    ~630 MiB against ~800) than its collections save time (the drain no slower).

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
