"""The worker pool of a Dagster home: one process that owns the warm workers the daemon's runs execute on.

``python -m orchestration.dagster.workers.server <home>``, started as :mod:`orchestration.dagster.workers.home`
says (with the code location, or by the launcher or the sensor when it is missing), listening where that module
says. It reads kprio.yaml (``$KPRIO_CONFIG``) for ``spark`` and ``workers``; its workers inherit its environment
(secrets included), as run processes inherit a code server's. It lives while a
:class:`~orchestration.dagster.workers.protocol.Hello` process or a run does; a new code location process (a
reload) makes every worker load the code again (idle ones at once, busy ones after their run).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from multiprocessing.connection import Connection, Listener
from pathlib import Path
from typing import Any

from orchestration.dagster.workers.home import ENV_IN_POOL, KEY_FILE, WorkerPoolUnavailable, address, key_of
from orchestration.dagster.workers.protocol import Hello, Submit, Terminate

LOGGER = logging.getLogger("kprio.workers")
ALONE_FOR_S = 10.0
"""Seconds alone (no client process, no run) before the server exits; a reloading code server comes back within."""


class PoolServer:
    """The server: a :class:`~orchestration.dagster.workers.pool.WorkerPool` behind a socket."""

    def __init__(self, home: Path) -> None:
        from kprio_core.config import load_config
        from orchestration.dagster.workers.pool import WorkerPool

        self.home = Path(home)
        config = load_config()
        self.pool = WorkerPool(config.spark, config.workers, name="kprio-worker")
        self._clients: set[int] = set()
        self._code_location: int | None = None
        self._instances: list[tuple[Any, Any]] = []
        self._lock = threading.Lock()
        self._alone_since: float | None = None
        self._closed = threading.Event()

    def serve(self) -> None:
        listener = Listener(address(self.home), family="AF_UNIX", authkey=key_of(self.home, create=True))
        self.pool.start()
        threading.Thread(target=self._accept, args=(listener,), name="kprio-pool-server", daemon=True).start()
        LOGGER.info("kprio's worker pool serves %s (pid %d)", self.home, os.getpid())
        try:
            while not self._alone_long():
                time.sleep(1.0)
        finally:
            self._closed.set()
            listener.close()
            self.pool.close()
            with contextlib.suppress(OSError):
                (self.home / KEY_FILE).unlink()

    def _alone_long(self) -> bool:
        from orchestration.runtime.leases import process_alive

        with self._lock:
            self._clients = {pid for pid in self._clients if process_alive(pid)}
            alone = not self._clients and self.pool.idle()
        if not alone:
            self._alone_since = None
            return False
        self._alone_since = self._alone_since or time.monotonic()
        return time.monotonic() - self._alone_since >= ALONE_FOR_S

    def _accept(self, listener: Listener) -> None:
        while True:
            try:
                conn = listener.accept()
            except (OSError, EOFError):  # closed, or a client that failed the key's challenge
                if self._closed.is_set():
                    return
                continue
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: Connection) -> None:
        with contextlib.closing(conn):
            try:
                request = conn.recv()
                conn.send(self._handle(request))
            except (EOFError, OSError):
                return
            except Exception as err:  # noqa: BLE001 - the client gets the one line, the server goes on
                LOGGER.exception("kprio's worker pool could not answer %r", type(request).__name__)
                with contextlib.suppress(OSError):
                    conn.send(WorkerPoolUnavailable(f"{type(err).__name__}: {err}", where=str(self.home)))

    def _handle(self, request: object) -> object:
        from orchestration.dagster.workers.pool import Submission

        if isinstance(request, Hello):
            self._hello(request)
            return True
        if isinstance(request, Submit):
            self._hello(Hello(request.pid))
            self.pool.submit(Submission(request.run_id, self._instance(request.instance), request.job, request.lane,
                                        request.tick_after))
            return True
        if isinstance(request, Terminate):
            return self.pool.terminate(request.run_id, "terminated from Dagster")
        raise TypeError(f"unknown request {type(request).__name__}")

    def _hello(self, hello: Hello) -> None:
        with self._lock:
            self._clients.add(hello.pid)
            reloaded = hello.code_location and self._code_location not in (None, hello.pid)
            if hello.code_location:
                self._code_location = hello.pid
        if reloaded:
            LOGGER.info("a new code location process (pid %d): every worker loads the code again", hello.pid)
            self.pool.recycle()

    def _instance(self, ref: Any) -> Any:
        import dagster as dg

        with self._lock:
            found = next((instance for known, instance in self._instances if known == ref), None)
            if found is None:
                found = dg.DagsterInstance.from_ref(ref)
                self._instances.append((ref, found))
            return found


def main(argv: list[str]) -> int:
    from orchestration.cli.logs import RedactingFormatter
    from orchestration.cli.redaction import Redactor

    os.environ[ENV_IN_POOL] = "1"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter(Redactor.of(os.environ)))
    logging.getLogger("kprio").addHandler(handler)
    logging.getLogger("kprio").setLevel(logging.INFO)
    PoolServer(Path(argv[0])).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
