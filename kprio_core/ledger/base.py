"""What every part of the ledger shares: the engine, the clock, one transaction, rows to batches, events.

Every public method of the ledger is one :meth:`LedgerBase._tx` transaction (BEGIN IMMEDIATE on
SQLite), so a process that dies between two calls leaves the last committed truth behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime

from sqlalchemy import Connection, Engine, Row, Select, insert, select

from kprio_core.errors import BatchNotFound
from kprio_core.ledger.codec import offset_range, to_batch, to_us
from kprio_core.ledger.engine import insert_for
from kprio_core.ledger.gate import TRANSACTIONS
from kprio_core.ledger.meta import Numbering, read_numbering
from kprio_core.ledger.rules import Taken
from kprio_core.ledger.schema import batches, events, partitions, ranges, topic_locks
from kprio_core.log_changes import superseded
from kprio_core.model.log_state import Superseded
from kprio_core.model.offsets import TopicPartitionKey
from kprio_core.model.records import Batch
from kprio_core.model.states import IN_FLIGHT_VALUES, BatchState

_CHUNK = 500
"""Batch keys per IN (...) list when loading range rows."""


class LedgerBase:
    """Engine, clock and the row helpers the ledger's parts share."""

    _url: str
    _engine: Engine
    _clock: Callable[[], datetime]

    @contextmanager
    def _tx(self, *, lock_numbering: bool = False) -> Iterator[tuple[Connection, Numbering]]:
        """One transaction and the ledger's numbering; ``lock_numbering`` when it creates batches.

        A method that judges time (a lease, a backoff) reads its clock inside the transaction, once
        the lock is held: a wait for another process's lock must not age its ``now``.
        """
        with TRANSACTIONS.transaction(), self._engine.begin() as conn:
            yield conn, read_numbering(conn, lock=lock_numbering)

    def _now_us(self) -> int:
        now = self._clock()
        if now.tzinfo is None:
            raise ValueError(f"the ledger clock must return an aware datetime, got {now!r}")
        return to_us(now)

    @staticmethod
    def _row(conn: Connection, numbering: Numbering, batch_id: str, *, for_update: bool = False) -> Row:
        query = select(batches).where(batches.c.id == numbering.key(batch_id))
        if for_update:
            query = query.with_for_update()
        row = conn.execute(query).first()
        if row is None:
            raise BatchNotFound(f"the ledger has no batch {batch_id}")
        return row

    @staticmethod
    def _range_rows(conn: Connection, keys: list[int]) -> dict[int, list[Row]]:
        found: dict[int, list[Row]] = {k: [] for k in keys}
        for i in range(0, len(keys), _CHUNK):
            query = select(ranges).where(ranges.c.batch_id.in_(keys[i : i + _CHUNK])).order_by(ranges.c.id)
            for row in conn.execute(query):
                found[row.batch_id].append(row)
        return found

    def _load(self, conn: Connection, numbering: Numbering, query: Select) -> list[Batch]:
        """The batches of a query on the batches table, in its order."""
        rows = conn.execute(query).all()
        by_key = self._range_rows(conn, [r.id for r in rows])
        return [to_batch(r, by_key[r.id], numbering) for r in rows]

    def _batch(self, conn: Connection, numbering: Numbering, key: int) -> Batch:
        return self._load(conn, numbering, select(batches).where(batches.c.id == key))[0]

    @staticmethod
    def _log(conn: Connection, key: int, from_state: BatchState | None, to_state: BatchState, attempt: int,
             at_us: int, reason: str | None) -> None:
        conn.execute(insert(events).values(
            batch_id=key, from_state=from_state.value if from_state else None, to_state=to_state.value,
            attempt=attempt, at_us=at_us, reason=reason,
        ))

    @staticmethod
    def _lock_topic(conn: Connection, logical_topic: str) -> None:
        """Serialise what reserves offsets of one topic (Postgres row lock; SQLite holds the write lock already)."""
        conn.execute(insert_for(conn, topic_locks).values(logical_topic=logical_topic).on_conflict_do_nothing())
        conn.execute(
            select(topic_locks.c.logical_topic).where(topic_locks.c.logical_topic == logical_topic).with_for_update()
        )

    @staticmethod
    def _taken(conn: Connection, numbering: Numbering, logical_topic: str) -> list[Taken]:
        """Every range of the topic's batches in flight or failed."""
        query = (
            select(ranges, batches.c.state, batches.c.replay_of_committed, batches.c.plan_json)
            .join(batches, batches.c.id == ranges.c.batch_id)
            .where(batches.c.logical_topic == logical_topic,
                   batches.c.state.in_([*IN_FLIGHT_VALUES, BatchState.FAILED.value]))
            .order_by(ranges.c.batch_id, ranges.c.id)
        )
        rows = conn.execute(query).all()
        failed: dict[int, list[Row]] = {}
        for r in rows:
            if r.state == BatchState.FAILED.value:
                failed.setdefault(r.batch_id, []).append(r)
        current = current_incarnations(conn, logical_topic) if failed else {}
        gone = {key for key, mine in failed.items()
                if superseded(numbering.batch_id(key), planned_incarnations(mine[0].plan_json, mine), current)}
        return [
            Taken(offset_range(r), r.priority, numbering.batch_id(r.batch_id), BatchState(r.state),
                  bool(r.replay_of_committed), r.batch_id in gone)
            for r in rows
        ]

    def _superseded(self, conn: Connection, numbering: Numbering, row: Row) -> tuple[Superseded, ...]:
        """Where the batch of ``row`` is superseded (empty: nowhere)."""
        mine = self._range_rows(conn, [row.id])[row.id]
        return superseded(numbering.batch_id(row.id), planned_incarnations(row.plan_json, mine),
                          current_incarnations(conn, row.logical_topic))


def current_incarnations(conn: Connection, logical_topic: str) -> dict[TopicPartitionKey, int]:
    """The incarnation kprio believes each partition of the topic is at (only rows above 1)."""
    query = select(partitions.c.topic, partitions.c.kafka_partition, partitions.c.incarnation).where(
        partitions.c.logical_topic == logical_topic, partitions.c.incarnation > 1)
    return {(t, p): int(i) for t, p, i in conn.execute(query)}


def planned_incarnations(plan_text: str, range_rows: Iterable[Row]) -> dict[TopicPartitionKey, int]:
    """Every partition of a batch's ranges with the incarnation its plan drains there (1 when not recorded)."""
    recorded = json.loads(plan_text).get("incarnations") or {}
    return {(r.topic, r.kafka_partition): int(recorded.get(f"{r.topic}[{r.kafka_partition}]", 1))
            for r in range_rows if r.end_offset > r.start_offset}


def need_reason(what: str, batch_id: str, reason: object) -> None:
    """A failure, retry or split says why: refuse an empty reason."""
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"{what}({batch_id}): needs a reason, got {reason!r}")


def streak_after(streak: int | None, transient: bool) -> int:
    """Transient failures in a row after one more failure (``transient`` or not).

    >>> streak_after(0, True), streak_after(2, True), streak_after(2, False)
    (1, 3, 0)
    """
    return (streak or 0) + 1 if transient else 0
