"""The drain loop behind ``kprio drain``: the sensor's tick, and the runs it requests handed to warm workers.

Each turn runs :func:`orchestration.runtime.tick.tick` over the instance's runs
(:class:`orchestration.dagster.runs.DagsterRuns`; no rule of its own) and creates a ``drain_job`` run per request,
tagged as the daemon tags its runs (so neither launches it again), for the loop's
:class:`~orchestration.dagster.workers.pool.WorkerPool`, the warm workers kprio's run launcher uses too: a run
executes one way whichever driver launched it. The pool starts with the loop (warming while the first tick reads)
and stops with it, unless the caller passes one. The loop ticks on while runs execute, so an urgent batch starts
at once beside a bulk one; between ticks it watches the priority partitions' ends (``sensor.watch_s``) and ticks
when records arrive on a priority with a free slot, or a run ends (after a watch-woken tick that launched nothing,
the watch rests until the interval or a run's end). A request whose launch claim another driver took, or whose run
key has a run, is not launched; reports count only this process's runs.

After each tick :func:`kprio_core.lifecycle.loop.next_step` says tick again (when) or stop (why), per
:class:`~kprio_core.lifecycle.loop.Until`: ``--until-empty`` waits out backoffs, throttles and other processes'
batches, and stops early, not ok, when only partitions needing a person are left or the broker stays unreachable;
``--follow`` is kprio as a service without the Dagster daemon, a stop request finishing the batches in flight.

A restart after a crash needs nothing special: the tick fails the runs whose lease owner is gone or expired and
resumes them with the same ranges. Killed attempts' staging is removed at start, and the first tick retries
transient failures (a full disk, a broker gone) at once; under ``--follow`` so does the first tick after a failed
probe (:mod:`orchestration.runtime.healing`) passes. What the loop reports: :mod:`orchestration.dagster.drain_report`.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg

from kprio_core.config import KprioConfig
from kprio_core.errors import KprioError, LedgerUnavailable
from kprio_core.kafka import KafkaEdge
from kprio_core.ledger import BatchState, Ledger
from kprio_core.lifecycle.loop import (
    LoopInputs,
    Others,
    StopLoop,
    Until,
    blocked,
    next_step,
    records_arrived,
    watched,
)
from orchestration.dagster.drain_report import BatchOutcome, DrainReport, outcome_of
from orchestration.dagster.partitions import BATCH_PARTITIONS_NAME
from orchestration.dagster.run_logs import logged_job
from orchestration.dagster.runs import DagsterRuns
from orchestration.dagster.sensors import SENSOR_NAME
from orchestration.dagster.tags import (
    MAX_RETRIES_TAG,
    PARTITION_TAG,
    RUN_KEY_TAG,
    SENSOR_NAME_TAG,
)
from orchestration.dagster.workers import dagster_api
from orchestration.dagster.workers.lanes import BULK
from orchestration.dagster.workers.pool import Submission, WorkerPool, workers_for
from orchestration.dagster.workers.protocol import ByConfig
from orchestration.runtime.healing import cause_seen_after, probe_causes
from orchestration.runtime.leases import this_owner
from orchestration.runtime.runs import RunOrder
from orchestration.runtime.tags import LANE_TAG, RUNNER_TAG, TOPIC_TAG, slot_priorities
from orchestration.runtime.tick import Tick, still_launchable, tick

IN_PROCESS_TAGS = {MAX_RETRIES_TAG: "0"}
"""What every run the loop launches carries: no retry by Dagster's daemon (the loop's tick retries it)."""
JOB = "drain_job"


@dataclass
class Launched:
    """A run the loop handed to its pool: the request, the Dagster run, when, the priority slots it holds."""

    request: RunOrder
    run_id: str
    started: float
    priorities: frozenset[int]


def launch(defs: dg.Definitions, instance: dg.DagsterInstance, pool: WorkerPool, request: RunOrder,
           config: KprioConfig, *, log_level: str = "DEBUG", runner: str | None = None) -> str:
    """Create ``request``'s Dagster run (tagged as the daemon would) and hand it to ``pool``; its id.

    ``dagster/max_retries=0``: the loop's tick retries; the daemon may not run at all, and a run marked
    ``dagster/will_retry=true`` would make every tick wait for a retry never coming.
    """
    tags = {**request.tags, PARTITION_TAG: request.partition_key, RUN_KEY_TAG: request.run_key,
            SENSOR_NAME_TAG: SENSOR_NAME, RUNNER_TAG: runner or this_owner(""), **IN_PROCESS_TAGS}
    return submit(defs, instance, pool, config, tags, log_level=log_level)


def submit(defs: dg.Definitions, instance: dg.DagsterInstance, pool: WorkerPool, config: KprioConfig,
           tags: dict[str, str], *, log_level: str = "DEBUG") -> str:
    """A new run of ``drain_job`` with ``tags``, STARTING, handed to ``pool``; its id."""
    job = dagster_api.in_memory(logged_job(defs, JOB))
    run = dagster_api.create_run(instance, job, tags=tags,
                                 run_config={"loggers": {"console": {"config": {"log_level": log_level}}}})
    dagster_api.mark_starting(instance, run)
    pool.submit(Submission(run.run_id, instance, ByConfig(config, JOB), lane=tags.get(LANE_TAG, BULK)))
    return run.run_id


def wait_for_run(instance: dg.DagsterInstance, run_id: str, poll_s: float = 0.05) -> dg.DagsterRun:
    """``run_id`` once it ended (a worker executes it, or its death failed it)."""
    while True:
        run = instance.get_run_by_id(run_id)
        if run is not None and run.is_finished:
            return run
        time.sleep(poll_s)


def execute(defs: dg.Definitions, instance: dg.DagsterInstance, request: RunOrder, log_level: str = "DEBUG",
            config: KprioConfig | None = None, workers: WorkerPool | None = None) -> BatchOutcome:
    """Launch one requested run on a warm worker and wait for its end; what it did (a test's way to run one batch)."""
    config = config or config_of(defs)
    with Ledger(config.ledger.url) as ledger, workers_for(config.spark, config.workers, workers) as pool:
        started = time.monotonic()
        run_id = launch(defs, instance, pool, request, config, log_level=log_level)
        wait_for_run(instance, run_id)
        return outcome_of(ledger, request.partition_key, request.tags[TOPIC_TAG], instance, run_id,
                          time.monotonic() - started)


def redrain(defs: dg.Definitions, instance: dg.DagsterInstance, batch_id: str,
            log_level: str = "WARNING", config: KprioConfig | None = None,
            workers: WorkerPool | None = None) -> BatchOutcome:
    """An operator's re-drain of one batch, on a warm worker: a failed one is retried whatever its attempts, a
    committed one re-drained (its output replaced, nothing new committed)."""
    config = config or config_of(defs)
    with Ledger(config.ledger.url) as ledger, workers_for(config.spark, config.workers, workers) as pool:
        topic = ledger.batches.get(batch_id).logical_topic
        started = time.monotonic()
        run_id = submit(defs, instance, pool, config, {PARTITION_TAG: batch_id, TOPIC_TAG: topic,
                                                       RUNNER_TAG: this_owner(""), **IN_PROCESS_TAGS},
                        log_level=log_level)
        wait_for_run(instance, run_id)
        return outcome_of(ledger, batch_id, topic, instance, run_id, time.monotonic() - started)


class DrainLoop:
    """The loop (see the module docstring); :func:`drain` runs one."""

    def __init__(self, config: KprioConfig, defs: dg.Definitions, instance: dg.DagsterInstance, ledger: Ledger,
                 edge, *, until: Until, max_batches: int | None, stop: threading.Event, log_level: str,
                 on_batch: Callable[[BatchOutcome], None] | None,
                 on_start: Callable[[str], None] | None = None,
                 on_event: Callable[[str], None] | None = None, pool: WorkerPool,
                 on_tick: Callable[[Tick, float], None] | None = None) -> None:
        self.config, self.defs, self.instance, self.ledger, self.edge = config, defs, instance, ledger, edge
        self.pool = pool
        self.on_tick = on_tick
        """Told each tick and its seconds (the metrics' plan phase), from the loop's thread."""
        self.runs = DagsterRuns(instance)
        self.until, self.max_batches, self.stop = until, max_batches, stop
        self.log_level, self.on_batch, self.on_start, self.on_event = log_level, on_batch, on_start, on_event
        self.driver = this_owner("")
        """This process as a launch claimant (and as the runner of the runs it launches, until a worker takes one)."""
        self.report = DrainReport()
        self.running: dict[str, Launched] = {}
        """This loop's runs executing, by run key (a stale run's batch is resumed beside it, its writes refused)."""
        self._ended = threading.Event()
        """Set when a run of the pool ends (the loop's wait wakes on it)."""
        self._ended_runs: set[str] = set()
        self._watched: dict = {}
        """The partitions of the last tick's lag snapshots and their readable ends (see :meth:`_wait`)."""
        self._throttled: set[tuple[str, int]] = set()
        self._watching = True
        """False after a watch-woken tick launched nothing: the watch rests until a run ends or the interval passes."""
        self._blocked_since: float | None = None
        self._turns = 0
        self._started = 0
        self._progress = time.monotonic()
        """When a run last committed a batch (a loop without progress for long stops)."""
        self._cause_seen = False
        """A probe failed since the last retry at once (the output unwritable, the broker unreachable)."""
        self._ledger_since: float | None = None
        """Since when the ledger's database has not answered (None: it does)."""

    def run(self) -> DrainReport:
        self.sweep_staging()
        unlisten = self.pool.listen(self._on_end)
        woke = Woke.TIME
        try:
            while not self._done():
                try:
                    self._reap()
                    probed = probe_causes(self.ledger, self.config, self._cause_seen)
                    began = time.monotonic()
                    turn = tick(self.runs, self.edge, self.ledger, self.config, driver=self.driver,
                                fresh_start=self._turns == 0 or probed.passed, cause=probed.problem)
                    if self.on_tick is not None:
                        self.on_tick(turn, time.monotonic() - began)
                except LedgerUnavailable as err:  # rule 0 of next_step: ride it out, or give up after a while
                    step = next_step((), self._ledger_down(str(err)))
                    if isinstance(step, StopLoop):
                        return self._stop(step.why, ok=step.ok)
                    woke = self._wait(step.after_s)
                    continue
                if self._ledger_since is not None:
                    self._say(f"the ledger answers again (after {time.monotonic() - self._ledger_since:.0f} s)")
                    self._ledger_since = None
                self._turns += 1
                self._cause_seen = cause_seen_after(self._cause_seen, probed, turn)
                self._add_partitions([*turn.partitions, *(r.partition_key for r in turn.requests)])
                started = sum(self._start(request) for request in turn.requests if not self._done())
                self._watched = watched(turn.decisions)
                self._throttled = {(d.topic, p) for d in turn.decisions for p in d.throttled}
                self._watching = started > 0 or woke != Woke.WATCH
                step = next_step(turn.decisions, self._seen(turn, started))
                if isinstance(step, StopLoop):
                    self._finish_running()
                    self.report.held = list(step.held) or self.report.held
                    return self._stop(step.why, ok=step.ok)
                woke = self._wait(step.after_s)
        finally:
            self._finish_running()
            unlisten()
        if self.stop.is_set():
            return self._stop(self._stopped_on_request())
        return self._stop(f"stopped after {len(self.report.batches)} runs (--max-batches)")

    def _ledger_down(self, why: str) -> LoopInputs:
        """What rule 0 of :func:`next_step` needs while the ledger's database does not answer (said once)."""
        clock = time.monotonic()
        if self._ledger_since is None:
            self._ledger_since = clock
            self._say(f"the ledger does not answer: {why}; the drain waits for it")
        return LoopInputs(self.until, float(self.config.sensor.interval_s), datetime.now(UTC),
                          runs_so_far=self._started, running=len(self.running),
                          blocked_for_s=clock - self._ledger_since, ledger_down=why)

    def _say(self, line: str) -> None:
        if self.on_event is not None:
            self.on_event(line)

    def _seen(self, turn: Tick, started: int) -> LoopInputs:
        """What :func:`next_step` needs besides the tick's decisions: this loop's turn and clocks, other drivers."""
        now, clock = self.ledger.now(), time.monotonic()
        if blocked(turn.decisions) and not turn.requests:
            self._blocked_since = self._blocked_since or clock
        else:
            self._blocked_since = None
        return LoopInputs(
            self.until, float(self.config.sensor.interval_s), now, requested=started,
            runs_so_far=self._started, running=len(self.running), first_turn=self._turns == 1,
            blocked_for_s=clock - self._blocked_since if self._blocked_since else 0.0,
            since_progress_s=clock - self._progress, contended=turn.contended, others=self._others(now),
            reason=turn.skip_reason,
        )

    def _done(self) -> bool:
        return self.stop.is_set() or (self.max_batches is not None and self._started >= self.max_batches)

    def _wait(self, seconds: float) -> Woke:
        """Wait ``seconds``, or less: until a run of this loop ends, a stop request, or (``sensor.watch_s``)
        records arrive on a priority a new batch could take (:func:`records_arrived`); what ended the wait."""
        watch = self.config.sensor.watch_s if self._watching else None
        deadline = time.monotonic() + seconds
        while not self.stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return Woke.TIME
            if self._ended.wait(min(left, watch or 0.5)):
                return Woke.RUN_ENDED
            if watch and self._watched and self._records_arrived():
                return Woke.WATCH
        return Woke.STOP

    def _records_arrived(self) -> bool:
        busy = {(r.request.tags[TOPIC_TAG], p) for r in self.running.values() for p in r.priorities}
        try:
            ends = self.edge.ends(self._watched)
        except KprioError:
            return False  # the broker does not answer: the next tick says so
        return records_arrived(self._watched, ends, busy | self._throttled)

    def _stopped_on_request(self) -> str:
        """Which batch the stop request let finish, or abandoned for the next start to resume."""
        if not self.report.batches:
            return "stopped on request"
        last = self.report.batches[-1]
        if last.state.in_flight:
            return f"stopped on request: abandoned {last.batch_id} ({last.state.value}); the next start resumes it"
        return f"stopped on request after finishing {last.batch_id} ({last.state.value})"

    def _stop(self, why: str, *, ok: bool = True) -> DrainReport:
        self.report.stopped, self.report.ok = why, ok and self.report.ok
        return self.report

    def _add_partitions(self, keys: list[str]) -> None:
        """Add the batch partitions the tick's runs need (another driver may add the same ones at once)."""
        for attempt in (1, 2):
            missing = self.runs.missing_partitions(keys)
            if not missing:
                return
            try:
                self.instance.add_dynamic_partitions(BATCH_PARTITIONS_NAME, missing)
            except Exception:  # noqa: BLE001 - a concurrent add of the same key; the re-check decides
                if attempt == 2:
                    raise

    def _start(self, request: RunOrder) -> bool:
        """Hand ``request``'s run to the pool, unless it runs already or another driver launched it meanwhile."""
        if request.run_key in self.running:
            return False
        if not still_launchable(self.runs, self.ledger, self.config, request, self.driver):
            return False
        if self.on_start is not None:
            self.on_start(request.partition_key)
        self._started += 1
        run_id = launch(self.defs, self.instance, self.pool, request, self.config, log_level=self.log_level,
                        runner=self.driver)
        self.running[request.run_key] = Launched(request, run_id, time.monotonic(),
                                                       slot_priorities(request.tags))
        return True

    def _on_end(self, run_id: str, _status: str) -> None:
        """The pool's word that a run ended (its thread): the loop's wait wakes."""
        self._ended_runs.add(run_id)
        self._ended.set()

    def _reap(self) -> None:
        """Report every run of this loop that ended, in the order they started."""
        self._ended.clear()
        for key, run in list(self.running.items()):
            if run.run_id not in self._ended_runs:
                continue
            self._ended_runs.discard(run.run_id)
            del self.running[key]
            outcome = outcome_of(self.ledger, run.request.partition_key, run.request.tags[TOPIC_TAG], self.instance,
                                 run.run_id, time.monotonic() - run.started)
            self.report.batches.append(outcome)
            if outcome.state is BatchState.COMMITTED:
                self._progress = time.monotonic()
            if self.on_batch is not None:
                self.on_batch(outcome)

    def _finish_running(self) -> None:
        """Let the runs still executing end (a stop request finishes the batches in flight), and report them."""
        while self.running:
            self._ended.wait(0.5)
            self._reap()

    def _others(self, now: datetime) -> Others:
        """Live leases of batches in flight, and other drivers' live launch claims of them."""
        ends, claimed = [], False
        for t in self.config.topics:
            in_flight = self.ledger.batches.in_flight(t.name)
            ends += [(b.lease.until - now).total_seconds() for b in in_flight
                     if b.lease is not None and not b.lease.expired(now)]
            ids = {b.batch_id for b in in_flight}
            claimed = claimed or any(c.batch_id in ids and c.owner != self.driver and c.live(now)
                                     for c in self.ledger.launches.claims(t.name).values())
        return Others(tuple(ends), claimed)

    def sweep_staging(self) -> list[str]:
        """Remove the staging of attempts that are no longer in flight (killed runs leave theirs)."""
        from spark_jobs.drain import sweep_staging

        live = {(b.batch_id, b.attempts) for t in self.config.topics for b in self.ledger.batches.in_flight(t.name)}
        drain = self.config.drain
        return sweep_staging((drain.output_path, drain.dead_letter_path),
                             keep=lambda batch_id, attempt: (batch_id, attempt) in live)


class Woke(enum.Enum):
    """What ended the loop's wait between two ticks."""

    TIME = "time"
    RUN_ENDED = "a run ended"
    WATCH = "records arrived"
    STOP = "a stop request"


def config_of(defs: dg.Definitions) -> KprioConfig:
    """The settings inside built definitions, for callers that hold only those (tests, the demo)."""
    kafka = defs.resources["kafka"]
    return defs.resources["kprio"].config(kafka)


def drain(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    *,
    config: KprioConfig | None = None,
    until: Until = Until.EMPTY,
    max_batches: int | None = None,
    stop: threading.Event | None = None,
    log_level: str = "DEBUG",
    on_batch: Callable[[BatchOutcome], None] | None = None,
    on_start: Callable[[str], None] | None = None,
    on_event: Callable[[str], None] | None = None,
    guard: Callable[[], AbstractContextManager] | None = None,
    workers: WorkerPool | None = None,
    on_tick: Callable[[Tick, float], None] | None = None,
) -> DrainReport:
    """Run the loop on ``instance`` until ``until`` says stop, ``max_batches`` ran, or ``stop`` is set;
    ``config``: the settings ``defs`` were built from (default: read back from ``defs``); ``guard``: entered around
    the loop (the CLI's signal handlers); ``on_start`` / ``on_batch``: before and after each run; ``on_event``: a
    line for a person (the ledger gone and back); ``on_tick``: each tick and its seconds (the metrics);
    ``workers``: the caller's pool (:func:`~orchestration.dagster.workers.pool.workers_for`)."""
    config = config or config_of(defs)
    with (Ledger(config.ledger.url) as ledger, KafkaEdge(config.kafka) as edge,
          workers_for(config.spark, config.workers, workers) as pool, (guard or nullcontext)()):
        loop = DrainLoop(config, defs, instance, ledger, edge, until=until, max_batches=max_batches,
                         stop=stop or threading.Event(), log_level=log_level, on_batch=on_batch,
                         on_start=on_start, on_event=on_event, pool=pool, on_tick=on_tick)
        return loop.run()
