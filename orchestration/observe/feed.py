"""What feeds kprio's metrics while ``kprio drain`` runs: the present from broker and ledger, events from the loop.

A :class:`MetricsFeed` runs in a thread of its own with its own Kafka edge and ledger (a slow broker slows only the
metrics): every ``interval_s`` it snapshots and judges each topic (:mod:`orchestration.observe.judging`) into the
gauges. The loop calls :meth:`~MetricsFeed.on_tick` and :meth:`~MetricsFeed.on_batch` and never waits for it; a run
that ended is counted once, in the feed's thread, with one bounded broker read for its produce-to-commit latency.

Counters count this process's runs (two ``kprio drain`` each count their own: Prometheus sums them); gauges describe
the topic as a whole. With ``count_ledger`` (``kprio metrics``) it counts every batch the ledger shows ended since it
started, whoever ran it (phases and lineage outcomes then unknown).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from kprio_core.config import KprioConfig
from kprio_core.errors import KprioError
from kprio_core.model.offsets import TopicPartitionKey
from kprio_core.verdict import Observation
from orchestration.observe.judging import HoldReason, judge_topic, remember
from orchestration.observe.metrics import KprioMetrics, LineageOutcome, Outcome, backlog_of

STOP_TIMEOUT_S = 10.0
PHASE_KEYS = ("drain_s", "check_s", "publish_s", "commit_s")
"""The runtime's step timings (``runtime.batch_metadata.Timings``) in a run's materialization metadata."""


class MetricsFeed:
    """Keeps a :class:`KprioMetrics` up to date while a drain runs (see the module docstring)."""

    def __init__(self, config: KprioConfig, metrics: KprioMetrics, *, instance: Any = None,
                 interval_s: float | None = None, on_error: Callable[[str], None] | None = None,
                 count_ledger: bool = False) -> None:
        self.config, self.metrics, self.instance = config, metrics, instance
        self.count_ledger = count_ledger
        self._since = datetime.now(UTC)
        self._counted: set[tuple[str, int, str]] = set()
        self.interval_s = float(interval_s if interval_s is not None else max(1, config.sensor.interval_s))
        self.on_error = on_error
        self._events: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._history: dict[TopicPartitionKey, list[Observation]] = {}
        self._said: dict[str, str] = {}
        """Per kind of work, the failure said last (until that work passes again)."""
        self.refreshed = threading.Event()
        """Set after each refresh (tests and the first scrape wait on it)."""

    def on_tick(self, turn: Any, seconds: float) -> None:
        """A tick of the loop took ``seconds``; the batches it recorded were planned in that time."""
        from orchestration.runtime.tags import TOPIC_TAG

        recorded = set(turn.partitions)
        for topic in {r.tags.get(TOPIC_TAG) for r in turn.requests if r.partition_key in recorded}:
            if topic:
                self.metrics.record_batch_phase(topic, "plan", seconds)

    def on_batch(self, outcome: Any) -> None:
        """A run of this process ended (a :class:`~orchestration.dagster.drain_loop.BatchOutcome`)."""
        if outcome.own:
            self._events.put(outcome)

    def start(self) -> MetricsFeed:
        self._thread = threading.Thread(target=self._run, name="kprio-metrics", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Count the runs reported so far, then stop (the thread is joined)."""
        self._stop.set()
        self._events.put(None)
        if self._thread is not None:
            self._thread.join(STOP_TIMEOUT_S)

    def __enter__(self) -> MetricsFeed:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        from kprio_core.kafka import KafkaEdge
        from kprio_core.ledger import Ledger, ledger_exists

        with KafkaEdge(self.config.kafka) as edge:
            ledger = None
            try:
                while not self._stop.is_set():
                    if ledger is None and ledger_exists(self.config.ledger.url):
                        ledger = Ledger(self.config.ledger.url)
                    self._guarded("count a run", self._count_runs, edge, ledger)
                    if self.count_ledger and ledger is not None:
                        self._guarded("count the ledger's batches", self._count_ledger, edge, ledger)
                    self._guarded("refresh", self.refresh, edge, ledger, time.time())
                    self.refreshed.set()
                    self._wait()
                self._guarded("count a run", self._count_runs, edge, ledger)
            finally:
                if ledger is not None:
                    ledger.close()

    def _wait(self) -> None:
        """Until the next refresh, or a run's end (counted at once, then refreshed)."""
        try:
            item = self._events.get(timeout=self.interval_s)
        except queue.Empty:
            return
        self._events.put(item)

    def _guarded(self, what: str, work: Callable[..., None], *args: Any) -> None:
        """``work(*args)``. Metrics never stop a drain: a failure is said once (until that work passes), the feed
        goes on; another work passing meanwhile does not make it said again."""
        try:
            work(*args)
        except Exception as err:  # noqa: BLE001 - the broker or the ledger gone: the loop says so itself
            line = f"metrics: could not {what}: {err}".splitlines()[0]
            if line != self._said.get(what) and self.on_error is not None:
                self.on_error(line)
            self._said[what] = line
            return
        self._said.pop(what, None)

    def refresh(self, edge: Any, ledger: Any, now_s: float) -> None:
        """Take every topic's snapshot and set the gauges (backlog, age, holds, in flight, verdicts, freshness)."""
        now_ms = int(now_s * 1000)
        for topic in self.config.topics:
            known = {b.topic for b in ledger.beliefs.of(topic.name).values()} if ledger is not None else set()
            snap = edge.snapshot(topic, now_ms=now_ms, avg_record_bytes={}, with_age=True, deleted_ok=known)
            judged = judge_topic(self.config, topic, snap, ledger, now_s=now_s, history=self._history)
            remember(self.config, self._history, snap, judged, now_s)
            m = self.metrics
            m.set_backlog(topic.name, backlog_of(snap, now_ms))
            counts: dict[tuple[int, HoldReason], int] = {}
            for held in judged.held.values():
                counts[(held.priority, held.reason)] = counts.get((held.priority, held.reason), 0) + 1
            m.set_holds(topic.name, counts)
            m.set_runs_in_flight(topic.name, len(ledger.batches.in_flight(topic.name)) if ledger is not None else 0)
            m.set_verdicts(topic.name, judged.verdicts)
            m.set_freshness(topic.name, judged.freshness)

    def _count_runs(self, edge: Any, ledger: Any) -> None:
        while True:
            try:
                outcome = self._events.get_nowait()
            except queue.Empty:
                return
            if outcome is not None and ledger is not None:
                self.count(edge, ledger, outcome)

    def _count_ledger(self, edge: Any, ledger: Any) -> None:
        """Every batch the ledger shows ended (committed, or failed) since the feed started, once per attempt."""
        from kprio_core.ledger import BatchState

        for topic in self.config.topics:
            ended = ledger.batches.find(topic.name, states=[BatchState.COMMITTED, BatchState.FAILED], limit=500)
            for batch in reversed(ended):  # oldest first
                key = (batch.batch_id, batch.attempts, batch.state.value)
                if key in self._counted or batch.updated_at < self._since:
                    continue
                self._counted.add(key)
                self._count_batch(edge, ledger, batch, {}, None)

    def count(self, edge: Any, ledger: Any, outcome: Any) -> None:
        """Count one run's batch: its outcome and phases, and, committed, its records, bytes and latency."""
        batch = ledger.batches.get(outcome.batch_id)
        phases, lineage = self._of_run(outcome.run_id)
        self._counted.add((batch.batch_id, batch.attempts, batch.state.value))
        self._count_batch(edge, ledger, batch, phases, lineage)

    def _count_batch(self, edge: Any, ledger: Any, batch: Any, phases: dict[str, float], lineage: str | None
                     ) -> None:
        from kprio_core.ledger import BatchState

        topic = self.config.topic(batch.logical_topic)
        committed = batch.state is BatchState.COMMITTED
        kind = Outcome.COMMITTED if committed else Outcome.FAILED
        if not committed and ledger.batches.superseded_batch(batch.batch_id):
            kind = Outcome.SUPERSEDED
        self.metrics.record_batch(topic.name, kind, phases)
        if lineage is not None:
            self.metrics.record_lineage(LineageOutcome(lineage))
        if not committed or batch.drain is None:
            return
        per: dict[int, list[int]] = {}
        for r in batch.drain.ranges:
            out = per.setdefault(r.priority, [0, 0, 0])
            out[0] += r.output + r.dead
            out[1] += r.bytes
            out[2] += r.dead
        for priority, (records, size, dead) in per.items():
            self.metrics.record_drained(topic.name, priority, records=records, size=size, dead_letters=dead)
        at_s = (batch.committed_at.timestamp() if batch.committed_at is not None else time.time())
        for priority, oldest_ms in self._first_timestamps(edge, batch).items():
            latency = None if oldest_ms is None else at_s - oldest_ms / 1000
            self.metrics.record_commit(topic.name, priority, at_s=at_s, latency_s=latency)

    def _of_run(self, run_id: str) -> tuple[dict[str, float], str | None]:
        """The step seconds a run's materializations carry, and how its lineage event went (``emitted``,
        ``failed``; None: none sent); nothing without the Dagster instance."""
        if self.instance is None:
            return {}, None
        import dagster as dg

        from orchestration.runtime.batch import LINEAGE_KEY

        found: dict[str, float] = {}
        lineage = None
        for entry in self.instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
            materialization = entry.asset_materialization
            metadata = materialization.metadata if materialization is not None else {}
            for key in PHASE_KEYS:
                if metadata.get(key) is not None:
                    found[key.removesuffix("_s")] = float(metadata[key].value)
            if metadata.get(LINEAGE_KEY) is not None:
                lineage = str(metadata[LINEAGE_KEY].value)
        return found, lineage

    def _first_timestamps(self, edge: Any, batch: Any) -> dict[int, int | None]:
        """Per priority of a committed batch, the timestamp of its oldest first record (None: none read)."""
        from kprio_core.kafka.fetch import peek

        starts = {(r.range.topic, r.range.partition): r.range.start for r in batch.plan.ranges if r.range.count}
        ends = {(r.range.topic, r.range.partition): r.range.end for r in batch.plan.ranges if r.range.count}
        priority_of = {(r.range.topic, r.range.partition): r.priority for r in batch.plan.ranges}
        try:
            heads = peek(self.config.kafka, starts, ends, 1, edge.deadline(), "read the first records of a batch")
        except KprioError:
            heads = {}
        out: dict[int, int | None] = {p: None for p in set(priority_of.values())}
        for tp, records in heads.items():
            stamps: Iterable[int] = [r.timestamp_ms for r in records if r.timestamp_ms is not None]
            for ts in stamps:
                p = priority_of[tp]
                out[p] = ts if out[p] is None else min(out[p], ts)
        return out
