"""Crash and failure recovery without an operator: leases, who holds them, and when to retry.

A run draining a batch renews its *lease*; one not renewed means the run died (kill -9, OOM) and the batch is retried
with the same ranges. The owner names run, host and process: on that host a dead owner is seen without waiting. Retries
back off exponentially (attempt 2 waits ``backoff_s``, doubling up to ``backoff_max_s``); after ``max_attempts`` only an
operator retries, unless the failure is *transient* (:func:`kprio_core.errors.is_transient`, judged where it happened,
carried in an :class:`~kprio_core.model.results.ErrorRecord`): retried until it passes.

>>> owner = lease_owner("6f1c2d3e", host="worker-1", pid=4242)
>>> owner
'6f1c2d3e@worker-1:4242'
>>> parse_owner(owner)
LeaseOwner(run_id='6f1c2d3e', host='worker-1', pid=4242)
>>> [retry_delay_s(a, base_s=5, max_s=60) for a in (1, 2, 3, 4, 5)]
[5.0, 10.0, 20.0, 40.0, 60.0]
>>> may_retry(attempts=2, max_attempts=3), may_retry(attempts=3, max_attempts=3)
(True, False)

A run's writes (ledger moves, publishes, Kafka commits) are *fenced* by its :class:`LeaseToken`: the ledger refuses a
stale one (another run took over, or a retry started a later attempt), a Delta table a publish below its epoch, and a
later committer fences a Kafka commit's transaction. A process paused past its lease writes nothing:

>>> LeaseToken(owner, attempt=2, epoch=3)
LeaseToken(owner='6f1c2d3e@worker-1:4242', attempt=2, epoch=3)
>>> print(LeaseToken(owner, attempt=2, epoch=3))
6f1c2d3e@worker-1:4242 (attempt 2, epoch 3)
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
