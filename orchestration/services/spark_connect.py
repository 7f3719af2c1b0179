"""A long-lived local Spark Connect server, so that drain runs reuse one warm Spark.

``kprio spark start`` runs pyspark's own ``SparkConnectServer`` via ``spark-submit`` (pyspark as ``SPARK_HOME``),
detached in its own process group, output in ``<connect_dir>/server.log``, with ``--master spark.master`` and
:func:`server_conf`. Its Python workers run this interpreter (``PYSPARK_PYTHON``), so they import kprio and the
handler. Drains reach it with ``spark.remote: sc://localhost:<port>``.

A fresh server has a cold JVM and no Python worker: the first drain paid half a minute for that on 2 cores. So
:meth:`SparkConnectServer.start` ends with :meth:`~SparkConnectServer.warm_up`, one small job on the drains' shared
session: drains find it warm, and a server whose workers cannot import kprio fails at ``kprio spark start``,
naming the cause, instead of at the first drain.

Spark records nothing about the server, so kprio keeps ``<connect_dir>/server.json`` (pid, port, create time to
tell a reused pid apart); a file whose process is gone is stale, removed by the next start or stop.

>>> server = SparkConnectServer(SparkSettings(connect_dir="/tmp/kprio-doc-connect", connect_port=15999))
>>> server.url, server.status().running
('sc://localhost:15999', False)
>>> server_conf(SparkSettings(master="local[2]", conf={"spark.executor.memory": "2g"}), 15002)[:4]
['--conf', 'spark.connect.grpc.binding.port=15002', '--conf', 'spark.connect.grpc.binding.address=127.0.0.1']
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil

from kprio_core.config import SparkSettings
from kprio_core.errors import KprioError
from orchestration.services.process import (
    StateFile,
    live_process,
    log_tail,
    port_open,
    spawn_detached,
    stop_process,
    wait_for,
)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
STATE_FILE = "server.json"
LOG_FILE = "server.log"
BIND_ADDRESS = "127.0.0.1"
"""Where the server listens unless spark.conf sets spark.connect.grpc.binding.address: a local
server takes no connections from other machines by default (Spark Connect has no auth)."""


class SparkConnectServerError(KprioError):
    """The Spark Connect server could not be started, reached or stopped."""

    code = "spark_connect_server"


def spark_home() -> Path:
    """pyspark's package directory: it holds bin/spark-submit and the jars, Connect's included."""
    import pyspark

    return Path(pyspark.__file__).parent


def server_conf(settings: SparkSettings, port: int) -> list[str]:
    """The server's ``--conf`` arguments: port and bind address, kprio's session defaults, spark.conf; ``spark.jars``
    gets Spark's Kafka connector when cached (the ``native`` reader), and a local python-reader server the lean
    driver JVM (:func:`spark_jobs.session.lean_driver`) unless spark.conf's Java options say otherwise."""
    from spark_jobs.connector import spark_connector_jars
    from spark_jobs.session import lean_driver, session_conf, with_jars

    conf = {"spark.connect.grpc.binding.port": str(port), "spark.connect.grpc.binding.address": BIND_ADDRESS,
            "spark.pyspark.python": sys.executable}
    conf.update(session_conf(settings))  # kprio's defaults, then the user's spark.conf
    conf["spark.connect.grpc.binding.port"] = str(port)  # --port / connect_port always wins
    conf = lean_driver(with_jars(conf, [str(jar) for jar in spark_connector_jars() or ()]), settings)
    return [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]


def server_env(settings: SparkSettings) -> dict[str, str]:
    """The server's environment: pyspark as SPARK_HOME, foreground, workers on this Python, a local one's LOCAL_ENV."""
    import kprio_core
    from spark_jobs.session import local_env

    env = dict(os.environ)
    # Python workers unpickle kprio's data source and handler: they import this process's kprio, a checkout too.
    source_root = str(Path(kprio_core.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source_root, env.get("PYTHONPATH", "")) if p)
    env.update({
        "SPARK_HOME": str(spark_home()),
        "SPARK_NO_DAEMONIZE": "1",  # no spark-daemon.sh fork: the pid we start is the server
        "SPARK_CONNECT_MODE": "0",  # as sbin/start-connect-server.sh: a classic driver, not a Connect client
        "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON") or sys.executable,
    })
    env.update(local_env(settings, env))
    return env


@dataclass(frozen=True)
class ConnectStatus:
    """Whether kprio's Spark Connect server runs, where, and for how long."""

    connect_dir: Path
    running: bool
    port: int
    pid: int | None = None
    started_at: float | None = None
    answering: bool = False
    log: Path | None = None

    @property
    def url(self) -> str:
        return f"sc://localhost:{self.port}"

    def uptime_s(self, now: float) -> float | None:
        return None if self.started_at is None else max(0.0, now - self.started_at)

    def describe(self, now: float) -> str:
        if not self.running:
            return f"spark connect server: stopped (dir {self.connect_dir})"
        state = "" if self.answering else ", not answering yet"
        return (f"spark connect server: running at {self.url} (pid {self.pid}, up {_duration(self.uptime_s(now))}"
                f"{state}; log {self.log})")

    def to_doc(self, now: float) -> dict[str, object]:
        return {"running": self.running, "url": self.url if self.running else None, "port": self.port,
                "pid": self.pid, "uptime_s": self.uptime_s(now), "answering": self.answering,
                "connect_dir": str(self.connect_dir), "log": str(self.log)}


class SparkConnectServer:
    """kprio's Spark Connect server for ``settings`` (``connect_dir``, ``connect_port``, master, conf)."""

    def __init__(self, settings: SparkSettings, *, port: int | None = None, start_timeout_s: float = 180.0,
                 stop_timeout_s: float = 30.0) -> None:
        self.settings = settings
        self.connect_dir = Path(settings.connect_dir).absolute()
        self.port = port or settings.connect_port
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s

    @property
    def url(self) -> str:
        return f"sc://localhost:{self.port}"

    @property
    def state_path(self) -> Path:
        return self.connect_dir / STATE_FILE

    @property
    def log_path(self) -> Path:
        return self.connect_dir / LOG_FILE

    @property
    def _state_file(self) -> StateFile:
        return StateFile(self.state_path)

    def _state(self) -> dict:
        return self._state_file.read() or {}

    def _process(self) -> tuple[psutil.Process | None, dict]:
        state = self._state()
        proc = live_process(state.get("pid"), created_at=state.get("created_at"))
        return proc, state

    def status(self) -> ConnectStatus:
        """Running when the state file names a live process; ``answering`` when its port accepts connections."""
        proc, state = self._process()
        if proc is None:
            return ConnectStatus(self.connect_dir, running=False, port=self.port, log=self.log_path)
        port = int(state["port"])
        return ConnectStatus(self.connect_dir, running=True, port=port, pid=proc.pid,
                             started_at=state.get("created_at"), answering=port_open("127.0.0.1", port),
                             log=self.log_path)

    def start(self) -> tuple[ConnectStatus, bool]:
        """Start the server and wait until its port answers; (status, False) when one already ran."""
        self.connect_dir.mkdir(parents=True, exist_ok=True)
        current = self.status()
        if current.running:
            if current.port != self.port:
                raise SparkConnectServerError(
                    f"a Spark Connect server started by kprio already runs from {self.connect_dir} on port "
                    f"{current.port}, not {self.port}: stop it first (kprio spark stop)"
                )
            if not wait_for(lambda: port_open("127.0.0.1", self.port), self.start_timeout_s, interval_s=0.25):
                raise SparkConnectServerError(self._not_answering(0))
            return self.status(), False
        self._state_file.remove()  # stale: its process is gone
        if port_open("127.0.0.1", self.port):
            raise SparkConnectServerError(
                f"port {self.port} is already in use by another process: choose another with --port "
                f"(or spark.connect_port), or stop what listens there"
            )
        cmd = [str(spark_home() / "bin" / "spark-submit"), "--class", SERVER_CLASS,
               "--name", "kprio Spark Connect server", "--master", self.settings.master,
               *server_conf(self.settings, self.port)]
        process, log_from = spawn_detached(cmd, self.log_path, env=server_env(self.settings), cwd=self.connect_dir)
        self._state_file.write({"pid": process.pid, "port": self.port, "created_at": process.create_time(),
                                "command": cmd})
        up = wait_for(lambda: process.poll() is not None or port_open("127.0.0.1", self.port),
                      self.start_timeout_s, interval_s=0.25)
        if process.poll() is not None:
            self._state_file.remove()
            raise SparkConnectServerError(
                f"Spark Connect server exited with code {process.returncode} while starting on port {self.port}: "
                f"{log_tail(self.log_path, log_from, lines=3, skip=_noise)} (log: {self.log_path})"
            )
        if not up:
            message = self._not_answering(log_from)
            self._stop(process)
            raise SparkConnectServerError(message)
        self.warm_up()
        return self.status(), True

    def warm_up(self) -> None:
        """Run :mod:`spark_jobs.warm_up` on the shared session (``spark.remote``, else this server) in a child process
        (a Connect client cannot start beside a classic SparkSession); a failure stops the server, useless to a drain,
        and raises :class:`SparkConnectServerError` with the job's one line."""
        remote = self.settings.remote or self.url
        try:
            done = subprocess.run([sys.executable, "-m", "spark_jobs.warm_up", remote], capture_output=True, text=True,
                                  env=server_env(self.settings), timeout=self.start_timeout_s, check=False)
            said = (done.stderr.strip().splitlines() or ["no output"])[-1] if done.returncode else None
        except subprocess.TimeoutExpired:
            said = f"it did not end within {self.start_timeout_s:.0f} s"
        if said is None:
            return
        proc, _ = self._process()
        if proc is not None:
            self._stop(proc)
        raise SparkConnectServerError(
            f"the Spark Connect server on port {self.port} started but could not run kprio's warm-up job "
            f"(its Python workers import kprio from this interpreter): {said} (log: {self.log_path})"
        )

    def stop(self) -> ConnectStatus | None:
        """Stop the server and every process of its group; the status it had, None when none ran."""
        proc, _ = self._process()
        if proc is None:
            self._state_file.remove()
            return None
        was = self.status()
        self._stop(proc)
        return was

    def _stop(self, proc: psutil.Process) -> None:
        try:
            # SIGTERM runs the JVM's shutdown hooks (SparkContext.stop); its Python workers share its group.
            stop_process(proc, self.stop_timeout_s, whole_group=True)
        except TimeoutError as err:
            raise SparkConnectServerError(f"Spark Connect server from {self.connect_dir} could not be stopped: "
                                          f"{err}") from None
        self._state_file.remove()

    def _not_answering(self, log_from: int) -> str:
        return (f"Spark Connect server did not answer on port {self.port} within {self.start_timeout_s:g} s: "
                f"{log_tail(self.log_path, log_from, lines=3, skip=_noise)} (log: {self.log_path})")

    def __enter__(self) -> SparkConnectServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _noise(line: str) -> bool:
    # Spark's INFO chatter and stack frames say nothing about why a start failed; exception lines do.
    stripped = line.strip()
    return " INFO " in line or stripped.startswith(("at ", "... ")) or stripped.endswith(" more")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
