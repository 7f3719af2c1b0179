"""``kprio metrics``: the endpoint to scrape where the Dagster daemon or Airflow drain (processes of their own).

:func:`exporter` runs it as a process of its own on a test's broker topic and ledger while a drain runs
elsewhere (tests/orchestration/observe/test_lineage.py drains in the test's process, as the daemon's runs
would): its scrape shows the backlog before, then zero, every committed batch counted from the ledger with
its records, and each priority's verdict OK; SIGTERM stops it, exit 0. (A helper module, no test of its own:
the drain it watches is shared with the lineage test, one drain fewer.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from orchestration.services.process import free_port

REPO = Path(__file__).resolve().parents[3]


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


class Exporter:
    """A running ``kprio metrics`` process and what its endpoint showed before the drain."""

    def __init__(self, proc: subprocess.Popen, url: str, topic_name: str) -> None:
        self.proc, self.url, self.topic_name = proc, url, topic_name

    def finished(self, topic, records: dict[int, int], committed: int) -> None:
        """After a drain elsewhere: backlog 0, every committed batch counted with its records, verdicts OK."""
        after = wait_for(self.url, lambda f: total(f, "kprio_backlog_records", topic=topic.name) == 0
                         and total(f, "kprio_batches_total", outcome="committed") == committed)
        for p, n in records.items():
            assert total(after, "kprio_records_drained_total", topic=topic.name, priority=str(p)) == n
        assert total(after, "kprio_produce_to_commit_latency_seconds_count", topic=topic.name) >= committed
        assert total(after, "kprio_lag_verdict", topic=topic.name, state="OK") == topic.priorities
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=60) == 0
        assert f"kprio metrics: serving {self.url}" in self.proc.stdout.read()


@contextlib.contextmanager
def exporter(env, tmp_path: Path) -> Iterator[Exporter]:
    """``kprio metrics`` on ``env``'s config, started before a drain: it saw the whole backlog, nothing counted."""
    config = tmp_path / "kprio-exporter.yaml"
    config.write_text(yaml.safe_dump(env.config.model_dump(mode="json", by_alias=True,
                                                           exclude={"kafka": {"secrets"}})))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "orchestration.cli", "metrics", "--config", str(config),
                             "--port", str(port), "--interval", "0.5"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    url = f"http://127.0.0.1:{port}/metrics"
    name = env.config.topics[0].name
    try:
        backlog = env.edge.snapshot(env.config.topics[0], now_ms=0).total_backlog
        before = wait_for(url, lambda f: total(f, "kprio_backlog_records", topic=name) == backlog)
        assert backlog > 0 and total(before, "kprio_records_drained_total") == 0
        yield Exporter(proc, url, name)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
