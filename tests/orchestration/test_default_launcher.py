"""Dagster's DefaultRunLauncher stays a choice (delete the ``run_launcher`` block of the shipped dagster.yaml): a run of
``drain_job`` it launches executes in a new ``dagster api execute_run`` process of the code server, with its own
imports and Spark, and drains, checks and commits its batch as a run on a warm worker does.

The run is launched as a user's script would, with Dagster's own CLI (``dagster job launch``) against a code server
(``dagster api grpc``) on a home whose dagster.yaml has no ``run_launcher`` block and Dagster's DefaultRunCoordinator
(no queue: no daemon needed to start it). The daemon's own path on the warm workers is tests/daemon's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml

from orchestration.dagster.sensors import tick
from orchestration.services.process import free_port, port_open, wait_for
from tests.orchestration.conservation import conservation, lag
from tests.orchestration.test_recovery import child_config

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_a_run_of_the_default_launcher_drains_checks_and_commits_its_batch(
        make_topic, kprio_env, tmp_path, spark, child_spark):
    topic = make_topic(priorities=2, partitions=1, records={1: 10, 0: 20}, schema={"i": "long", "amount": "double"})
    env = kprio_env(topic)
    config = child_config(env, tmp_path, child_spark)
    home = tmp_path / "home"
    process_env = {**os.environ, "DAGSTER_HOME": str(home), "KPRIO_CONFIG": str(config), "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-m", "orchestration.cli", "instance", "init", "--home", str(home), "--config",
                    str(config)], env=process_env, check=True, capture_output=True, timeout=300)
    settings = yaml.safe_load((home / "dagster.yaml").read_text())
    assert settings.pop("run_launcher")["class"] == "WarmRunLauncher", "kprio's launcher is the shipped default"
    settings.pop("run_queue")
    settings["run_coordinator"] = {"module": "dagster._core.run_coordinator", "class": "DefaultRunCoordinator"}  # (a dagster.yaml value, as Dagster documents it)
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings))

    with dg.DagsterInstance.from_config(str(home)) as instance:
        [request] = tick(instance, env.edge, env.ledger, env.config).requests
        instance.add_dynamic_partitions("kprio_batches", [request.partition_key])
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "dagster", "api", "grpc", "-m", "orchestration.definitions", "-h", "127.0.0.1",
             "-p", str(port)], env=process_env, cwd=tmp_path, stdout=(tmp_path / "server.log").open("wb"),
            stderr=subprocess.STDOUT, start_new_session=True)
        try:
            assert wait_for(lambda: port_open("127.0.0.1", port), 120, interval_s=0.2)
            tags = {**request.tags, "dagster/partition": request.partition_key}
            launched = subprocess.run(
                [sys.executable, "-m", "dagster", "job", "launch", "--grpc-host", "127.0.0.1", "--grpc-port",
                 str(port), "-j", "drain_job", "--tags", json.dumps(tags)], env=process_env, cwd=tmp_path,
                capture_output=True, text=True, timeout=300)
            assert launched.returncode == 0, launched.stdout + launched.stderr
            [run] = instance.get_runs()
            assert wait_for(lambda: instance.get_run_by_id(run.run_id).is_finished, 300, interval_s=0.5), \
                (tmp_path / "server.log").read_text(errors="replace")[-3000:]
            done = instance.get_run_by_id(run.run_id)
            assert done.status is dg.DagsterRunStatus.SUCCESS, (tmp_path / "server.log").read_text()[-3000:]
            assert "kprio/runner" not in done.tags, "no warm worker: a process of its own"
            said = [e.message for e in instance.all_logs(run.run_id) if e.message]
            assert any(m.startswith("Started process for run (pid:") for m in said), said
        finally:
            server.terminate()
            server.wait(timeout=60)
    assert env.ledger.batches.get(request.partition_key).state.value == "committed"
    assert lag(topic, env.edge) == {1: 0, 0: 0}
    assert conservation(env.config, topic, env.edge).ok
