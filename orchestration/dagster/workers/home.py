"""The worker pool of a Dagster home as the processes that hand it runs reach it: where it listens, how they ask, how
they start it when it is not there.

Under the daemon, kprio's run launcher (:mod:`orchestration.dagster.workers.launcher`) is built in whichever
process launches a run (the run queue, a webserver, a worker), so the workers belong to a server instead
(:mod:`orchestration.dagster.workers.server`, ``python -m orchestration.dagster.workers.server <home>``), one per
Dagster home, on an abstract local socket named by the home (on disk only ``<home>/.kprio-workers.key``, readable
by its owner, which authenticates clients).

The server starts with the code location on a home whose ``dagster.yaml`` names kprio's launcher
(:func:`warm_for_code_location`), warming while the user turns the sensor on, or when the launcher or the sensor
finds it missing (:func:`ensure`); what it reads and how long it lives is the server's to say.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import subprocess
import sys
import time
from multiprocessing.connection import Client
from pathlib import Path
from typing import Any

import yaml

from kprio_core.errors import KprioError
from orchestration.dagster.workers.protocol import Hello

LOGGER = logging.getLogger("kprio.workers")
KEY_FILE = ".kprio-workers.key"
LOCK_FILE = ".kprio-workers.lock"
LAUNCHER_MODULE = "orchestration.dagster.workers.launcher"
ENV_IN_POOL = "KPRIO_IN_WORKER_POOL"
"""Set in the server's environment (so in its workers'): kprio's code loaded there starts no pool of its own."""
START_TIMEOUT_S = 30.0
"""Longest a process that started the server waits for it to listen (its workers warm up after that)."""


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


def key_of(home: Path, *, create: bool) -> bytes | None:
    """The key that authenticates ``home``'s pool and its clients (``create``: a new one, by the server)."""
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
    key = key_of(home, create=False)
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
