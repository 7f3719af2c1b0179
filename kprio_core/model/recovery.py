"""Crash and failure recovery without an operator: leases, who holds them, and when to retry.

A run that drains a batch holds the batch's *lease*: an owner string and an expiry, renewed by
the run while it works. A lease that was not renewed in time means the run died (kill -9, OOM,
a lost machine): the batch is retried with the same ranges. The owner names the Dagster run,
the host and the process, so a process on the same host can tell at once that the owner is gone
instead of waiting for the expiry.

Retries back off exponentially: attempt 2 waits ``backoff_s``, attempt 3 twice that, never more
than ``backoff_max_s``; after ``max_attempts`` attempts only an operator retries.

>>> owner = lease_owner("6f1c2d3e", host="worker-1", pid=4242)
>>> owner
'6f1c2d3e@worker-1:4242'
>>> parse_owner(owner)
LeaseOwner(run_id='6f1c2d3e', host='worker-1', pid=4242)
>>> [retry_delay_s(a, base_s=5, max_s=60) for a in (1, 2, 3, 4, 5)]
[5.0, 10.0, 20.0, 40.0, 60.0]
>>> may_retry(attempts=2, max_attempts=3), may_retry(attempts=3, max_attempts=3)
(True, False)

A run's writes are *fenced*: every ledger move, publish and Kafka commit of a batch carries the
run's :class:`LeaseToken` (its owner, the attempt it claimed and the lease's epoch, which grows
each time the lease passes to another owner). The ledger refuses a stale token once another run
took the batch over or a retry started a later attempt; a Delta table refuses a publish whose
epoch is below the one it holds for the batch; a Kafka commit runs in a transaction that a later
committer fences. A process paused past its lease (a GC pause, a stopped VM, a slow disk)
therefore writes nothing when it wakes up:

>>> LeaseToken(owner, attempt=2, epoch=3)
LeaseToken(owner='6f1c2d3e@worker-1:4242', attempt=2, epoch=3)
>>> print(LeaseToken(owner, attempt=2, epoch=3))
6f1c2d3e@worker-1:4242 (attempt 2, epoch 3)

A failure whose cause passes by itself (the broker restarts, the disk fills up, Spark restarts)
is *transient*: its batch is retried with the same backoff until the cause is gone, never
exhausted, since no operator step is needed once the world is back. A failure of the data or
of the code (a check, a handler's contract, lost offsets) is retried ``max_attempts`` times.
Which is which is the failure's type (:func:`kprio_core.errors.is_transient`), decided where it
happened and carried from the executors in a typed record (:class:`kprio_core.model.results.ErrorRecord`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

_OWNER = re.compile(r"(?P<run_id>[^@]*)@(?P<host>[^:]*):(?P<pid>\d+)")


@dataclass(frozen=True, slots=True)
class LeaseOwner:
    """Who holds a batch: a Dagster run id (empty outside a run), a host name and a process id."""

    run_id: str
    host: str
    pid: int


@dataclass(frozen=True, slots=True)
class Lease:
    """A batch's lease: its owner and until when it holds (renewed while the owner works)."""

    owner: str
    until: datetime

    def expired(self, now: datetime) -> bool:
        return self.until <= now


@dataclass(frozen=True, slots=True)
class LeaseToken:
    """What a run proves it holds a batch with (a fencing token): its lease owner, the attempt it claimed,
    and the lease's epoch (+1 each time the lease passes to another owner; never below the attempt)."""

    owner: str
    attempt: int
    epoch: int = 0

    def __str__(self) -> str:
        return f"{self.owner} (attempt {self.attempt}, epoch {self.epoch})"


def lease_owner(run_id: str, *, host: str, pid: int) -> str:
    """The owner string of a lease: ``<run id>@<host>:<pid>``."""
    if "@" in run_id or ":" in host:
        raise ValueError(f"cannot build a lease owner from run id {run_id!r} and host {host!r}")
    return f"{run_id}@{host}:{pid}"


def parse_owner(owner: str) -> LeaseOwner | None:
    """The parts of an owner string, or None when it is not one kprio wrote."""
    match = _OWNER.fullmatch(owner or "")
    if match is None:
        return None
    return LeaseOwner(match["run_id"], match["host"], int(match["pid"]))


def retry_delay_s(attempt: int, *, base_s: float, max_s: float) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1 = the first) before the next one."""
    if attempt < 1:
        raise ValueError(f"attempts are numbered from 1, got {attempt}")
    return float(min(max_s, base_s * 2 ** (attempt - 1)))


def may_retry(*, attempts: int, max_attempts: int) -> bool:
    """True while a batch that failed ``attempts`` times may be retried without an operator."""
    return attempts < max_attempts
