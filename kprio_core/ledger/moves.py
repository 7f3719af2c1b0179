"""A batch's moves through its states (``TRANSITIONS``): one transaction on its locked row each, allowed by
``check_transition``, logged in its events, and fenced: a run's lease token must hold the batch now (``check_token``,
else :class:`LeaseLost` and nothing changed). A move without a token is an operator's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Row, select, update

from kprio_core.errors import DrainStatsInvalid, InvalidTransition, LeaseLost
from kprio_core.ledger.beliefs import note_commits
from kprio_core.ledger.codec import CLEARED_OUTCOME, drain_values, maybe_us, offset_range, outcome_values
from kprio_core.ledger.commit_samples import record as record_samples
from kprio_core.ledger.leases import check_token
from kprio_core.ledger.rows import batch_row, load_one, log_event, need_reason, range_rows, streak_after
from kprio_core.ledger.schema import batches, events, ranges
from kprio_core.ledger.store import Repository
from kprio_core.model.log_state import Superseded
from kprio_core.model.offsets import TopicPartitionKey
from kprio_core.model.records import Batch
from kprio_core.model.recovery import LeaseToken
from kprio_core.model.results import CheckReport, CommitReport, DrainResult
from kprio_core.model.states import BatchState, check_transition

S = BatchState


class Moves(Repository):
    """drained, checked, committed, failed; and a superseded batch's note in its events."""

    def mark_drained(self, batch_id: str, result: DrainResult, *, fence: LeaseToken | None = None) -> Batch:
        """The drain wrote (and staged) the batch's ranges; ``result`` replaces any earlier drain and voids checks.

        :class:`LeaseLost` when ``result`` is of an older attempt than the batch's, or ``fence`` is stale.
        """
        def apply(conn: Connection, row: Row, now: int) -> dict[str, Any]:
            rows = range_rows(conn, [row.id])[row.id]
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
            mine = {offset_range(r) for r in range_rows(conn, [row.id])[row.id]}
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
        """The offsets were committed (check ``Batches.ready_to_commit`` first); the batch releases its lease.

        ``committed_at`` stays the first commit's time. The moves raise the beliefs and make commit samples (with
        ``log_ends``); so does ``reached`` (the batch's end where the group already stood past it: up to there the
        offsets are kprio's, only beyond is someone else's skip).
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

        ``retry_at``: not retried by itself before (None: at once, or only by an operator); ``transient``: the
        cause passes by itself, never exhausted.
        """
        need_reason("mark_failed", batch_id, reason)
        return self._move(batch_id, S.FAILED, lambda conn, row, now: {
            "reason": reason, "transient": transient, "retry_at_us": maybe_us(retry_at), "lease_owner": None,
            "lease_until_us": None, "transient_streak": streak_after(row.transient_streak, transient),
        }, reason=reason, fence=fence)

    def note_superseded(self, found: Superseded) -> bool:
        """Log in the batch's events that it is superseded there, once; True when this call logged it."""
        line = found.describe()
        with self._store.tx() as (conn, numbering):
            row = batch_row(conn, numbering, found.batch_id)
            seen = conn.execute(select(events.c.id).where(events.c.batch_id == row.id, events.c.reason == line)).first()
            if seen is not None:
                return False
            log_event(conn, row.id, S(row.state), S(row.state), row.attempts, self._store.now_us(), line)
            return True

    def _move(self, batch_id: str, asked: BatchState, apply: Callable[[Connection, Row, int], dict[str, Any]], *,
              reason: str | None = None, fence: LeaseToken | None = None) -> Batch:
        with self._store.tx() as (conn, numbering):
            now = self._store.now_us()
            row = batch_row(conn, numbering, batch_id, for_update=True)
            if fence is not None:
                check_token(batch_id, row, fence, f"the move to {asked.value}")
            current = S(row.state)
            check_transition(batch_id, current, asked)
            values = apply(conn, row, now)
            conn.execute(update(batches).where(batches.c.id == row.id).values(state=asked.value, updated_us=now,
                                                                                **values))
            log_event(conn, row.id, current, asked, row.attempts, now, reason)
            return load_one(conn, numbering, row.id)


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
