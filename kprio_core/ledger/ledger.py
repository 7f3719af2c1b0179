"""The batch ledger: plans, their ranges and states, so two batches never take the same offsets.

A plan of 29 records of orders-2[0] is batch b-000001; a second plan asking for offset 28 again
conflicts; once the first fails it holds partition 0 from offset 0 on, while partition 1 drains:

>>> from kprio_core.model.offsets import OffsetRange
>>> from kprio_core.model.drain_plan import DrainPlan, PlannedRange
>>> def plan(partition, start, end):
...     r = PlannedRange(2, OffsetRange("orders-2", partition, start, end), est_bytes=200 * (end - start))
...     return DrainPlan("orders", "lag-aware", 50, None, {2: 29, 1: 14, 0: 7}, {2: 29}, (r,))
>>> ledger = Ledger("sqlite://")
>>> b = ledger.record_plan(plan(0, 0, 29))
>>> b.batch_id, b.state.value, b.attempts
('b-000001', 'planned', 1)
>>> ledger.record_plan(plan(0, 28, 40))
Traceback (most recent call last):
...
kprio_core.errors.RangeConflict: plan of 'orders': orders-2[0]@[28,40) overlaps orders-2[0]@[0,29) held by batch b-000001 (planned)
>>> ledger.mark_failed(b.batch_id, "drain failed: broker restarted", retry_at=None).holds
True
>>> [str(h) for h in ledger.holds("orders")]
['orders-2[0] held from offset 0 by failed batch b-000001 (attempt 1): drain failed: broker restarted']
>>> ledger.record_plan(plan(1, 0, 29)).batch_id
'b-000002'
>>> ledger.retry(b.batch_id, reason="automatic retry 2 of 3").attempts
2
>>> ledger.close()
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Row, insert, select, update
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from kprio_core.errors import DrainStatsInvalid, InvalidTransition, LeaseLost, RangeConflict
from kprio_core.ledger.attempts import AttemptMethods
from kprio_core.ledger.base import current_incarnations, need_reason, planned_incarnations, streak_after
from kprio_core.ledger.beliefs import BeliefMethods, believed_offsets, note_commits, plan_incarnations
from kprio_core.ledger.codec import (
    CLEARED_OUTCOME,
    drain_values,
    from_us,
    maybe_us,
    offset_range,
    outcome_values,
    plan_json,
    range_values,
)
from kprio_core.ledger.derived import DerivedReads
from kprio_core.ledger.engine import DEFAULT_BUSY_TIMEOUT_S, database_clock, make_engine
from kprio_core.ledger.gate import TRANSACTIONS
from kprio_core.ledger.launches import LaunchMethods
from kprio_core.ledger.leases import LeaseMethods, check_token
from kprio_core.ledger.meta import Identity, Numbering, has_batches, number_after, open_schema, read_identity
from kprio_core.ledger.rules import below_committed, full, predecessors, room_for, self_overlap, slots_in_use
from kprio_core.ledger.samples import record as record_samples
from kprio_core.ledger.schema import batches, events, meta, ranges
from kprio_core.log_changes import superseded
from kprio_core.model.drain_plan import DrainPlan
from kprio_core.model.log_state import Superseded
from kprio_core.model.offsets import OffsetRange, TopicPartitionKey
from kprio_core.model.priority import Priority
from kprio_core.model.records import Batch, BatchEvent, Hold
from kprio_core.model.recovery import LeaseToken, may_retry
from kprio_core.model.results import CheckReport, CommitReport, DrainResult
from kprio_core.model.states import IN_FLIGHT, BatchState, check_transition

if TYPE_CHECKING:
    from kprio_core.config import LedgerSettings

S = BatchState


def utc_now() -> datetime:
    """This host's clock: the ledger's clock on SQLite (every process that opens the file runs on this host)."""
    return datetime.now(UTC)


class Ledger(AttemptMethods, LeaseMethods, LaunchMethods, DerivedReads, BeliefMethods):
    """Batches of drain plans in SQLite (a file by default) or PostgreSQL. Every method is one transaction.

    Time is the database's (``clock`` None, the default): a lease, a backoff and a launch claim expire by
    one clock for every host that shares a PostgreSQL ledger, never by each host's own (:meth:`now`). A
    test passes its own ``clock``.
    """

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

    def _open(self) -> str:
        for attempt in (1, 2):
            try:
                with TRANSACTIONS.transaction(), self._engine.begin() as conn:
                    open_schema(conn, self._url, self._now_us())
                    return read_identity(conn).ledger_id
            except DBAPIError:
                # Postgres: two processes creating the tables at once; the loser's CREATE fails
                # and the tables exist by the time it retries.
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def now(self) -> datetime:
        """The ledger's time: the database server's clock on PostgreSQL, this host's on SQLite (or the test's)."""
        return self._clock()

    # ----------------------------------------------------------------------------- identity

    @property
    def ledger_id(self) -> str:
        """Random hex made when the ledger was created: tells this ledger's output from another life's."""
        return self._ledger_id

    def identity(self) -> Identity:
        with self._tx() as (conn, _):
            return read_identity(conn)

    def is_fresh(self) -> bool:
        """True while no batch was ever recorded and no earlier life was adopted."""
        with self._tx() as (conn, _):
            return not has_batches(conn) and read_identity(conn).adopted_at is None

    def number_batches_after(self, n: int) -> None:
        """Number the next batch ``b-(n+1)`` or above, after an earlier life's batches.

        Only before the first batch is recorded (else :class:`LedgerNotFresh`); never lowers the numbering.
        """
        if n < 0:
            raise ValueError(f"batch numbers are >= 0, got {n}")
        with TRANSACTIONS.transaction(), self._engine.begin() as conn:
            number_after(conn, n)

    def mark_adopted(self, note: str) -> None:
        """Record that an earlier life's committed offsets and output were adopted (``note`` says what)."""
        need_reason("mark_adopted", "the ledger", note)
        now = self._now_us()
        with self._tx() as (conn, _):
            conn.execute(update(meta).where(meta.c.id == 1).values(adopted_us=now, adopted_note=note))

    # ----------------------------------------------------------------------------- reserving

    def record_plan(self, plan: DrainPlan, *, max_in_flight: int | None = None) -> Batch:
        """Store ``plan`` as a new planned batch reserving its ranges, or raise :class:`RangeConflict`.

        Conflicts: two ranges of the plan overlap; a range overlaps one of a batch in flight or
        lies on a partition a failed batch holds; a priority of the plan already has
        ``max_in_flight`` batches in flight (slots are per priority); or a range starts below the
        offset kprio committed on its partition, or on an earlier incarnation of it (the plan was
        made from a lag snapshot older than a commit another driver made meanwhile:
        :func:`~kprio_core.ledger.rules.below_committed`). Empty ranges hold no offset and are not
        recorded.
        """
        what = f"plan of {plan.logical_topic!r}"
        plan = dataclasses.replace(plan, ranges=tuple(r for r in plan.ranges if r.range.count))
        problem = self_overlap(plan.offset_ranges())
        if problem:
            raise RangeConflict(f"{what}: {problem}")
        with self._tx(lock_numbering=True) as (conn, numbering):
            now = self._now_us()
            self._lock_topic(conn, plan.logical_topic)
            taken = self._taken(conn, numbering, plan.logical_topic)
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
            self._log(conn, key, None, S.PLANNED, 1, now, None)
            return self._batch(conn, numbering, key)

    # ----------------------------------------------------------------------------- transitions

    def mark_drained(self, batch_id: str, result: DrainResult, *, fence: LeaseToken | None = None) -> Batch:
        """The drain wrote (and staged) the batch's ranges; ``result`` replaces any earlier drain and voids checks.

        :class:`LeaseLost` when ``result`` is of an older attempt than the batch's (a newer one owns it).
        ``fence``: the run's lease token; every move of a run passes it, and a stale one is refused
        (:class:`LeaseLost`, nothing changed). Moves without one are an operator's.
        """
        def apply(conn: Connection, row: Row, now: int) -> dict[str, Any]:
            rows = self._range_rows(conn, [row.id])[row.id]
            stats = _match_drain(batch_id, row, rows, result)
            for r in rows:
                values = outcome_values(stats[r.id]) if r.id in stats else CLEARED_OUTCOME
                conn.execute(update(ranges).where(ranges.c.id == r.id).values(**values))
            return {"drained_us": now, **drain_values(result), "checks_json": None}

        return self._move(batch_id, S.DRAINED, apply, fence=fence)

    def mark_checked(self, batch_id: str, report: CheckReport, *, fence: LeaseToken | None = None) -> Batch:
        """The blocking checks passed on the drained output, and it was published.

        A failed check is allowed only on ranges already split off (it must name them).
        """
        def apply(conn: Connection, row: Row, now: int) -> dict[str, Any]:
            mine = {offset_range(r) for r in self._range_rows(conn, [row.id])[row.id]}
            for outcome in report.failed:
                still = [r for r in outcome.failed_ranges if r in mine]
                if still or not outcome.failed_ranges:
                    where = ", ".join(map(str, still)) or "ranges it does not name"
                    raise InvalidTransition(f"batch {batch_id} cannot become checked: {outcome.failure()}, on {where} "
                                            "of this batch; split those ranges off or fail the batch")
            return {"checks_json": report.to_json()}

        return self._move(batch_id, S.CHECKED, apply, fence=fence)

    def mark_committed(self, batch_id: str, report: CommitReport, *, fence: LeaseToken | None = None,
                       log_ends: Mapping[TopicPartitionKey, int] | None = None,
                       reached: Mapping[TopicPartitionKey, int] | None = None) -> Batch:
        """The offsets were committed (check :meth:`ready_to_commit` first); the batch releases its lease.

        ``committed_at`` stays the first commit's time: a re-drain's commit commits nothing new.
        What the commit moved raises the partitions' believed committed offsets (:meth:`beliefs`), and is
        a commit sample per partition (:meth:`commit_samples`), with its log end seen after the commit
        (``log_ends``; unknown when absent). ``reached`` raises the beliefs too: per partition the batch's
        end, where its commit found the group at or past it already (moved forward by someone while the
        batch was in flight: its offsets up to there are kprio's, drained; only what lies beyond is someone
        else's skip).
        """
        def apply(conn: Connection, row: Row, now: int) -> dict[str, Any]:
            note_commits(conn, row.logical_topic, {**{tp: (None, end) for tp, end in (reached or {}).items()},
                                                   **report.moves()}, now)
            record_samples(conn, row.logical_topic, row.id, report.moves(), log_ends or {}, now)
            return {"commit_json": report.to_json(), "committed_us": row.committed_us or now,
                    "lease_owner": None, "lease_until_us": None}

        return self._move(batch_id, S.COMMITTED, apply, fence=fence)

    def mark_failed(self, batch_id: str, reason: str, *, retry_at: datetime | None, transient: bool = False,
                    fence: LeaseToken | None = None) -> Batch:
        """The batch failed (``reason`` says why); it holds its partitions (unless a re-drain of committed offsets).

        ``retry_at``: not retried automatically before then (None: at once, or only by an operator).
        ``transient``: the cause passes by itself (see :attr:`Batch.transient`): never exhausted.
        """
        need_reason("mark_failed", batch_id, reason)
        return self._move(batch_id, S.FAILED, lambda conn, row, now: {
            "reason": reason, "transient": transient, "retry_at_us": maybe_us(retry_at), "lease_owner": None,
            "lease_until_us": None, "transient_streak": streak_after(row.transient_streak, transient),
        }, reason=reason, fence=fence)

    def retry_now(self, batch_id: str) -> Batch:
        """A failed batch's backoff ends now (a fresh driver retries a transient failure at once); no move.

        Only a failed batch's ``retry_at`` changes: any other state is returned as it is.
        """
        with self._tx() as (conn, numbering):
            now = self._now_us()
            row = self._row(conn, numbering, batch_id, for_update=True)
            if S(row.state) is S.FAILED and row.retry_at_us is not None and row.retry_at_us > now:
                conn.execute(update(batches).where(batches.c.id == row.id).values(retry_at_us=now, updated_us=now))
            return self._batch(conn, numbering, row.id)

    def _move(self, batch_id: str, asked: BatchState, apply: Callable[[Connection, Row, int], dict[str, Any]], *,
              reason: str | None = None, fence: LeaseToken | None = None) -> Batch:
        with self._tx() as (conn, numbering):
            now = self._now_us()
            row = self._row(conn, numbering, batch_id, for_update=True)
            if fence is not None:
                check_token(batch_id, row, fence, f"the move to {asked.value}")
            current = S(row.state)
            check_transition(batch_id, current, asked)
            values = apply(conn, row, now)
            conn.execute(update(batches).where(batches.c.id == row.id).values(state=asked.value, updated_us=now,
                                                                                **values))
            self._log(conn, row.id, current, asked, row.attempts, now, reason)
            return self._batch(conn, numbering, row.id)

    # ----------------------------------------------------------------------------- commit order

    def blocking_predecessors(self, batch_id: str) -> list[Batch]:
        """Batches in flight or holding with an earlier range on one of this batch's partitions, oldest first.

        This batch must not commit before they do (it would commit past their offsets). A re-drain
        of committed offsets has none and is nobody's.
        """
        with self._tx() as (conn, numbering):
            batch = self._batch(conn, numbering, self._row(conn, numbering, batch_id).id)
            if batch.replay_of_committed:
                return []
            taken = self._taken(conn, numbering, batch.logical_topic)
            keys = [numbering.key(b) for b in predecessors(batch.plan.offset_ranges(), taken, batch_id)]
            return self._load(conn, numbering, select(batches).where(batches.c.id.in_(keys)).order_by(batches.c.id))

    def ready_to_commit(self, logical_topic: str) -> list[Batch]:
        """Checked batches of the topic with no blocking predecessor, oldest first."""
        query = (select(batches).where(batches.c.logical_topic == logical_topic, batches.c.state == S.CHECKED.value)
                 .order_by(batches.c.id))
        with self._tx() as (conn, numbering):
            taken = self._taken(conn, numbering, logical_topic)
            checked = self._load(conn, numbering, query)
        return [b for b in checked
                if b.replay_of_committed or not predecessors(b.plan.offset_ranges(), taken, b.batch_id)]

    # ----------------------------------------------------------------------------- reading

    def get(self, batch_id: str) -> Batch:
        """The batch of that id, or :class:`BatchNotFound`."""
        with self._tx() as (conn, numbering):
            return self._batch(conn, numbering, self._row(conn, numbering, batch_id).id)

    def batches(self, logical_topic: str | None = None, states: Iterable[BatchState] | None = None,
                limit: int | None = None) -> list[Batch]:
        """Batches, newest first, optionally of one topic, in some states, at most ``limit``."""
        query = select(batches).order_by(batches.c.id.desc())
        if logical_topic is not None:
            query = query.where(batches.c.logical_topic == logical_topic)
        if states is not None:
            query = query.where(batches.c.state.in_([S(s).value for s in states]))
        if limit is not None:
            query = query.limit(limit)
        with self._tx() as (conn, numbering):
            return self._load(conn, numbering, query)

    def in_flight(self, logical_topic: str | None = None) -> list[Batch]:
        """Batches reserving their ranges (planned, drained, checked), oldest first."""
        return self.batches(logical_topic, IN_FLIGHT)[::-1]

    def reserved_ranges(self, logical_topic: str) -> list[OffsetRange]:
        """Non-empty ranges of the topic's batches in flight, sorted (the planner skips these and :meth:`holds`)."""
        with self._tx() as (conn, numbering):
            taken = self._taken(conn, numbering, logical_topic)
        return sorted(t.range for t in taken if t.in_flight and t.range.count)

    def holds(self, logical_topic: str, max_attempts: int | None = None) -> list[Hold]:
        """Partitions held by the topic's failed batches, one per batch and partition, from its first range there.

        A superseded batch (:meth:`superseded`) holds nothing.

        ``max_attempts`` marks holds whose batch may no longer be retried automatically (a transient
        failure always may).
        """
        query = (
            select(ranges.c.topic, ranges.c.kafka_partition, ranges.c.start_offset, batches)
            .join(batches, batches.c.id == ranges.c.batch_id)
            .where(batches.c.logical_topic == logical_topic, batches.c.state == S.FAILED.value,
                   batches.c.replay_of_committed.is_(False), ranges.c.start_offset < ranges.c.end_offset)
        )
        with self._tx() as (conn, numbering):
            rows = conn.execute(query).all()
            gone = {s.batch_id for s in self._all_superseded(conn, numbering, logical_topic, [S.FAILED])}
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
        """Where the topic's batches in ``states`` are superseded: planned on an earlier incarnation of a partition.

        One entry per batch and partition, oldest batch first (see :func:`kprio_core.log_changes.superseded`
        for the rule: such a batch never runs again and holds nothing).
        """
        with self._tx() as (conn, numbering):
            return self._all_superseded(conn, numbering, logical_topic, states)

    def superseded_batch(self, batch_id: str) -> tuple[Superseded, ...]:
        """Where one batch is superseded (empty: nowhere); :class:`BatchNotFound` for an unknown id."""
        with self._tx() as (conn, numbering):
            return self._superseded(conn, numbering, self._row(conn, numbering, batch_id))

    def note_superseded(self, found: Superseded) -> bool:
        """Log in the batch's events that it is superseded there, once; True when this call logged it."""
        line = found.describe()
        with self._tx() as (conn, numbering):
            row = self._row(conn, numbering, found.batch_id)
            seen = conn.execute(select(events.c.id).where(events.c.batch_id == row.id, events.c.reason == line)).first()
            if seen is not None:
                return False
            self._log(conn, row.id, S(row.state), S(row.state), row.attempts, self._now_us(), line)
            return True

    def _all_superseded(self, conn: Connection, numbering: Numbering, logical_topic: str,
                        states: Iterable[BatchState]) -> list[Superseded]:
        current = current_incarnations(conn, logical_topic)
        if not current:
            return []
        query = (select(batches).where(batches.c.logical_topic == logical_topic,
                                       batches.c.state.in_([S(s).value for s in states])).order_by(batches.c.id))
        rows = conn.execute(query).all()
        by_key = self._range_rows(conn, [r.id for r in rows])
        return [s for r in rows
                for s in superseded(numbering.batch_id(r.id), planned_incarnations(r.plan_json, by_key[r.id]), current)]

    def full_priorities(self, logical_topic: str, max_in_flight: int) -> dict[Priority, list[str]]:
        """Priorities whose ``max_in_flight`` slots are all taken, with the batches taking them (oldest first)."""
        with self._tx() as (conn, numbering):
            return full(slots_in_use(self._taken(conn, numbering, logical_topic)), max_in_flight)

    def events(self, batch_id: str | None = None, logical_topic: str | None = None) -> list[BatchEvent]:
        """Logged steps in the order they were logged, of one batch, one topic, or all."""
        query = select(events).order_by(events.c.id)
        if logical_topic is not None:
            query = query.join(batches, batches.c.id == events.c.batch_id).where(
                batches.c.logical_topic == logical_topic)
        with self._tx() as (conn, numbering):
            if batch_id is not None:
                query = query.where(events.c.batch_id == self._row(conn, numbering, batch_id).id)
            return [
                BatchEvent(row.id, numbering.batch_id(row.batch_id), S(row.from_state) if row.from_state else None,
                           S(row.to_state), row.attempt, from_us(row.at_us), row.reason)
                for row in conn.execute(query)
            ]


def _match_drain(batch_id: str, row: Row, rows: Sequence[Row], result: DrainResult) -> dict[int, Any]:
    """Range row id -> its stats in ``result``; refuse a result that is not of this batch's current attempt."""
    where = f"drain result of {batch_id}"
    if result.batch_id != batch_id or result.logical_topic != row.logical_topic:
        raise DrainStatsInvalid(f"{where}: it names batch {result.batch_id} of {result.logical_topic!r}")
    if result.attempt != row.attempts:
        raise LeaseLost(f"{where} is of attempt {result.attempt}, but the batch is at attempt {row.attempts}: "
                        "a newer attempt owns it")
    by_range = {offset_range(r): r for r in rows}
    found: dict[int, Any] = {}
    for s in result.ranges:
        r = by_range.get(s.range)
        if r is None or r.priority != s.priority:
            raise DrainStatsInvalid(f"{where}: {s.range} (priority {s.priority}) is not a range of the batch")
        if r.id in found:
            raise DrainStatsInvalid(f"{where}: {s.range} is there twice")
        found[r.id] = s
    missing = [str(offset_range(r)) for r in rows if r.id not in found and r.end_offset > r.start_offset]
    if missing:
        raise DrainStatsInvalid(f"{where}: no stats for {', '.join(missing)}")
    return found
