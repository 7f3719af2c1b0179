"""New attempts of a batch: retry, replay, split, redrain, ending a backoff, and an attempt spent untaken.

A retry or replay keeps the batch's id and ranges, ``attempts`` + 1; a split moves failing ranges to a new failed
batch so the rest can publish and commit; a redrain puts ranges of a committed batch back to planned (the whole
batch, as a replay, or only those ranges, moved to a new planned batch).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, insert, update

from kprio_core.errors import BatchSuperseded, InvalidTransition
from kprio_core.ledger.codec import CLEARED_ATTEMPT, maybe_us, offset_range
from kprio_core.ledger.leases import check_free, check_token
from kprio_core.ledger.meta import Numbering
from kprio_core.ledger.rows import (batch_row, load_one, lock_topic, log_event, need_reason, range_rows, streak_after,
                                    superseded_at, taken_ranges)
from kprio_core.ledger.rules import room_for
from kprio_core.ledger.schema import batches, ranges
from kprio_core.ledger.store import Repository
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.records import Batch
from kprio_core.model.recovery import LeaseToken
from kprio_core.model.states import REPLAYABLE, BatchState, check_transition

S = BatchState


class Attempts(Repository):
    """A batch's new attempts (same ranges, ``attempts`` + 1) and the ranges split off or re-drained apart."""

    def retry(self, batch_id: str, *, reason: str, max_in_flight: int | None = None,
              take_over: Collection[str] = ()) -> Batch:
        """Try a failed or stuck batch again with the same ranges; ``attempts`` grows by one.

        A failed batch becomes planned if it has a slot and no overlap (another's hold does not stop it: it commits
        after). A batch in flight drops a lease expired or of ``take_over`` (else :class:`BatchBusy`).
        """
        need_reason("retry", batch_id, reason)
        with self._store.tx() as (conn, numbering):
            now = self._store.now_us()
            first = batch_row(conn, numbering, batch_id)  # unlocked: which way, and the topic to lock first
            if first.state == S.FAILED.value:
                return _back_to_planned(conn, numbering, first, {S.FAILED}, max_in_flight, now, reason)
            row = batch_row(conn, numbering, batch_id, for_update=True)
            state = S(row.state)
            if not state.in_flight:
                raise InvalidTransition(
                    f"batch {batch_id} is {state.value} and cannot be retried (only a failed batch or a stuck one "
                    "in flight can; replay re-drains a committed batch)"
                )
            check_free(batch_id, row, now, take_over)
            conn.execute(update(batches).where(batches.c.id == row.id).values(
                attempts=row.attempts + 1, lease_owner=None, lease_until_us=None, updated_us=now))
            log_event(conn, row.id, state, state, row.attempts + 1, now, reason)
            return load_one(conn, numbering, row.id)

    def fail_untaken(self, batch_id: str, attempt: int, *, reason: str, retry_at: datetime | None) -> Batch | None:
        """A batch the run of ``attempt`` ended without taking fails at that attempt, transient (tick rule 1b).

        None, and nothing changed, when it moved on meanwhile: a run took it, or it is neither planned or checked
        at that attempt or earlier, nor failed at an earlier one.
        """
        need_reason("fail_untaken", batch_id, reason)
        with self._store.tx() as (conn, numbering):
            now = self._store.now_us()
            row = batch_row(conn, numbering, batch_id, for_update=True)
            state = S(row.state)
            spent = ((state in (S.PLANNED, S.CHECKED) and row.attempts <= attempt)
                     or (state is S.FAILED and row.attempts < attempt))
            if not spent or row.lease_owner is not None:
                return None
            if state is not S.FAILED:
                check_transition(batch_id, state, S.FAILED)
            conn.execute(update(batches).where(batches.c.id == row.id).values(
                state=S.FAILED.value, attempts=attempt, reason=reason, transient=True, retry_at_us=maybe_us(retry_at),
                transient_streak=streak_after(row.transient_streak, True), updated_us=now))
            log_event(conn, row.id, state, S.FAILED, attempt, now, reason)
            return load_one(conn, numbering, row.id)

    def retry_now(self, batch_id: str) -> Batch:
        """A failed batch's backoff ends now (a fresh driver's transient retry); any other batch returned as it is."""
        with self._store.tx() as (conn, numbering):
            now = self._store.now_us()
            row = batch_row(conn, numbering, batch_id, for_update=True)
            if S(row.state) is S.FAILED and row.retry_at_us is not None and row.retry_at_us > now:
                conn.execute(update(batches).where(batches.c.id == row.id).values(retry_at_us=now, updated_us=now))
            return load_one(conn, numbering, row.id)

    def replay(self, batch_id: str, *, max_in_flight: int | None = None) -> Batch:
        """Re-drain a committed (operator) or failed batch: back to planned with the same ranges, attempts + 1.

        A superseded batch is refused with :class:`BatchSuperseded`, as by :meth:`retry`. A committed batch keeps
        ``replay_of_committed=True`` for good: it rewrites the same output, commits nothing new, and holds nothing.
        """
        with self._store.tx() as (conn, numbering):
            now = self._store.now_us()
            row = batch_row(conn, numbering, batch_id)
            return _back_to_planned(conn, numbering, row, REPLAYABLE, max_in_flight, now, None)

    def redrain(self, batch_id: str, wanted: Iterable[OffsetRange], *, max_in_flight: int | None = None) -> Batch:
        """Re-drain ``wanted``, ranges of a committed batch (or a failed re-drain) whose group moved back.

        Every range: :meth:`replay`. Else those range rows move (never copied) to a new planned batch, so it takes
        only the moved priorities' slots and commits only there. Refused as a replay is.
        """
        wanted = {r for r in wanted if r.count}
        if not wanted:
            raise ValueError(f"re-drain of {batch_id}: no range given")
        with self._store.tx(lock_numbering=True) as (conn, numbering):
            now = self._store.now_us()
            first = batch_row(conn, numbering, batch_id)
            lock_topic(conn, first.logical_topic)
            row = batch_row(conn, numbering, batch_id, for_update=True)
            rows = range_rows(conn, [row.id])[row.id]
            have = {offset_range(r) for r in rows if r.start_offset < r.end_offset}
            if wanted - have:
                raise ValueError(f"re-drain of {batch_id}: {', '.join(map(str, sorted(wanted - have)))} is not a "
                                 "range of the batch")
            if wanted == have:
                return _back_to_planned(conn, numbering, row, REPLAYABLE, max_in_flight, now, None)
            current = S(row.state)
            if current not in REPLAYABLE:
                raise InvalidTransition(f"batch {batch_id} is {current.value}: only a committed or failed batch's "
                                        "ranges are re-drained")
            moving = [r for r in rows if offset_range(r) in wanted]
            _room_again(conn, numbering, row, moving, f"re-drain of {batch_id}", max_in_flight)
            moved, why = ", ".join(str(offset_range(r)) for r in moving), "its group was moved back outside kprio"
            return _split_off(conn, numbering, row, moving, now,
                              {"state": S.PLANNED.value, "attempts": 1, "replay_of_committed": True},
                              f"re-drain of {moved} of {batch_id}: {why}",
                              lambda child: f"{moved} moved to {child} to be re-drained ({why})")

    def split(self, batch_id: str, failing: Iterable[OffsetRange], reason: str, *,
              retry_at: datetime | None, transient: bool = False, fence: LeaseToken | None = None) -> Batch:
        """Move the ``failing`` ranges of a batch in flight to a new failed batch (``parent`` = this one); return it.

        The range rows move (never copied) with their drain outcome. ``fence``: refused when stale
        (:class:`~kprio_core.errors.LeaseLost`).
        """
        need_reason("split", batch_id, reason)
        failing = set(failing)
        if not failing:
            raise ValueError(f"split of {batch_id}: no failing range given")
        with self._store.tx(lock_numbering=True) as (conn, numbering):
            now = self._store.now_us()
            row = batch_row(conn, numbering, batch_id, for_update=True)
            if fence is not None:
                check_token(batch_id, row, fence, "the split")
            state = S(row.state)
            if not state.in_flight:
                raise InvalidTransition(f"batch {batch_id} is {state.value} and cannot be split (only a batch in "
                                        "flight can)")
            rows = range_rows(conn, [row.id])[row.id]
            unknown = failing - {offset_range(r) for r in rows}
            if unknown:
                raise ValueError(f"split of {batch_id}: {', '.join(map(str, sorted(unknown)))} is not a range of "
                                 "the batch")
            moving = [r for r in rows if offset_range(r) in failing]
            if len(moving) == len(rows):
                raise ValueError(f"split of {batch_id}: every range fails; fail the batch instead")
            moved = ", ".join(str(offset_range(r)) for r in moving)
            return _split_off(conn, numbering, row, moving, now, {
                "state": S.FAILED.value, "attempts": row.attempts, "replay_of_committed": row.replay_of_committed,
                "reason": reason, "transient": transient, "retry_at_us": maybe_us(retry_at),
                "transient_streak": streak_after(row.transient_streak, transient), "drained_us": row.drained_us,
                "drain_seconds": row.drain_seconds, "drain_json": row.drain_json,
            }, f"split from {batch_id}: {reason}", lambda child: f"split: {moved} moved to {child}: {reason}")


def _back_to_planned(conn: Connection, numbering: Numbering, first: Row, allowed: Collection[BatchState],
                     max_in_flight: int | None, now: int, reason: str | None) -> Batch:
    # Topic row first, batch row second: the same order as record_plan, so no deadlock.
    lock_topic(conn, first.logical_topic)
    batch_id = numbering.batch_id(first.id)
    row = batch_row(conn, numbering, batch_id, for_update=True)
    current = S(row.state)
    verb = "retried" if reason else "replayed"
    if current not in allowed:
        raise InvalidTransition(
            f"batch {batch_id} is {current.value} and cannot be {verb} (only "
            f"{' or '.join(s.value for s in sorted(allowed))} batches can; a batch in flight is retried when "
            "stuck, or fail it first)"
        )
    check_transition(batch_id, current, S.PLANNED)
    _room_again(conn, numbering, row, range_rows(conn, [row.id])[row.id],
                f"{'retry' if reason else 'replay'} of {batch_id}", max_in_flight)
    attempt = row.attempts + 1
    conn.execute(update(batches).where(batches.c.id == row.id).values(
        **CLEARED_ATTEMPT, state=S.PLANNED.value, attempts=attempt, updated_us=now,
        replay_of_committed=bool(row.replay_of_committed) or current is S.COMMITTED,
    ))
    log_event(conn, row.id, current, S.PLANNED, attempt, now, reason or f"replay of a {current.value} batch")
    return load_one(conn, numbering, row.id)


def _room_again(conn: Connection, numbering: Numbering, row: Row, mine: list[Row], what: str,
                max_in_flight: int | None) -> None:
    """Refuse to put ``mine``, range rows of the batch of ``row``, in flight again: the batch is superseded
    (:class:`BatchSuperseded`), or a slot or a range is taken (:class:`RangeConflict`, as ``what``)."""
    gone = superseded_at(conn, numbering, row)
    if gone:
        raise BatchSuperseded(gone[0].describe())
    others = [t for t in taken_ranges(conn, numbering, row.logical_topic) if t.batch_id != numbering.batch_id(row.id)]
    room_for(what, [offset_range(r) for r in mine], {r.priority for r in mine}, others, max_in_flight, new=False)


def _split_off(conn: Connection, numbering: Numbering, row: Row, moving: list[Row], now: int, values: dict[str, Any],
               why: str, parent_why: Callable[[str], str]) -> Batch:
    """Move the ``moving`` range rows (never copied) of the batch of ``row`` to a new batch of ``values``, its parent
    that batch; log ``why`` in the new batch's events, ``parent_why(its id)`` in the parent's."""
    child = conn.execute(insert(batches).values(
        logical_topic=row.logical_topic, plan_json=row.plan_json, parent_id=row.id, created_us=now, updated_us=now,
        committed_us=row.committed_us, **values,
    )).inserted_primary_key[0]
    conn.execute(update(ranges).where(ranges.c.id.in_([r.id for r in moving])).values(batch_id=child))
    conn.execute(update(batches).where(batches.c.id == row.id).values(updated_us=now))
    log_event(conn, child, None, S(values["state"]), values["attempts"], now, why)
    log_event(conn, row.id, S(row.state), S(row.state), row.attempts, now, parent_why(numbering.batch_id(child)))
    return load_one(conn, numbering, child)
