"""Commit a checked batch: each range's end to its priority's group, proven on the broker, then the ledger.

Offsets never move backwards and only a contiguous prefix is committed (``KafkaEdge.commit``),
so a re-drain of an old batch commits nothing new; the ledger's topic lock, held around that
read and write, keeps two kprio processes from interleaving them. One lag snapshot after the commit both
proves what the broker holds and gives the lag after, for the metadata Dagster plots.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kprio_core.config import TopicSettings
from kprio_core.errors import KafkaOperationFailed
from kprio_core.ledger import Batch, Ledger
from kprio_core.recovery import LeaseToken
from kprio_core.results import CommitReport
from orchestration.runtime.faults import crash_point


@dataclass(frozen=True)
class CommitOutcome:
    """What a commit did, and the numbers for ``committed_offsets``' metadata."""

    report: CommitReport
    metadata: Mapping[str, int | str]


def commit_batch(edge, ledger: Ledger, topic: TopicSettings, batch: Batch, token: LeaseToken, *,
                 now_s: float) -> CommitOutcome:
    """Commit ``batch``'s ranges, check the broker holds them, and mark the batch committed.

    Fenced by the run's lease ``token``: the Kafka commit runs while the ledger holds the batch
    for it (refused, committing nothing, once the token is stale), and the topic's lock makes its
    read of the committed offsets and its write one step among kprio's committers.
    """
    ranges = [r for r in batch.plan.offset_ranges() if r.count]
    crash_point("before-kafka-commit", topic.name)
    with ledger.fenced(batch.batch_id, token, "the Kafka commit"):
        report = edge.commit(topic, ranges)
    # A priority topic this batch commits nothing to may be gone (deleted while draining): its
    # partitions are held by the tick; the batch's own partitions commit on.
    mine = {r.topic for r in ranges}
    snapshot = edge.snapshot(topic, now_ms=int(now_s * 1000),
                             deleted_ok={n for n in topic.priority_topics().values() if n not in mine})
    committed = {(p.topic, p.partition): p.committed for p in snapshot.partitions}
    short = [r for r in ranges if (committed.get(r.topic_partition) or 0) < r.end]
    if short:
        # Checked but not committed: the batch keeps its ranges; committing later is safe.
        raise KafkaOperationFailed(
            f"batch {batch.batch_id}: offsets not committed for {', '.join(map(str, short))} ({report})"
        )
    crash_point("after-kafka-commit", topic.name)
    ledger.mark_committed(batch.batch_id, report, fence=token)
    drained = batch.drain.written_by_priority() if batch.drain is not None else {}
    meta = commit_metadata(report, snapshot.backlog_by_priority(), drained, replay=batch.replay_of_committed)
    return CommitOutcome(report, {**meta, "logical_topic": topic.name})


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
