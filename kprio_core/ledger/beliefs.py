"""What kprio believes about each partition, and the log changes and decisions it recorded.

A belief is the topic's identity, the incarnation kprio drains and the offset kprio last committed (raised by
``Moves.mark_committed``, lowered only by a recorded decision). Without belief rows (an earlier kprio's ledger),
the committed offset is the highest range end of the committed batches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from sqlalchemy import ColumnElement, Connection, Select, func, insert, select, update

from kprio_core.ledger.codec import from_us
from kprio_core.ledger.schema import batches, log_events, partitions, ranges
from kprio_core.ledger.store import Repository
from kprio_core.model.drain_plan import DrainPlan
from kprio_core.model.log_state import Belief, Change, Outcome
from kprio_core.model.offsets import TopicPartitionKey
from kprio_core.model.records import LogEvent

DECIDED_BY = ("rule", "policy", "person")


class Beliefs(Repository):
    """What kprio believes about each partition's log, and the changes of it that kprio saw and decided."""

    def of(self, logical_topic: str) -> dict[TopicPartitionKey, Belief]:
        """Every partition kprio believes something about (its rows, else what its committed batches say)."""
        with self._store.tx() as (conn, _):
            found = {(r.topic, r.kafka_partition): Belief(r.topic, r.kafka_partition, r.topic_id, r.incarnation,
                                                          r.committed)
                     for r in conn.execute(select(partitions).where(partitions.c.logical_topic == logical_topic))}
            for topic, partition, end in conn.execute(_committed_ends(logical_topic)):
                found.setdefault((topic, partition), Belief(topic, partition, None, 1, int(end)))
        return found

    def remember(self, logical_topic: str, beliefs: Iterable[Belief]) -> None:
        """Store these beliefs as they are (identity, incarnation, committed), one row per partition."""
        now = self._store.now_us()
        with self._store.tx() as (conn, _):
            for b in beliefs:
                _upsert(conn, logical_topic, b.topic, b.partition, now, topic_id=b.topic_id,
                        incarnation=b.incarnation, committed=b.committed)

    def record_change(self, logical_topic: str, change: Change, outcome: Outcome, *, decided_by: str,
                      committed_after: int | None = None, note: str | None = None) -> LogEvent | None:
        """Record a change and its outcome; None when it repeats the partition's last event (a hold seen again)."""
        if decided_by not in DECIDED_BY:
            raise ValueError(f"decided_by must be one of {DECIDED_BY}, not {decided_by!r}")
        now = self._store.now_us()
        values = {"logical_topic": logical_topic, "topic": change.topic, "kafka_partition": change.partition,
                  "incarnation": change.incarnation, "state": change.state.value, "outcome": outcome.value,
                  "decided_by": decided_by, "believed": change.believed, "committed": change.committed,
                  "committed_after": committed_after, "log_start": change.log_start,
                  "high_watermark": change.high_watermark, "note": note}
        with self._store.tx() as (conn, _):
            last = conn.execute(
                select(log_events).where(log_events.c.topic == change.topic,
                                         log_events.c.kafka_partition == change.partition)
                .order_by(log_events.c.id.desc()).limit(1)).first()
            same = ("incarnation", "state", "outcome", "decided_by", "believed", "committed")
            if decided_by != "person" and last is not None and all(getattr(last, k) == values[k] for k in same):
                return None
            key = conn.execute(insert(log_events).values(at_us=now, **values)).inserted_primary_key[0]
            row = conn.execute(select(log_events).where(log_events.c.id == key)).one()
        return _event(row)

    def open_holds(self, logical_topic: str) -> dict[TopicPartitionKey, LogEvent]:
        """Per partition, the hold a person has not decided yet: its last change (:meth:`last_changes`) is a
        ``hold``; a ``kprio reset`` or the policy's decision records a later event and ends it."""
        return {tp: e for tp, e in self.last_changes(logical_topic).items() if e.outcome == Outcome.HOLD.value}

    def last_changes(self, logical_topic: str) -> dict[TopicPartitionKey, LogEvent]:
        """Per partition, its last recorded change and decision, a wait left aside (kprio decides those again)."""
        last: dict[TopicPartitionKey, LogEvent] = {}
        for event in self.log_events(logical_topic):
            if event.outcome != Outcome.WAIT.value:
                last[(event.topic, event.partition)] = event
        return last

    def log_events(self, logical_topic: str | None = None, *, after: int = 0) -> list[LogEvent]:
        """Recorded log changes and decisions, oldest first, of one logical topic or all, with id above ``after``."""
        query = select(log_events).where(log_events.c.id > after).order_by(log_events.c.id)
        if logical_topic is not None:
            query = query.where(log_events.c.logical_topic == logical_topic)
        with self._store.tx() as (conn, _):
            return [_event(r) for r in conn.execute(query)]


def note_commits(conn: Connection, logical_topic: str, moves: Mapping[TopicPartitionKey, tuple[int | None, int]],
                 now: int) -> None:
    """Raise each partition's believed committed offset to what a commit wrote (never lower it)."""
    for (topic, partition), (_, new) in moves.items():
        row = conn.execute(select(partitions.c.committed).where(
            partitions.c.topic == topic, partitions.c.kafka_partition == partition)).first()
        if row is None or row.committed is None or row.committed < new:
            _upsert(conn, logical_topic, topic, partition, now, committed=new)


def believed_offsets(conn: Connection, plan: DrainPlan) -> dict[TopicPartitionKey, tuple[int, int | None]]:
    """Per partition of ``plan``'s ranges, (incarnation, offset kprio last committed), read as :meth:`Beliefs.of`
    does but in the caller's transaction; unknown partitions left out."""
    wanted = {r.topic_partition for r in plan.offset_ranges() if r.count}
    found: dict[TopicPartitionKey, tuple[int, int | None]] = {}
    topics = sorted({t for t, _ in wanted})
    for row in conn.execute(select(partitions).where(partitions.c.topic.in_(topics))):
        if (row.topic, row.kafka_partition) in wanted:
            found[(row.topic, row.kafka_partition)] = (int(row.incarnation or 1), row.committed)
    for topic, partition, end in conn.execute(_committed_ends(plan.logical_topic, ranges.c.topic.in_(topics))):
        if (topic, partition) in wanted:
            found.setdefault((topic, partition), (1, int(end)))
    return found


def _committed_ends(logical_topic: str, *where: ColumnElement[bool]) -> Select:
    """Per partition, the highest range end of the topic's committed batches (the belief without belief rows)."""
    return (select(ranges.c.topic, ranges.c.kafka_partition, func.max(ranges.c.end_offset))
            .join(batches, batches.c.id == ranges.c.batch_id)
            .where(batches.c.logical_topic == logical_topic, batches.c.committed_us.is_not(None), *where)
            .group_by(ranges.c.topic, ranges.c.kafka_partition))


def plan_incarnations(plan: DrainPlan) -> dict[TopicPartitionKey, int]:
    """The incarnation ``plan`` drains on each partition of its ranges."""
    return {r.topic_partition: plan.incarnation_of(r.topic, r.partition) for r in plan.offset_ranges()}


def _upsert(conn: Connection, logical_topic: str, topic: str, partition: int, now: int, **values) -> None:
    where = (partitions.c.topic == topic, partitions.c.kafka_partition == partition)
    if conn.execute(select(partitions.c.topic).where(*where)).first() is None:
        conn.execute(insert(partitions).values(topic=topic, kafka_partition=partition, logical_topic=logical_topic,
                                               incarnation=values.pop("incarnation", 1) or 1, updated_us=now,
                                               **values))
    else:
        conn.execute(update(partitions).where(*where).values(updated_us=now, **values))


def _event(r) -> LogEvent:
    return LogEvent(r.id, r.logical_topic, r.topic, r.kafka_partition, r.incarnation, r.state, r.outcome,
                    r.decided_by, r.believed, r.committed, r.committed_after, r.log_start, r.high_watermark,
                    from_us(r.at_us), r.note)
