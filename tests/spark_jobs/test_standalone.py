"""The drain on a standalone Spark master + worker (started from pyspark's own scripts).

Proves the data source and the handler run in separate executor processes, not in the driver.
The drain runs in a subprocess so the test session keeps its one SparkSession.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from kprio_core.model.results import DrainResult
from orchestration.services.process import free_port, wait_for
from tests.spark_jobs.plans import whole_plan
from tests.spark_jobs.spark_processes import SPARK_HOME, start, stop

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("standalone_drain.py")
REPO_ROOT = SCRIPT.parents[2]


def _start(args: list[str], log: Path, java_options: str) -> subprocess.Popen:
    return start([str(SPARK_HOME / "bin" / "spark-class"), *args], log,
                 {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_DAEMON_JAVA_OPTS": java_options})


def _alive_workers(ui_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as resp:
            state = json.load(resp)
    except OSError:
        return 0
    return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")


def test_drain_on_a_standalone_cluster_runs_in_executor_processes(kafka_settings, make_topic, tmp_path, spark,
                                                                  child_spark_conf):
    java_options = child_spark_conf["spark.driver.extraJavaOptions"]  # every JVM of the cluster starts quicker
    topic = make_topic(priorities=2, partitions=2, records={1: 60, 0: 40}, schema={"i": "long", "pid": "long"})
    plan = whole_plan(kafka_settings, topic)
    port, ui, worker_ui = free_port(), free_port(), free_port()
    master = _start(["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                     "--webui-port", str(ui)], tmp_path / "master.log", java_options)
    worker = None
    try:
        worker = _start(["org.apache.spark.deploy.worker.Worker", f"spark://127.0.0.1:{port}", "--host", "127.0.0.1",
                         "--cores", "2", "--memory", "1g", "--webui-port", str(worker_ui),
                         "--work-dir", str(tmp_path / "work")], tmp_path / "worker.log", java_options)
        assert wait_for(lambda: _alive_workers(ui) == 1, timeout_s=120, interval_s=0.5), (
            (tmp_path / "master.log").read_text()[-2000:] + (tmp_path / "worker.log").read_text()[-2000:])
        args = {"master": f"spark://127.0.0.1:{port}", "bootstrap": kafka_settings.bootstrap_servers,
                "topic": topic.model_dump_json(by_alias=True), "plan": plan.to_json(),
                "output": str(tmp_path / "out"), "dead_letters": str(tmp_path / "dead"), "batch_id": "standalone",
                "java_options": java_options}
        run = subprocess.run([sys.executable, str(SCRIPT), json.dumps(args)], capture_output=True, text=True,
                             timeout=600, cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
        assert run.returncode == 0, run.stderr[-4000:]
        report = json.loads(run.stdout.strip().splitlines()[-1])
    finally:
        if worker is not None:
            stop(worker)
        stop(master)
    result = DrainResult.from_json(report["result"])
    assert (result.records, result.dead) == (100, 0) and all(s.complete for s in result.ranges)
    assert result.by_priority() == {1: (60, 0), 0: (40, 0)}
    assert len(report["published"]) == len(plan.ranges)
    handler_pids = report["handler_pids"]
    assert handler_pids and all(handler_pids.values()), handler_pids  # every handler ran under an executor
    assert not set(map(int, handler_pids)) & set(report["driver_pids"])
    # The files are there and hold each planned offset once (read with the test session's Spark).
    from tests.spark_jobs.on_disk import read_output

    rows = read_output(spark, str(tmp_path / "out"), topic.name, "standalone", topic.schema_).collect()
    assert sorted((r.topic, r.partition, r.offset) for r in rows) == sorted(
        (r.range.topic, r.range.partition, o) for r in plan.ranges for o in range(r.range.start, r.range.end))
