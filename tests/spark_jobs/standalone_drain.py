"""Run one drain on a standalone Spark cluster, in its own process (used by test_standalone.py).

Usage: ``python standalone_drain.py '<json args>'`` with ``master``, ``bootstrap``, ``topic``
(TopicSettings JSON), ``plan`` (DrainPlan JSON), ``output``, ``dead_letters`` and ``batch_id``.
Drains, publishes, and prints one JSON line: the DrainResult (JSON), the published paths, the
driver's pids and, for every handler pid seen in the output, whether an executor backend
process is among its ancestors.
"""

from __future__ import annotations

import json
import os
import sys

import psutil

from kprio_core.config import KprioConfig, SparkSettings, TopicSettings
from kprio_core.model.drain_plan import DrainPlan
from spark_jobs.drain import drain_batch
from spark_jobs.output import publish, read_table
from spark_jobs.session import build_session

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _under_executor(pid: int) -> bool:
    try:
        return any("CoarseGrainedExecutorBackend" in " ".join(p.cmdline()) for p in psutil.Process(pid).parents())
    except psutil.Error:
        return False


def main(args: dict) -> dict:
    settings = SparkSettings(master=args["master"], conf={
        "spark.ui.enabled": "false",
        "spark.executor.memory": "512m",
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
        "spark.sql.shuffle.partitions": "4",
        "spark.executorEnv.PYTHONPATH": REPO_ROOT,
        # The test session's quicker JVM start (tests.fixtures.spark.child_spark_conf), executors too.
        "spark.driver.extraJavaOptions": args["java_options"],
        "spark.executor.extraJavaOptions": args["java_options"],
    })
    config = KprioConfig(kafka={"bootstrap_servers": args["bootstrap"]},
                         drain={"handler": "tests.spark_jobs.handlers_for_tests:record_process"},
                         ordering={"mode": "key", "lanes": 2}, splits={"max_records": 25})
    topic = TopicSettings.model_validate_json(args["topic"])
    spark = build_session(settings, app_name="kprio-standalone-test")
    try:
        result = drain_batch(spark, config, topic, args["batch_id"], 1, DrainPlan.from_json(args["plan"]),
                             output_root=args["output"], dead_letter_root=args["dead_letters"])
        published = publish(result, output_root=args["output"], dead_letter_root=args["dead_letters"])
        pids = sorted(set(read_table(args["output"], topic.name, columns=["pid"]).column("pid").to_pylist()))
        driver_jvm = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        return {"result": result.to_json(), "published": published, "driver_pids": [os.getpid(), driver_jvm],
                "handler_pids": {str(pid): _under_executor(pid) for pid in pids}}
    finally:
        spark.stop()


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
