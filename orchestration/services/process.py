"""Local server processes kprio supervises: start one detached, wait on a condition, stop and reap.

Waits retry a condition until a deadline (tenacity); stopping is psutil's terminate, ``wait_procs`` and kill, which
also reaps our children. A started server's pid, create time and ports are kept in a :class:`StateFile` for status
and stop from another process; a recorded pid counts only while :func:`live_process` finds the same process there.

>>> wait_for(lambda: True, timeout_s=1)
True
>>> wait_for(lambda: False, timeout_s=0.2, interval_s=0.05)
False
>>> pid_alive(2**22 + 1)  # above Linux's pid_max
False
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_open(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def wait_for(condition: Callable[[], bool], timeout_s: float, interval_s: float = 0.05) -> bool:
    """Poll ``condition`` every ``interval_s`` until it holds or ``timeout_s`` ends; whether it held (errors raise)."""
    from tenacity import Retrying, retry_if_result, stop_after_delay, wait_fixed  # here: every kprio start would pay it

    retrying = Retrying(
        stop=stop_after_delay(timeout_s),
        wait=wait_fixed(interval_s),
        retry=retry_if_result(lambda held: not held),
        retry_error_callback=lambda state: False,
    )
    return bool(retrying(condition))


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, ValueError):
        return False


def live_process(pid: int | None, *, command_has: str | None = None,
                 created_at: float | None = None) -> psutil.Process | None:
    """The running process ``pid`` if still the one we mean (``command_has``: a word of its command line,
    ``created_at``: its psutil create time), else None (gone or pid reused)."""
    if pid is None or not pid_alive(pid):
        return None
    try:
        proc = psutil.Process(pid)
        if created_at is not None and abs(proc.create_time() - created_at) > 1.0:
            return None
        if command_has is not None and not any(command_has in part for part in proc.cmdline()):
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def spawn_detached(cmd: Sequence[str], log_path: Path, *, env: Mapping[str, str] | None = None,
                   cwd: Path | None = None) -> tuple[psutil.Popen, int]:
    """Start ``cmd`` in its own session and process group (it outlives its starter, ignores that terminal's Ctrl-C),
    output appended to ``log_path``; (process, log offset). SIGTERM always stops it (:data:`WITH_SIGTERM`)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        cmd = [sys.executable, "-c", WITH_SIGTERM, *cmd]  # the same pid: it execs the server
    with open(log_path, "ab") as log:
        offset = log.tell()
        proc = psutil.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            start_new_session=True, cwd=cwd, env=dict(env) if env is not None else None)
    return proc, offset


WITH_SIGTERM = ("import os, signal, sys; signal.signal(signal.SIGTERM, signal.SIG_DFL); "
                "os.execvp(sys.argv[1], sys.argv[1:])")
"""Runs a server with SIGTERM at its default when this process ignores it (Dagster maps SIGTERM to SIGINT's handler,
so an ignored SIGINT makes it ignored): an ignored signal is inherited, and a JVM keeps an ignored SIGTERM ignored,
so every stop would wait out its deadline and kill the server (a broker's logs, a registry's store closed unclean)."""


def _group_members(pgid: int) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid:
                members.append(proc)
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            continue
    return members


def stop_process(proc: psutil.Process, timeout_s: float, *, whole_group: bool = False) -> None:
    """Terminate ``proc`` and its children (``whole_group``: its process group, where a JVM's re-parented Python
    workers stay), kill what outlives ``timeout_s``, reap; TimeoutError if any survive."""
    try:
        members = [proc, *proc.children(recursive=True)]
        pgid = os.getpgid(proc.pid) if whole_group else None
    except (psutil.NoSuchProcess, ProcessLookupError):
        return
    if pgid is not None:
        members = list({p.pid: p for p in [*members, *_group_members(pgid)]}.values())
        _killpg(pgid, signal.SIGTERM)
    else:
        for member in members:
            _quietly(member.terminate)
    _, alive = psutil.wait_procs(members, timeout=timeout_s)
    if alive:
        if pgid is not None:
            _killpg(pgid, signal.SIGKILL)
        for member in alive:
            _quietly(member.kill)
        _, alive = psutil.wait_procs(alive, timeout=timeout_s)
    if alive:
        raise TimeoutError(f"pids {sorted(p.pid for p in alive)} survived SIGKILL for {timeout_s:g} s")


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _quietly(action: Callable[[], None]) -> None:
    try:
        action()
    except psutil.NoSuchProcess:
        pass


@contextlib.contextmanager
def data_dir_lock(data_dir: Path, lock_file: str, wait_s: float, busy: type[Exception], what: str) -> Iterator[None]:
    """One start or stop at a time per data dir, across processes; ``busy`` (naming ``what``) after ``wait_s``."""
    from filelock import FileLock, Timeout  # here: every kprio start would pay it

    data_dir.mkdir(parents=True, exist_ok=True)
    try:
        lock = FileLock(str(data_dir / lock_file), timeout=wait_s).acquire()
    except Timeout:
        raise busy(f"another process has been starting or stopping the {what} in {data_dir} for over {wait_s:g} s "
                   f"(lock {lock_file})") from None
    with lock:
        yield


def log_tail(path: Path, start: int = 0, lines: int = 5, skip: Callable[[str], bool] | None = None) -> str:
    """The last ``lines`` lines written to ``path`` from byte ``start`` on, joined with `` | ``."""
    try:
        with open(path, "rb") as log:
            log.seek(start)
            text = log.read().decode(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    useful = [line.strip() for line in text if line.strip() and not (skip and skip(line))]
    return " | ".join(useful[-lines:]) or "(empty log)"


@dataclass(frozen=True)
class StateFile:
    """The JSON record of a server kprio started, written whole (a temp file moved into place: never read half).

    >>> import tempfile
    >>> state = StateFile(Path(tempfile.mkdtemp()) / "server.json")
    >>> state.read() is None
    True
    >>> state.write({"pid": 42, "port": 9092})
    >>> state.read()
    {'pid': 42, 'port': 9092}
    >>> state.remove(); state.read() is None
    True
    """

    path: Path

    def read(self) -> dict | None:
        """What was recorded; None when nothing is (no file, a data dir under a file, a file that is no JSON object)."""
        try:
            doc = json.loads(self.path.read_text())
        except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
            return None
        return doc if isinstance(doc, dict) else None

    def write(self, doc: Mapping[str, object]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
