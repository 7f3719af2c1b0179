"""Fault points for fault injection: ``KPRIO_CRASH_AT=<point>`` kills the process there, ``KPRIO_PAUSE_AT`` stops it.

What a kill -9 at the worst moment does to a batch is part of kprio's contract (the next run resumes it, nothing
lost or doubled), and so is what a process paused past its lease does when it wakes (a GC pause, a stopped VM: it
writes nothing, its lease is another run's), so tests and operators must cause either at an exact step. Unset, a
point costs one dictionary lookup. ``<point>:<logical topic>`` limits it to one logical topic's batches; with
``KPRIO_CRASH_ONCE=<file>`` it fires only if the file does not exist yet (it is created first), so a retried run
gets through.

``KPRIO_CRASH_AT`` sends SIGKILL; ``KPRIO_PAUSE_AT`` SIGSTOPs every thread (the heartbeat too, as a stopped VM
would) until SIGCONT, between the process's ledger transactions (:data:`kprio_core.ledger.gate.TRANSACTIONS`):
stopped inside a SQLite transaction it would hold the write lock and block every other process.

Points, in the order of a batch: ``after-snapshot`` (a tick's lag snapshot taken, nothing decided or recorded: a
second driver's stale plan), ``before-take`` (a run decided to take its batch, the ledger not told: a tick meanwhile
sees a retry launched and not taken), ``before-drain`` (leased, about to read), ``after-drain`` (staged, nothing
published), ``before-publish`` (checked), ``after-publish`` (output visible, not committed),
``before-kafka-commit``, ``during-kafka-commit`` (group offsets read, lease checked, write not sent: what a newer
writer's fencing refuses), ``after-kafka-commit`` (offsets committed, the ledger not told). Of no batch:
``worker-leaving`` (a warm worker retired or asked to leave, its Spark client not yet stopped).
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

POINTS = ("after-snapshot", "before-take", "before-drain", "after-drain", "before-publish", "after-publish",
          "before-kafka-commit", "during-kafka-commit", "after-kafka-commit", "worker-leaving")


def crash_point(name: str, logical_topic: str = "") -> None:
    """Die (``KPRIO_CRASH_AT``) or stop (``KPRIO_PAUSE_AT``) here when one names this point."""
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
    """Return once this process has been stopped and resumed (at most ``at_most_s``), timed from ``sent``: the stop
    often lands in ``kill``, and ``kill(SIGSTOP)`` of its own process returns before every thread stopped, so this
    thread could begin its next ledger transaction and hold SQLite's write lock through the pause (seen in tests)."""
    last = sent
    while last - sent < at_most_s:
        time.sleep(0.01)
        now = time.monotonic()
        if now - last > 0.25:
            return
        last = now
