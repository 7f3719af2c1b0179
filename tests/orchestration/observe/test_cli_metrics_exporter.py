"""``kprio metrics``: the endpoint to scrape where the Dagster daemon or Airflow drain (processes of their own).

The exporter runs as a process of its own on the session's broker and a ledger; a drain runs elsewhere (here,
the loop in the test's process, as the daemon's runs would): the exporter's scrape shows the backlog before,
then zero, every committed batch counted from the ledger with its records, and each priority's verdict OK.
SIGTERM stops it, exit 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kprio_core.ledger import BatchState
from kprio_core.lifecycle.loop import Until
from orchestration.dagster import drain_loop
from orchestration.services.process import free_port

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster]

REPO = Path(__file__).resolve().parents[3]
RECORDS = {2: 30, 1: 60, 0: 90}


def samples(url: str) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def total(found: dict, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in found.items() if n == name and set(labels.items()) <= ls)


def wait_for(url: str, holds, timeout_s: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = samples(url)
            if holds(found):
                return found
        except OSError:
            found = {}
        assert time.monotonic() < deadline, sorted(found.items())[:40]
        time.sleep(0.3)


def test_the_exporter_counts_what_other_processes_drain(make_topic, kprio_env, dagster_instance, tmp_path):
    topic = make_topic(priorities=3, partitions=1, records=RECORDS, base_ts_ms=int(time.time() * 1000))
    env = kprio_env(topic, planner={"record_budget": 80, "target_batch_s": None})
    config = tmp_path / "kprio.yaml"
    config.write_text(yaml.safe_dump(env.config.model_dump(mode="json", by_alias=True,
                                                           exclude={"kafka": {"secrets"}})))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "orchestration.cli", "metrics", "--config", str(config),
                             "--port", str(port), "--interval", "0.5"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        before = wait_for(url, lambda f: total(f, "kprio_backlog_records", topic=topic.name) == sum(RECORDS.values()))
        assert total(before, "kprio_records_drained_total") == 0

        report = drain_loop.drain(env.defs, dagster_instance, config=env.config, until=Until.EMPTY,
                                  log_level="WARNING")
        assert report.ok, report.stopped
        committed = env.ledger.batches(topic.name, states=[BatchState.COMMITTED])
        after = wait_for(url, lambda f: total(f, "kprio_backlog_records", topic=topic.name) == 0
                         and total(f, "kprio_batches_total", outcome="committed") == len(committed))
        assert len(committed) >= 2
        for p, n in RECORDS.items():
            assert total(after, "kprio_records_drained_total", topic=topic.name, priority=str(p)) == n
        assert total(after, "kprio_produce_to_commit_latency_seconds_count", topic=topic.name) >= len(committed)
        assert total(after, "kprio_lag_verdict", topic=topic.name, state="OK") == 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert f"kprio metrics: serving {url}" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
