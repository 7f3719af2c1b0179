"""Fault points for fault-injection runs: ``KPRIO_CRASH_AT=<point>`` kills the process there, ``KPRIO_PAUSE_AT`` stops it.

What a kill -9 at the worst moment does to a batch is part of kprio's contract (the next run
resumes it, nothing is lost or doubled), and so is what a process paused past its lease does
when it wakes up (a GC pause, a stopped VM, a slow disk: it writes nothing, its lease is another
run's), so tests and operators must be able to cause either at an exact step. Unset (the
default), a fault point costs one dictionary lookup. ``<point>:<logical topic>`` limits it to
the batches of one logical topic. With ``KPRIO_CRASH_ONCE=<file>`` the process dies (or stops)
only if the file does not exist yet (it is created first), so a retried run gets through.

``KPRIO_CRASH_AT`` kills with SIGKILL; ``KPRIO_PAUSE_AT`` stops every thread of the process with
SIGSTOP (the heartbeat too, as a stopped VM would), until someone sends it SIGCONT; the thread at
the point waits there until the stop has come and gone, never running on into its next write. It stops
between the heartbeat's ledger transactions (:data:`QUIET`: its renewals, and opening its
ledger, which checks the schema in a write transaction): a process stopped inside a SQLite transaction
would hold the ledger's write lock, and every other process would wait for it, which is not the
case a pause point is for.

Points, in the order of a batch: ``after-snapshot`` (a tick took its lag snapshot, nothing decided
or recorded yet: a second driver's stale plan), ``before-drain`` (leased, about to read),
``after-drain`` (staged, nothing published), ``before-publish`` (checked, about to publish),
``after-publish`` (output visible, not committed), ``before-kafka-commit`` (about to commit),
``during-kafka-commit`` (the group's offsets read, the lease checked, the write not sent: what a
newer writer's fencing refuses), ``after-kafka-commit`` (offsets committed, the ledger not told).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

ENV_AT = "KPRIO_CRASH_AT"
ENV_PAUSE_AT = "KPRIO_PAUSE_AT"
ENV_ONCE = "KPRIO_CRASH_ONCE"
QUIET = threading.Lock()
"""Held by the lease heartbeat while it is in a ledger transaction (opening, renewing); a pause point takes it first."""

POINTS = ("after-snapshot", "before-drain", "after-drain", "before-publish", "after-publish", "before-kafka-commit",
          "during-kafka-commit", "after-kafka-commit")


def crash_point(name: str, logical_topic: str) -> None:
    """Die (``KPRIO_CRASH_AT``) or stop (``KPRIO_PAUSE_AT``) here when one names this point (see the module docstring)."""
    if name not in POINTS:
        raise ValueError(f"unknown fault point {name!r} (known: {', '.join(POINTS)})")
    here = (name, f"{name}:{logical_topic}")
    if os.environ.get(ENV_AT) in here:
        how = signal.SIGKILL
    elif os.environ.get(ENV_PAUSE_AT) in here:
        how = signal.SIGSTOP
    else:
        return
    once = os.environ.get(ENV_ONCE)
    if once:
        try:
            Path(once).touch(exist_ok=False)
        except FileExistsError:
            return
    if how is signal.SIGSTOP:
        with QUIET:
            os.kill(os.getpid(), how)
            _until_stopped_and_resumed()
        return
    os.kill(os.getpid(), how)
    time.sleep(60)  # never past this point: the kill lands within it


def _until_stopped_and_resumed(at_most_s: float = 5.0) -> None:
    """Return once this process has been stopped and resumed (a sleep that took far longer than asked).

    ``kill(SIGSTOP)`` on its own process returns before every thread has stopped: the calling
    thread can run on for a moment, long enough to begin its next ledger transaction and then
    hold SQLite's write lock through the whole pause (seen in the paused tests). It sleeps here
    instead, until the stop has come and gone (or ``at_most_s``, should it never come).
    """
    started = time.monotonic()
    while time.monotonic() - started < at_most_s:
        before = time.monotonic()
        time.sleep(0.01)
        if time.monotonic() - before > 0.25:
            return
