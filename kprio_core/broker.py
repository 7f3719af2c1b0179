"""The embedded Kafka broker: the pinned noida-db binary run detached, with kprio's state in its data dir.

The broker process writes its output to ``<data_dir>/broker.log``; kprio keeps its own state
(pid, port) in ``<data_dir>/kprio-broker.json``. A state file whose pid is gone (a killed
broker) is stale: it is removed and never blocks the next start.

>>> b = EmbeddedBroker("/tmp/kprio-doc-broker", port=19092)
>>> b.bootstrap
'127.0.0.1:19092'
>>> b.status().running
False
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kprio_core.errors import BrokerProcessError

DEFAULT_DATA_DIR = Path("kprio-data/broker")
DEFAULT_PORT = 9092
STATE_FILE = "kprio-broker.json"
LOG_FILE = "broker.log"
NOIDA_CONTROL_FILE = "noida.control.json"


def noida_binary() -> Path:
    """The noida-db executable shipped inside the noida_db wheel."""
    import noida_db

    path = Path(noida_db.__file__).parent / ("noida-db.exe" if os.name == "nt" else "noida-db")
    if not path.is_file():
        raise BrokerProcessError(f"noida-db binary not found at {path}: reinstall the noida-db package")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _is_noida(pid: int) -> bool:
    """Guard against pid reuse: only signal a process that really is noida-db."""
    import psutil

    try:
        return any("noida-db" in part for part in psutil.Process(pid).cmdline()[:1])
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def wait_for(condition: Callable[[], bool], timeout_s: float, interval_s: float = 0.05) -> bool:
    """Evaluate ``condition`` until it holds or ``timeout_s`` passes; True when it held."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(interval_s, left))  # poll interval, the loop ends on the condition


def answers_metadata(bootstrap: str, timeout_s: float) -> bool:
    """True when a Kafka broker at ``bootstrap`` answers a metadata request within ``timeout_s``."""
    import logging

    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": logging.getLogger("kprio.broker")})
    try:
        admin.list_topics(timeout=timeout_s)
        return True
    except KafkaException:
        return False


@dataclass(frozen=True)
class BrokerStatus:
    """What runs in a data dir: the pid and port when a broker is up."""

    data_dir: Path
    running: bool
    pid: int | None = None
    port: int | None = None
    host: str = "127.0.0.1"
    log: Path | None = None

    @property
    def bootstrap(self) -> str | None:
        return f"{self.host}:{self.port}" if self.port is not None else None

    def describe(self) -> str:
        if not self.running:
            return f"embedded broker: stopped (data dir {self.data_dir})"
        return f"embedded broker: running at {self.bootstrap} (pid {self.pid}, data dir {self.data_dir})"


class EmbeddedBroker:
    """One noida-db Kafka broker on ``port`` (None or 0: a free one) persisting to ``data_dir``."""

    def __init__(self, data_dir: str | os.PathLike = DEFAULT_DATA_DIR, port: int | None = None, *,
                 host: str = "127.0.0.1", start_timeout_s: float = 30.0, stop_timeout_s: float = 10.0) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.host = host
        self.port = port or None  # 0 would let the broker pick a port we could not learn
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._process: subprocess.Popen | None = None
        self._log_from = 0

    @property
    def bootstrap(self) -> str:
        port = self.port if self.port is not None else self._state().get("port")
        if port is None:
            raise BrokerProcessError(f"embedded broker in {self.data_dir} has no port yet: start it first")
        return f"{self.host}:{port}"

    @property
    def state_path(self) -> Path:
        return self.data_dir / STATE_FILE

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE

    def _state(self) -> dict[str, Any]:
        try:
            return json.loads(self.state_path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    def _clear_stale(self) -> None:
        """Remove state left by a broker that is gone, so it cannot block the next start."""
        for name in (STATE_FILE, NOIDA_CONTROL_FILE):
            path = self.data_dir / name
            try:
                pid = int(json.loads(path.read_text())["pid"])
            except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError, ValueError):
                path.unlink(missing_ok=True)
                continue
            if pid_alive(pid) and _is_noida(pid):
                if name == NOIDA_CONTROL_FILE and not self.state_path.exists():
                    raise BrokerProcessError(
                        f"a noida-db (pid {pid}) not started by kprio already runs in {self.data_dir}: "
                        f"stop it with `noida-db down --data-dir {self.data_dir}`"
                    )
                continue
            path.unlink(missing_ok=True)

    def status(self) -> BrokerStatus:
        """Running when kprio's state file names a live noida-db process."""
        state = self._state()
        pid = state.get("pid")
        running = pid is not None and pid_alive(int(pid)) and _is_noida(int(pid))
        return BrokerStatus(
            data_dir=self.data_dir,
            running=running,
            pid=int(pid) if running else None,
            port=int(state["port"]) if running and "port" in state else None,
            host=state.get("host", self.host),
            log=self.log_path,
        )

    def start(self) -> EmbeddedBroker:
        """Start the broker detached and wait until it answers metadata; a running one is reused."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._clear_stale()
        current = self.status()
        if current.running:
            if self.port is not None and current.port != self.port:
                raise BrokerProcessError(
                    f"an embedded broker already runs in {self.data_dir} on port {current.port}, "
                    f"not {self.port}: stop it first (kprio broker stop --data-dir {self.data_dir})"
                )
            self.port = current.port
            return self
        port = self.port if self.port is not None else free_port(self.host)
        cmd = [str(noida_binary()), "start", "--only", "kafka", "--host", self.host,
               "--kafka-port", str(port), "--data-dir", str(self.data_dir)]
        with open(self.log_path, "ab") as log:
            self._log_from = log.tell()  # report only this run's lines if it fails
            # Own session: the broker outlives the CLI that started it and ignores its Ctrl-C.
            self._process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True, cwd=self.data_dir)
        self.port = port
        state = {"pid": self._process.pid, "port": port, "host": self.host, "started_ms": int(time.time() * 1000)}
        self.state_path.write_text(json.dumps(state))
        bootstrap = f"{self.host}:{port}"

        def ready() -> bool:
            if self._process is not None and self._process.poll() is not None:
                return True  # exited: reported below
            return answers_metadata(bootstrap, timeout_s=1.0)

        up = wait_for(ready, self.start_timeout_s)
        if self._process.poll() is not None:
            code = self._process.returncode
            self.state_path.unlink(missing_ok=True)
            raise BrokerProcessError(
                f"embedded broker exited with code {code} while starting on {bootstrap}: {self._log_tail()}"
            )
        if not up:
            self.stop()
            raise BrokerProcessError(
                f"embedded broker on {bootstrap} did not answer metadata within {self.start_timeout_s:g} s "
                f"(log: {self.log_path})"
            )
        return self

    def stop(self) -> bool:
        """Stop the broker (SIGTERM, then SIGKILL after the deadline); True when one was running."""
        current = self.status()
        if not current.running or current.pid is None:
            self._clear_stale()
            return False
        pid = current.pid
        self._signal(pid, signal.SIGTERM)
        if not wait_for(lambda: self._gone(pid), self.stop_timeout_s):
            self._signal(pid, signal.SIGKILL)
            if not wait_for(lambda: self._gone(pid), self.stop_timeout_s):
                raise BrokerProcessError(f"embedded broker pid {pid} in {self.data_dir} survived SIGKILL")
        self.state_path.unlink(missing_ok=True)
        (self.data_dir / NOIDA_CONTROL_FILE).unlink(missing_ok=True)
        return True

    def _signal(self, pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass

    def _gone(self, pid: int) -> bool:
        # Reap our own child, else it lingers as a zombie.
        if self._process is not None and self._process.pid == pid:
            self._process.poll()
        return not pid_alive(pid)

    def _log_tail(self, lines: int = 5) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(self._log_from)
                text = log.read().decode(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        useful = [line for line in text if "GLIBC" not in line]
        return " | ".join(useful[-lines:]) or "(empty log)"

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
