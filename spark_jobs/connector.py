"""Spark's Kafka connector (the ``native`` reader's jars): which set, and which of its jars Spark lacks.

The connector must match Spark exactly (PySpark's own version). ``scripts/setup.sh`` resolves it into the jar
cache (:mod:`kprio_core.jar_cache`); sessions add only the jars pyspark does not ship (:func:`spark_connector_jars`).

>>> spark_kafka_connector("4.2.0").artifacts
('org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0',)
"""

from __future__ import annotations

import re
from pathlib import Path

from kprio_core.jar_cache import JarSet, cached


def spark_kafka_connector(spark_version: str | None = None) -> JarSet:
    """Spark's Kafka source at PySpark's own version (the connector must match Spark exactly)."""
    if spark_version is None:
        import pyspark

        spark_version = pyspark.__version__
    return JarSet("spark-sql-kafka", spark_version,
                  (f"org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version}",))


def spark_connector_jars(spark_version: str | None = None) -> list[Path] | None:
    """The connector's jars for ``spark.jars``; None when the set is not cached. Never calls Maven.

    Only artifacts pyspark does not ship (:func:`not_shipped`): second copies of Scala, Hadoop, slf4j ... at the
    pom's versions beside Spark's own risk version conflicts.
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

    The version starts at the last ``-<digits>.``, so digits inside an artifact id and classifiers stay put.

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
