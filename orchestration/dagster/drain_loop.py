"""The in-process drain loop behind ``kprio drain``: the sensor's tick and the runs it requests, in one process.

Each turn evaluates :func:`orchestration.runtime.tick.tick` over the instance's runs
(:class:`orchestration.dagster.runs.DagsterRuns`; the same gather, core rules and
applier as the sensor: heal, retry, plan; no rule of its own here) and executes the requested
runs of ``drain_job`` here with ``execute_in_process``, tagged as a daemon-launched run is (so
neither the sensor nor the daemon launches them again), on one warm Spark session. Each run
executes in a thread of its own (:class:`~orchestration.dagster.run_threads.RunThread`, on the instance of
:mod:`orchestration.dagster.threaded_instance`) and the loop ticks on while runs execute, so
a batch of priorities no running batch holds (``planner.max_in_flight`` slots: an urgent batch while
a bulk one drains) starts at once beside them, its Spark jobs in its priority's scheduler pool.
Between ticks the loop watches the priority partitions' ends (``sensor.watch_s``) and ticks as soon
as records arrive on a priority with a free slot, or a run ends; after a tick the watch woke that
launched nothing (the slot is another driver's, the partitions are held), the watch rests until the
next tick the interval or a run's end brings. A request
whose launch claim another driver took meanwhile (a second ``kprio drain`` on the same config),
or whose run key already has a run, is not executed. Each line and total reports only what this
process's runs drained and committed. After each tick, :func:`kprio_core.lifecycle.loop.next_step`
says whether to tick again (and when) or stop (and why); three ways to run it:

- ``Until.EMPTY`` (``--until-empty``): until no backlog is left outside held partitions;
  retries after their backoff, throttles and batches another process finishes are waited for;
  it stops early, not ok, when only partitions that need a person are left, or when the broker
  stays unreachable;
- ``Until.ONCE`` (``--once``): what one tick requests;
- ``Until.FOLLOW`` (``--follow``): tick for ever, the way to run kprio as a service without the
  Dagster daemon (systemd, a Kubernetes deployment); a stop request finishes the batches in flight.

A restart after a crash needs nothing special: the tick sees batches whose lease owner is gone
(this host) or expired, marks their runs failed, and resumes them with the same ranges. Staging
left by killed attempts is removed when the loop starts, and its first tick retries batches that
failed for a transient cause (a full disk, a broker gone) at once, not after their backoff. While
it runs (``--follow``), the probe before each tick (:mod:`orchestration.runtime.healing`, which the
sensor runs too) retries them at once as well, on the first tick after a probe that had failed
passes again: a disk grown, a mount made writable, a broker back.

What the loop reports, one :class:`~orchestration.dagster.drain_report.BatchOutcome` per run and the
:class:`~orchestration.dagster.drain_report.DrainReport`, is :mod:`orchestration.dagster.drain_report`'s.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
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
from orchestration.dagster.run_threads import Running, RunThread, slot_priorities
from orchestration.dagster.runs import DagsterRuns
from orchestration.dagster.sensors import SENSOR_NAME
from orchestration.dagster.tags import MAX_RETRIES_TAG, RUN_KEY_TAG, SENSOR_NAME_TAG
from orchestration.dagster.threaded_instance import for_runs_in_threads
from orchestration.runtime.healing import cause_seen_after, probe_causes
from orchestration.runtime.leases import this_owner
from orchestration.runtime.runs import RunOrder
from orchestration.runtime.tags import RUNNER_TAG, TOPIC_TAG
from orchestration.runtime.tick import Tick, still_launchable, tick
from spark_jobs.session import SparkProvider

IN_PROCESS_TAGS = {MAX_RETRIES_TAG: "0"}
"""What every run executed here carries: no retry by Dagster's daemon (the loop's tick retries it)."""


@contextmanager
def spark_for_the_loop(defs: dg.Definitions, spark: SparkProvider | None = None) -> Iterator[SparkProvider]:
    """The one Spark session of every run of the loop, as a provider each run's Spark resource shares
    (:func:`execute`); without it each run's resource would start and stop its own session.

    ``spark``: the caller's, left to it (``kprio drain`` starts it before it imports Dagster, and stops
    it). Else a provider of the Spark resource's settings, started here in the background, so the JVM
    starts while the first tick reads the ledger and the broker (the first run waits for it), and stopped
    at the end. A session that was already active (a test's) is reused and left to whoever started it.
    """
    if spark is not None:
        yield spark
        return
    resource = defs.resources["spark"]
    provider = SparkProvider(resource.settings(), app_name=resource.app_name)
    provider.start_in_background()
    try:
        yield provider
    finally:
        provider.stop()


def shared_spark(defs: dg.Definitions, spark: SparkProvider | None) -> dict[str, dg.ResourceDefinition] | None:
    """The resources a run executed here gets instead of the definitions': the Spark resource over the
    loop's provider ``spark`` (none given: the run's resource makes its own)."""
    if spark is None:
        return None
    return {"spark": dg.ResourceDefinition.hardcoded_resource(defs.resources["spark"].sharing(spark))}


def execute(defs: dg.Definitions, instance: dg.DagsterInstance, request: RunOrder,
            log_level: str = "DEBUG", spark: SparkProvider | None = None) -> dg.ExecuteInProcessResult:
    """Execute one requested run of ``drain_job`` in this process, tagged as the daemon would tag it.

    Except for one tag: Dagster's run retries are off for it (``dagster/max_retries=0``). A run that
    fails here is retried by the loop's own tick; the daemon that would honour a retry may not be
    running at all, and a failed run marked ``dagster/will_retry=true`` would make every tick wait for
    a retry that never comes.
    """
    job = logged_job(defs, "drain_job")
    tags = {**request.tags, RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: SENSOR_NAME, RUNNER_TAG: this_owner(""),
            **IN_PROCESS_TAGS}
    return job.execute_in_process(
        run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
        instance=instance, partition_key=request.partition_key, tags=tags, raise_on_error=False,
        resources=shared_spark(defs, spark),
    )



def redrain(defs: dg.Definitions, instance: dg.DagsterInstance, batch_id: str,
            log_level: str = "WARNING", config: KprioConfig | None = None,
            spark: SparkProvider | None = None) -> BatchOutcome:
    """An operator's re-drain of one batch, here: a failed one is retried whatever its attempts, a
    committed one re-drained (its output replaced, nothing new committed)."""
    config = config or config_of(defs)
    with Ledger(config.ledger.url) as ledger, spark_for_the_loop(defs, spark) as provider:
        topic = ledger.get(batch_id).logical_topic
        job = logged_job(defs, "drain_job")
        started = time.monotonic()
        result = job.execute_in_process(
            run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
            instance=instance, partition_key=batch_id,
            tags={TOPIC_TAG: topic, RUNNER_TAG: this_owner(""), **IN_PROCESS_TAGS},
            raise_on_error=False, resources=shared_spark(defs, provider),
        )
        return outcome_of(ledger, batch_id, topic, result, time.monotonic() - started)


    return "the run failed"


class DrainLoop:
    """The loop (see the module docstring); :func:`drain` runs one."""

    def __init__(self, config: KprioConfig, defs: dg.Definitions, instance: dg.DagsterInstance, ledger: Ledger,
                 edge, *, until: Until, max_batches: int | None, stop: threading.Event, log_level: str,
                 on_batch: Callable[[BatchOutcome], None] | None,
                 on_start: Callable[[str], None] | None = None,
                 on_event: Callable[[str], None] | None = None, spark: SparkProvider | None = None,
                 on_tick: Callable[[Tick, float], None] | None = None) -> None:
        self.config, self.defs, self.instance, self.ledger, self.edge = config, defs, instance, ledger, edge
        self.spark = spark
        self.on_tick = on_tick
        """Told each tick and its seconds (the metrics' plan phase), from the loop's thread."""
        self.runs = DagsterRuns(instance)
        self.until, self.max_batches, self.stop = until, max_batches, stop
        self.log_level, self.on_batch, self.on_start, self.on_event = log_level, on_batch, on_start, on_event
        self.driver = this_owner("")
        """This process as a launch claimant (and as the runner of the runs it executes)."""
        self.report = DrainReport()
        self.running: dict[str, Running] = {}
        """This loop's runs still executing, by batch."""
        self._ended = threading.Event()
        """Set by a run's thread when it ends (the loop's wait wakes on it)."""
        self._watched: dict = {}
        """The partitions of the last tick's lag snapshots and their readable ends (see :meth:`_wait`)."""
        self._throttled: set[tuple[str, int]] = set()
        self._watching = True
        """False after a tick the watch woke launched nothing (the arrivals wait for a slot another driver
        holds, or on held partitions): the watch rests until a run ends or the interval passes."""
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
        """Start the run of ``request`` in a thread of its own, unless it runs here already or another
        driver launched it meanwhile (its run, its report)."""
        if request.partition_key in self.running:
            return False
        if not still_launchable(self.runs, self.ledger, self.config, request, self.driver):
            return False
        if self.on_start is not None:
            self.on_start(request.partition_key)
        self._started += 1
        self.running[request.partition_key] = Running(
            request, time.monotonic(), slot_priorities(request.tags),
            RunThread(lambda: execute(self.defs, self.instance, request, self.log_level, self.spark),
                      on_end=self._ended.set, name=f"kprio-run-{request.partition_key}"))
        return True

    def _reap(self) -> None:
        """Report every run of this loop that ended, in the order they started."""
        self._ended.clear()
        for key, run in list(self.running.items()):
            if not run.thread.done.is_set():
                continue
            del self.running[key]
            outcome = outcome_of(self.ledger, key, run.request.tags[TOPIC_TAG], run.thread.result(),
                                 time.monotonic() - run.started)
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
            in_flight = self.ledger.in_flight(t.name)
            ends += [(b.lease.until - now).total_seconds() for b in in_flight
                     if b.lease is not None and not b.lease.expired(now)]
            ids = {b.batch_id for b in in_flight}
            claimed = claimed or any(c.batch_id in ids and c.owner != self.driver and c.live(now)
                                     for c in self.ledger.launch_claims(t.name).values())
        return Others(tuple(ends), claimed)

    def sweep_staging(self) -> list[str]:
        """Remove the staging of attempts that are no longer in flight (killed runs leave theirs)."""
        from spark_jobs.drain import sweep_staging

        live = {(b.batch_id, b.attempts) for t in self.config.topics for b in self.ledger.in_flight(t.name)}
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
    """The settings inside built definitions, for callers that hold only those (tests, the demo);
    ``kprio drain`` hands its loaded config to :func:`drain` instead."""
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
    spark: SparkProvider | None = None,
    on_tick: Callable[[Tick, float], None] | None = None,
) -> DrainReport:
    """Run the loop on ``instance`` until ``until`` says stop, ``max_batches`` ran, or ``stop`` is set.

    ``config``: the settings ``defs`` were built from (the CLI loads them once; by default read back
    from ``defs``). ``guard`` is entered around the loop (the CLI's stop-on-signal handlers);
    ``on_start`` / ``on_batch`` are called before and after each run, ``on_event`` with a line for a person
    (the ledger's database gone and back), ``on_tick`` with each tick and its seconds (the metrics).
    ``spark``: the session's provider, the caller's (see :func:`spark_for_the_loop`).
    """
    config = config or config_of(defs)
    with (Ledger(config.ledger.url) as ledger, KafkaEdge(config.kafka) as edge,
          spark_for_the_loop(defs, spark) as provider,
          for_runs_in_threads(instance) as threaded, (guard or nullcontext)()):
        loop = DrainLoop(config, defs, threaded, ledger, edge, until=until, max_batches=max_batches,
                         stop=stop or threading.Event(), log_level=log_level, on_batch=on_batch,
                         on_start=on_start, on_event=on_event, spark=provider, on_tick=on_tick)
        return loop.run()
