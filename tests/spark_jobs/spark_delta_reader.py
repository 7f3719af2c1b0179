"""Read a Delta table with Spark and Delta Lake's own jars, in a process of its own (test_lake_readers.py).

Usage: ``python spark_delta_reader.py <table path> [<Spark settings as JSON>]`` (the tests' children's quicker JVM
start, ``child_spark_conf``). A session with Delta's extension and catalog
(static settings: the test session cannot take them), then one JSON line: the rows, the distinct
``(topic, partition, offset)``, the columns with Spark's types, the rows per batch.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

from spark_jobs.lake_readers import spark_delta_conf


def main(path: str, extra: dict[str, str]) -> dict:
    conf = spark_delta_conf()
    if conf is None:
        raise SystemExit("spark_delta_reader: Delta's Spark jars are not in the jar cache: run scripts/setup.sh")
    builder = SparkSession.builder.master("local[1]").appName("kprio-delta-reader")
    for key, value in {**conf, "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                       "spark.sql.shuffle.partitions": "2", **extra}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    try:
        frame = session.read.format("delta").load(path)
        frame.createOrReplaceTempView("t")
        [(rows, distinct)] = session.sql("SELECT count(*), count(DISTINCT topic, `partition`, `offset`) FROM t").collect()
        per_batch = {r["batch_id"]: r["count"] for r in frame.groupBy("batch_id").count().collect()}
        return {"rows": rows, "distinct": distinct, "dtypes": dict(frame.dtypes), "per_batch": per_batch}
    finally:
        session.stop()


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]) if len(sys.argv) > 2 else {})))
