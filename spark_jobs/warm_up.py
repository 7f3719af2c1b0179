"""The warm-up job ``kprio spark start`` runs on a new Spark Connect server: ``python -m spark_jobs.warm_up <remote>``.

One small job of a drain's kinds (shuffle, sort, ``mapInArrow`` over a kprio function) on the shared session
(:func:`spark_jobs.session.shared_remote`) loads the classes and starts the Python workers a first drain would
wait for. On failure: exit 1, one line on stderr (:func:`cause`).

>>> cause(RuntimeError("Job aborted: Lost task 0.0: org.apache.spark.SparkException: \\nError from python "
...                    "worker:\\n  no python here\\nPYTHONPATH was:\\n  /x\\n\\tat org.apache..."))
'RuntimeError: the Python worker said: no python here'
>>> cause(ValueError("bad\\nmore"))
'ValueError: bad'
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

ROWS = 2_000


def pass_through(batches: Iterator[Any]) -> Iterator[Any]:
    """A ``mapInArrow`` function that yields its Arrow batches unchanged (the workers import it from kprio)."""
    yield from batches


def warm_up(remote: str) -> int:
    """Run the job on ``remote``'s shared session; the rows it saw (:data:`ROWS`)."""
    from pyspark.sql import SparkSession

    from spark_jobs.session import shared_remote

    spark = SparkSession.builder.appName("kprio-warm-up").remote(shared_remote(remote)).getOrCreate()
    spark.release_session_on_close = False  # the drains share this session: stop() closes this client only
    try:
        return warm_job(spark)
    finally:
        spark.stop()


def warm_job(spark: Any) -> int:
    """The job on ``spark`` (a classic session or a Connect client): the rows it saw (:data:`ROWS`)."""
    frame = spark.range(ROWS, numPartitions=2).repartition(2, "id").sortWithinPartitions("id")
    return frame.mapInArrow(pass_through, "id long").count()


def cause(error: BaseException) -> str:
    """One line of what failed: a Python worker's own error output when Spark quotes it, else the first line."""
    text = str(error)
    if "Error from python worker:" in text:
        said = text.split("Error from python worker:", 1)[1].split("PYTHONPATH was:", 1)[0]
        return f"{type(error).__name__}: the Python worker said: {' '.join(said.split())}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return f"{type(error).__name__}: {first}"


if __name__ == "__main__":
    try:
        warm_up(sys.argv[1])
    except Exception as e:  # noqa: BLE001 (reported as one line to the caller)
        print(cause(e), file=sys.stderr)
        sys.exit(1)
