"""The batches: a plan recorded as a batch reserving its ranges, refused in that transaction under the topic's lock
(``room_for``, ``below_committed``); and the batches read back (in flight, holding, superseded, ready to commit).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from sqlalchemy import Connection, Row, insert, select

from kprio_core.errors import RangeConflict
from kprio_core.ledger.beliefs import believed_offsets, plan_incarnations
from kprio_core.ledger.codec import from_us, plan_json, range_values
from kprio_core.ledger.meta import Numbering
from kprio_core.ledger.rows import (batch_row, current_incarnations, load, load_one, lock_topic, log_event,
                                    planned_incarnations, range_rows, superseded_at, taken_ranges)
from kprio_core.ledger.rules import below_committed, full, predecessors, room_for, self_overlap, slots_in_use
from kprio_core.ledger.schema import batches, events, ranges
from kprio_core.ledger.store import Repository
from kprio_core.log_changes import superseded
from kprio_core.model.drain_plan import DrainPlan
from kprio_core.model.log_state import Superseded
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.priority import Priority
from kprio_core.model.records import Batch, BatchEvent, Hold
from kprio_core.model.recovery import may_retry
from kprio_core.model.states import IN_FLIGHT, BatchState

S = BatchState


class Batches(Repository):
    """Record a plan; read the batches, what they reserve and hold, and the order they commit in."""

    def record_plan(self, plan: DrainPlan, *, max_in_flight: int | None = None) -> Batch:
        """Store ``plan`` as a new planned batch reserving its ranges, or raise :class:`RangeConflict`.

        Conflicts: overlapping ranges in the plan; a range overlapping a batch in flight or a failed batch's hold;
        a priority with ``max_in_flight`` batches in flight; a range below kprio's commit or on an earlier
        incarnation (a snapshot older than another driver's commit: :func:`~kprio_core.ledger.rules.below_committed`).
        Empty ranges are not recorded.
        """
        what = f"plan of {plan.logical_topic!r}"
        plan = dataclasses.replace(plan, ranges=tuple(r for r in plan.ranges if r.range.count))
        problem = self_overlap(plan.offset_ranges())
        if problem:
            raise RangeConflict(f"{what}: {problem}")
        with self._store.tx(lock_numbering=True) as (conn, numbering):
            now = self._store.now_us()
            lock_topic(conn, plan.logical_topic)
            taken = taken_ranges(conn, numbering, plan.logical_topic)
            room_for(what, plan.offset_ranges(), {r.priority for r in plan.ranges}, taken, max_in_flight)
            stale = below_committed(plan.offset_ranges(), plan_incarnations(plan), believed_offsets(conn, plan))
            if stale:
                more = f" (and {len(stale) - 1} more)" if len(stale) > 1 else ""
                raise RangeConflict(f"{what}: {stale[0]}{more}")
            key = conn.execute(insert(batches).values(
                logical_topic=plan.logical_topic, state=S.PLANNED.value, plan_json=plan_json(plan), attempts=1,
                replay_of_committed=False, created_us=now, updated_us=now,
            )).inserted_primary_key[0]
            if plan.ranges:
                conn.execute(insert(ranges), [{"batch_id": key, **range_values(r)} for r in plan.ranges])
            log_event(conn, key, None, S.PLANNED, 1, now, None)
            return load_one(conn, numbering, key)

    def blocking_predecessors(self, batch_id: str) -> list[Batch]:
        """Batches in flight or holding with an earlier range on this batch's partitions, oldest first: it must not
        commit before them (past their offsets). A re-drain of committed offsets has none and is nobody's."""
        with self._store.tx() as (conn, numbering):
            batch = load_one(conn, numbering, batch_row(conn, numbering, batch_id).id)
            if batch.replay_of_committed:
                return []
            taken = taken_ranges(conn, numbering, batch.logical_topic)
            keys = [numbering.key(b) for b in predecessors(batch.plan.offset_ranges(), taken, batch_id)]
            return load(conn, numbering, select(batches).where(batches.c.id.in_(keys)).order_by(batches.c.id))

    def ready_to_commit(self, logical_topic: str) -> list[Batch]:
        """Checked batches of the topic with no blocking predecessor, oldest first."""
        query = (select(batches).where(batches.c.logical_topic == logical_topic, batches.c.state == S.CHECKED.value)
                 .order_by(batches.c.id))
        with self._store.tx() as (conn, numbering):
            taken = taken_ranges(conn, numbering, logical_topic)
            checked = load(conn, numbering, query)
        return [b for b in checked
                if b.replay_of_committed or not predecessors(b.plan.offset_ranges(), taken, b.batch_id)]

    def get(self, batch_id: str) -> Batch:
        """The batch of that id, or :class:`BatchNotFound`."""
        with self._store.tx() as (conn, numbering):
            return load_one(conn, numbering, batch_row(conn, numbering, batch_id).id)

    def find(self, logical_topic: str | None = None, states: Iterable[BatchState] | None = None,
                limit: int | None = None) -> list[Batch]:
        """Batches, newest first, optionally of one topic, in some states, at most ``limit``."""
        query = select(batches).order_by(batches.c.id.desc())
        if logical_topic is not None:
            query = query.where(batches.c.logical_topic == logical_topic)
        if states is not None:
            query = query.where(batches.c.state.in_([S(s).value for s in states]))
        if limit is not None:
            query = query.limit(limit)
        with self._store.tx() as (conn, numbering):
            return load(conn, numbering, query)

    def in_flight(self, logical_topic: str | None = None) -> list[Batch]:
        """Batches reserving their ranges (planned, drained, checked), oldest first."""
        return self.find(logical_topic, IN_FLIGHT)[::-1]

    def reserved_ranges(self, logical_topic: str) -> list[OffsetRange]:
        """Non-empty ranges of the topic's batches in flight, sorted (the planner skips these and :meth:`holds`)."""
        with self._store.tx() as (conn, numbering):
            taken = taken_ranges(conn, numbering, logical_topic)
        return sorted(t.range for t in taken if t.in_flight and t.range.count)

    def holds(self, logical_topic: str, max_attempts: int | None = None) -> list[Hold]:
        """Partitions held by the topic's failed batches (not superseded), one per batch and partition, from its
        first range there; ``max_attempts`` marks those no longer retried by themselves (never transient ones)."""
        query = (
            select(ranges.c.topic, ranges.c.kafka_partition, ranges.c.start_offset, batches)
            .join(batches, batches.c.id == ranges.c.batch_id)
            .where(batches.c.logical_topic == logical_topic, batches.c.state == S.FAILED.value,
                   batches.c.replay_of_committed.is_(False), ranges.c.start_offset < ranges.c.end_offset)
        )
        with self._store.tx() as (conn, numbering):
            rows = conn.execute(query).all()
            gone = {s.batch_id for s in _all_superseded(conn, numbering, logical_topic, [S.FAILED])}
        rows = [r for r in rows if numbering.batch_id(r.id) not in gone]
        first: dict[tuple[str, int, int], Row] = {}
        for r in rows:
            key = (r.topic, r.kafka_partition, r.id)
            if key not in first or r.start_offset < first[key].start_offset:
                first[key] = r
        found = [
            Hold(r.topic, r.kafka_partition, r.start_offset, numbering.batch_id(r.id), S.FAILED, r.reason,
                 r.attempts, None if r.retry_at_us is None else from_us(r.retry_at_us),
                 max_attempts is not None and not r.transient
                 and not may_retry(attempts=r.attempts, max_attempts=max_attempts), bool(r.transient))
            for r in first.values()
        ]
        return sorted(found, key=lambda h: (h.topic, h.partition, h.start))

    def superseded(self, logical_topic: str, states: Iterable[BatchState] = (S.FAILED,)) -> list[Superseded]:
        """Where the topic's batches in ``states`` are superseded (:func:`kprio_core.log_changes.superseded`), one
        entry per batch and partition, oldest first."""
        with self._store.tx() as (conn, numbering):
            return _all_superseded(conn, numbering, logical_topic, states)

    def superseded_batch(self, batch_id: str) -> tuple[Superseded, ...]:
        """Where one batch is superseded (empty: nowhere); :class:`BatchNotFound` for an unknown id."""
        with self._store.tx() as (conn, numbering):
            return superseded_at(conn, numbering, batch_row(conn, numbering, batch_id))

    def full_priorities(self, logical_topic: str, max_in_flight: int) -> dict[Priority, list[str]]:
        """Priorities whose ``max_in_flight`` slots are all taken, with the batches taking them (oldest first)."""
        with self._store.tx() as (conn, numbering):
            return full(slots_in_use(taken_ranges(conn, numbering, logical_topic)), max_in_flight)

    def events(self, batch_id: str | None = None, logical_topic: str | None = None) -> list[BatchEvent]:
        """Logged steps in the order they were logged, of one batch, one topic, or all."""
        query = select(events).order_by(events.c.id)
        if logical_topic is not None:
            query = query.join(batches, batches.c.id == events.c.batch_id).where(
                batches.c.logical_topic == logical_topic)
        with self._store.tx() as (conn, numbering):
            if batch_id is not None:
                query = query.where(events.c.batch_id == batch_row(conn, numbering, batch_id).id)
            return [
                BatchEvent(row.id, numbering.batch_id(row.batch_id), S(row.from_state) if row.from_state else None,
                           S(row.to_state), row.attempt, from_us(row.at_us), row.reason)
                for row in conn.execute(query)
            ]


def _all_superseded(conn: Connection, numbering: Numbering, logical_topic: str,
                    states: Iterable[BatchState]) -> list[Superseded]:
    current = current_incarnations(conn, logical_topic)
    if not current:
        return []
    query = (select(batches).where(batches.c.logical_topic == logical_topic,
                                   batches.c.state.in_([S(s).value for s in states])).order_by(batches.c.id))
    rows = conn.execute(query).all()
    by_key = range_rows(conn, [r.id for r in rows])
    return [s for r in rows
            for s in superseded(numbering.batch_id(r.id), planned_incarnations(r.plan_json, by_key[r.id]), current)]
