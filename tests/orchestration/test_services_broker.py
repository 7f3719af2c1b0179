"""The embedded noida-db broker: start, status, stop, stale state, port conflicts.

Each test runs its own EmbeddedBroker in its own data dir, so the session broker is untouched.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from orchestration.services.broker import (
    NOIDA_CONTROL_FILE,
    BrokerProcessError,
    EmbeddedBroker,
    answers_metadata,
    noida_binary,
)
from orchestration.services.process import pid_alive, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.slow]


@pytest.fixture
def broker(tmp_path):
    b = EmbeddedBroker(tmp_path / "broker", start_timeout_s=60)
    try:
        yield b
    finally:
        b.stop()


def test_start_status_stop(broker):
    broker.start()
    status = broker.status()
    assert status.running and status.bootstrap == broker.bootstrap
    assert answers_metadata(broker.bootstrap, timeout_s=5)
    assert (broker.data_dir / "broker.log").exists()
    pid = status.pid
    assert broker.stop() is True
    assert not pid_alive(pid), "stop left the broker process behind"
    assert not (broker.data_dir / NOIDA_CONTROL_FILE).exists()
    assert sorted(p.name for p in broker.data_dir.iterdir() if p.suffix == ".json") == ["kafka.json"], (
        "kprio keeps no state file of its own beside noida-db's")
    assert not broker.status().running
    assert broker.stop() is False  # stopping a stopped broker is a no-op


def test_start_twice_reuses_the_running_broker(broker):
    first = broker.start().status().pid
    again = EmbeddedBroker(broker.data_dir)
    assert again.start().status().pid == first
    assert again.bootstrap == broker.bootstrap


def test_another_port_for_a_running_data_dir_is_refused(broker):
    broker.start()
    with pytest.raises(BrokerProcessError, match="already runs in"):
        EmbeddedBroker(broker.data_dir, port=broker.status().port + 1).start()


def test_a_killed_broker_does_not_block_the_next_start(broker):
    broker.start()
    pid = broker.status().pid
    os.kill(pid, signal.SIGKILL)  # our own broker, killed as a crash would
    assert wait_for(lambda: not pid_alive(pid), 10)
    assert (broker.data_dir / NOIDA_CONTROL_FILE).exists(), "a killed noida-db leaves its control file"
    assert not broker.status().running
    broker.start()
    assert broker.status().running and broker.status().pid != pid
    assert answers_metadata(broker.bootstrap, timeout_s=5)


def test_a_stale_state_file_with_a_dead_pid_is_cleaned_up(broker):
    broker.data_dir.mkdir(parents=True)
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(finished.stdout)
    (broker.data_dir / NOIDA_CONTROL_FILE).write_text(json.dumps({"pid": dead, "port": 1, "token": "x"}))
    assert not broker.status().running
    assert broker.stop() is False
    assert not (broker.data_dir / NOIDA_CONTROL_FILE).exists(), "stop left the stale control file"
    (broker.data_dir / NOIDA_CONTROL_FILE).write_text(json.dumps({"pid": dead, "port": 1, "token": "x"}))
    broker.start()
    assert broker.status().running and broker.status().pid != dead


def test_a_busy_port_fails_fast_with_the_broker_reason(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        b = EmbeddedBroker(tmp_path / "busy", port=port, start_timeout_s=60)
        with pytest.raises(BrokerProcessError, match=rf"port {port} is already in use"):
            b.start()
    assert not b.status().running


def test_context_manager_stops_on_exit(tmp_path):
    with EmbeddedBroker(tmp_path / "ctx") as b:
        pid = b.status().pid
        assert answers_metadata(b.bootstrap, timeout_s=5)
    assert not pid_alive(pid)


def test_noida_down_stops_a_broker_we_started(broker):
    """noida-db's own `down --data-dir` also works on our broker; our status then says stopped."""
    broker.start()
    pid = broker.status().pid
    done = subprocess.run([str(noida_binary()), "down", "--data-dir", str(broker.data_dir)],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert wait_for(lambda: not pid_alive(pid), 10), "noida-db down left the process running"
    assert not broker.status().running
