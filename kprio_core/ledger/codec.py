"""Rows <-> values: times, a plan without its ranges, a range's drain outcome, and a Batch from its rows.

Each fact is stored once: a plan is the batch's ``plan_json`` plus its range rows; a drain result the batch's
``drain_json`` plus the range rows' outcome. 28 output rows and 2 dead letters are columns, the rest JSON:

>>> from kprio_core.model.offsets import OffsetRange
>>> s = RangeStats(2, OffsetRange("orders-2", 0, 0, 30), output=28, dead=2, distinct=30, first=0, last=29,
...                bytes=6000)
>>> values = outcome_values(s)
>>> values["output"], values["dead"], values["bytes"], values["stats_json"][:35]
(28, 2, 6000, '{"distinct":30,"first":0,"last":29,')
>>> from_us(to_us(datetime(2025, 1, 2, 3, 4, 5, 6, tzinfo=UTC)))
datetime.datetime(2025, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone.utc)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter
from sqlalchemy import Row

from kprio_core.model.drain_plan import DrainPlan, PlannedRange
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.records import Batch
from kprio_core.model.recovery import Lease
from kprio_core.model.results import CheckReport, CommitReport, DrainResult, RangeStats
from kprio_core.model.states import BatchState

if TYPE_CHECKING:
    from kprio_core.ledger.meta import Numbering

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PLAN: TypeAdapter[DrainPlan] = TypeAdapter(DrainPlan)
_STATS: TypeAdapter[RangeStats] = TypeAdapter(RangeStats)
_DRAIN: TypeAdapter[DrainResult] = TypeAdapter(DrainResult)
_ON_RANGE_ROW = {"priority", "range", "output", "dead", "bytes"}
"""RangeStats fields that are columns of the range row (the rest is its ``stats_json``)."""
_ON_BATCH_ROW = {"batch_id", "logical_topic", "ranges", "seconds"}
"""DrainResult fields the batch row or the range rows hold (the rest is the batch's ``drain_json``)."""

CLEARED_OUTCOME: dict[str, Any] = {"output": None, "dead": None, "bytes": None, "stats_json": None}
"""A range row its drain left out (an empty range)."""
CLEARED_ATTEMPT: dict[str, Any] = {
    "drain_json": None, "checks_json": None, "commit_json": None,
    "reason": None, "transient": False, "retry_at_us": None, "lease_owner": None, "lease_until_us": None,
}
"""A batch row at a new attempt; the last drain's numbers stay until the next drain (samples survive a re-drain)."""


def to_us(at: datetime) -> int:
    if at.tzinfo is None:
        raise ValueError(f"the ledger stores aware datetimes only, got {at!r}")
    return (at - _EPOCH) // timedelta(microseconds=1)


def from_us(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def maybe_us(at: datetime | None) -> int | None:
    return None if at is None else to_us(at)


def plan_json(plan: DrainPlan) -> str:
    """The plan's decisions without its ranges (they live in the range rows)."""
    return _PLAN.dump_json(plan, exclude={"ranges"}).decode()


def quotas_of(plan_text: str) -> dict[int, int]:
    """Base quota per priority of a stored plan, without rebuilding the plan."""
    return {int(p): int(q) for p, q in json.loads(plan_text)["quotas"].items()}


def range_values(planned: PlannedRange) -> dict[str, Any]:
    r = planned.range
    return {"priority": planned.priority, "topic": r.topic, "kafka_partition": r.partition,
            "start_offset": r.start, "end_offset": r.end, "est_bytes": planned.est_bytes}


def offset_range(row: Row) -> OffsetRange:
    return OffsetRange(row.topic, row.kafka_partition, row.start_offset, row.end_offset)


def outcome_values(stats: RangeStats) -> dict[str, Any]:
    """A range's drain outcome as range-row columns."""
    return {"output": stats.output, "dead": stats.dead, "bytes": stats.bytes,
            "stats_json": _STATS.dump_json(stats, exclude=_ON_RANGE_ROW).decode()}


def drain_values(result: DrainResult) -> dict[str, Any]:
    """The attempt-level part of a drain result as batch-row columns."""
    return {"drain_seconds": result.seconds, "drain_json": _DRAIN.dump_json(result, exclude=_ON_BATCH_ROW).decode()}


def range_stats(row: Row) -> RangeStats:
    return _STATS.validate_python({**json.loads(row.stats_json), "priority": row.priority, "range": offset_range(row),
                                   "output": row.output, "dead": row.dead, "bytes": row.bytes})


def to_batch(row: Row, range_rows: Sequence[Row], numbering: Numbering) -> Batch:
    """The Batch of a batch row and its range rows (in plan order)."""
    batch_id = numbering.batch_id(row.id)
    planned = tuple(PlannedRange(r.priority, offset_range(r), r.est_bytes) for r in range_rows)
    plan = _PLAN.validate_python({**json.loads(row.plan_json), "ranges": planned})
    drain = None
    if row.drain_json is not None:
        drain = _DRAIN.validate_python({
            **json.loads(row.drain_json), "batch_id": batch_id, "logical_topic": row.logical_topic,
            "seconds": row.drain_seconds, "ranges": tuple(range_stats(r) for r in range_rows if r.stats_json),
        })
    return Batch(
        batch_id=batch_id,
        logical_topic=row.logical_topic,
        state=BatchState(row.state),
        plan=plan,
        attempts=row.attempts,
        created_at=from_us(row.created_us),
        updated_at=from_us(row.updated_us),
        reason=row.reason,
        transient=bool(row.transient),
        transient_streak=int(row.transient_streak or 0),
        replay_of_committed=bool(row.replay_of_committed),
        parent=None if row.parent_id is None else numbering.batch_id(row.parent_id),
        retry_at=None if row.retry_at_us is None else from_us(row.retry_at_us),
        lease=None if row.lease_owner is None else Lease(row.lease_owner, from_us(row.lease_until_us)),
        lease_epoch=int(row.lease_epoch or 0),
        drain=drain,
        checks=None if row.checks_json is None else CheckReport.from_json(row.checks_json),
        commit=None if row.commit_json is None else CommitReport.from_json(row.commit_json),
        committed_at=None if row.committed_us is None else from_us(row.committed_us),
    )
