"""Helpers of the ledger tests: a hand-moved clock, plans, complete drains, and the steps of a batch.

The ``clock``, ``url`` and ``ledger`` fixtures built on them are in ``tests/kprio_core/conftest.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kprio_core.ledger import Batch, Ledger
from kprio_core.model.drain_plan import DrainPlan, PlannedRange
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import CheckOutcome, CheckReport, CommitReport, DrainResult, RangeStats

CHECKS_PASSED = CheckReport((CheckOutcome("row_count_matches", True, {"rows": 10}),))


class Clock:
    """A clock the test moves by hand (the ledger reads time only through it)."""

    def __init__(self) -> None:
        self.now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def tick(self, seconds: float = 1.0) -> None:
        self.now += timedelta(seconds=seconds)


def R(topic: str, partition: int, start: int, end: int) -> OffsetRange:  # noqa: N802 (reads like the type)
    return OffsetRange(topic, partition, start, end)


def make_plan(*spans: tuple[int, int] | OffsetRange, topic: str = "orders", priority: int = 2,
              quotas: dict[int, int] | None = None) -> DrainPlan:
    """A plan over ``spans`` ((start, end) of <topic>-<priority> partition 0, or whole ranges)."""
    planned = []
    for span in spans:
        r = span if isinstance(span, OffsetRange) else OffsetRange(f"{topic}-{priority}", 0, *span)
        prio = int(r.topic.rsplit("-", 1)[1])
        planned.append(PlannedRange(prio, r, est_bytes=100 * r.count))
    quotas = quotas or {2: 571, 1: 286, 0: 143}
    return DrainPlan(logical_topic=topic, mode="lag-aware", record_budget=1000, byte_budget=None, quotas=quotas,
                     grants=quotas, ranges=tuple(planned))


def result_for(batch: Batch, bytes_per_record: int = 100, *, seconds: float = 1.0, dead: int = 0,
               record_seconds: float | None = None) -> DrainResult:
    """A complete drain of every range of ``batch`` (``dead`` dead letters per range), as its current attempt."""
    stats = []
    for p in batch.plan.ranges:
        n, bad = p.range.count, min(dead, p.range.count)
        stats.append(RangeStats(p.priority, p.range, output=n - bad, dead=bad, distinct=n,
                                first=p.range.start if n else None, last=p.range.end - 1 if n else None,
                                bytes=bytes_per_record * n))
    return DrainResult(batch.batch_id, batch.attempts, batch.logical_topic, tuple(stats),
                       staging=f"/out/_staging/{batch.batch_id}.{batch.attempts}", seconds=seconds,
                       record_seconds=record_seconds)


def commit_report(batch: Batch) -> CommitReport:
    return CommitReport.of({p.range.topic_partition: (p.range.start, p.range.end) for p in batch.plan.ranges}, {})


def drain_and_check(ledger: Ledger, batch: Batch, **kw) -> Batch:
    batch = ledger.moves.mark_drained(batch.batch_id, result_for(batch, **kw))
    return ledger.moves.mark_checked(batch.batch_id, CHECKS_PASSED)


def drain_check_commit(ledger: Ledger, batch: Batch, **kw) -> Batch:
    batch = drain_and_check(ledger, batch, **kw)
    return ledger.moves.mark_committed(batch.batch_id, commit_report(batch))


def record_history(ledger: Ledger, clock: Clock, arrivals: list[dict[int, int]], step_s: float = 2.0,
                   topic: str = "orders", budget: int | None = None) -> None:
    """A topic's life as kprio records it: each step, ``arrivals[i]`` records arrive per priority (partition 0 of
    each priority topic), a tick snapshots the backlog and plans up to ``budget`` records of it (most urgent first;
    all without a budget), and the batch commits a second later."""
    arrived: dict[int, int] = {}
    committed: dict[int, int] = {}
    for step in arrivals:
        clock.tick(step_s - 1.0)
        for p, n in step.items():
            arrived[p] = arrived.get(p, 0) + n
        backlog = {p: arrived[p] - committed.get(p, 0) for p in sorted(arrived, reverse=True)}
        left, spans = budget, []
        for p, n in backlog.items():
            take = n if left is None else min(n, left)
            if take:
                start = committed.get(p, 0)
                spans.append(OffsetRange(f"{topic}-{p}", 0, start, start + take))
                committed[p] = start + take
                left = None if left is None else left - take
        plan = make_plan(*spans, topic=topic)
        plan = DrainPlan(**{**plan.__dict__, "backlog_before": backlog,
                            "snapshot_taken_at_ms": int(clock.now.timestamp() * 1000)})
        batch = ledger.batches.record_plan(plan)
        clock.tick(1.0)
        if spans:
            drain_check_commit(ledger, batch)
