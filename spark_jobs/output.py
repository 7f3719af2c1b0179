"""Staged, replaceable Parquet output of a drained batch.

Layout: ``<root>/<logical topic>/priority=<p>/batch_id=<id>/part-*.parquet``. ``priority`` and
``batch_id`` live in the directory names (Hive style), so read the output with
:func:`read_output`, which gives them back with their types.

A batch is written to ``<root>/_staging/<batch>-<uuid>/`` first, then published: for each
priority directory of the batch, the old one (a previous run of the same batch) is moved
aside, the staged one renamed into its place, and the old one deleted; priority directories
of the batch that the new run no longer has are deleted. A rerun therefore replaces its files
instead of adding to them.

Atomicity: on a local filesystem or HDFS a directory rename is atomic, so a reader of one
``priority=<p>/batch_id=<id>`` directory sees the old files or the new ones, never a mix;
between the two renames the directory is briefly absent. Publishing several priorities is not
atomic as a whole: a crash part-way leaves some priorities new and some old, and rerunning the
batch repairs it (the old offsets are not committed until the whole batch is published and
checked). On object stores (S3A, GCS) a rename is a copy and delete: not atomic at all.

>>> batch_dir("/data/out", "orders", 2, "b-7")
'/data/out/orders/priority=2/batch_id=b-7'
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kprio_core.errors import OutputPublishFailed

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

STAGING = "_staging"


def batch_dir(root: str, logical_topic: str, priority: int, batch_id: str) -> str:
    return f"{root.rstrip('/')}/{logical_topic}/priority={priority}/batch_id={batch_id}"


def staging_dir(root: str, batch_id: str) -> str:
    """A fresh staging directory for one write of ``batch_id``."""
    return f"{root.rstrip('/')}/{STAGING}/{batch_id}-{uuid.uuid4().hex[:12]}"


PARQUET_OPTIONS = {
    # Nearly every value, offset and timestamp of a batch is distinct: a dictionary for them is
    # built and thrown away (offsets and timestamps never even reach the fallback size in one
    # file), and min/max of whole values is no use to a reader. About a quarter of the JVM's
    # write CPU (benchmarks/drain_bench.py). Keys, small columns and decoded fields keep both.
    "parquet.enable.dictionary#value": "false",
    "parquet.enable.dictionary#offset": "false",
    "parquet.enable.dictionary#timestamp": "false",
    "parquet.column.statistics.enabled#value": "false",
}


def write_staged(df: DataFrame, staging: str) -> None:
    """Write ``df`` as Parquet under ``staging``, one directory per priority and batch."""
    df.write.mode("errorifexists").options(**PARQUET_OPTIONS).partitionBy("priority", "batch_id").parquet(staging)


def publish(spark: SparkSession, staging: str, root: str, logical_topic: str, batch_id: str) -> tuple[str, ...]:
    """Move every staged priority directory of ``batch_id`` into place; returns the published dirs."""
    fs = filesystem(spark, root)
    topic_root = f"{root.rstrip('/')}/{logical_topic}"
    staged = {
        int(name.split("=", 1)[1]): f"{staging}/{name}/batch_id={batch_id}"
        for name in fs.list(staging)
        if name.startswith("priority=") and fs.exists(f"{staging}/{name}/batch_id={batch_id}")
    }
    published = []
    try:
        for priority, source in sorted(staged.items(), reverse=True):
            target = batch_dir(root, logical_topic, priority, batch_id)
            fs.mkdirs(f"{topic_root}/priority={priority}")
            if fs.exists(target):
                aside = f"{staging}/replaced-priority={priority}"
                fs.rename(target, aside)
                fs.rename(source, target)
                fs.delete(aside)
            else:
                fs.rename(source, target)
            published.append(target)
        for name in fs.list(topic_root):
            if not name.startswith("priority="):
                continue
            priority = int(name.split("=", 1)[1])
            old = batch_dir(root, logical_topic, priority, batch_id)
            if priority not in staged and fs.exists(old):
                fs.delete(old)  # the rerun has no records of this priority any more
    except Exception as err:  # noqa: BLE001 - OSError here, Py4JJavaError from Hadoop
        raise OutputPublishFailed(f"publishing batch {batch_id!r} of {logical_topic!r} from {staging}: {err}") from err
    fs.delete(staging)
    return tuple(published)


def discard(spark: SparkSession, staging: str, root: str) -> None:
    """Remove a staging directory (a failed write leaves nothing behind)."""
    filesystem(spark, root).delete(staging)


def read_output(spark: SparkSession, root: str, logical_topic: str, batch_id: str | None = None,
                schema: dict[str, str] | None = None) -> DataFrame:
    """The drained records of a topic (or one batch) with ``priority`` and ``batch_id`` typed."""
    from pyspark.sql import functions as F

    from spark_jobs.columns import drain_struct

    struct = drain_struct(schema or {})
    topic_root = f"{root.rstrip('/')}/{logical_topic}"
    df = spark.read.schema(struct).option("basePath", topic_root).parquet(topic_root)
    if batch_id is not None:
        df = df.where(F.col("batch_id") == batch_id)
    return df


def filesystem(spark: SparkSession, root: str) -> Any:
    """Hadoop's FileSystem for ``root`` in a classic session; the local disk under Spark Connect."""
    jvm = getattr(getattr(spark, "sparkContext", None), "_jvm", None) if not _is_connect(spark) else None
    return _HadoopFs(spark, root) if jvm is not None else _LocalFs()


def _is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


class _LocalFs:
    """Plain directory operations (Spark Connect: the output root must be visible to this process)."""

    def list(self, path: str) -> list[str]:
        p = Path(_local(path))
        return sorted(c.name for c in p.iterdir()) if p.is_dir() else []

    def exists(self, path: str) -> bool:
        return Path(_local(path)).exists()

    def mkdirs(self, path: str) -> None:
        Path(_local(path)).mkdir(parents=True, exist_ok=True)

    def rename(self, source: str, target: str) -> None:
        os.rename(_local(source), _local(target))

    def delete(self, path: str) -> None:
        shutil.rmtree(_local(path), ignore_errors=True)


def _local(path: str) -> str:
    return path[len("file:"):] if path.startswith("file:") else path


class _HadoopFs:
    """The same operations through Hadoop's FileSystem (HDFS, local, object stores)."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        jvm = spark.sparkContext._jvm
        self._path = jvm.org.apache.hadoop.fs.Path
        self._fs = self._path(root).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def list(self, path: str) -> list[str]:
        p = self._path(path)
        if not self._fs.exists(p):
            return []
        return sorted(status.getPath().getName() for status in self._fs.listStatus(p))

    def exists(self, path: str) -> bool:
        return bool(self._fs.exists(self._path(path)))

    def mkdirs(self, path: str) -> None:
        if not self._fs.mkdirs(self._path(path)):
            raise OSError(f"cannot create {path}")

    def rename(self, source: str, target: str) -> None:
        if not self._fs.rename(self._path(source), self._path(target)):
            raise OSError(f"cannot rename {source} to {target}")

    def delete(self, path: str) -> None:
        p = self._path(path)
        if self._fs.exists(p) and not self._fs.delete(p, True):
            raise OSError(f"cannot delete {path}")
