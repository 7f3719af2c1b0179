"""The batch ledger: plans, their ranges and states, reserved so two batches in flight never overlap.

Every method is one transaction, so a process that dies between two calls leaves the truth
behind: a batch whose run died stays in flight (its ranges reserved) until someone calls
:meth:`Ledger.abandon` or :meth:`Ledger.mark_failed`. A plan of 29 records of orders-2 drained
as 5800 bytes gives 200 bytes per record; a second plan asking for offset 28 again conflicts:

>>> from kprio_core.offsets import OffsetRange
>>> from kprio_core.drain_plan import DrainPlan, PlannedRange
>>> def plan(start, end):
...     r = PlannedRange(2, OffsetRange("orders-2", 0, start, end), est_bytes=200 * (end - start))
...     return DrainPlan("orders", "lag-aware", 50, None, {2: 29}, {2: 29}, (r,))
>>> ledger = Ledger("sqlite://")
>>> b = ledger.record_plan(plan(0, 29))
>>> b.batch_id, b.state.value, b.attempts
('b-000001', 'planned', 1)
>>> ledger.mark_drained(b.batch_id, {"ranges": [{"topic": "orders-2", "records": 29, "bytes": 5800}]}).state.value
'drained'
>>> ledger.avg_record_bytes("orders")
{'orders-2': 200.0}
>>> ledger.record_plan(plan(28, 40))
Traceback (most recent call last):
...
kprio_core.errors.RangeConflict: orders-2[0]@[28,40) overlaps orders-2[0]@[0,29) held by batch b-000001 (drained)
>>> ledger.close()
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Row, delete, func, insert, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError

from kprio_core.errors import BatchNotFound, InvalidTransition, RangeConflict
from kprio_core.ledger.engine import DEFAULT_BUSY_TIMEOUT_S, make_engine
from kprio_core.ledger.records import Batch, BatchEvent, format_batch_id, parse_batch_id
from kprio_core.ledger.schema import METADATA, batches, drained_topics, events, ranges, topic_locks, topic_state
from kprio_core.ledger.states import IN_FLIGHT, REPLAYABLE, BatchState, check_transition
from kprio_core.ledger.stats import topic_totals
from kprio_core.offsets import OffsetRange
from kprio_core.drain_plan import DrainPlan

if TYPE_CHECKING:
    from kprio_core.burst import PollHistory
    from kprio_core.config import LedgerSettings

HISTORY_STATE = "burst.poll_history"
"""Name under which :meth:`Ledger.save_history` keeps the poll-history windows of a topic."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_IN_FLIGHT_VALUES = sorted(s.value for s in IN_FLIGHT)


def utc_now() -> datetime:
    """The default clock of a ledger."""
    return datetime.now(UTC)


class Ledger:
    """Batches of drain plans in a SQL database (SQLite file by default, any SQLAlchemy URL)."""

    def __init__(
        self,
        url: str,
        *,
        clock: Callable[[], datetime] = utc_now,
        busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    ) -> None:
        self._url = url
        self._clock = clock
        self._engine = make_engine(url, busy_timeout_s)
        self._create_tables()

    @classmethod
    def from_settings(cls, s: LedgerSettings, **kwargs: Any) -> Ledger:
        """The ledger at ``s.url`` (``ledger.url`` of kprio.yaml)."""
        return cls(s.url, **kwargs)

    def __repr__(self) -> str:
        return f"Ledger({make_url(self._url).render_as_string(hide_password=True)!r})"

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every pooled connection."""
        self._engine.dispose()

    # ----------------------------------------------------------------------------- reserving

    def record_plan(self, plan: DrainPlan, *, max_in_flight: int | None = None) -> Batch:
        """Store ``plan`` as a new planned batch holding its ranges, or raise :class:`RangeConflict`.

        Conflicts: a range overlaps one held by a batch in flight, two ranges of the plan
        overlap each other, or ``max_in_flight`` batches of the topic are already in flight.
        """
        _check_limit(max_in_flight)
        _check_plan_overlap(plan)
        now = self._now_us()
        self._ensure_lock_row(plan.logical_topic)
        with self._engine.begin() as conn:
            self._lock_topic(conn, plan.logical_topic)
            self._check_capacity(conn, plan.logical_topic, max_in_flight)
            self._check_overlap(conn, plan.offset_ranges())
            key = conn.execute(
                insert(batches).values(
                    logical_topic=plan.logical_topic,
                    state=BatchState.PLANNED.value,
                    plan_json=plan.to_json(),
                    records=plan.records,
                    est_bytes=plan.est_bytes,
                    created_us=now,
                    updated_us=now,
                    attempts=1,
                    replay_of_committed=False,
                )
            ).inserted_primary_key[0]
            _insert_ranges(conn, key, plan)
            self._log(conn, key, None, BatchState.PLANNED, 1, now, None)
            return _to_batch(self._row(conn, key))

    def replay(self, batch_id: str, *, max_in_flight: int | None = None) -> Batch:
        """Reserve the exact ranges of a failed or committed batch again and move it back to planned.

        ``attempts`` grows by one and the outputs of the previous attempt are cleared. A
        committed batch keeps ``replay_of_committed=True`` for good: its re-drain rewrites the
        same output and its commit step has nothing new to commit.
        """
        _check_limit(max_in_flight)
        topic = self.get(batch_id).logical_topic
        key = self._key(batch_id)
        now = self._now_us()
        self._ensure_lock_row(topic)
        with self._engine.begin() as conn:
            # Topic row first, batch row second: the same order as record_plan, so no deadlock.
            self._lock_topic(conn, topic)
            row = self._row(conn, key, for_update=True)
            current = BatchState(row.state)
            if current not in REPLAYABLE:
                raise InvalidTransition(
                    f"batch {batch_id} is {current.value} and cannot be replayed: only failed or committed "
                    "batches can (it is still in flight; fail it first)"
                )
            check_transition(batch_id, current, BatchState.PLANNED)
            self._check_capacity(conn, topic, max_in_flight)
            self._check_overlap(conn, _to_plan(row).offset_ranges())
            attempt = row.attempts + 1
            conn.execute(
                update(batches)
                .where(batches.c.id == key)
                .values(
                    state=BatchState.PLANNED.value,
                    updated_us=now,
                    attempts=attempt,
                    replay_of_committed=row.replay_of_committed or current is BatchState.COMMITTED,
                    reason=None,
                    drain_stats_json=None,
                    check_results_json=None,
                    commit_report_json=None,
                )
            )
            self._log(conn, key, current, BatchState.PLANNED, attempt, now, f"replay of a {current.value} batch")
            return _to_batch(self._row(conn, key))

    # ----------------------------------------------------------------------------- transitions

    def mark_drained(self, batch_id: str, stats: dict) -> Batch:
        """The drain wrote the batch; ``stats`` has a ``ranges`` list with topic, records, bytes per range."""
        totals = topic_totals(stats, where=batch_id)
        values = {"drain_stats_json": _dump(stats, f"drain stats of {batch_id}"), "check_results_json": None}
        return self._move(batch_id, BatchState.DRAINED, values, drained=totals)

    def mark_checked(self, batch_id: str, results: dict) -> Batch:
        """The blocking checks passed on the drained output."""
        return self._move(batch_id, BatchState.CHECKED, {"check_results_json": _dump(results, f"checks of {batch_id}")})

    def mark_committed(self, batch_id: str, report: dict) -> Batch:
        """The offsets were committed; the batch releases its ranges."""
        return self._move(batch_id, BatchState.COMMITTED, {"commit_report_json": _dump(report, f"commit of {batch_id}")})

    def mark_failed(self, batch_id: str, reason: str) -> Batch:
        """The batch failed (its ranges are released); ``reason`` says why."""
        if not isinstance(reason, str) or not reason.strip():
            raise ValueError(f"mark_failed({batch_id}): a failure needs a reason, got {reason!r}")
        return self._move(batch_id, BatchState.FAILED, {"reason": reason}, reason=reason)

    def abandon(self, batch_id: str, reason: str) -> Batch:
        """Fail an in-flight batch whose run died (after a crash), releasing its ranges."""
        return self.mark_failed(batch_id, f"abandoned: {reason}")

    # ----------------------------------------------------------------------------- reading

    def get(self, batch_id: str) -> Batch:
        """The batch of that id, or :class:`BatchNotFound`."""
        key = self._key(batch_id)
        with self._engine.begin() as conn:
            return _to_batch(self._row(conn, key))

    def batches(
        self,
        logical_topic: str | None = None,
        states: Iterable[BatchState] | None = None,
        limit: int | None = None,
    ) -> list[Batch]:
        """Batches, newest first, optionally of one topic, in some states, at most ``limit``."""
        query = select(batches).order_by(batches.c.id.desc())
        if logical_topic is not None:
            query = query.where(batches.c.logical_topic == logical_topic)
        if states is not None:
            query = query.where(batches.c.state.in_([BatchState(s).value for s in states]))
        if limit is not None:
            query = query.limit(limit)
        with self._engine.begin() as conn:
            return [_to_batch(row) for row in conn.execute(query)]

    def in_flight(self, logical_topic: str | None = None) -> list[Batch]:
        """Batches holding their ranges (planned, drained, checked), oldest first."""
        return sorted(self.batches(logical_topic, IN_FLIGHT), key=lambda b: parse_batch_id(b.batch_id) or 0)

    def reserved_ranges(self, logical_topic: str) -> list[OffsetRange]:
        """Non-empty ranges held by the topic's batches in flight, sorted (the planner skips these)."""
        query = (
            select(ranges.c.topic, ranges.c.kafka_partition, ranges.c.start_offset, ranges.c.end_offset)
            .join(batches, batches.c.id == ranges.c.batch_id)
            .where(
                batches.c.logical_topic == logical_topic,
                batches.c.state.in_(_IN_FLIGHT_VALUES),
                ranges.c.start_offset < ranges.c.end_offset,
            )
        )
        with self._engine.begin() as conn:
            return sorted(OffsetRange(*row) for row in conn.execute(query))

    def events(self, batch_id: str | None = None, logical_topic: str | None = None) -> list[BatchEvent]:
        """Transitions in the order they were logged, of one batch, one topic, or all."""
        query = select(events).order_by(events.c.id)
        if batch_id is not None:
            self.get(batch_id)  # BatchNotFound for an unknown id rather than an empty list
            query = query.where(events.c.batch_id == self._key(batch_id))
        if logical_topic is not None:
            query = query.join(batches, batches.c.id == events.c.batch_id).where(
                batches.c.logical_topic == logical_topic
            )
        with self._engine.begin() as conn:
            return [
                BatchEvent(
                    seq=row.id,
                    batch_id=format_batch_id(row.batch_id),
                    from_state=BatchState(row.from_state) if row.from_state else None,
                    to_state=BatchState(row.to_state),
                    attempt=row.attempt,
                    at=_to_datetime(row.at_us),
                    reason=row.reason,
                )
                for row in conn.execute(query)
            ]

    def avg_record_bytes(self, logical_topic: str, last_batches: int = 20) -> dict[str, float]:
        """Bytes per record of each priority topic over the last ``last_batches`` batches that drained it.

        A topic drained 29 records in 5800 B then 1 record in 400 B -> 6200 / 30 = 206.67 B.
        Topics never drained (or drained with 0 records) are absent.
        """
        if last_batches < 1:
            raise ValueError(f"avg_record_bytes({logical_topic!r}): last_batches must be >= 1, got {last_batches}")
        d = drained_topics.c
        recent = (
            select(
                d.topic,
                d.records,
                d.bytes,
                func.row_number()
                .over(partition_by=d.topic, order_by=(d.drained_us.desc(), d.batch_id.desc()))
                .label("rank"),
            )
            .where(d.logical_topic == logical_topic)
            .subquery()
        )
        query = (
            select(recent.c.topic, func.sum(recent.c.records), func.sum(recent.c.bytes))
            .where(recent.c.rank <= last_batches)
            .group_by(recent.c.topic)
            .order_by(recent.c.topic)
        )
        with self._engine.begin() as conn:
            rows = conn.execute(query).all()
        return {topic: int(size) / int(records) for topic, records, size in rows if records}

    # ----------------------------------------------------------------------------- small state

    def load_history(self, logical_topic: str) -> dict | None:
        """The poll-history windows saved for the topic (``PollHistory.to_dict()``), or None."""
        return self.load_state(logical_topic, HISTORY_STATE)

    def save_history(self, logical_topic: str, history: dict) -> None:
        """Keep the topic's poll-history windows (``PollHistory.to_dict()``) across restarts."""
        self.save_state(logical_topic, HISTORY_STATE, history)

    def load_poll_history(self, logical_topic: str) -> PollHistory | None:
        """The saved windows as a ``kprio_core.burst.PollHistory``, or None when none were saved."""
        saved = self.load_history(logical_topic)
        if saved is None:
            return None
        from kprio_core.burst import PollHistory  # lazy: the ledger works without the burst module

        return PollHistory.from_dict(saved)

    def load_state(self, logical_topic: str, name: str) -> dict | None:
        """The JSON state ``name`` of the topic (as json.loads gives it back), or None."""
        query = select(topic_state.c.value_json).where(
            topic_state.c.logical_topic == logical_topic, topic_state.c.name == name
        )
        with self._engine.begin() as conn:
            text = conn.execute(query).scalar()
        return None if text is None else json.loads(text)

    def save_state(self, logical_topic: str, name: str, value: dict) -> None:
        """Replace the JSON state ``name`` of the topic (e.g. the rate-quota tracker)."""
        text = _dump(value, f"state {name!r} of {logical_topic!r}")
        now = self._now_us()
        where = (topic_state.c.logical_topic == logical_topic, topic_state.c.name == name)
        for attempt in (1, 2):
            try:
                with self._engine.begin() as conn:
                    changed = conn.execute(update(topic_state).where(*where).values(value_json=text, updated_us=now))
                    if not changed.rowcount:
                        conn.execute(
                            insert(topic_state).values(
                                logical_topic=logical_topic, name=name, value_json=text, updated_us=now
                            )
                        )
                return
            except IntegrityError:
                # Postgres: another process inserted the same key between our UPDATE and INSERT.
                if attempt == 2:
                    raise

    # ----------------------------------------------------------------------------- internals

    def _create_tables(self) -> None:
        for attempt in (1, 2):
            try:
                with self._engine.begin() as conn:
                    METADATA.create_all(conn)
                return
            except DBAPIError:
                # Postgres: two processes creating the tables at once; the loser's CREATE fails
                # and the tables exist by the time it retries.
                if attempt == 2:
                    raise

    def _move(
        self,
        batch_id: str,
        asked: BatchState,
        values: dict[str, Any],
        *,
        reason: str | None = None,
        drained: Mapping[str, tuple[int, int]] | None = None,
    ) -> Batch:
        key = self._key(batch_id)
        now = self._now_us()
        with self._engine.begin() as conn:
            row = self._row(conn, key, for_update=True)
            current = BatchState(row.state)
            check_transition(batch_id, current, asked)
            conn.execute(update(batches).where(batches.c.id == key).values(state=asked.value, updated_us=now, **values))
            if drained is not None:
                _replace_drained(conn, key, row.logical_topic, drained, now)
            self._log(conn, key, current, asked, row.attempts, now, reason)
            return _to_batch(self._row(conn, key))

    def _ensure_lock_row(self, logical_topic: str) -> None:
        """Create the topic's lock row if missing, in its own transaction (so taking the lock never races an insert).

        Not cached per process: a lock row that went missing would silently lock nothing.
        """
        try:
            with self._engine.begin() as conn:
                exists = conn.execute(
                    select(topic_locks.c.logical_topic).where(topic_locks.c.logical_topic == logical_topic)
                ).first()
                if exists is None:
                    conn.execute(insert(topic_locks).values(logical_topic=logical_topic))
        except IntegrityError:
            pass  # another process created it first: that is all we needed

    @staticmethod
    def _lock_topic(conn: Connection, logical_topic: str) -> None:
        # Postgres: serialises reservations of one topic. SQLite: BEGIN IMMEDIATE already holds
        # the database write lock and SQLAlchemy drops FOR UPDATE from the statement.
        conn.execute(
            select(topic_locks.c.logical_topic).where(topic_locks.c.logical_topic == logical_topic).with_for_update()
        )

    @staticmethod
    def _check_capacity(conn: Connection, logical_topic: str, max_in_flight: int | None) -> None:
        if max_in_flight is None:
            return
        keys = conn.execute(
            select(batches.c.id)
            .where(batches.c.logical_topic == logical_topic, batches.c.state.in_(_IN_FLIGHT_VALUES))
            .order_by(batches.c.id)
        ).scalars().all()
        if len(keys) >= max_in_flight:
            held = ", ".join(format_batch_id(k) for k in keys)
            raise RangeConflict(
                f"logical topic {logical_topic!r} already has {len(keys)} batch(es) in flight "
                f"(max_in_flight={max_in_flight}): {held}"
            )

    @staticmethod
    def _check_overlap(conn: Connection, wanted: Iterable[OffsetRange]) -> None:
        wanted = sorted(r for r in wanted if r.count)  # an empty range holds no offset
        if not wanted:
            return
        query = (
            select(
                ranges.c.topic,
                ranges.c.kafka_partition,
                ranges.c.start_offset,
                ranges.c.end_offset,
                batches.c.id,
                batches.c.state,
            )
            .join(batches, batches.c.id == ranges.c.batch_id)
            .where(
                batches.c.state.in_(_IN_FLIGHT_VALUES),
                ranges.c.topic.in_(sorted({r.topic for r in wanted})),
                ranges.c.start_offset < ranges.c.end_offset,
            )
            .order_by(batches.c.id, ranges.c.topic, ranges.c.kafka_partition, ranges.c.start_offset)
        )
        held = [(OffsetRange(t, p, s, e), key, state) for t, p, s, e, key, state in conn.execute(query)]
        conflicts = [(w, h, key, state) for w in wanted for h, key, state in held if w.overlaps(h)]
        if conflicts:
            w, h, key, state = conflicts[0]
            more = f" (and {len(conflicts) - 1} more overlaps)" if len(conflicts) > 1 else ""
            raise RangeConflict(f"{w} overlaps {h} held by batch {format_batch_id(key)} ({state}){more}")

    @staticmethod
    def _row(conn: Connection, key: int, *, for_update: bool = False) -> Row:
        query = select(batches).where(batches.c.id == key)
        if for_update:
            query = query.with_for_update()
        row = conn.execute(query).first()
        if row is None:
            raise BatchNotFound(f"the ledger has no batch {format_batch_id(key)}")
        return row

    def _log(
        self,
        conn: Connection,
        key: int,
        from_state: BatchState | None,
        to_state: BatchState,
        attempt: int,
        at_us: int,
        reason: str | None,
    ) -> None:
        conn.execute(
            insert(events).values(
                batch_id=key,
                from_state=from_state.value if from_state else None,
                to_state=to_state.value,
                attempt=attempt,
                at_us=at_us,
                reason=reason,
            )
        )

    def _key(self, batch_id: str) -> int:
        key = parse_batch_id(batch_id)
        if key is None:
            raise BatchNotFound(f"{batch_id!r} is not a ledger batch id (expected like 'b-000042')")
        return key

    def _now_us(self) -> int:
        now = self._clock()
        if now.tzinfo is None:
            raise ValueError(f"the ledger clock must return an aware datetime, got {now!r}")
        return (now - _EPOCH) // timedelta(microseconds=1)


def _check_limit(max_in_flight: int | None) -> None:
    if max_in_flight is not None and max_in_flight < 1:
        raise ValueError(f"max_in_flight must be >= 1 or None, got {max_in_flight}")


def _check_plan_overlap(plan: DrainPlan) -> None:
    """Two ranges of one plan may not hold the same offset (the ledger could not tell them apart)."""
    previous: OffsetRange | None = None
    for r in sorted(r for r in plan.offset_ranges() if r.count):
        if previous is not None and previous.overlaps(r):
            raise RangeConflict(f"plan of {plan.logical_topic!r}: {previous} overlaps {r} of the same plan")
        previous = r


def _insert_ranges(conn: Connection, key: int, plan: DrainPlan) -> None:
    if not plan.ranges:
        return
    conn.execute(
        insert(ranges),
        [
            {
                "batch_id": key,
                "topic": p.range.topic,
                "kafka_partition": p.range.partition,
                "start_offset": p.range.start,
                "end_offset": p.range.end,
                "priority": p.priority,
                "est_bytes": p.est_bytes,
            }
            for p in plan.ranges
        ],
    )


def _replace_drained(
    conn: Connection, key: int, logical_topic: str, totals: Mapping[str, tuple[int, int]], now_us: int
) -> None:
    # A rerun of the drain replaces the previous numbers: the batch counts once per topic.
    conn.execute(delete(drained_topics).where(drained_topics.c.batch_id == key))
    if totals:
        conn.execute(
            insert(drained_topics),
            [
                {
                    "batch_id": key,
                    "topic": topic,
                    "logical_topic": logical_topic,
                    "records": records,
                    "bytes": size,
                    "drained_us": now_us,
                }
                for topic, (records, size) in sorted(totals.items())
            ],
        )


def _dump(value: Mapping, what: str) -> str:
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a dict, got {type(value).__name__}")
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as err:
        raise TypeError(f"{what} is not JSON-serialisable: {err}") from None


def _load(text: str | None) -> dict | None:
    return None if text is None else json.loads(text)


def _to_datetime(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def _to_plan(row: Row) -> DrainPlan:
    return DrainPlan.from_json(row.plan_json)


def _to_batch(row: Row) -> Batch:
    return Batch(
        batch_id=format_batch_id(row.id),
        logical_topic=row.logical_topic,
        state=BatchState(row.state),
        plan=_to_plan(row),
        created_at=_to_datetime(row.created_us),
        updated_at=_to_datetime(row.updated_us),
        attempts=row.attempts,
        reason=row.reason,
        drain_stats=_load(row.drain_stats_json),
        check_results=_load(row.check_results_json),
        commit_report=_load(row.commit_report_json),
        replay_of_committed=bool(row.replay_of_committed),
    )
