"""The ledger's samples (burst windows, rates, record sizes, throughput, backlogs, commits), derived on read.

Only commit samples are stored apart, in the commit's transaction, so a crash cannot leave these a batch behind.
A batch counts at its first commit with its last drain's numbers; a *poll* is one not split off another. Records
are output rows plus dead letters: both were consumed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, func, select

from kprio_core.burst import DEFAULT_MAXED_OUT_THRESHOLD, DEFAULT_WINDOW_SIZE, PollHistory
from kprio_core.ledger.codec import from_us, quotas_of, to_us
from kprio_core.ledger.schema import batches, commit_samples, ranges
from kprio_core.ledger.store import Repository
from kprio_core.model.priority import Priority
from kprio_core.model.records import BacklogSample, CommitSample, DrainedSample, DrainSample
from kprio_core.rate import DEFAULT_SAMPLES, DEFAULT_WINDOW_S, RateQuotaTracker

_RECORDS = func.coalesce(ranges.c.output, 0) + func.coalesce(ranges.c.dead, 0)
_BYTES = func.coalesce(ranges.c.bytes, 0)
_COMMITTED = batches.c.committed_us.is_not(None)


class Samples(Repository):
    """What the topic's batches drained and committed, read as the rules plan and judge with it."""

    def commits(self, logical_topic: str, per_partition: int) -> list[CommitSample]:
        """The newest ``per_partition`` commits of each partition of the topic, oldest first (the verdict's ring)."""
        ranked = select(
            commit_samples, func.row_number().over(
                partition_by=(commit_samples.c.topic, commit_samples.c.kafka_partition),
                order_by=(commit_samples.c.at_us.desc(), commit_samples.c.id.desc())).label("rank"),
        ).where(commit_samples.c.logical_topic == logical_topic).subquery()
        query = (select(ranked.c.topic, ranked.c.kafka_partition, ranked.c.at_us, ranked.c.committed,
                        ranked.c.log_end)
                 .where(ranked.c.rank <= per_partition)
                 .order_by(ranked.c.topic, ranked.c.kafka_partition, ranked.c.at_us, ranked.c.id))
        with self._store.tx() as (conn, _):
            rows = conn.execute(query).all()
        return [CommitSample(t, p, from_us(at), int(c), None if end is None else int(end))
                for t, p, at, c, end in rows]

    def poll_history(self, logical_topic: str, n_priorities: int, window_size: int = DEFAULT_WINDOW_SIZE,
                     maxed_out_threshold: int = DEFAULT_MAXED_OUT_THRESHOLD) -> PollHistory:
        """The burst windows of the last ``window_size`` polls of the topic, in commit order.

        Each poll adds (records drained, base quota) per priority; a poll of another priority count ends the window.
        """
        history = PollHistory(n_priorities, window_size, maxed_out_threshold)
        query = (select(batches.c.id, batches.c.plan_json)
                 .where(batches.c.logical_topic == logical_topic, _COMMITTED, batches.c.parent_id.is_(None))
                 .order_by(batches.c.committed_us.desc(), batches.c.id.desc())
                 .limit(window_size))
        with self._store.tx() as (conn, _):
            polls = conn.execute(query).all()
            written = _written(conn, [key for key, _ in polls])
        window = []
        for key, plan_text in polls:  # newest first
            quotas = quotas_of(plan_text)
            if set(quotas) != set(range(n_priorities)):
                break
            window.append((key, quotas))
        for key, quotas in reversed(window):
            history.record({p: records for p, (records, _) in written.get(key, {}).items()}, quotas)
        return history

    def drained_since(self, logical_topic: str, since: datetime) -> list[DrainedSample]:
        """What the topic's batches committed since ``since`` drained per priority, in commit order."""
        query = (
            select(batches.c.committed_us, ranges.c.priority, func.sum(_RECORDS), func.sum(_BYTES))
            .join(batches, batches.c.id == ranges.c.batch_id)
            .where(batches.c.logical_topic == logical_topic, _COMMITTED, batches.c.committed_us >= to_us(since))
            .group_by(batches.c.id, batches.c.committed_us, ranges.c.priority)
            .order_by(batches.c.committed_us, batches.c.id, ranges.c.priority.desc())
        )
        with self._store.tx() as (conn, _):
            rows = conn.execute(query).all()
        return [DrainedSample(from_us(at), p, int(records), int(size)) for at, p, records, size in rows]

    def backlogs(self, logical_topic: str, since: datetime, until: datetime) -> list[BacklogSample]:
        """The backlog each plan of the topic saw in ``[since, until)``, by snapshot (a split plan is one), oldest
        first."""
        # A plan is recorded right after its snapshot: the batches created in the window, a minute around it.
        query = (select(batches.c.plan_json)
                 .where(batches.c.logical_topic == logical_topic,
                        batches.c.created_us >= to_us(since - timedelta(minutes=1)),
                        batches.c.created_us < to_us(until + timedelta(minutes=1)))
                 .order_by(batches.c.id))
        with self._store.tx() as (conn, _):
            plans = [json.loads(text) for text, in conn.execute(query)]
        seen = {}
        for plan in plans:
            at = datetime.fromtimestamp(plan.get("snapshot_taken_at_ms", 0) / 1000, UTC)
            if since <= at < until:
                seen[at] = BacklogSample(at, {int(p): int(n) for p, n in plan.get("backlog_before", {}).items()})
        return [seen[at] for at in sorted(seen)]

    def rate_tracker(
        self,
        logical_topic: str,
        *,
        records_per_s: Mapping[Priority, float] | None = None,
        bytes_per_s: Mapping[Priority, float] | None = None,
        samples: int = DEFAULT_SAMPLES,
        window_s: float = DEFAULT_WINDOW_S,
    ) -> RateQuotaTracker:
        """A rate-quota tracker fed with the batches committed within ``samples * window_s``; its time is epoch
        seconds: ask ``throttle_time(p, now.timestamp())``."""
        tracker = RateQuotaTracker(records_per_s, bytes_per_s, samples, window_s)
        since = self._store.now() - timedelta(seconds=samples * window_s)
        for s in self.drained_since(logical_topic, since):
            tracker.record_batch(s.priority, s.records, s.bytes, s.at.timestamp())
        return tracker

    def avg_record_bytes(self, logical_topic: str, last_batches: int = 20) -> dict[str, float]:
        """Bytes per record of each priority topic over the last ``last_batches`` batches that drained it.

        29 records in 5800 B then 1 in 400 B -> 6200 / 30 = 206.67 B. Topics with no record drained are absent.
        """
        if last_batches < 1:
            raise ValueError(f"avg_record_bytes({logical_topic!r}): last_batches must be >= 1, got {last_batches}")
        per_batch = (
            select(ranges.c.topic, ranges.c.batch_id, batches.c.drained_us,
                   func.sum(_RECORDS).label("records"), func.sum(ranges.c.bytes).label("bytes"))
            .join(batches, batches.c.id == ranges.c.batch_id)
            .where(batches.c.logical_topic == logical_topic, ranges.c.output.is_not(None))
            .group_by(ranges.c.topic, ranges.c.batch_id, batches.c.drained_us)
            .subquery()
        )
        order = (per_batch.c.drained_us.desc(), per_batch.c.batch_id.desc())
        ranked = select(
            per_batch.c.topic, per_batch.c.records, per_batch.c.bytes,
            func.row_number().over(partition_by=per_batch.c.topic, order_by=order).label("rank"),
        ).subquery()
        query = (select(ranked.c.topic, func.sum(ranked.c.records), func.sum(ranked.c.bytes))
                 .where(ranked.c.rank <= last_batches).group_by(ranked.c.topic).order_by(ranked.c.topic))
        with self._store.tx() as (conn, _):
            rows = conn.execute(query).all()
        return {topic: int(size) / int(records) for topic, records, size in rows if records}

    def throughput(self, logical_topic: str, last_batches: int = 10) -> float | None:
        """The best drain rate (records/s of drain time) of the topic's last committed batches; None without any.

        The best, not the mean: a trickle measures only the fixed cost, and a mean would shrink every later batch;
        the best (fixed cost included) stays safe and grows as batches do.

        Batches of 3000 records in 2 s and 1000 in 2 s -> max(1500, 500) = 1500.0 records/s.
        """
        rates = [s.records / s.seconds for s in self.drains(logical_topic, last_batches)]
        return max(rates) if rates else None

    def drains(self, logical_topic: str, last_batches: int = 10) -> list[DrainSample]:
        """What the topic's last committed batches took (:class:`DrainSample`), newest first."""
        if last_batches < 1:
            raise ValueError(f"{logical_topic}: last_batches must be >= 1, got {last_batches}")
        query = (select(batches.c.id, batches.c.drain_seconds, batches.c.drain_json, batches.c.attempts,
                        batches.c.created_us, batches.c.committed_us)
                 .where(batches.c.logical_topic == logical_topic, _COMMITTED, batches.c.drain_seconds > 0)
                 .order_by(batches.c.committed_us.desc(), batches.c.id.desc())
                 .limit(last_batches))
        with self._store.tx() as (conn, _):
            recent = conn.execute(query).all()
            written = _written(conn, [row.id for row in recent])
        return [DrainSample(sum(n for n, _ in written.get(row.id, {}).values()), row.drain_seconds,
                            _record_seconds(row.drain_json),
                            (row.committed_us - row.created_us) / 1e6 if row.attempts == 1 else None)
                for row in recent]


def _record_seconds(drain_json: str | None) -> float | None:
    """The records' share of a drain's seconds, as its drain result recorded it (older results: None)."""
    if drain_json is None:
        return None
    value = json.loads(drain_json).get("record_seconds")
    return float(value) if value else None


def _written(conn: Connection, keys: Iterable[int]) -> dict[int, dict[Priority, tuple[int, int]]]:
    """(records, bytes) per priority of each batch."""
    keys = list(keys)
    if not keys:
        return {}
    query = (select(ranges.c.batch_id, ranges.c.priority, func.sum(_RECORDS), func.sum(_BYTES))
             .where(ranges.c.batch_id.in_(keys)).group_by(ranges.c.batch_id, ranges.c.priority))
    out: dict[int, dict[Priority, tuple[int, int]]] = {}
    for key, p, records, size in conn.execute(query):
        out.setdefault(key, {})[p] = (int(records), int(size))
    return out
