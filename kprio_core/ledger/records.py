"""What the ledger hands out: a :class:`Batch` (one plan and where it stands) and its events.

Batch ids are ``b-`` plus the ledger's autoincrement key, zero-padded to six digits.

>>> format_batch_id(42), parse_batch_id("b-000042"), format_batch_id(1234567)
('b-000042', 42, 'b-1234567')
>>> parse_batch_id("batch-42") is None
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from kprio_core.ledger.states import BatchState
from kprio_core.drain_plan import DrainPlan

_BATCH_ID = re.compile(r"b-(\d+)")


def format_batch_id(key: int) -> str:
    """The public id of the batch stored under autoincrement ``key``."""
    return f"b-{key:06d}"


def parse_batch_id(batch_id: str) -> int | None:
    """The autoincrement key of ``batch_id``, or None when it is not a ledger id."""
    match = _BATCH_ID.fullmatch(batch_id) if isinstance(batch_id, str) else None
    return int(match.group(1)) if match else None


@dataclass(frozen=True)
class Batch:
    """One recorded plan and where it stands.

    ``attempts`` counts reservations (1 when recorded, +1 per replay). ``replay_of_committed``
    is True once an earlier attempt committed the batch's offsets: a replay then re-drains the
    same ranges, and its commit step has nothing new to commit (offsets never move backwards).
    ``drain_stats``, ``check_results`` and ``commit_report`` belong to the current attempt.
    """

    batch_id: str
    logical_topic: str
    state: BatchState
    plan: DrainPlan
    created_at: datetime
    updated_at: datetime
    attempts: int
    reason: str | None
    drain_stats: dict | None
    check_results: dict | None
    commit_report: dict | None
    replay_of_committed: bool = False

    @property
    def in_flight(self) -> bool:
        """True while the batch holds its ranges (planned, drained or checked)."""
        return self.state.in_flight


@dataclass(frozen=True, slots=True)
class BatchEvent:
    """One transition; ``seq`` orders a ledger's events (on SQLite exactly as they were committed)."""

    seq: int
    batch_id: str
    from_state: BatchState | None
    to_state: BatchState
    attempt: int
    at: datetime
    reason: str | None
