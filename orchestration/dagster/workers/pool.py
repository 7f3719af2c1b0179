"""A pool of warm run workers: it starts them, hands each one run at a time, and replaces the ones that die or retire.

Every run of a batch executes on one of these workers, whichever driver launched it: ``kprio drain``'s loop owns
a pool for its life; under the daemon the run launcher uses the home's (:mod:`orchestration.dagster.workers.home`,
:mod:`orchestration.dagster.workers.server`).
Each worker is a process on a socket pair, forked from imports made once (:mod:`orchestration.dagster.workers.fork`);
``workers.count`` of them run as many runs at once, in the lanes of :mod:`orchestration.dagster.workers.lanes`.

One thread watches every worker. A worker that dies (kill -9, OOM) fails its run in Dagster at once, as the
default launcher's code server does, and kprio's tick resumes its batch; one that cannot start fails the runs
waiting for it with its one line and is started again after a backoff; one that dies or retires
(``workers.max_runs``, ``workers.max_rss_mib``) is replaced. Runs a worker's tick created (under the daemon) are
launched here at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from kprio_core.config import SparkSettings, WorkersSettings
from orchestration.dagster.workers.protocol import (
    CannotStart,
    Ended,
    Execute,
    JobSource,
    Launched,
    LogRoute,
    Ready,
    Stop,
    Warm,
)
from orchestration.dagster.workers.lanes import BULK, lanes, pick
from orchestration.dagster.workers.fork import Forked, fork
from orchestration.runtime.tags import LANE_TAG

LOGGER = logging.getLogger("kprio.workers")
_ACTIVE: list[WorkerPool] = []
"""The pool this process made active (:meth:`WorkerPool.activate`), as Spark keeps an active session."""
RESTART_BACKOFF_S = (1.0, 5.0, 30.0)
"""Waits before a worker that could not start is started again (the last one repeats)."""
LEAVE_S = 5.0
"""How long a worker asked to leave may take (its Spark client stops) before its process group is killed."""


@contextmanager
def workers_for(spark: SparkSettings, limits: WorkersSettings, workers: WorkerPool | None = None,
                log: LogRoute = LogRoute()) -> Iterator[WorkerPool]:
    """A driver's pool: ``workers``, else this process's active one (both left to their starter), else a new one of
    ``limits`` and ``spark``, started now (warming while the driver does its first work) and stopped at the end."""
    workers = workers or WorkerPool.active()
    if workers is not None:
        yield workers
        return
    with WorkerPool(spark, limits, log=log) as pool:
        yield pool


@dataclass
class Submission:
    """A run handed to the pool: its instance (to report what happens to it), how to execute it, its lane."""

    run_id: str
    instance: Any
    job: JobSource
    lane: str = BULK
    tick_after: bool = False


@dataclass
class Slot:
    """One worker of the pool, by index: its process and socket, its lane, what it runs now."""

    index: int
    lane: str
    proc: Forked | None = None
    conn: Connection | None = None
    ready: bool = False
    running: Submission | None = None
    started_at: float = 0.0
    failures: int = 0
    restart_at: float = 0.0
    pid: int | None = None
    recycle: bool = False
    """Replace this worker once its run ended (:meth:`WorkerPool.recycle`)."""
    last: Submission | None = None
    """The run it executed last (what the runs its idle tick launches share: the instance, the job)."""


class WorkerPool:
    """``limits.count`` warm workers with ``spark``'s client; listeners (:meth:`listen`, ``on_end``) get ``(run_id,
    Dagster run status value)`` from the pool's thread when a run ends; ``on_event(line)``: a line for a person."""

    def __init__(self, spark: SparkSettings, limits: WorkersSettings, *, log: LogRoute = LogRoute(),
                 on_end: Callable[[str, str], None] | None = None, on_event: Callable[[str], None] | None = None,
                 name: str = "kprio-worker", env: dict[str, str] | None = None) -> None:
        self.spark, self.limits, self.log, self.name = spark, limits, log, name
        self.on_event = on_event
        self.env = env
        self._listeners: list[Callable[[str, str], None]] = [on_end] if on_end is not None else []
        self._slots = [Slot(i, lane) for i, lane in enumerate(lanes(limits.count))]
        self._queue: deque[Submission] = deque()
        self._leaving: list[tuple[Forked, float]] = []
        """Workers asked to leave, with when their group is killed if still there (:meth:`_reap_leaving`)."""
        self._lock = threading.Lock()
        self._wake_r, self._wake_w = socket.socketpair()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"{name}-pool", daemon=True)

    # --- life ----------------------------------------------------------------------------------------

    def start(self) -> WorkerPool:
        """Start the pool's thread, which starts every worker (they warm up in the background); once."""
        with self._lock:
            if not self._thread.is_alive():
                self._thread.start()
        return self

    def activate(self) -> WorkerPool:
        """Make this pool the one every drain of this process that is handed none runs on (until it closes), as
        Spark's ``getOrCreate`` reuses the active session: a test session's pool, which every test's drain shares."""
        _ACTIVE[:] = [self]
        return self

    @staticmethod
    def active() -> WorkerPool | None:
        """The pool this process made active, if it is still open."""
        return next((pool for pool in _ACTIVE if not pool._closing.is_set()), None)

    def __enter__(self) -> WorkerPool:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, timeout_s: float = 30.0) -> None:
        """Ask every worker to leave once its run ended; kill those still there after ``timeout_s``."""
        self._closing.set()
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        self._wake()
        self._thread.join(timeout=timeout_s)
        with self._lock:
            for slot in self._slots:
                self._send(slot, Stop())
        deadline = time.monotonic() + timeout_s
        for slot in self._slots:
            if slot.proc is None:
                continue
            slot.proc.join(max(0.1, deadline - time.monotonic()))
            self._kill(slot)
            if slot.conn is not None:
                slot.conn.close()
        with self._lock:
            self._reap_leaving(until=deadline)
        self._wake_r.close()
        self._wake_w.close()

    # --- what callers ask ----------------------------------------------------------------------------

    def listen(self, listener: Callable[[str, str], None]) -> Callable[[], None]:
        """Call ``listener(run_id, status)`` whenever a run ends here; returns what stops that."""
        with self._lock:
            self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def submit(self, submission: Submission) -> None:
        """Execute the run on the next free worker of its lane (in the order runs were submitted)."""
        with self._lock:
            self._queue.append(submission)
        self._wake()

    def terminate(self, run_id: str, why: str = "terminated") -> bool:
        """Stop ``run_id``: canceled in Dagster, then its worker killed (a fresh one takes its place) or the run
        taken out of the queue; whether it was this pool's."""
        with self._lock:
            queued = next((s for s in self._queue if s.run_id == run_id), None)
            slot = next((s for s in self._slots if s.running and s.running.run_id == run_id), None)
            submission = queued or (slot.running if slot else None)
            if submission is None:
                return False
            run = submission.instance.get_run_by_id(run_id)
            if run is not None and not run.is_finished:
                submission.instance.report_run_canceled(run, f"kprio: {why}")
            if queued is not None:
                self._queue.remove(queued)
                self._tell_end(run_id, "CANCELED")
            elif slot is not None:
                slot.running = None
                self._kill(slot)
                self._lost(slot, f"it was killed: {why}", known=True)
                self._tell_end(run_id, "CANCELED")
        return True

    def recycle(self) -> None:
        """Replace every worker by a fresh one (the code they run changed): idle ones now, busy ones after their run."""
        with self._lock:
            for slot in self._slots:
                slot.recycle = True
                if slot.running is None and slot.proc is not None:
                    self._stop_slot(slot)
                    self._spawn(slot)

    def idle(self) -> bool:
        """No run waits or executes here."""
        with self._lock:
            return not self._queue and all(s.running is None for s in self._slots)

    def ready(self, timeout_s: float) -> bool:
        """Wait until every worker is warm (or ``timeout_s`` passed); whether they are."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if all(slot.ready for slot in self._slots):
                    return True
            time.sleep(0.05)
        return False

    def queued(self, run_id: str) -> bool:
        with self._lock:
            return any(s.run_id == run_id for s in self._queue)

    def pids(self) -> list[int]:
        """The pids of the workers alive now."""
        with self._lock:
            return [s.pid for s in self._slots if s.pid is not None and s.proc is not None and s.proc.is_alive()]

    # --- the pool's thread ---------------------------------------------------------------------------

    def _watch(self) -> None:
        first = [(slot, self._fork(slot)) for slot in self._slots]  # the first waits for the fork server's imports
        with self._lock:
            for slot, forked_ in first:
                self._started(slot, *forked_)
        while not self._closing.is_set():
            with self._lock:
                conns = [s.conn for s in self._slots if s.conn is not None]
            for ready in wait([*conns, self._wake_r], timeout=0.5):
                if ready is self._wake_r:
                    self._wake_r.recv(4096)
                    continue
                self._hear(ready)
            with self._lock:
                self._reap_leaving()
                self._reap_dead()
                self._restart_due()
                self._dispatch()

    def _hear(self, conn: Connection) -> None:
        with self._lock:
            slot = next((s for s in self._slots if s.conn is conn), None)
        if slot is None:
            return
        try:
            message = conn.recv()
        except (EOFError, OSError):
            with self._lock:
                self._lost(slot, "its connection closed")
            return
        with self._lock:
            if isinstance(message, Ready):
                slot.ready, slot.failures = True, 0
                LOGGER.info("%s %d (%s lane, pid %d) is warm after %.1f s", self.name, slot.index, slot.lane,
                            message.pid, message.seconds)
            elif isinstance(message, CannotStart):
                self._cannot_start(slot, message.why)
            elif isinstance(message, Ended):
                self._ended(slot, message)
            elif isinstance(message, Launched) and slot.last is not None:  # its idle tick (records arrived)
                for run_id in message.run_ids:
                    self._launch_follow_up(slot.last, run_id)

    def _ended(self, slot: Slot, message: Ended) -> None:
        done = slot.running
        slot.running, slot.last = None, done or slot.last
        if done is not None and message.status == "FAILURE":
            self._fail(done, f"the kprio worker (pid {slot.pid}) could not execute it: {message.retire}")
        elif done is not None:
            self._tell_end(done.run_id, message.status)
        if done is not None:
            for run_id in message.launched:  # its tick's runs (under the daemon): launched at once, as the daemon would
                self._launch_follow_up(done, run_id)
        if message.retire or slot.recycle:
            LOGGER.info("%s %d retires (%s); a fresh one takes its place", self.name, slot.index,
                        message.retire or "the code location changed")
            self._stop_slot(slot)
            self._spawn(slot)

    def _launch_follow_up(self, parent: Submission, run_id: str) -> None:
        from orchestration.dagster.workers import dagster_api

        run = parent.instance.get_run_by_id(run_id)
        if run is None:
            return
        dagster_api.mark_starting(parent.instance, run)
        self._queue.append(Submission(run_id, parent.instance, parent.job, lane=run.tags.get(LANE_TAG, BULK),
                                      tick_after=parent.tick_after))

    def _dispatch(self) -> None:
        for submission in list(self._queue):
            free = [(s.index, s.lane) for s in self._slots if s.ready and s.running is None]
            chosen = pick(submission.lane, free)
            if chosen is None:
                continue
            slot = self._slots[chosen]
            self._queue.remove(submission)
            slot.running = submission
            if not self._send(slot, Execute(submission.run_id, submission.instance.get_ref(), submission.job,
                                            submission.tick_after)):
                self._lost(slot, "it could not be handed the run")

    def _reap_dead(self) -> None:
        for slot in self._slots:
            if slot.proc is None:
                continue
            if not slot.proc.is_alive():
                self._lost(slot, "its process ended")
            elif not slot.ready and time.monotonic() - slot.started_at > self.limits.start_timeout_s:
                self._kill(slot)
                self._cannot_start(slot, f"it was not warm after {self.limits.start_timeout_s:.0f} s "
                                         "(workers.start_timeout_s)")

    def _restart_due(self) -> None:
        if self._closing.is_set():
            return
        for slot in self._slots:
            if slot.proc is None and time.monotonic() >= slot.restart_at:
                self._spawn(slot)

    # --- one worker ----------------------------------------------------------------------------------

    def _spawn(self, slot: Slot) -> None:
        self._started(slot, *self._fork(slot))

    def _fork(self, slot: Slot) -> tuple[Forked | None, Connection | None, str | None]:
        """A new worker for ``slot`` (:func:`~orchestration.dagster.workers.fork.fork`) with the pool's environment of
        the moment, and the pool's end of its socket; or why it could not be (the fork server could not start)."""
        mine, theirs = socket.socketpair()
        env = dict(self.env if self.env is not None else os.environ)
        try:
            process = fork(f"{self.name}-{slot.index}", theirs, env, self.log)
        except (OSError, EOFError) as err:  # the fork server died or could not start
            mine.close()
            return None, None, f"the fork server could not fork it: {type(err).__name__}: {err}"
        return process, Connection(mine.detach()), None

    def _started(self, slot: Slot, process: Forked | None, conn: Connection | None, why: str | None) -> None:
        if process is None or conn is None:
            slot.started_at = time.monotonic()
            self._cannot_start(slot, why or "it could not be forked")
            return
        slot.proc, slot.conn, slot.pid = process, conn, process.pid
        slot.ready, slot.running, slot.started_at, slot.recycle = False, None, time.monotonic(), False
        nice = self.limits.bulk_nice if slot.lane == BULK else 0
        self._send(slot, Warm(self.spark, self.limits, f"{self.name}-{slot.index}", nice, self.log,
                              watch=slot.lane != BULK))

    def _send(self, slot: Slot, message: object) -> bool:
        if slot.conn is None:
            return False
        try:
            slot.conn.send(message)
            return True
        except OSError:
            return False

    def _lost(self, slot: Slot, why: str, *, known: bool = False) -> None:
        """The worker of ``slot`` is gone: its run fails (as a dead run process's does), a new one is started.
        ``why``: what was seen, unless how its process ended says more (``known``: the pool itself killed it)."""
        why = why if known else self._exit_of(slot) or why
        LOGGER.warning("%s %d (pid %s) is gone: %s", self.name, slot.index, slot.pid, why)
        lost = slot.running
        self._stop_slot(slot)
        if lost is not None:
            self._fail(lost, f"the kprio worker executing it (pid {slot.pid}) died: {why}")
        if not self._closing.is_set():
            self._spawn(slot)

    @staticmethod
    def _exit_of(slot: Slot) -> str | None:
        """How the worker's process ended, once it has (a closed socket comes a moment before the exit)."""
        if slot.proc is None:
            return None
        slot.proc.join(1.0)
        code = slot.proc.exitcode
        if code is None:
            return None
        return f"it exited with status {code}" if code >= 0 else f"it was killed by signal {-code}"

    def _cannot_start(self, slot: Slot, why: str) -> None:
        slot.failures += 1
        wait_s = RESTART_BACKOFF_S[min(slot.failures, len(RESTART_BACKOFF_S)) - 1]
        line = f"{self.name} {slot.index} could not start: {why}; started again in {wait_s:.0f} s"
        LOGGER.warning(line)
        if self.on_event is not None:
            self.on_event(line)
        self._stop_slot(slot)
        slot.restart_at = time.monotonic() + wait_s
        if not any(s.ready or s.proc is not None for s in self._slots if s is not slot):
            while self._queue:  # no worker can take them: each fails with why, and its batch is retried by kprio
                self._fail(self._queue.popleft(), f"no kprio worker could start: {why}")

    def _stop_slot(self, slot: Slot) -> None:
        """Free ``slot`` now. A live worker is asked to leave and reaped later by :meth:`_reap_leaving`, never waited
        for here: this runs under the lock, and a worker's Spark client takes seconds to stop, during which no run
        could be handed to another worker nor an ended one heard."""
        if slot.proc is not None and slot.proc.is_alive():
            self._send(slot, Stop())
            self._leaving.append((slot.proc, time.monotonic() + LEAVE_S))
        elif slot.proc is not None:
            self._kill_group(slot.proc)
        if slot.conn is not None:
            slot.conn.close()
        slot.proc, slot.conn, slot.ready, slot.running = None, None, False, None

    def _reap_leaving(self, *, until: float | None = None) -> None:
        """Kill the group of each leaving worker that left or overstayed :data:`LEAVE_S` (what it started and left
        behind: its Spark JVM, the JVM's Python workers), and reap it; ``until`` (the pool closes): wait for each to
        leave up to then, and kill every one still there."""
        staying = []
        for proc, deadline in self._leaving:
            if until is not None:
                deadline = min(deadline, until)
                proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive() and time.monotonic() < deadline:
                staying.append((proc, deadline))
            else:
                self._kill_group(proc)
        self._leaving[:] = staying

    @classmethod
    def _kill(cls, slot: Slot) -> None:
        if slot.proc is not None:
            cls._kill_group(slot.proc)

    @staticmethod
    def _kill_group(proc: Forked) -> None:
        """SIGKILL a worker's process group (it, its Spark JVM and the JVM's Python workers) and the worker itself
        (forked a moment ago, it may not lead its own group yet), and reap it."""
        for kill in (os.killpg, os.kill):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                kill(proc.pid, signal.SIGKILL)
        proc.join()

    def _fail(self, submission: Submission, why: str) -> None:
        """Fail ``submission``'s run in Dagster with ``why`` (unless it ended meanwhile), and say it ended."""
        instance = submission.instance
        run = instance.get_run_by_id(submission.run_id)
        if run is not None and not run.is_finished:
            instance.report_engine_event(f"kprio: {why}; kprio's tick resumes its batch with the same ranges", run)
            instance.report_run_failed(run)
        self._tell_end(submission.run_id, "FAILURE")

    def _tell_end(self, run_id: str, status: str) -> None:
        for listener in list(self._listeners):
            try:
                listener(run_id, status)
            except Exception:  # noqa: BLE001 - a caller's callback must not stop the pool
                LOGGER.exception("a listener of the pool failed for run %s", run_id)

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
