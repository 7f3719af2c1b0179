"""How a warm worker's process comes to be: forked by this process's fork server, which imported what every run needs
once, into a session of its own with its pool's environment of the moment and its pool's output, and killed when its
pool's process dies.

The fork server is :mod:`multiprocessing`'s (one per process, started with the first worker and left when the process
ends); its imports (:data:`PRELOAD`) cost about 5 s of CPU, 2.6 of them Great Expectations', which every worker
started afresh paid before its Spark client: a forked worker is warm half a second after it is forked, and a worker
replaced after a kill or ``workers.max_runs`` does not hold its lane for seconds. The pool learns how a worker ended
(its exit status, the signal that killed it) from the fork server, as from a child of its own, and whether it still
runs from the process itself (:class:`Forked`): a fork server killed alone (the OOM killer, a person) takes no worker
with it, and the next fork starts a new one.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import signal
import socket
import sys
import threading
import weakref
from dataclasses import dataclass
from multiprocessing import reduction
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import psutil

from orchestration.dagster.workers.protocol import LogRoute

PRELOAD = ("orchestration.dagster.definitions", "orchestration.runtime.checks", "great_expectations",
           "spark_jobs.session", "spark_jobs.warm_up", "pyspark.sql.connect.session",
           "orchestration.dagster.workers.worker",
           # What a worker's first run imported on first use: the instance's storage, the run's execution, the
           # Kafka client, the drain and its output (0.3 s of CPU each worker paid, found with py-spy).
           "dagster._core.storage.sqlite_storage", "dagster._core.secrets.env_file",
           "orchestration.dagster.workers.dagster_api", "confluent_kafka.admin", "kprio_core.kafka.security",
           "spark_jobs.drain", "spark_jobs.source", "spark_jobs.handlers", "spark_jobs.formats.parquet",
           "upath.core", "pyarrow.dataset", "croniter")
"""What the fork server imports before it forks a worker: what a worker's start and every run need (a module
missing here is imported by every worker on its first use; one that cannot be imported is left out)."""
FORK_SERVER = multiprocessing.get_context("forkserver")


def fork(name: str, theirs: socket.socket, env: dict[str, str], log: LogRoute) -> Forked:
    """Fork worker ``name`` on its end of a socket pair (``theirs``, closed here: the worker holds its copy) with the
    environment ``env`` and its output where ``log`` says; the process, a child of this one's fork server."""
    FORK_SERVER.set_forkserver_preload(list(PRELOAD))
    conn = Connection(theirs.detach())
    process = FORK_SERVER.Process(target=forked, name=name, daemon=True,
                                  args=(conn, env, Output.of(log), os.getpid()))
    try:
        process.start()
    finally:
        conn.close()
    return Forked(process)


class Forked:
    """A worker's process as its pool sees it. Multiprocessing learns that a process it had forked ended from the fork
    server's pipe, which also ends when the fork server dies: every worker it forked would read as dead (status 255)
    and be killed by its pool, their runs failed. Whether it runs is asked of the process itself here (its pidfd, on
    Linux); how it ended, of the fork server while that one runs (None when nobody knows)."""

    def __init__(self, process: BaseProcess) -> None:
        self.process = process
        self.pid = process.pid
        try:
            self._server: psutil.Process | None = psutil.Process(process.pid).parent()
        except psutil.Error:  # it ended already
            self._server = None
        try:
            pidfd = os.pidfd_open(process.pid)
        except (OSError, AttributeError):  # it ended already, or not Linux: the fork server's word only
            self._pidfd: int | None = None
        else:
            self._pidfd = pidfd
            weakref.finalize(self, os.close, pidfd)

    def is_alive(self) -> bool:
        if self._pidfd is None:
            return self.process.is_alive()
        return not self._ended_within(0.0)

    def join(self, timeout: float | None = None) -> None:
        """Wait until it ended (up to ``timeout`` s), then for its fork server's word of how."""
        if self._pidfd is not None:
            if not self._ended_within(timeout):
                return
            timeout = 1.0
        self.process.join(timeout)

    @property
    def exitcode(self) -> int | None:
        """How it ended, as :attr:`multiprocessing.Process.exitcode` says (a negative number: the signal); None while
        it runs, or once the fork server that forked it is gone (its pipe's end reads as status 255)."""
        if self.is_alive():
            return None
        code = self.process.exitcode
        if code == 255 and not self._server_runs():
            return None
        return code

    def _ended_within(self, timeout: float | None) -> bool:
        poller = select.poll()  # not select(): a pool's process may hold more than 1,024 descriptors
        poller.register(self._pidfd, select.POLLIN)
        return bool(poller.poll(None if timeout is None else timeout * 1000))

    def _server_runs(self) -> bool:
        try:
            return (self._server is not None and self._server.is_running()
                    and self._server.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False


def forked(conn: Connection, env: dict[str, str], output: Output, pool: int) -> None:
    """The worker's process, as the fork server forked it: its own session (a kill of its group takes its Spark JVM
    and the JVM's Python workers; a terminal's Ctrl-C reaches only the pool, which finishes the runs in flight), the
    environment and output it was handed, killed when ``pool``'s process dies; then the worker's life."""
    from orchestration.dagster.workers.worker import serve

    os.setsid()
    die_with(pool)
    # Its own multiprocessing (tqdm's lock, in GX) as any process's, not the fork server's: such locks would be the
    # pool's resource tracker's to unlink, and said leaked whenever a worker is killed.
    multiprocessing.set_start_method(None, force=True)
    os.environ.clear()
    os.environ.update(env)
    output.attach()
    sys.exit(serve(conn))


def die_with(pool: int) -> None:
    """Be killed when the pool's process dies, as a run executing in that process would die with it (kill -9 of
    ``kprio drain``, of the daemon's pool): a thread waits on the process's pidfd (Linux); elsewhere the worker
    still leaves once the pool's socket closes, after the run in progress."""
    try:
        pidfd = os.pidfd_open(pool)
    except ProcessLookupError:  # it died before this worker could watch it
        os._exit(1)
    except (OSError, AttributeError):
        return

    def watch() -> None:
        select.select([pidfd], [], [])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="kprio-worker-dies-with-its-pool", daemon=True).start()


@dataclass(frozen=True)
class Output:
    """Where a worker's standard output and error go: the pool's log file (``path``), the pool's own (``fds``,
    handed over by the fork server), or nowhere."""

    path: str | None = None
    fds: tuple[Any, ...] = ()

    @classmethod
    def of(cls, log: LogRoute) -> Output:
        if log.log_file:
            return cls(path=log.log_file)
        if log.inherit or log.verbose:
            return cls(fds=(_Inherited(1), _Inherited(2)))
        return cls()

    def attach(self) -> None:
        """In the worker: make its descriptors 1 and 2 these."""
        if self.fds:  # unpickled into descriptors
            targets = list(self.fds)
        else:
            target = os.open(self.path or os.devnull, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            targets = [target, target]
        for number, target in zip((1, 2), targets, strict=True):
            os.dup2(target, number)


@dataclass(frozen=True)
class _Inherited:
    """A descriptor of the pool's, handed to the worker by the fork server (pickled only while it forks)."""

    fd: int

    def __reduce__(self) -> tuple[Any, ...]:
        return _detached, (reduction.DupFd(self.fd),)


def _detached(handed: Any) -> int:
    return handed.detach()
