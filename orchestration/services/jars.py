"""Java artifacts kprio runs, resolved from Maven Central once into a local cache.

Two sets: the Apache Kafka broker (``org.apache.kafka:kafka_2.13`` and its dependencies: the
embedded broker of the demo and the tests) and Spark's Kafka connector
(``org.apache.spark:spark-sql-kafka-0-10_2.13`` at exactly PySpark's version: the ``native``
reader). ``scripts/setup.sh`` resolves both (``python3 -m orchestration.services.jars``); later
runs take the jars from the cache and never call Maven again.

Maven does the resolving with its default settings (a throwaway ``pom.xml`` and
``dependency:copy-dependencies``), so a machine's own mirror or proxy configuration applies. A
set is complete when its ``classpath.txt`` exists: it is written last, after every jar landed,
so a resolution cut short is resolved again.

>>> s = KAFKA_BROKER
>>> s.name, s.version, s.artifacts[0]
('kafka-broker', '4.1.1', 'org.apache.kafka:kafka_2.13:4.1.1')
>>> print(pom_xml(JarSet("x", "1", ("g:a:1", "g:b:2"))))  # doctest: +ELLIPSIS
<project ...><dependency><groupId>g</groupId><artifactId>a</artifactId><version>1</version></dependency>...
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from kprio_core.errors import KprioError

ENV_CACHE = "KPRIO_CACHE_DIR"
"""Overrides where resolved jars are kept (default ``~/.cache/kprio``)."""

KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"  # the version kafka_2.13 4.1.1 depends on


class JarsUnavailable(KprioError):
    """A set of jars is not in the cache and Maven could not resolve it."""

    code = "jars_unavailable"


@dataclass(frozen=True)
class JarSet:
    """A named set of Maven coordinates (``group:artifact:version``) resolved together."""

    name: str
    version: str
    artifacts: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


KAFKA_BROKER = JarSet(
    "kafka-broker", KAFKA_VERSION,
    (f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
     # Kafka logs through slf4j 1.7; this binding sends it to log4j2 (the distribution ships the same).
     f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}"),
)


def spark_kafka_connector(spark_version: str | None = None) -> JarSet:
    """Spark's Kafka source at PySpark's own version (the connector must match Spark exactly)."""
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    return JarSet("spark-sql-kafka", spark_version,
                  (f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version}",))


def spark_connector_jars(spark_version: str | None = None) -> list[Path] | None:
    """The connector's jars to put on Spark's classpath (``spark.jars``); None when the set is not cached.

    Only the jars whose artifact pyspark does not already ship (:func:`not_shipped`): the set
    also holds Scala, Hadoop's client, slf4j, lz4, snappy ... at the versions the connector's pom
    names, and a second copy of those beside Spark's own risks version conflicts. Never calls Maven.
    """
    found = cached(spark_kafka_connector(spark_version))
    return None if found is None else not_shipped(found, pyspark_jars_dir())


def pyspark_jars_dir() -> Path:
    """The jars Spark runs with: ``pyspark/jars`` of the installed pyspark."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def not_shipped(jars: list[Path], shipped_dir: Path) -> list[Path]:
    """``jars`` less those whose artifact (:func:`artifact_of`) has a jar in ``shipped_dir``, at any version."""
    shipped = {artifact_of(j.name) for j in shipped_dir.glob("*.jar")}
    return [j for j in jars if artifact_of(j.name) not in shipped]


def artifact_of(jar_name: str) -> str:
    """The artifact id in a jar's file name as Maven lays it out (``artifact-version[-classifier].jar``).

    The version starts at the last ``-`` followed by digits and a dot, so digits inside an
    artifact id (``-0-10_2.13``, ``-1.2-api``) and classifiers (``-jre``, ``-7``) stay where they belong.

    >>> artifact_of("spark-sql-kafka-0-10_2.13-4.2.0.jar"), artifact_of("kafka-clients-3.9.2.jar")
    ('spark-sql-kafka-0-10_2.13', 'kafka-clients')
    >>> artifact_of("commons-pool2-2.13.1.jar"), artifact_of("commons-pool-1.5.4.jar")
    ('commons-pool2', 'commons-pool')
    >>> artifact_of("log4j-1.2-api-2.24.3.jar"), artifact_of("zstd-jni-1.5.7-7.jar"), artifact_of("guava-33.4.0-jre.jar")
    ('log4j-1.2-api', 'zstd-jni', 'guava')
    >>> artifact_of("netty-tcnative-boringssl-static-2.0.76.Final-linux-x86_64.jar"), artifact_of("unversioned.jar")
    ('netty-tcnative-boringssl-static', 'unversioned')
    """
    stem = jar_name.removesuffix(".jar")
    found = _VERSIONED.match(stem)
    return found.group(1) if found else stem


_VERSIONED = re.compile(r"(.+)-\d+\.")  # greedy: the last "-<digits>." starts the version


def cache_dir() -> Path:
    """Where resolved jar sets live: ``$KPRIO_CACHE_DIR`` or ``~/.cache/kprio``."""
    return Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "kprio").expanduser()


def set_dir(jars: JarSet) -> Path:
    return cache_dir() / "jars" / jars.key


def cached(jars: JarSet) -> list[Path] | None:
    """The jars of a completely resolved set, or None when it is not (wholly) in the cache."""
    listing = set_dir(jars) / "classpath.txt"
    if not listing.is_file():
        return None
    paths = [Path(line) for line in listing.read_text().splitlines() if line.strip()]
    return paths if paths and all(p.is_file() for p in paths) else None


def pom_xml(jars: JarSet) -> str:
    """A pom that depends on exactly ``jars.artifacts`` (runtime scope brings their dependencies)."""
    deps = []
    for coordinate in jars.artifacts:
        group, artifact, version = coordinate.split(":")
        deps.append(f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
                    f"<version>{version}</version></dependency>")
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
            f"<groupId>kprio.cache</groupId><artifactId>{jars.name}</artifactId><version>{jars.version}</version>"
            f"<packaging>pom</packaging><dependencies>{''.join(deps)}</dependencies></project>")


def resolve(jars: JarSet, *, timeout_s: float = 900.0) -> list[Path]:
    """The set's jars: from the cache, or resolved with Maven into it first."""
    found = cached(jars)
    if found is not None:
        return found
    mvn = shutil.which("mvn")
    where = set_dir(jars)
    if mvn is None:
        raise JarsUnavailable(
            f"{jars.key} is not in the jar cache ({where}) and Maven (mvn) is not installed: "
            "run scripts/setup.sh, or install Maven and run `python3 -m orchestration.services.jars`")
    lib = where / "lib"
    if lib.exists():
        shutil.rmtree(lib)
    where.mkdir(parents=True, exist_ok=True)
    (where / "pom.xml").write_text(pom_xml(jars))
    cmd = [mvn, "-q", "-B", "-f", str(where / "pom.xml"), "dependency:copy-dependencies",
           f"-DoutputDirectory={lib}", "-DincludeScope=runtime"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise JarsUnavailable(f"Maven did not resolve {', '.join(jars.artifacts)} within {timeout_s:g} s") from None
    if done.returncode != 0:
        errors = [line for line in (done.stdout + done.stderr).splitlines() if "ERROR" in line]
        raise JarsUnavailable(
            f"Maven could not resolve {', '.join(jars.artifacts)} into {lib}: "
            f"{(errors[0] if errors else done.stderr.strip()[-500:])[:600]}")
    paths = sorted(lib.glob("*.jar"))
    if not paths:
        raise JarsUnavailable(f"Maven resolved no jar for {', '.join(jars.artifacts)} into {lib}")
    tmp = where / "classpath.txt.tmp"
    tmp.write_text("".join(f"{p}\n" for p in paths))
    tmp.replace(where / "classpath.txt")
    return paths


def main(argv: list[str] | None = None) -> int:
    """Resolve every jar set kprio uses (what scripts/setup.sh runs); print where each landed."""
    del argv
    for jars in (KAFKA_BROKER, spark_kafka_connector()):
        try:
            paths = resolve(jars)
        except JarsUnavailable as err:
            print(f"kprio setup: {err}", file=sys.stderr)
            return 1
        print(f"kprio setup: {jars.key}: {len(paths)} jars in {set_dir(jars)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
