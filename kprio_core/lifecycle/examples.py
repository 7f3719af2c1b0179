"""Small batches, claims and snapshots for the lifecycle's worked examples and its case table.

``batch("b-000005")`` is a planned batch of 10 records of ``orders-2[0]`` (offsets [0,10)):

>>> b = batch("b-000005", state=BatchState.FAILED, attempts=2)
>>> b.batch_id, b.state.value, b.attempts, [str(r) for r in b.plan.offset_ranges()]
('b-000005', 'failed', 2, ['orders-2[0]@[0,10)'])
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kprio_core.model.drain_plan import DrainPlan, PlannedRange
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.records import Batch, LaunchClaim
from kprio_core.model.recovery import Lease
from kprio_core.model.snapshot import LagSnapshot, PartitionLag
from kprio_core.model.states import BatchState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def batch(batch_id: str, *, state: BatchState = BatchState.PLANNED, attempts: int = 1, priority: int = 2,
          partition: int = 0, start: int = 0, end: int = 10, owner: str | None = None, until: datetime | None = None,
          retry_at: datetime | None = None, transient: bool = False, replay_of_committed: bool = False,
          topic: str = "orders") -> Batch:
    """A batch of ``[start, end)`` on ``<topic>-<priority>[partition]``, leased to ``owner`` until ``until``."""
    r = PlannedRange(priority, OffsetRange(f"{topic}-{priority}", partition, start, end), est_bytes=100 * (end - start))
    plan = DrainPlan(topic, "lag-aware", 50, None, {priority: end - start}, {priority: end - start}, (r,))
    lease = Lease(owner, until or T0 + timedelta(seconds=30)) if owner is not None else None
    return Batch(batch_id, topic, state, plan, attempts, T0, T0, reason="failed" if state is BatchState.FAILED
                 else None, transient=transient, replay_of_committed=replay_of_committed, retry_at=retry_at,
                 lease=lease)


def claim(run_key: str, owner: str, now: datetime, *, seconds: float = 30.0) -> LaunchClaim:
    """``owner``'s claim of ``run_key`` (of the batch it names), made at ``now`` for ``seconds``."""
    return LaunchClaim(run_key, run_key.split(".")[0], owner, now, now + timedelta(seconds=seconds))


def snapshot(topic: str = "orders", *, priorities: int = 3, backlog: dict[int, int] | None = None,
             committed: int = 0) -> LagSnapshot:
    """One partition per priority, committed at ``committed``, with ``backlog[p]`` records after it."""
    backlog = backlog or {}
    parts = tuple(PartitionLag(f"{topic}-{p}", 0, p, log_start=0, high_watermark=committed + backlog.get(p, 0),
                               committed=committed, avg_record_bytes=100.0)
                  for p in range(priorities))
    return LagSnapshot(topic, priorities, parts)
