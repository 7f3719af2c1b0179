"""Java artifacts kprio runs, resolved from Maven Central once into a local cache.

Two sets: the Apache Kafka broker (``org.apache.kafka:kafka_2.13`` and dependencies: the embedded broker) and Spark's
Kafka connector (``spark-sql-kafka-0-10_2.13`` at exactly PySpark's version: the ``native`` reader).
``scripts/setup.sh`` resolves them (``python3 -m orchestration.services.jars``); later runs never call Maven again.

Maven resolves with its default settings (a throwaway ``pom.xml``, ``dependency:copy-dependencies``), so a machine's
mirror or proxy applies. A set is complete when its ``classpath.txt`` exists: written last, after every jar landed,
so a resolution cut short is resolved again.

>>> s = KAFKA_BROKER
>>> s.name, s.version, s.artifacts[0]
('kafka-broker', '4.1.1', 'org.apache.kafka:kafka_2.13:4.1.1')
>>> print(pom_xml(JarSet("x", "1", ("g:a:1", "g:b:2"))))  # doctest: +ELLIPSIS
<project ...><dependency><groupId>g</groupId><artifactId>a</artifactId><version>1</version></dependency>...
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from kprio_core.errors import KprioError
from kprio_core.jar_cache import CLASSPATH_FILE, JarSet, cached, set_dir
from spark_jobs.connector import spark_kafka_connector

KAFKA_VERSION = "4.1.1"
LOG4J_VERSION = "2.24.3"  # the version kafka_2.13 4.1.1 depends on


class JarsUnavailable(KprioError):
    """A set of jars is not in the cache and Maven could not resolve it."""

    code = "jars_unavailable"


KAFKA_BROKER = JarSet(
    "kafka-broker", KAFKA_VERSION,
    (f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}",
     # Kafka logs through slf4j 1.7; this binding sends it to log4j2 (the distribution ships the same).
     f"org.apache.logging.log4j:log4j-slf4j-impl:{LOG4J_VERSION}"),
)


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
    tmp = where / f"{CLASSPATH_FILE}.tmp"
    tmp.write_text("".join(f"{p}\n" for p in paths))
    tmp.replace(where / CLASSPATH_FILE)
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
