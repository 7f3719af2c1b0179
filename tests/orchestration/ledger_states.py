"""Move a recorded batch through the ledger as a run would, without Spark (for tests of the rules)."""

from __future__ import annotations

from kprio_core.ledger import Ledger
from kprio_core.model.results import CheckReport, CommitReport, DrainResult, RangeStats


def drained_as_planned(ledger: Ledger, batch_id: str, *, seconds: float = 1.0) -> DrainResult:
    """The drain result of a batch whose every planned range came back whole, all valid."""
    batch = ledger.batches.get(batch_id)
    stats = tuple(
        RangeStats(p.priority, p.range, output=p.range.count, dead=0, distinct=p.range.count,
                   first=p.range.start if p.range.count else None,
                   last=p.range.end - 1 if p.range.count else None, bytes=100 * p.range.count)
        for p in batch.plan.ranges
    )
    return DrainResult(batch_id, batch.attempts, batch.logical_topic, stats, staging="(none)", seconds=seconds)


def commit_as_drained(ledger: Ledger, batch_id: str, edge=None, topic=None) -> None:
    """Drained, checked and committed, as a run that found every record would leave it.

    With ``edge`` and ``topic`` the offsets are committed to Kafka too (the planner plans from there).
    """
    ledger.moves.mark_drained(batch_id, drained_as_planned(ledger, batch_id))
    ledger.moves.mark_checked(batch_id, CheckReport(()))
    report = CommitReport()
    if edge is not None:
        report = edge.commit(topic, [r for r in ledger.batches.get(batch_id).plan.offset_ranges() if r.count])
    ledger.moves.mark_committed(batch_id, report)
