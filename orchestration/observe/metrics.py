"""kprio's Prometheus metrics: one registry, named by Prometheus' conventions, updated from plain values.

Names start with ``kprio_``, in base units (seconds, bytes, records); counters end in ``_total``. Labels are bounded
(``topic`` is the logical topic; never a batch id, run id or offset). In full: docs/operations.md, "Monitoring".

=======================================  =========  =================================  ================================
name                                     type       labels                             what (unit)
=======================================  =========  =================================  ================================
kprio_backlog_records                    gauge      topic, priority, partition         committed offset to last stable
kprio_oldest_pending_age_seconds         gauge      topic, priority, partition         0 when nothing is pending (s)
kprio_log_end_offset                     gauge      topic, priority, partition         last stable offset, else HW
kprio_committed_offset                   gauge      topic, priority, partition         absent: never committed
kprio_records_drained_total              counter    topic, priority                    output and dead letters
kprio_bytes_drained_total                counter    topic, priority                    key + value bytes of them
kprio_dead_letters_total                 counter    topic, priority                    records sent to dead letters
kprio_batches_total                      counter    topic, outcome                     committed, failed, superseded
kprio_batch_phase_duration_seconds       histogram  topic, phase                       plan/drain/checks/publish/commit
kprio_produce_to_commit_latency_seconds  histogram  topic, priority                    oldest record's time to commit
kprio_last_commit_timestamp_seconds      gauge      topic, priority                    Unix time (s)
kprio_partitions_held                    gauge      topic, priority, reason            by :class:`HoldReason`
kprio_runs_in_flight                     gauge      topic                              batches being drained now
kprio_lag_verdict                        gauge      topic, priority, state             1 for the verdict, 0 others
kprio_partition_lag_verdict              gauge      topic, priority, partition, state  the same per partition
kprio_freshness_objective_seconds        gauge      topic, priority                    ``slo.max_age_s`` (s)
kprio_freshness_status                   gauge      topic, priority, status            1 for pass/warn/fail, 0 others
kprio_lineage_events_total               counter    outcome                            emitted, failed
kprio_build_info                         gauge      version                            1, with kprio's version
=======================================  =========  =================================  ================================

A snapshot with 120 records waiting on orders-2[0], the oldest 4.5 s old:

>>> m = KprioMetrics(version="0.1.0")
>>> m.set_backlog("orders", [PartitionBacklog(2, 0, backlog=120, oldest_age_s=4.5, committed=880, end=1000)])
>>> m.record_drained("orders", 2, records=120, size=24_000, dead_letters=1)
>>> print(m.value("kprio_backlog_records", topic="orders", priority="2", partition="0"),
...       m.value("kprio_records_drained_total", topic="orders", priority="2"))
120.0 120.0
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from kprio_core.freshness import Freshness, FreshnessResult
from kprio_core.model.priority import Priority
from kprio_core.verdict import LagState, PriorityVerdict
from orchestration.observe.judging import HoldReason

PHASE_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
"""A phase takes from tens of milliseconds (a commit) to many minutes (a bulk drain)."""
LATENCY_BUCKETS_S = (1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0, 86400.0)
"""Produce to commit: seconds for an urgent priority, hours for a bulk backlog."""


class Phase(enum.Enum):
    """The phases of a batch's life the histogram times."""

    PLAN = "plan"
    DRAIN = "drain"
    CHECKS = "checks"
    PUBLISH = "publish"
    COMMIT = "commit"

    @classmethod
    def of_step(cls, step: str) -> Phase | None:
        """The phase of a step as ``runtime.batch_metadata.Timings`` names it (None: not one of them).

        >>> Phase.of_step("check"), Phase.of_step("drain"), Phase.of_step("lease")
        (<Phase.CHECKS: 'checks'>, <Phase.DRAIN: 'drain'>, None)
        """
        return _STEPS.get(step)


_STEPS = {"plan": Phase.PLAN, "drain": Phase.DRAIN, "check": Phase.CHECKS, "checks": Phase.CHECKS,
          "publish": Phase.PUBLISH, "commit": Phase.COMMIT}


class Outcome(enum.Enum):
    """How a batch ended (a batch that will be retried ended its attempt as failed)."""

    COMMITTED = "committed"
    FAILED = "failed"
    SUPERSEDED = "superseded"


class LineageOutcome(enum.Enum):
    EMITTED = "emitted"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class PartitionBacklog:
    """One priority partition as a lag snapshot sees it (:func:`backlog_of` makes them from one)."""

    priority: Priority
    partition: int
    backlog: int
    oldest_age_s: float | None
    """Age of the record at the committed offset; None when not read (0 is set when nothing is pending)."""
    committed: int | None
    end: int


def backlog_of(snapshot: object, now_ms: int) -> list[PartitionBacklog]:
    """The partitions of a :class:`kprio_core.model.snapshot.LagSnapshot` as the metrics take them.

    >>> from kprio_core.model.snapshot import LagSnapshot, PartitionLag
    >>> snap = LagSnapshot("orders", 3, (PartitionLag("orders-2", 0, 2, 0, 1000, 880, oldest_pending_ms=55_500),
    ...                                  PartitionLag("orders-0", 1, 0, 0, 40, 40)))
    >>> [(b.priority, b.backlog, b.oldest_age_s) for b in backlog_of(snap, now_ms=60_000)]
    [(2, 120, 4.5), (0, 0, None)]
    """
    out = []
    for part in snapshot.partitions:  # type: ignore[attr-defined]
        age = None if part.oldest_pending_ms is None else max(0, now_ms - part.oldest_pending_ms) / 1000
        out.append(PartitionBacklog(part.priority, part.partition, part.backlog, age, part.committed,
                                    part.readable_end))
    return out


class KprioMetrics:
    """The table above, in a :class:`CollectorRegistry` of its own (never the process-wide one); thread-safe. Series
    of the present (backlog, holds, verdicts) are replaced per topic by each update: none goes stale."""

    def __init__(self, version: str | None = None, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._current: dict[tuple[str, str], set[tuple[str, ...]]] = {}
        r = self.registry
        part = ("topic", "priority", "partition")
        prio = ("topic", "priority")
        self.backlog = Gauge("kprio_backlog_records", "Readable backlog of a priority partition (records).",
                             part, registry=r)
        self.oldest_age = Gauge("kprio_oldest_pending_age_seconds",
                                "Age of the oldest pending record of a priority partition, 0 when none (seconds).",
                                part, registry=r)
        self.log_end = Gauge("kprio_log_end_offset", "Where a read of the partition ends (last stable offset).",
                             part, registry=r)
        self.committed = Gauge("kprio_committed_offset", "Committed offset of the priority's group.", part,
                               registry=r)
        self.records = Counter("kprio_records_drained", "Records of committed batches (output and dead letters).",
                               prio, registry=r)
        self.bytes = Counter("kprio_bytes_drained", "Key and value bytes of committed batches' records (bytes).",
                             prio, registry=r)
        self.dead_letters = Counter("kprio_dead_letters", "Records of committed batches sent to the dead letters.",
                                    prio, registry=r)
        self.batches = Counter("kprio_batches", "Batches that ended, by outcome.", ("topic", "outcome"), registry=r)
        self.phases = Histogram("kprio_batch_phase_duration_seconds", "Duration of one phase of a batch (seconds).",
                                ("topic", "phase"), buckets=PHASE_BUCKETS_S, registry=r)
        self.latency = Histogram("kprio_produce_to_commit_latency_seconds",
                                 "From a committed batch's oldest record's timestamp to its commit (seconds).",
                                 prio, buckets=LATENCY_BUCKETS_S, registry=r)
        self.last_commit = Gauge("kprio_last_commit_timestamp_seconds",
                                 "When the priority last committed (Unix time, seconds).", prio, registry=r)
        self.held = Gauge("kprio_partitions_held", "Partitions held, by reason.", ("topic", "priority", "reason"),
                          registry=r)
        self.in_flight = Gauge("kprio_runs_in_flight", "Batches being drained now.", ("topic",), registry=r)
        self.verdict = Gauge("kprio_lag_verdict", "1 for the priority's lag verdict, 0 for the other states.",
                             ("topic", "priority", "state"), registry=r)
        self.partition_verdict = Gauge("kprio_partition_lag_verdict",
                                       "1 for the partition's lag verdict, 0 for the other states.",
                                       ("topic", "priority", "partition", "state"), registry=r)
        self.objective = Gauge("kprio_freshness_objective_seconds",
                               "The freshness objective: the oldest pending record's largest age (seconds).",
                               prio, registry=r)
        self.freshness = Gauge("kprio_freshness_status", "1 for the priority's freshness outcome, 0 for the others.",
                               ("topic", "priority", "status"), registry=r)
        self.lineage = Counter("kprio_lineage_events", "Lineage events of committed batches, by outcome.",
                               ("outcome",), registry=r)
        info = Gauge("kprio_build_info", "1, with the version of kprio.", ("version",), registry=r)
        info.labels(version or "unknown").set(1)

    def set_backlog(self, topic: str, parts: Iterable[PartitionBacklog]) -> None:
        """A topic's partitions now: backlog, oldest age (0 when nothing waits), log end, committed offset."""
        parts = list(parts)
        with self._lock:
            seen = set()
            for b in parts:
                labels = (topic, str(b.priority), str(b.partition))
                seen.add(labels)
                self.backlog.labels(*labels).set(b.backlog)
                self.log_end.labels(*labels).set(b.end)
                age = 0.0 if b.backlog == 0 else b.oldest_age_s
                self._set_or_drop(self.oldest_age, labels, age)
                self._set_or_drop(self.committed, labels, b.committed)
            self._replace((self.backlog, self.log_end), topic, "partitions", seen)

    def set_holds(self, topic: str, held: Mapping[tuple[Priority, HoldReason], int]) -> None:
        """How many partitions of each priority are held, and why (every (priority, reason) not given: 0)."""
        with self._lock:
            seen = set()
            for (priority, reason), n in held.items():
                labels = (topic, str(priority), reason.value)
                seen.add(labels)
                self.held.labels(*labels).set(n)
            self._replace((self.held,), topic, "holds", seen)

    def set_runs_in_flight(self, topic: str, n: int) -> None:
        self.in_flight.labels(topic).set(n)

    def set_verdicts(self, topic: str, verdicts: Iterable[PriorityVerdict]) -> None:
        """The lag verdict of each priority and partition, as state sets (one 1, five 0 per series)."""
        with self._lock:
            seen_p, seen_q = set(), set()
            for v in verdicts:
                for state in LagState:
                    labels = (topic, str(v.priority), state.value)
                    seen_p.add(labels)
                    self.verdict.labels(*labels).set(1 if state is v.state else 0)
                    for q in v.partitions:
                        qlabels = (topic, str(q.priority), str(q.partition), state.value)
                        seen_q.add(qlabels)
                        self.partition_verdict.labels(*qlabels).set(1 if state is q.state else 0)
            self._replace((self.verdict,), topic, "verdicts", seen_p)
            self._replace((self.partition_verdict,), topic, "partition verdicts", seen_q)

    def set_freshness(self, topic: str, results: Iterable[FreshnessResult]) -> None:
        """Each priority's objective and its outcome (a state set of pass, warn, fail)."""
        with self._lock:
            for r in results:
                self.objective.labels(topic, str(r.priority)).set(r.objective.max_age_s)
                for status in Freshness:
                    self.freshness.labels(topic, str(r.priority), status.value).set(1 if status is r.status else 0)

    def record_drained(self, topic: str, priority: Priority, *, records: int, size: int, dead_letters: int) -> None:
        """A committed batch's records of one priority (output and dead letters), their bytes, the dead letters."""
        labels = (topic, str(priority))
        self.records.labels(*labels).inc(records)
        self.bytes.labels(*labels).inc(size)
        self.dead_letters.labels(*labels).inc(dead_letters)

    def record_batch(self, topic: str, outcome: Outcome, phases: Mapping[str | Phase, float] | None = None) -> None:
        """A batch ended: its outcome, and each phase's seconds (``Timings.steps``; non-phases, negatives dropped)."""
        self.batches.labels(topic, outcome.value).inc()
        for step, seconds in (phases or {}).items():
            phase = step if isinstance(step, Phase) else Phase.of_step(step)
            if phase is not None and seconds >= 0:
                self.phases.labels(topic, phase.value).observe(seconds)

    def record_batch_phase(self, topic: str, phase: str | Phase, seconds: float) -> None:
        """One phase of a batch timed apart from its end (the tick that planned it: ``plan``)."""
        found = phase if isinstance(phase, Phase) else Phase.of_step(phase)
        if found is not None and seconds >= 0:
            self.phases.labels(topic, found.value).observe(seconds)

    def record_commit(self, topic: str, priority: Priority, *, at_s: float, latency_s: float | None = None) -> None:
        """A priority committed at ``at_s`` (Unix seconds); ``latency_s``: from its oldest record's timestamp,
        where the record's timestamp is known (a negative one, a producer's clock ahead, counts as 0)."""
        self.last_commit.labels(topic, str(priority)).set(at_s)
        if latency_s is not None:
            self.latency.labels(topic, str(priority)).observe(max(0.0, latency_s))

    def record_lineage(self, outcome: LineageOutcome) -> None:
        self.lineage.labels(outcome.value).inc()

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format, as the endpoint serves it."""
        return generate_latest(self.registry)

    def value(self, name: str, **labels: str) -> float | None:
        """One sample's value (None: no such series): for tests, the Dagster metadata and ``kprio lag``."""
        return self.registry.get_sample_value(name, labels)

    def _set_or_drop(self, gauge: Gauge, labels: tuple[str, ...], value: float | None) -> None:
        if value is None:
            _remove(gauge, labels)
        else:
            gauge.labels(*labels).set(value)

    def _replace(self, gauges: tuple[Gauge, ...], topic: str, kind: str, seen: set[tuple[str, ...]]) -> None:
        """Drop the series of ``topic`` an earlier update set and this one did not (caller holds the lock)."""
        key = (topic, kind)
        for labels in self._current.get(key, set()) - seen:
            for gauge in gauges:
                _remove(gauge, labels)
            if kind == "partitions":
                _remove(self.oldest_age, labels)
                _remove(self.committed, labels)
        self._current[key] = seen


def _remove(gauge: Gauge, labels: tuple[str, ...]) -> None:
    try:
        gauge.remove(*labels)
    except KeyError:  # never set
        pass
