"""``kprio spark start|stop|status``: a real Spark Connect server, one per test module, stopped in finally."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import yaml
from typer.testing import CliRunner

from kprio_core.config import SparkSettings
from orchestration.cli.main import app
from orchestration.services.process import free_port, pid_alive
from orchestration.services.spark_connect import STATE_FILE, SparkConnectServer

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.spark, pytest.mark.slow]

runner = CliRunner()


def run(*args: str):  # noqa: ANN201
    return runner.invoke(app, list(args))


def write_config(path: Path, connect_dir: Path, port: int, **spark: object) -> Path:
    doc = {"spark": {"master": "local[1]", "connect_dir": str(connect_dir), "connect_port": port, **spark}}
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, child_spark_conf):  # noqa: ANN201
    """The module's server, started with `kprio spark start` (the session's class archive, C1: a quicker JVM start);
    (config path, start JSON)."""
    root = tmp_path_factory.mktemp("connect")
    config = write_config(root / "kprio.yaml", root / "connect", free_port(),
                          conf={"spark.sql.shuffle.partitions": "3", **child_spark_conf})
    try:
        started = run("spark", "start", "--config", str(config), "--json")
        assert started.exit_code == 0, started.output
        yield config, json.loads(started.stdout)
    finally:
        run("spark", "stop", "--config", str(config))
        SparkConnectServer(SparkSettings(**yaml.safe_load(config.read_text())["spark"])).stop()


def test_status_says_running_with_pid_port_url_and_uptime(server):
    config, started = server
    assert started["started"] is True and started["running"] and started["answering"]
    status = json.loads(run("spark", "status", "--config", str(config), "--json").stdout)
    assert status["pid"] == started["pid"] and pid_alive(status["pid"])
    assert status["url"] == f"sc://localhost:{status['port']}" and status["uptime_s"] >= 0
    text = run("spark", "status", "--config", str(config)).stdout
    assert f"running at sc://localhost:{status['port']} (pid {status['pid']}" in text


def test_a_second_start_says_it_already_runs(server):
    config, started = server
    again = run("spark", "start", "--config", str(config))
    assert again.exit_code == 0, again.output
    assert again.stdout.startswith("already running:") and f"pid {started['pid']}" in again.stdout


def test_another_port_for_the_running_server_is_refused(server):
    config, started = server
    other = run("spark", "start", "--config", str(config), "--port", str(started["port"] + 1))
    assert other.exit_code == 1
    assert f"already runs from {Path(started['connect_dir'])} on port {started['port']}" in other.stderr


CLIENT = """
import json, os, sys
from pyspark.sql import SparkSession
from pyspark.sql.functions import udf

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
try:
    @udf("string")
    def where_kprio_is(x):
        import kprio_core  # the workers import kprio: PYSPARK_PYTHON is this interpreter
        return os.path.dirname(kprio_core.__file__)

    rows = spark.range(2).select(where_kprio_is("id").alias("kprio")).collect()
    print(json.dumps({"kprio": sorted({r.kprio for r in rows}),
                      "tz": spark.conf.get("spark.sql.session.timeZone"),
                      "shuffle": spark.conf.get("spark.sql.shuffle.partitions")}))
finally:
    spark.stop()
"""


def test_a_connect_session_runs_kprio_python_with_kprio_defaults(server):
    import kprio_core

    _, started = server
    # Its own process: a remote session cannot start beside the test session's local one.
    client = subprocess.run([sys.executable, "-c", CLIENT, started["url"]], capture_output=True, text=True,
                            timeout=300, cwd=REPO)
    assert client.returncode == 0, client.stderr[-3000:]
    seen = json.loads(client.stdout.strip().splitlines()[-1])
    assert seen["kprio"] == [os.path.dirname(kprio_core.__file__)]
    assert seen["tz"] == "UTC", "kprio's session defaults reach the server"
    assert seen["shuffle"] == "3", "spark.conf reaches the server"


PROVIDER_CLIENT = """
import json, sys
from kprio_core.config import SparkSettings
from spark_jobs.session import SparkProvider

provider = SparkProvider(SparkSettings(remote=sys.argv[1]))
first = provider.session()
seen = {"first": first.range(2).count()}
again = provider.session()  # asked for again, as each run asks: the same shared session
seen.update(again=again.range(3).count(), same_session=again.session_id == first.session_id,
            tz=again.conf.get("spark.sql.session.timeZone"))
provider.stop()
print(json.dumps(seen))
"""


def test_a_providers_connect_session_is_the_shared_one_on_every_call(server):
    """kprio drain's one provider serves every run: over Spark Connect each call asks for the shared session
    again (kprio's settings and the data source set again), and gets the same one."""
    _, started = server
    client = subprocess.run([sys.executable, "-c", PROVIDER_CLIENT, started["url"]], capture_output=True, text=True,
                            timeout=300, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert client.returncode == 0, client.stderr[-3000:]
    assert json.loads(client.stdout.strip().splitlines()[-1]) == {"first": 2, "again": 3, "same_session": True,
                                                                  "tz": "UTC"}


def test_stop_leaves_no_process_of_the_server(server):
    config, started = server
    leader = psutil.Process(started["pid"])
    group = [p for p in psutil.process_iter() if _pgid(p) == os.getpgid(leader.pid)]
    stopped = run("spark", "stop", "--config", str(config))
    assert stopped.exit_code == 0 and f"stopped (was pid {started['pid']}" in stopped.stdout
    assert not [p.pid for p in group if pid_alive(p.pid)], "stop left a process of the server's group"
    assert not (Path(started["connect_dir"]) / STATE_FILE).exists()
    assert "stopped" in run("spark", "status", "--config", str(config)).stdout
    assert "no Spark Connect server running" in run("spark", "stop", "--config", str(config)).stdout


def _pgid(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except (ProcessLookupError, PermissionError):
        return None


def test_a_busy_port_fails_fast_with_one_line(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = write_config(tmp_path / "kprio.yaml", tmp_path / "connect", port)
        result = run("spark", "start", "--config", str(config))
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"kprio: error: port {port} is already in use by another process: choose another with --port "
        "(or spark.connect_port), or stop what listens there (kprio spark start) [spark_connect_server]"
    ]


def test_a_server_that_cannot_start_reports_the_log(tmp_path):
    # A master Spark refuses ("Master must either be yarn or start with spark, k8s, or local") is refused when the
    # configuration loads, before any JVM starts.
    config = write_config(tmp_path / "kprio.yaml", tmp_path / "connect", free_port(), master="nonsense://x")
    result = run("spark", "start", "--config", str(config), "--timeout", "120")
    assert result.exit_code == 1 and "spark.master: 'nonsense://x' is not a master URL Spark accepts" in result.stderr
    assert not (tmp_path / "connect").exists()
    # A JVM that cannot start at all: its own words and the log, in one line.
    config = write_config(tmp_path / "kprio.yaml", tmp_path / "connect", free_port(),
                          conf={"spark.driver.memory": "1x"})
    result = run("spark", "start", "--config", str(config), "--timeout", "120")
    assert result.exit_code == 1
    line = result.stderr.strip()
    assert line.startswith("kprio: error: Spark Connect server exited with code 1 while starting")
    assert "Invalid maximum heap size: -Xmx1x" in line and "server.log" in line, line
    assert not (tmp_path / "connect" / STATE_FILE).exists()


def test_a_stale_state_file_is_cleaned(tmp_path):
    connect_dir = tmp_path / "connect"
    connect_dir.mkdir()
    gone = psutil.Popen(["true"])
    gone.wait()
    (connect_dir / STATE_FILE).write_text(json.dumps({"pid": gone.pid, "port": 1, "created_at": 0}))
    server = SparkConnectServer(SparkSettings(connect_dir=str(connect_dir), connect_port=free_port()))
    assert not server.status().running
    assert server.stop() is None and not (connect_dir / STATE_FILE).exists()


def test_a_server_whose_python_workers_cannot_start_fails_at_start_naming_the_cause(tmp_path, child_spark_conf):
    """The warm-up job runs on the server's Python workers: a broken worker Python fails the start, not the first drain."""
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'no python here' >&2\nexit 3\n")
    python.chmod(0o755)
    config = write_config(tmp_path / "kprio.yaml", tmp_path / "connect", free_port(), conf=dict(child_spark_conf))
    result = runner.invoke(app, ["spark", "start", "--config", str(config), "--timeout", "120"],
                           env={"PYSPARK_PYTHON": str(python)})
    if result.exit_code == 0:
        run("spark", "stop", "--config", str(config))
    assert result.exit_code == 1, result.output
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("kprio: error: the Spark Connect server on port") and "warm-up job" in line, line
    assert "the Python worker said: no python here" in line, line
    assert "server.log" in line and line.endswith("[spark_connect_server]"), line
    assert not (tmp_path / "connect" / STATE_FILE).exists()  # stopped: no server is left running
    assert "stopped" in run("spark", "status", "--config", str(config)).stdout
