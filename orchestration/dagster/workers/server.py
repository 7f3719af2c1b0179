"""The worker pool of a Dagster home: one process that owns the warm workers the daemon's runs execute on.

Under the daemon, kprio's run launcher (:mod:`orchestration.dagster.workers.launcher`) is built in whichever
process launches a run (the run queue, a webserver, a worker), so the workers belong to this server instead:
``python -m orchestration.dagster.workers.server <home>``, one per Dagster home, on an abstract local socket named
by the home (on disk only ``<home>/.kprio-workers.key``, readable by its owner, which authenticates clients).

It starts with the code location on a home whose ``dagster.yaml`` names kprio's launcher
(:func:`warm_for_code_location`), warming while the user turns the sensor on, or when the launcher or the sensor
finds it missing (:func:`ensure`). It reads kprio.yaml (``$KPRIO_CONFIG``) for ``spark`` and ``workers``; its
workers inherit its environment (secrets included), as run processes inherit a code server's. It lives while a
:class:`~orchestration.dagster.workers.protocol.Hello` process or a run does; a new code location process (a
reload) makes every worker load the code again (idle ones at once, busy ones after their run).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Client, Connection, Listener
from pathlib import Path
from typing import Any

import yaml

from kprio_core.errors import KprioError
from orchestration.dagster.workers.protocol import Hello, Submit, Terminate

LOGGER = logging.getLogger("kprio.workers")
KEY_FILE = ".kprio-workers.key"
LOCK_FILE = ".kprio-workers.lock"
LAUNCHER_MODULE = "orchestration.dagster.workers.launcher"
ENV_IN_POOL = "KPRIO_IN_WORKER_POOL"
"""Set in the server's environment (so in its workers'): kprio's code loaded there starts no pool of its own."""
START_TIMEOUT_S = 30.0
"""Longest a process that started the server waits for it to listen (its workers warm up after that)."""
ALONE_FOR_S = 10.0
"""Seconds alone (no client process, no run) before the server exits; a reloading code server comes back within."""


class WorkerPoolUnavailable(KprioError):
    """The worker pool of a Dagster home could not be started or reached."""

    code = "worker_pool_unavailable"
    transient = True


def address(home: Path) -> str:
    """The pool's socket for ``home``: an abstract Unix socket named by the home's real path.

    >>> address(Path("/srv/dagster")).startswith("\\0kprio-workers-")
    True
    """
    digest = hashlib.sha256(str(Path(home).resolve()).encode()).hexdigest()[:20]
    return f"\0kprio-workers-{digest}"


def _key(home: Path, *, create: bool) -> bytes | None:
    path = Path(home) / KEY_FILE
    if create:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(os.urandom(32))
    try:
        return path.read_bytes()
    except OSError:
        return None


def call(home: Path, request: object, timeout_s: float = 5.0) -> Any:
    """Send ``request`` to ``home``'s pool; its answer, or :class:`WorkerPoolUnavailable` when none answers."""
    key = _key(home, create=False)
    if key is None:
        raise WorkerPoolUnavailable("no worker pool runs for this Dagster home", where=str(home))
    try:
        with contextlib.closing(Client(address(home), family="AF_UNIX", authkey=key)) as conn:
            conn.send(request)
            if not conn.poll(timeout_s):
                raise WorkerPoolUnavailable(f"the worker pool did not answer within {timeout_s:.0f} s", where=str(home))
            answer = conn.recv()
    except (OSError, EOFError) as err:
        raise WorkerPoolUnavailable(f"the worker pool does not answer: {err}", where=str(home)) from None
    if isinstance(answer, Exception):
        raise answer
    return answer


def ensure(home: Path, *, code_location: bool = False) -> None:
    """Make sure ``home``'s pool runs (start it, or wait while another process does) and knows this process."""
    hello = Hello(os.getpid(), code_location)
    with contextlib.suppress(WorkerPoolUnavailable):
        call(home, hello)
        return
    from filelock import FileLock

    with FileLock(str(Path(home) / LOCK_FILE), timeout=START_TIMEOUT_S):
        with contextlib.suppress(WorkerPoolUnavailable):  # another process started it meanwhile
            call(home, hello)
            return
        subprocess.Popen([sys.executable, "-m", "orchestration.dagster.workers.server", str(home)],
                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                call(home, hello)
                return
            except WorkerPoolUnavailable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def names_kprio_launcher(home: Path) -> bool:
    """Whether the ``dagster.yaml`` of ``home`` sets kprio's run launcher."""
    try:
        settings = yaml.safe_load((Path(home) / "dagster.yaml").read_text()) or {}
    except (OSError, yaml.YAMLError):
        return False
    launcher = settings.get("run_launcher") if isinstance(settings, dict) else None
    return isinstance(launcher, dict) and launcher.get("module") == LAUNCHER_MODULE


def warm_for_code_location(env: dict[str, str] | None = None) -> None:
    """Start the pool of ``$DAGSTER_HOME`` as the code location loads, when its instance uses kprio's launcher
    (not inside the pool, under ``dagster definitions validate`` or without a home); a failure is only logged."""
    env = dict(os.environ) if env is None else env
    home = env.get("DAGSTER_HOME")
    if not home or env.get(ENV_IN_POOL) or env.get("DAGSTER_IS_DEFS_VALIDATION_CLI") or not names_kprio_launcher(Path(home)):
        return
    try:
        ensure(Path(home), code_location=True)
    except (KprioError, OSError, TimeoutError) as err:
        LOGGER.warning("kprio's worker pool did not start with the code location: %s", err)


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
        listener = Listener(address(self.home), family="AF_UNIX", authkey=_key(self.home, create=True))
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
