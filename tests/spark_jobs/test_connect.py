"""The drain over Spark Connect: a real Connect server (pyspark's own) in a subprocess, a remote client.

The client runs in its own process too (tests/spark_jobs/connect_drain.py): a Connect session and
this test session's classic one do not mix in one process. Proves that the driver side never
needs a SparkContext or a JVM: the data source is registered over Connect, the tasks (the fused
source and the key-order shuffle's ``mapInArrow``) run in the server's Python workers, and the
output is the same.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import DrainResult
from spark_jobs.connector import spark_connector_jars
from tests.spark_jobs.plans import plan_of, watermarks, whole_plan
from tests.spark_jobs.spark_processes import SPARK_HOME, start, stop
from tests.spark_jobs.test_drain import _delete_below

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.slow]

SCRIPT = Path(__file__).with_name("connect_drain.py")
REPO_ROOT = SCRIPT.parents[2]
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _start_server(port: int, log: Path, java_options: str) -> subprocess.Popen:
    env = {**os.environ, "SPARK_NO_DAEMONIZE": "1", "SPARK_CONNECT_MODE": "0", "PYSPARK_PYTHON": sys.executable,
           "PYTHONPATH": str(REPO_ROOT)}
    jars = spark_connector_jars()
    assert jars is not None, "Spark's Kafka connector is not cached: run `bash scripts/setup.sh`"
    args = [str(SPARK_HOME / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", "local[1]",
            "--jars", ",".join(map(str, jars)),  # Spark's own Kafka source, for the native reader
            "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
            # More cores than the plan has partitions: key order with several splits takes the shuffle.
            "--conf", "spark.default.parallelism=8",
            "--conf", f"spark.pyspark.python={sys.executable}", "--driver-java-options", java_options]
    return start(args, log, env)


def test_drain_over_spark_connect(kafka_settings, make_topic, tmp_path, child_spark_conf):
    bad = [(f"bad-{i}", "{not json", None, i % 2) for i in range(3)]
    topic = make_topic(priorities=2, partitions=2, records={1: 60, 0: bad}, schema={"i": "long", "pid": "long"})
    plan = whole_plan(kafka_settings, topic)
    # Spark's own Kafka source over a log that no longer holds offsets [4, 12) of partition 0.
    gap = make_topic(priorities=1, partitions=2, records={0: 60})
    gap_name = gap.priority_topic(0)
    _delete_below(kafka_settings, gap_name, 0, 12)
    gap_plan = plan_of(gap, {0: [OffsetRange(gap_name, 0, 4, watermarks(kafka_settings, gap_name, 2)[0][1]),
                                 OffsetRange(gap_name, 1, 0, watermarks(kafka_settings, gap_name, 2)[1][1])]})
    port, log = _free_port(), tmp_path / "connect-server.log"
    server = _start_server(port, log, child_spark_conf["spark.driver.extraJavaOptions"])
    try:
        deadline = time.monotonic() + 180
        while not _listening(port):
            assert server.poll() is None, f"the Connect server exited: {log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"the Connect server did not listen within 180 s: {log.read_text()[-3000:]}"
            time.sleep(0.2)
        args = {"remote": f"sc://127.0.0.1:{port}", "bootstrap": kafka_settings.bootstrap_servers,
                "topic": topic.model_dump_json(by_alias=True), "plan": plan.to_json(),
                "output": str(tmp_path / "out"), "dead_letters": str(tmp_path / "dead"),
                "gap": gap.model_dump_json(by_alias=True), "gap_plan": gap_plan.to_json()}
        run = subprocess.run([sys.executable, str(SCRIPT), json.dumps(args)], capture_output=True, text=True,
                             timeout=600, cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
        assert run.returncode == 0, run.stderr[-4000:] + log.read_text()[-3000:]
        report = json.loads(run.stdout.strip().splitlines()[-1])
    finally:
        stop(server)
    assert report["session"].startswith("pyspark.sql.connect")
    planned = sorted([r.range.topic, r.range.partition, o] for r in plan.ranges for o in range(r.range.start, r.range.end))
    for key in ("fused", "shuffled"):
        result = DrainResult.from_json(report[key])
        assert all(s.complete for s in result.ranges), result
        assert (result.records, result.dead) == (60, 3)
    assert sorted(report["offsets"] + report["dead_offsets"]) == planned  # every offset once, output or dead
    assert len(report["dead_offsets"]) == 3
    assert report["handler_pids"] and report["client_pid"] not in report["handler_pids"]  # ran in the server's workers
    assert len(report["published"]) == 4  # priority 1: two output files; priority 0: two dead-letter files
    # The shuffle's read stage failed on the missing partition: its range fails with its typed error, read from
    # the record the reader attached to the error (not from its text), and every other range drains.
    failing = DrainResult.from_json(report["failing"])
    name = topic.priority_topic(0)
    [missing] = [s for s in failing.ranges if s.range.partition == 7]
    assert missing.failure == f"{name}[7]@[0,5): topic {name} has no partition 7 (it has 0..1)"
    assert (missing.error.kind, missing.error.where) == ("KafkaOperationFailed", OffsetRange(name, 7, 0, 5))
    assert all(s.complete and s.failure is None for s in failing.ranges if s is not missing)
    assert (failing.records, failing.dead) == (60, 3)
    # Spark's own source could not read the range whose start the log no longer holds: the range comes from the
    # error's condition and parameters, which PySpark raises over Connect (never from its text); it fails with its
    # typed error and the other partition drains.
    lost = DrainResult.from_json(report["lost"])
    [gone] = [s for s in lost.ranges if s.range.partition == 0]
    assert (gone.error.kind, gone.error.where, gone.error.transient) == (
        "RangeIncomplete", gap_plan.ranges[0].range, False)
    assert gone.failure.startswith(f"{gap_plan.ranges[0].range}: range {gap_plan.ranges[0].range} is incomplete")
    [kept] = [s for s in lost.ranges if s.range.partition == 1]
    assert kept.complete and kept.failure is None and kept.output == gap_plan.ranges[1].range.count
