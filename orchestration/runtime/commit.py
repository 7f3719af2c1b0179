"""Commit a checked batch: each range's end to its priority's group, proven on the broker, then the ledger.

Offsets never move backwards and only a contiguous prefix is committed (``KafkaEdge.commit``), so a re-drain of
an old batch commits nothing new; the write is fenced per group by Kafka (a transaction of the group's
transactional id: two kprio processes never interleave a read and a write of one group). One lag snapshot after
the commit proves what the broker holds and gives the lag after (for the metadata, and with each commit sample of
the ledger: the lag verdict's window, as Burrow stores it). Partitions it could not commit (group moved back,
topic recreated) are split off, each partition's outcome its own, as a drain's failed ranges are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kprio_core.config import TopicSettings
from kprio_core.errors import LogChanged
from kprio_core.ledger import Batch
from kprio_core.lifecycle.outcome import Cause, FailWhole, after_commit
from kprio_core.model.offsets import OffsetRange, TopicPartitionKey
from kprio_core.model.recovery import LeaseToken
from kprio_core.model.results import CommitReport
from orchestration.runtime.faults import crash_point
from orchestration.runtime.ports import Edge, LedgerPort


@dataclass(frozen=True)
class CommitOutcome:
    """What a commit did, and the numbers for ``committed_offsets``' metadata."""

    report: CommitReport
    metadata: Mapping[str, int | str]
    left: tuple[str, ...] = ()
    """Batches split off with the ranges this commit left (their group moved under them, their log changed)."""


@dataclass(frozen=True)
class Uncommitted:
    """Nothing of the batch could be committed: why, in one line, and whether it passes by itself."""

    reason: str
    transient: bool


Split = Callable[[list[OffsetRange], str, bool], str]
"""Split these ranges off the batch into a new failed batch (``reason``, ``transient``); the new batch's id."""


def commit_batch(edge: Edge, ledger: LedgerPort, topic: TopicSettings, batch: Batch, token: LeaseToken, *,
                 now_s: float, split: Split) -> CommitOutcome | Uncommitted:
    """Commit ``batch``'s ranges, check the broker holds them, and mark the batch committed.

    Fenced by the run's lease ``token``, no lock held: between its read of the group and its write, the Kafka
    transaction asks the ledger whether the run still holds the batch (a run that lost it writes nothing). Ranges
    whose group stands below them (moved back outside kprio) or whose topic was recreated are split off (``split``),
    never committed over the move; :class:`Uncommitted` when nothing is committed.
    """
    ranges = [r for r in batch.plan.offset_ranges() if r.count]
    changed = other_logs(edge, batch)  # after the publish: a recreation now would commit another log's offsets
    if changed and all(r.topic in changed for r in ranges):
        raise LogChanged(log_changed(batch.batch_id, changed, "committed"))
    crash_point("before-kafka-commit", topic.name)
    ledger.leases.check(batch.batch_id, token, "the Kafka commit")  # a run paused past its lease stops here

    def still_mine() -> None:
        ledger.leases.check(batch.batch_id, token, "the Kafka commit")
        crash_point("during-kafka-commit", topic.name)  # read, checked, not yet written: the window fencing closes

    report = edge.commit(topic, [r for r in ranges if r.topic not in changed], before_write=still_mine)
    # A priority topic this batch commits nothing to may be gone (deleted while draining): the tick holds it.
    mine = {r.topic for r in ranges if r.topic not in changed}
    snapshot = edge.snapshot(topic, now_ms=int(now_s * 1000),
                             deleted_ok={n for n in topic.priority_topics().values() if n not in mine})
    stands = {(p.topic, p.partition): p.committed for p in snapshot.partitions}
    after = after_commit(ranges, written=report.moves(), stands=stands, other_log=changed)
    crash_point("after-kafka-commit", topic.name)
    if isinstance(after, FailWhole):
        short = [r for r in ranges if r.topic not in changed]
        return Uncommitted(left_reason(batch.batch_id, after.cause, short, stands, changed, report), after.transient)
    left = tuple(split(list(off.ranges), left_reason(batch.batch_id, off.cause, off.ranges, stands, changed, report),
                       off.transient) for off in after.splits)
    ends: dict[TopicPartitionKey, int] = {}
    for r in after.kept:
        ends[r.topic_partition] = max(r.end, ends.get(r.topic_partition, r.end))
    # Found committed at or past its end already (moved forward by someone): kprio drained up to its end there.
    reached = {tp: end for tp, end in ends.items() if tp not in report.moves() and (stands.get(tp) or 0) >= end}
    log_ends = {(p.topic, p.partition): p.readable_end for p in snapshot.partitions}
    ledger.moves.mark_committed(batch.batch_id, report, fence=token, reached=reached,
                                log_ends={tp: log_ends[tp] for tp in report.moves() if tp in log_ends})
    drained = batch.drain.written_by_priority() if batch.drain is not None else {}
    meta = commit_metadata(report, snapshot.backlog_by_priority(), drained, replay=batch.replay_of_committed)
    return CommitOutcome(report, {**meta, "logical_topic": topic.name}, left)


def left_reason(batch_id: str, cause: Cause, ranges: Iterable[OffsetRange],
                stands: Mapping[TopicPartitionKey, int | None], changed: Mapping[str, str],
                report: CommitReport) -> str:
    """The one line of ranges a commit left, by their cause (:func:`~kprio_core.lifecycle.outcome.commit_cause`).

    >>> from kprio_core.model.offsets import OffsetRange as R
    >>> print(left_reason("b-000038", Cause.GROUP_BEHIND, [R("o-1", 0, 792, 820)], {("o-1", 0): 392}, {},
    ...                   CommitReport()))  # doctest: +NORMALIZE_WHITESPACE
    o-1[0]@[792,820) not committed: the group stands below the batch (o-1[0] at 392), moved back outside kprio
    while b-000038 was in flight (committing it would skip what the move asks to read again); retried by itself
    once the group is back at the batch's start
    """
    ranges = sorted(ranges)
    if cause is Cause.LOG_CHANGED:
        return log_changed(batch_id, {t: why for t, why in changed.items() if any(r.topic == t for r in ranges)},
                           "committed")
    if cause is Cause.GROUP_BEHIND:
        where = ", ".join(f"{tp[0]}[{tp[1]}] at {stands.get(tp) if stands.get(tp) is not None else 'none'}"
                          for tp in sorted({r.topic_partition for r in ranges}))
        return (f"{', '.join(map(str, ranges))} not committed: the group stands below the batch ({where}), moved "
                f"back outside kprio while {batch_id} was in flight (committing it would skip what the move asks to "
                "read again); retried by itself once the group is back at the batch's start")
    return f"batch {batch_id}: offsets not committed for {', '.join(map(str, ranges))} ({report})"


def other_logs(edge: Edge, batch: Batch) -> dict[str, str]:
    """The priority topics of ``batch``'s ranges deleted or recreated since its plan (topic id changed), with what."""
    if not batch.plan.topic_ids:
        return {}  # a cluster without topic ids: its recreations show as a committed offset beyond the log
    return batch.plan.changed_logs(edge.topic_ids(batch.plan.topic_ids))


def log_changed(batch_id: str, changed: dict[str, str], nothing: str) -> str:
    """The words of a batch whose log changed under it (``nothing``: what it does not do, "published").

    >>> print(log_changed("b-000003", {"orders-1": "recreated: topic id A, now B"}, "published"))
    the log of orders-1 changed while b-000003 was in flight (recreated: topic id A, now B): what it read there is another log's, nothing of it was published; the partitions are held until kprio reset decides (the batch is superseded then)
    """
    what = "; ".join(f"{t} ({why})" if len(changed) > 1 else t for t, why in sorted(changed.items()))
    why = "" if len(changed) > 1 else f" ({next(iter(changed.values()))})"
    return (f"the log of {what} changed while {batch_id} was in flight{why}: what it read there is another log's, "
            f"nothing of it was {nothing}; the partitions are held until kprio reset decides (the batch is "
            "superseded then)")


def commit_metadata(report: CommitReport, lag_after: Mapping[int, int], drained: Mapping[int, int], *,
                    replay: bool) -> dict[str, int]:
    """Numbers per priority (records, lag after) and in total, so Dagster plots them across batches.

    >>> commit_metadata(CommitReport.of({("o-2", 0): (None, 7)}, {}), {2: 0, 1: 5, 0: 40}, {2: 7}, replay=False)
    {'records_p2': 7, 'records_p1': 0, 'records_p0': 0, 'lag_after_p2': 0, 'lag_after_p1': 5, 'lag_after_p0': 40, 'lag_after': 45, 'partitions_moved': 1, 'partitions_already_committed': 0, 'replay': 0}
    """
    meta = {f"records_p{p}": int(drained.get(p, 0)) for p in sorted(lag_after, reverse=True)}
    meta.update({f"lag_after_p{p}": int(n) for p, n in sorted(lag_after.items(), reverse=True)})
    meta.update(lag_after=sum(lag_after.values()), partitions_moved=len(report.moved),
                partitions_already_committed=len(report.skipped), replay=int(replay))
    return meta
