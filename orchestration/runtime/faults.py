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
between the process's ledger transactions, whichever thread runs them (the heartbeat's renewals, the
drain loop's tick, another batch's run: :data:`kprio_core.ledger.gate.TRANSACTIONS`): a process
stopped inside a SQLite transaction would hold the ledger's write lock, and every other process
would wait for it, which is not the case a pause point is for.

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
import time
from pathlib import Path

from kprio_core.ledger.gate import TRANSACTIONS

ENV_AT = "KPRIO_CRASH_AT"
ENV_PAUSE_AT = "KPRIO_PAUSE_AT"
ENV_ONCE = "KPRIO_CRASH_ONCE"

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
        with TRANSACTIONS.closed():
            sent = time.monotonic()
            os.kill(os.getpid(), how)
            _until_stopped_and_resumed(sent)
        return
    os.kill(os.getpid(), how)
    time.sleep(60)  # never past this point: the kill lands within it


def _until_stopped_and_resumed(sent: float, at_most_s: float = 5.0) -> None:
    """Return once this process has been stopped and resumed (a step that took far longer than it should).

    ``kill(SIGSTOP)`` on its own process returns before every thread has stopped: the calling
    thread can run on for a moment, long enough to begin its next ledger transaction and then
    hold SQLite's write lock through the whole pause (seen in the paused tests). It sleeps here
    instead, until the stop has come and gone (or ``at_most_s``, should it never come). The stop
    often lands inside ``kill`` itself, so the first step is timed from ``sent``, when it was sent.
    """
    last = sent
    while last - sent < at_most_s:
        time.sleep(0.01)
        now = time.monotonic()
        if now - last > 0.25:
            return
        last = now
