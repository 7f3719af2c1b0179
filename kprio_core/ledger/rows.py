"""The batch rows the ledger's repositories share, read and written inside the caller's transaction: a batch's
row and range rows, a batch from them, its events, the topic lock, the ranges taken, where a batch is superseded.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from sqlalchemy import Connection, Row, Select, insert, select

from kprio_core.errors import BatchNotFound
from kprio_core.ledger.codec import offset_range, to_batch
from kprio_core.ledger.engine import insert_for
from kprio_core.ledger.meta import Numbering
from kprio_core.ledger.rules import Taken
from kprio_core.ledger.schema import batches, events, partitions, ranges, topic_locks
from kprio_core.log_changes import superseded
from kprio_core.model.log_state import Superseded
from kprio_core.model.offsets import TopicPartitionKey
from kprio_core.model.records import Batch
from kprio_core.model.states import IN_FLIGHT_VALUES, BatchState

_CHUNK = 500
"""Batch keys per IN (...) list when loading range rows."""


def batch_row(conn: Connection, numbering: Numbering, batch_id: str, *, for_update: bool = False) -> Row:
    """The row of ``batch_id`` (locked for the transaction with ``for_update``), or :class:`BatchNotFound`."""
    query = select(batches).where(batches.c.id == numbering.key(batch_id))
    if for_update:
        query = query.with_for_update()
    row = conn.execute(query).first()
    if row is None:
        raise BatchNotFound(f"the ledger has no batch {batch_id}")
    return row


def range_rows(conn: Connection, keys: list[int]) -> dict[int, list[Row]]:
    """The range rows of each batch key, in plan order."""
    found: dict[int, list[Row]] = {k: [] for k in keys}
    for i in range(0, len(keys), _CHUNK):
        query = select(ranges).where(ranges.c.batch_id.in_(keys[i : i + _CHUNK])).order_by(ranges.c.id)
        for row in conn.execute(query):
            found[row.batch_id].append(row)
    return found


def load(conn: Connection, numbering: Numbering, query: Select) -> list[Batch]:
    """The batches of a query on the batches table, in its order."""
    rows = conn.execute(query).all()
    by_key = range_rows(conn, [r.id for r in rows])
    return [to_batch(r, by_key[r.id], numbering) for r in rows]


def load_one(conn: Connection, numbering: Numbering, key: int) -> Batch:
    return load(conn, numbering, select(batches).where(batches.c.id == key))[0]


def log_event(conn: Connection, key: int, from_state: BatchState | None, to_state: BatchState, attempt: int,
              at_us: int, reason: str | None) -> None:
    """One step in the batch's events."""
    conn.execute(insert(events).values(
        batch_id=key, from_state=from_state.value if from_state else None, to_state=to_state.value,
        attempt=attempt, at_us=at_us, reason=reason,
    ))


def lock_topic(conn: Connection, logical_topic: str) -> None:
    """Serialise what reserves offsets of one topic (Postgres row lock; SQLite holds the write lock already)."""
    conn.execute(insert_for(conn, topic_locks).values(logical_topic=logical_topic).on_conflict_do_nothing())
    conn.execute(
        select(topic_locks.c.logical_topic).where(topic_locks.c.logical_topic == logical_topic).with_for_update()
    )


def taken_ranges(conn: Connection, numbering: Numbering, logical_topic: str) -> list[Taken]:
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


def superseded_at(conn: Connection, numbering: Numbering, row: Row) -> tuple[Superseded, ...]:
    """Where the batch of ``row`` is superseded (empty: nowhere)."""
    mine = range_rows(conn, [row.id])[row.id]
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
