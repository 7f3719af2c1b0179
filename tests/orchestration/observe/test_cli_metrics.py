"""``kprio drain --metrics-port / --metrics-host``: where the endpoint cannot listen is one line, before anything else.

The configuration's broker answers nothing: the metrics endpoint is opened first, so its failure is the one
said (exit 1, one line on stderr, its code), and no Spark, broker or ledger is touched.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]


def kprio(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    config = {"kafka": {"bootstrap_servers": "127.0.0.1:1", "timeout_s": 1},
              "topics": [{"name": "orders", "priorities": 3, "partitions": 2}],
              "ledger": {"url": f"sqlite:///{tmp_path}/ledger.db"}}
    (tmp_path / "kprio.yaml").write_text(yaml.safe_dump(config))
    return subprocess.run([sys.executable, "-m", "orchestration.cli", "drain", "--config", "kprio.yaml", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO), "DAGSTER_HOME": str(tmp_path / "home")})


def test_a_metrics_port_in_use_is_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = kprio(tmp_path, "--follow", "--metrics-port", str(port))
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr.strip() == (f"kprio: error: the metrics port {port} on 127.0.0.1 is in use by another process "
                                   "(--metrics-port / --metrics-host) [metrics_port_in_use]")
    assert not (tmp_path / "ledger.db").exists()


@pytest.mark.parametrize(("host", "says"), [
    ("192.0.2.1", "cannot listen on 192.0.2.1:"),  # TEST-NET-1: never an address of this host
    ("no-such-host.invalid", "is not a host name or address this host knows"),
])
def test_a_metrics_host_not_of_this_machine_is_one_line(tmp_path, host, says):
    done = kprio(tmp_path, "--follow", "--metrics-port", "0", "--metrics-host", host)
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert says in line and line.endswith("(--metrics-port / --metrics-host) [metrics_listen_failed]"), line
