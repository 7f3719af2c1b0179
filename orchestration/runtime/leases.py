"""Leases of the batches a run works on: who owns one, whether the owner is gone, and the heartbeat.

A run claims its batch's lease in the ledger (``owner = "<run id>@<host>:<pid>"``, at the batch's attempt: its
:class:`~kprio_core.model.recovery.LeaseToken`) and a :class:`Heartbeat` thread renews it every ``lease_s / 3``.
When the process dies (kill -9, OOM, a lost machine) the lease expires; :func:`owner_dead` tells sooner when it
can: the owner's run has ended, or its process is gone from this host.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable

import psutil

from kprio_core.errors import LeaseLost
from kprio_core.model.recovery import LeaseToken, lease_owner, parse_owner
from orchestration.runtime.ports import LeasesPort

LOGGER = logging.getLogger("kprio.lease")


def this_owner(run_id: str) -> str:
    """The lease owner string of this process working for Dagster run ``run_id``."""
    return lease_owner(run_id, host=socket.gethostname(), pid=os.getpid())


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs on this host (a zombie waiting to be reaped counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def owner_dead(owner: str, run_ended: Callable[[str], bool] | None = None) -> bool:
    """True when the lease ``owner`` certainly no longer works on its batch: its run ended (``run_ended``) or its
    process on this host is gone; anything else (another host, a foreign owner) is left to the lease's expiry."""
    parsed = parse_owner(owner)
    if parsed is None:
        return False
    if run_ended is not None and parsed.run_id and run_ended(parsed.run_id):
        return True
    return parsed.host == socket.gethostname() and not process_alive(parsed.pid)


class Heartbeat:
    """Renews a run's lease of ``batch_id`` (its ``token``: owner and attempt) every ``lease_s / 3`` until stopped.

    ``leases``: the run's own (each renewal one transaction on a pooled connection of its own; an in-memory SQLite
    ledger is one database per thread). ``lost`` is set when the lease is someone else's (taken over, or a retry
    moved the batch on), or renewals failed for longer than the lease; the run must then stop before it publishes
    or commits, and if it does not notice, the ledger refuses its stale token anyway (fencing).
    """

    def __init__(self, leases: LeasesPort, batch_id: str, token: LeaseToken, lease_s: float, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.batch_id, self.token, self.lease_s = batch_id, token, lease_s
        self.lost = threading.Event()
        self.why: str | None = None
        self._stop = threading.Event()
        self.leases, self._clock = leases, clock
        self._thread = threading.Thread(target=self._run, name=f"kprio-lease-{batch_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self.lease_s)

    def check(self) -> None:
        """Raise LeaseLost when the lease is gone (see the class docstring)."""
        if self.lost.is_set():
            raise LeaseLost(f"batch {self.batch_id}: the lease of {self.token} is lost ({self.why}); "
                            "this run stops without publishing or committing")

    def _run(self) -> None:
        renewed = self._clock()
        while not self._stop.wait(self.lease_s / 3):
            try:  # one transaction: between transactions only may a pause point stop it (ledger/gate.py)
                self.leases.renew(self.batch_id, self.token.owner, self.lease_s, attempt=self.token.attempt,
                                  epoch=self.token.epoch)
                renewed = self._clock()
            except LeaseLost as err:
                self._lose(str(err))
                return
            except Exception as err:  # noqa: BLE001 - a renewal that fails now may work next time
                unrenewed = self._clock() - renewed
                LOGGER.warning("batch %s: lease renewal failed (%.0f s since the last one): %s",
                               self.batch_id, unrenewed, err)
                if unrenewed >= self.lease_s:
                    self._lose(f"not renewed for {unrenewed:.0f} s, longer than its {self.lease_s:g} s: {err}")
                    return

    def _lose(self, why: str) -> None:
        self.why = why
        LOGGER.warning("batch %s: lease of %s lost: %s", self.batch_id, self.token, why)
        self.lost.set()
