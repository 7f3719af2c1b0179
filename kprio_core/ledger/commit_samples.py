"""The commit samples (``kprio_commit_samples``): each partition's newest commits, the lag verdict's window.

A commit writes one row per partition it moved (:func:`record`, in the transaction marking it committed): the
offset, the time and the log end right after, so the lag at commit time, as Burrow's ring stores. The newest
:data:`SAMPLES_KEPT` per partition stay. An older ledger is filled from its committed batches (:func:`backfill`).
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Connection, delete, func, insert, select

from kprio_core.ledger.schema import batches, commit_samples
from kprio_core.model.offsets import TopicPartitionKey
from kprio_core.model.results import CommitReport

SAMPLES_KEPT = 64
"""The commits kept per partition (``verdict.intervals`` may not ask for more)."""


def record(conn: Connection, logical_topic: str, batch_key: int, moves: Mapping[TopicPartitionKey, tuple],
           log_ends: Mapping[TopicPartitionKey, int], at_us: int) -> None:
    """A sample per moved partition (``moves``: ``(old, new)``), then drop what falls out of the kept ones."""
    if not moves:
        return
    conn.execute(insert(commit_samples), [
        {"logical_topic": logical_topic, "topic": topic, "kafka_partition": partition, "batch_id": batch_key,
         "at_us": at_us, "committed": new, "log_end": log_ends.get((topic, partition))}
        for (topic, partition), (_, new) in sorted(moves.items())])
    for topic, partition in sorted(moves):
        here = (commit_samples.c.topic == topic, commit_samples.c.kafka_partition == partition)
        oldest_kept = conn.execute(select(commit_samples.c.id).where(*here).order_by(commit_samples.c.id.desc())
                                   .offset(SAMPLES_KEPT - 1).limit(1)).scalar()
        if oldest_kept is not None:
            conn.execute(delete(commit_samples).where(*here, commit_samples.c.id < oldest_kept))


def backfill(conn: Connection) -> None:
    """Fill an empty table from each topic's newest :data:`SAMPLES_KEPT` committed batches (log end unknown)."""
    if conn.execute(select(func.count()).select_from(commit_samples)).scalar():
        return
    topics = conn.execute(select(batches.c.logical_topic).distinct()).scalars().all()
    for topic in topics:
        rows = conn.execute(
            select(batches.c.id, batches.c.committed_us, batches.c.commit_json)
            .where(batches.c.logical_topic == topic, batches.c.committed_us.is_not(None),
                   batches.c.commit_json.is_not(None))
            .order_by(batches.c.committed_us.desc(), batches.c.id.desc()).limit(SAMPLES_KEPT)).all()
        for key, at_us, text in reversed(rows):
            record(conn, topic, key, CommitReport.from_json(text).moves(), {}, at_us)
