"""Crash points for fault-injection runs: ``KPRIO_CRASH_AT=<point>`` kills the process there with SIGKILL.

What a kill -9 at the worst moment does to a batch is part of kprio's contract (the next run
resumes it, nothing is lost or doubled), so tests and operators must be able to cause one at an
exact step. Unset (the default), a crash point costs one dictionary lookup. ``<point>:<logical
topic>`` limits it to the batches of one logical topic. With ``KPRIO_CRASH_ONCE=<file>`` the
process dies only if the file does not exist yet (it is created first), so a retried run gets
through.

Points, in the order of a batch: ``after-drain`` (staged, nothing published), ``after-publish``
(output visible, not committed), ``after-kafka-commit`` (offsets committed, the ledger not told).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

ENV_AT = "KPRIO_CRASH_AT"
ENV_ONCE = "KPRIO_CRASH_ONCE"
POINTS = ("after-drain", "after-publish", "after-kafka-commit")


def crash_point(name: str, logical_topic: str) -> None:
    """Die here with SIGKILL when ``KPRIO_CRASH_AT`` names this point (see the module docstring)."""
    if name not in POINTS:
        raise ValueError(f"unknown crash point {name!r} (known: {', '.join(POINTS)})")
    if os.environ.get(ENV_AT) not in (name, f"{name}:{logical_topic}"):
        return
    once = os.environ.get(ENV_ONCE)
    if once:
        try:
            Path(once).touch(exist_ok=False)
        except FileExistsError:
            return
    os.kill(os.getpid(), signal.SIGKILL)
