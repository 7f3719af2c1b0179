"""The ledger's database, which its repositories share: the engine, the clock, one transaction, and who the ledger
is (``kprio_meta``: its id, where batch numbers start, an adopted earlier life).

Every public repository method is one :meth:`Store.tx` transaction, so a process dying between calls leaves the
last committed truth. Threads share a store: each transaction takes its own pooled connection and passes the
process's gate (``gate.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Self

from sqlalchemy import Connection, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from kprio_core.ledger.codec import to_us
from kprio_core.ledger.engine import DEFAULT_BUSY_TIMEOUT_S, database_clock, make_engine
from kprio_core.ledger.gate import TRANSACTIONS
from kprio_core.ledger.meta import (Identity, Numbering, has_batches, number_after, open_schema, read_identity,
                                    read_numbering)
from kprio_core.ledger.rows import need_reason
from kprio_core.ledger.schema import meta


class Store:
    """A ledger in SQLite or PostgreSQL, opened (schema created or brought up to date). Time is the database's
    (``clock`` None): leases, backoffs and claims expire by one clock for every host sharing a PostgreSQL ledger."""

    def __init__(self, url: str, *, clock: Callable[[], datetime] | None = None,
                 busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
        self._url = url
        self._engine = make_engine(url, busy_timeout_s)
        self._clock = clock or database_clock(self._engine)
        try:
            self._ledger_id = self._open()
        except BaseException:
            self._engine.dispose()
            raise

    def __repr__(self) -> str:
        return f"{type(self).__name__}({make_url(self._url).render_as_string(hide_password=True)!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every pooled connection."""
        self._engine.dispose()

    def _open(self) -> str:
        for attempt in (1, 2):
            try:
                with TRANSACTIONS.transaction(), self._engine.begin() as conn:
                    open_schema(conn, self._url, self.now_us())
                    return read_identity(conn).ledger_id
            except DBAPIError:
                # Postgres: two processes creating the tables at once; the loser's CREATE fails
                # and the tables exist by the time it retries.
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    @contextmanager
    def tx(self, *, lock_numbering: bool = False) -> Iterator[tuple[Connection, Numbering]]:
        """One transaction and the ledger's numbering; ``lock_numbering`` when it creates batches.

        A method that judges time reads the clock inside it, once the lock is held: waiting for a lock must not
        age its ``now``.
        """
        with TRANSACTIONS.transaction(), self._engine.begin() as conn:
            yield conn, read_numbering(conn, lock=lock_numbering)

    def now(self) -> datetime:
        """The ledger's time: the database server's clock on PostgreSQL, this host's on SQLite (or the test's)."""
        return self._clock()

    def now_us(self) -> int:
        now = self._clock()
        if now.tzinfo is None:
            raise ValueError(f"the ledger clock must return an aware datetime, got {now!r}")
        return to_us(now)

    @property
    def ledger_id(self) -> str:
        """Random hex made when the ledger was created: tells this ledger's output from another life's."""
        return self._ledger_id

    def identity(self) -> Identity:
        with self.tx() as (conn, _):
            return read_identity(conn)

    def is_fresh(self) -> bool:
        """True while no batch was ever recorded and no earlier life was adopted."""
        with self.tx() as (conn, _):
            return not has_batches(conn) and read_identity(conn).adopted_at is None

    def number_batches_after(self, n: int) -> None:
        """Number the next batch ``b-(n+1)`` or above (never lower), only before the first (else LedgerNotFresh)."""
        if n < 0:
            raise ValueError(f"batch numbers are >= 0, got {n}")
        with TRANSACTIONS.transaction(), self._engine.begin() as conn:
            number_after(conn, n)

    def mark_adopted(self, note: str) -> None:
        """Record that an earlier life's committed offsets and output were adopted (``note`` says what)."""
        need_reason("mark_adopted", "the ledger", note)
        now = self.now_us()
        with self.tx() as (conn, _):
            conn.execute(update(meta).where(meta.c.id == 1).values(adopted_us=now, adopted_note=note))


class Repository:
    """One part of the ledger (its batches, leases, launch claims, beliefs, samples) over the store it shares."""

    def __init__(self, store: Store) -> None:
        self._store = store
