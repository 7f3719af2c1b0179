"""The embedded Kafka broker: the noida-db binary of the noida-db wheel, run detached in a data dir.

kprio keeps no state file of its own: noida-db writes ``<data_dir>/noida.control.json`` (its
pid, the port and token of its control API) while it runs, and that API's ``/v1/status`` says
on which port its Kafka service listens. A control file whose pid is gone (a killed broker)
is stale: it is removed and never blocks the next start. The broker's output goes to
``<data_dir>/broker.log``. A noida-db someone started by hand in the same data dir (``noida-db
up``) is the same broker to kprio: ``status`` shows it, ``stop`` stops it.

>>> b = EmbeddedBroker("/tmp/kprio-doc-broker", port=19092)
>>> b.bootstrap
'127.0.0.1:19092'
>>> b.status().running
False
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

from kprio_core.errors import KprioError
from orchestration.services.process import free_port, live_process, log_tail, spawn_detached, stop_process, wait_for

DEFAULT_DATA_DIR = Path("kprio-data/broker")
DEFAULT_PORT = 9092
LOG_FILE = "broker.log"
NOIDA_CONTROL_FILE = "noida.control.json"


class BrokerProcessError(KprioError):
    """The embedded broker could not be started, reached or stopped."""

    code = "embedded_broker"


def noida_binary() -> Path:
    """The noida-db executable shipped inside the noida_db wheel."""
    import noida_db

    path = Path(noida_db.__file__).parent / ("noida-db.exe" if os.name == "nt" else "noida-db")
    if not path.is_file():
        raise BrokerProcessError(f"noida-db binary not found at {path}: reinstall the noida-db package")
    if not os.access(path, os.X_OK):
        path.chmod(0o755)
    return path


def answers_metadata(bootstrap: str, timeout_s: float) -> bool:
    """True when a Kafka broker at ``bootstrap`` answers a metadata request within ``timeout_s``."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": logging.getLogger("kprio.broker")})
    try:
        admin.list_topics(timeout=timeout_s)
        return True
    except KafkaException:
        return False


@dataclass(frozen=True)
class NoidaControl:
    """What ``noida.control.json`` records about a running noida-db server."""

    pid: int
    control_port: int
    token: str

    @classmethod
    def read(cls, data_dir: Path) -> NoidaControl | None:
        """The control file of ``data_dir``; None when there is none (or it is unreadable)."""
        try:
            doc = json.loads((data_dir / NOIDA_CONTROL_FILE).read_text())
            return cls(pid=int(doc["pid"]), control_port=int(doc["port"]), token=str(doc.get("token", "")))
        except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError, ValueError):
            return None

    def process(self) -> psutil.Process | None:
        """The noida-db process, when it still runs (a reused pid is not noida-db)."""
        return live_process(self.pid, command_has="noida-db")

    def kafka_listener(self, timeout_s: float = 2.0) -> tuple[str, int] | None:
        """(host, port) of the server's Kafka service from its control API; None when it is not running."""
        request = urllib.request.Request(f"http://127.0.0.1:{self.control_port}/v1/status",
                                         headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # noqa: S310 - loopback only
                doc = json.loads(answer.read())
        except (OSError, urllib.error.URLError, json.JSONDecodeError):
            return None
        for service in doc.get("services", []):
            if service.get("name") == "kafka" and service.get("state") == "running":
                return str(service.get("host") or "127.0.0.1"), int(service["port"])
        return None


@dataclass(frozen=True)
class BrokerStatus:
    """What runs in a data dir: the pid and Kafka port when a broker is up."""

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
        where = self.bootstrap or "an unknown port (its Kafka service is not running)"
        return f"embedded broker: running at {where} (pid {self.pid}, data dir {self.data_dir})"


class EmbeddedBroker:
    """One noida-db Kafka broker on ``port`` (None or 0: a free one) persisting to ``data_dir``."""

    def __init__(self, data_dir: str | os.PathLike = DEFAULT_DATA_DIR, port: int | None = None, *,
                 host: str = "127.0.0.1", start_timeout_s: float = 30.0, stop_timeout_s: float = 10.0) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.host = host
        self.port = port or None  # 0 would let the broker pick a port we could not learn
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s

    @property
    def bootstrap(self) -> str:
        port = self.port if self.port is not None else self.status().port
        if port is None:
            raise BrokerProcessError(f"embedded broker in {self.data_dir} has no port yet: start it first")
        return f"{self.host}:{port}"

    @property
    def control_path(self) -> Path:
        return self.data_dir / NOIDA_CONTROL_FILE

    @property
    def log_path(self) -> Path:
        return self.data_dir / LOG_FILE

    def status(self) -> BrokerStatus:
        """Running when noida-db's control file names a live noida-db process."""
        control = NoidaControl.read(self.data_dir)
        if control is None or control.process() is None:
            return BrokerStatus(data_dir=self.data_dir, running=False, log=self.log_path)
        listener = control.kafka_listener()
        host, port = listener if listener is not None else (self.host, None)
        return BrokerStatus(data_dir=self.data_dir, running=True, pid=control.pid, port=port, host=host,
                            log=self.log_path)

    def _clear_stale(self) -> None:
        """Remove a control file left by a broker that is gone, so it cannot block the next start."""
        control = NoidaControl.read(self.data_dir)
        if control is None or control.process() is None:
            self.control_path.unlink(missing_ok=True)

    def start(self) -> EmbeddedBroker:
        """Start the broker detached and wait until it answers metadata; a running one is reused."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._clear_stale()
        current = self.status()
        if current.running:
            if current.port is None:
                raise BrokerProcessError(
                    f"a noida-db server (pid {current.pid}) runs in {self.data_dir} without its Kafka service: "
                    f"start it with `noida-db start kafka --data-dir {self.data_dir}` or stop that server"
                )
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
        process, log_from = spawn_detached(cmd, self.log_path, cwd=self.data_dir)
        self.port = port
        bootstrap = f"{self.host}:{port}"
        # Exited (reported below) or answering: either ends the wait.
        up = wait_for(lambda: process.poll() is not None or answers_metadata(bootstrap, timeout_s=1.0),
                      self.start_timeout_s)
        if process.poll() is not None:
            self._clear_stale()
            raise BrokerProcessError(
                f"embedded broker exited with code {process.returncode} while starting on {bootstrap}: "
                f"{log_tail(self.log_path, log_from, skip=_noise)}"
            )
        if not up:
            self._stop(process)
            raise BrokerProcessError(
                f"embedded broker on {bootstrap} did not answer metadata within {self.start_timeout_s:g} s "
                f"(log: {self.log_path}): {log_tail(self.log_path, log_from, skip=_noise)}"
            )
        return self

    def stop(self) -> bool:
        """Stop the broker (SIGTERM, then SIGKILL after the deadline); True when one was running."""
        control = NoidaControl.read(self.data_dir)
        process = control.process() if control is not None else None
        if process is None:
            self._clear_stale()
            return False
        self._stop(process)
        return True

    def _stop(self, process: psutil.Process) -> None:
        try:
            stop_process(process, self.stop_timeout_s)
        except TimeoutError as err:
            raise BrokerProcessError(f"embedded broker in {self.data_dir} could not be stopped: {err}") from None
        # noida-db removes its control file on SIGTERM, not when it was killed.
        self.control_path.unlink(missing_ok=True)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _noise(line: str) -> bool:
    # The wheel's binary warns about the host's glibc version on every start; never the cause.
    return "GLIBC" in line
