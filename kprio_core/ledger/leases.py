"""Leases on batches in flight: a run claims its batch, renews the lease while it works, releases it.

A lease not renewed in time means its run died (:meth:`Leases.expired`). Every write of a run is *fenced* by its
:class:`~kprio_core.model.recovery.LeaseToken`: the ledger's moves take it as ``fence=`` and refuse a stale one
with :class:`LeaseLost`; outside the ledger no lock is held, a run asks :meth:`Leases.check` right before a
publish or a Kafka commit and the system written refuses a stale owner itself (docs/architecture.md, "Fenced writes").
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import timedelta

from sqlalchemy import Row, select, update

from kprio_core.errors import BatchBusy, InvalidTransition, LeaseLost
from kprio_core.ledger.codec import from_us
from kprio_core.ledger.rows import batch_row, load, load_one, log_event
from kprio_core.ledger.schema import batches
from kprio_core.ledger.store import Repository
from kprio_core.model.records import Batch
from kprio_core.model.recovery import Lease, LeaseToken
from kprio_core.model.states import IN_FLIGHT_VALUES, BatchState

_US = 1_000_000


class Leases(Repository):
    """Who works on each batch in flight: claim, renew, release and check a lease; the expired ones."""

    def claim(self, batch_id: str, owner: str, lease_s: float, *, take_over: Collection[str] = ()) -> Batch:
        """Hold the lease of a batch in flight until now + ``lease_s``; :class:`BatchBusy` if another owner does.

        Claiming one's own renews it; taking over an expired or ``take_over`` lease logs an event naming both owners.
        """
        _check_lease(owner, lease_s)
        with self._store.tx() as (conn, numbering):
            now = self._store.now_us()
            row = batch_row(conn, numbering, batch_id, for_update=True)
            state = BatchState(row.state)
            if not state.in_flight:
                raise InvalidTransition(f"batch {batch_id} is {state.value} and cannot be claimed "
                                        "(only a batch in flight can; retry or replay it first)")
            if row.lease_owner not in (None, owner):
                check_free(batch_id, row, now, take_over)
                why = "expired" if row.lease_until_us <= now else "declared dead"
                log_event(conn, row.id, state, state, row.attempts, now,
                          f"lease of {row.lease_owner} ({why}, until {from_us(row.lease_until_us):%Y-%m-%d %H:%M:%S} "
                          f"UTC) taken over by {owner}")
            values = {"lease_owner": owner, "lease_until_us": now + round(lease_s * _US)}
            if row.lease_owner != owner:
                values["lease_epoch"] = next_epoch(row.lease_epoch, row.attempts)
            conn.execute(update(batches).where(batches.c.id == row.id).values(**values))
            return load_one(conn, numbering, row.id)

    def renew(self, batch_id: str, owner: str, lease_s: float, *, attempt: int | None = None,
              epoch: int | None = None) -> Lease:
        """Extend ``owner``'s lease to now + ``lease_s``; :class:`LeaseLost` when it is no longer theirs.

        ``attempt``, ``epoch``: as claimed; a later attempt, or a lease that passed to another owner and back,
        ends the lease too.
        """
        _check_lease(owner, lease_s)
        with self._store.tx() as (conn, numbering):
            now = self._store.now_us()
            row = batch_row(conn, numbering, batch_id, for_update=True)
            moved_on = ((attempt is not None and row.attempts != attempt)
                        or (epoch is not None and (row.lease_epoch or 0) != epoch))
            if row.lease_owner != owner or moved_on or not BatchState(row.state).in_flight:
                holder = f"{row.lease_owner}'s" if row.lease_owner else "nobody's"
                raise LeaseLost(f"batch {batch_id} ({row.state}, attempt {row.attempts}): the lease is no longer "
                                f"{owner}'s{f' (attempt {attempt})' if moved_on else ''} but {holder}; "
                                "stop working on it")
            until = now + round(lease_s * _US)
            conn.execute(update(batches).where(batches.c.id == row.id).values(lease_until_us=until))
            return Lease(owner, from_us(until))

    def release(self, batch_id: str, owner: str) -> bool:
        """Give up ``owner``'s lease; False (and nothing changed) when it was not theirs any more."""
        with self._store.tx() as (conn, numbering):
            key = numbering.key(batch_id)
            batch_row(conn, numbering, batch_id)  # BatchNotFound for an unknown id
            done = conn.execute(update(batches).where(batches.c.id == key, batches.c.lease_owner == owner)
                                .values(lease_owner=None, lease_until_us=None))
            return bool(done.rowcount)

    def check(self, batch_id: str, token: LeaseToken, what: str) -> Batch:
        """The batch if ``token`` holds it now, else :class:`LeaseLost` naming ``what`` (the write about to be
        made outside the ledger). One short read: no lock outlives it."""
        with self._store.tx() as (conn, numbering):
            row = batch_row(conn, numbering, batch_id)
            check_token(batch_id, row, token, what)
            return load_one(conn, numbering, row.id)

    def expired(self, logical_topic: str | None = None) -> list[Batch]:
        """Batches in flight whose lease ran out (their run died): retry them. Oldest first."""
        now = self._store.now_us()
        query = (select(batches)
                 .where(batches.c.state.in_(IN_FLIGHT_VALUES), batches.c.lease_until_us <= now)
                 .order_by(batches.c.id))
        if logical_topic is not None:
            query = query.where(batches.c.logical_topic == logical_topic)
        with self._store.tx() as (conn, numbering):
            return load(conn, numbering, query)


def _check_lease(owner: str, lease_s: float) -> None:
    if not owner:
        raise ValueError("a lease needs an owner (kprio_core.model.recovery.lease_owner)")
    if lease_s <= 0:
        raise ValueError(f"a lease must last > 0 s, got {lease_s}")


def next_epoch(epoch: int | None, attempts: int) -> int:
    """The epoch of a lease passing to a new owner: above the last one and the attempt (a Delta table written
    by a kprio that fenced with the attempt number holds that as the batch's transaction).

    >>> next_epoch(0, 1), next_epoch(4, 2), next_epoch(0, 3)
    (2, 5, 4)
    """
    return max(epoch or 0, attempts) + 1


def check_token(batch_id: str, row: Row, token: LeaseToken, what: str) -> None:
    """Raise :class:`LeaseLost` unless ``token`` holds the batch now (owner, attempt, epoch, in flight)."""
    if (row.lease_owner == token.owner and row.attempts == token.attempt and (row.lease_epoch or 0) == token.epoch
            and BatchState(row.state).in_flight):
        return
    holder = f"held by {row.lease_owner}" if row.lease_owner else "held by nobody"
    raise LeaseLost(f"{what} of batch {batch_id} refused: the batch is {row.state} at attempt {row.attempts}, {holder}; "
                    f"the lease of {token} is stale (another run took the batch over, or a retry moved it on); "
                    "nothing was written")


def check_free(batch_id: str, row: Row, now_us: int, take_over: Collection[str]) -> None:
    """Raise :class:`BatchBusy` while another owner's lease is live and not declared dead."""
    if row.lease_owner is None or row.lease_until_us <= now_us or row.lease_owner in take_over:
        return
    left = timedelta(microseconds=row.lease_until_us - now_us).total_seconds()
    raise BatchBusy(f"batch {batch_id} is held by {row.lease_owner} until "
                    f"{from_us(row.lease_until_us):%Y-%m-%d %H:%M:%S} UTC ({left:g} s left); wait for the lease "
                    "to expire, or name that owner as dead")
