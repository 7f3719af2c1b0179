"""The in-process drain loop behind ``kprio drain``: the sensor's tick and the runs it requests, in one process.

Each turn evaluates :func:`orchestration.runtime.tick.tick` over the instance's runs
(:class:`orchestration.dagster.runs.DagsterRuns`; the same gather, core rules and
applier as the sensor: heal, retry, plan; no rule of its own here) and executes the requested
runs of ``drain_job`` here with ``execute_in_process``, tagged as a daemon-launched run is (so
neither the sensor nor the daemon launches them again), on one warm Spark session. Each run
executes in a thread of its own (:class:`RunThread`) and the loop ticks on while runs execute, so
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
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
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
from orchestration.dagster.partitions import BATCH_PARTITIONS_NAME
from orchestration.dagster.resources import start_in_background
from orchestration.dagster.runs import DagsterRuns
from orchestration.dagster.sensors import SENSOR_NAME
from orchestration.dagster.tags import MAX_RETRIES_TAG, RUN_KEY_TAG, SENSOR_NAME_TAG
from orchestration.runtime.healing import cause_seen_after, probe_causes
from orchestration.runtime.leases import this_owner
from orchestration.runtime.runs import RunOrder
from orchestration.runtime.tags import RUNNER_TAG, SLOT_TAG_PREFIX, TOPIC_TAG
from orchestration.runtime.tick import Tick, still_launchable, tick
from spark_jobs.session import session_running, starting_in_background

DRAINED_ASSET = "drained_batch"
IN_PROCESS_TAGS = {MAX_RETRIES_TAG: "0"}
"""What every run executed here carries: no retry by Dagster's daemon (the loop's tick retries it)."""
COMMITTED_ASSET = "committed_offsets"


@dataclass(frozen=True)
class BatchOutcome:
    """One executed run: its batch, what it drained per priority, and where the ledger left the batch.

    ``own`` is False when the run found its batch's work done or taken by another run and did
    nothing; ``committed_here`` counts the records this run committed (its batch's, and those of
    later batches it committed once they only waited for it), per priority.
    """

    batch_id: str
    logical_topic: str
    run_id: str
    success: bool
    state: BatchState
    records: dict[int, int]
    dead_letters: int = 0
    reason: str | None = None
    seconds: float = 0.0
    own: bool = True
    committed_here: dict[int, int] | None = None

    def line(self) -> str:
        """One line per run for the operator.

        >>> BatchOutcome("b-000003", "orders", "run-1", True, BatchState.COMMITTED, {0: 7, 2: 29}, 2, None, 1.25).line()
        'b-000003 orders: 36 records [p2=29 p0=7] + 2 dead letters -> committed (1.2 s)'
        >>> BatchOutcome("b-000004", "orders", "run-2", True, BatchState.COMMITTED, {}, seconds=0.3, own=False).line()
        'b-000004 orders: nothing done here: committed by another run (0.3 s)'
        """
        if not self.own:
            return (f"{self.batch_id} {self.logical_topic}: nothing done here: {self.state.value} by another run "
                    f"({self.seconds:.1f} s)")
        by_p = " ".join(f"p{p}={n}" for p, n in sorted(self.records.items(), reverse=True))
        dead = f" + {self.dead_letters} dead letters" if self.dead_letters else ""
        tail = f": {self.reason}" if self.reason and self.state is not BatchState.COMMITTED else ""
        return (f"{self.batch_id} {self.logical_topic}: {sum(self.records.values())} records [{by_p}]{dead} "
                f"-> {self.state.value} ({self.seconds:.1f} s){tail}")

    @property
    def committed(self) -> dict[int, int]:
        """Records this run committed per priority (by default: the batch's, when it ended committed)."""
        if self.committed_here is not None:
            return self.committed_here
        return dict(self.records) if self.own and self.state is BatchState.COMMITTED else {}

    def to_dict(self) -> dict:
        return {"batch_id": self.batch_id, "logical_topic": self.logical_topic, "run_id": self.run_id,
                "success": self.success, "state": self.state.value, "own": self.own,
                "records": {str(p): n for p, n in sorted(self.records.items(), reverse=True)},
                "committed_here": {str(p): n for p, n in sorted(self.committed.items(), reverse=True)},
                "dead_letters": self.dead_letters, "reason": self.reason, "seconds": round(self.seconds, 3)}


@dataclass
class DrainReport:
    """Every run the loop executed, why it stopped, and what still waits for a person."""

    batches: list[BatchOutcome] = field(default_factory=list)
    stopped: str = ""
    ok: bool = True
    held: list[str] = field(default_factory=list)

    def records(self) -> dict[int, int]:
        """Records this process committed per priority (output and dead letters: both were drained)."""
        totals: dict[int, int] = {}
        for b in self.batches:
            for p, n in b.committed.items():
                totals[p] = totals.get(p, 0) + n
        return dict(sorted(totals.items(), reverse=True))


@contextmanager
def spark_for_the_loop(defs: dg.Definitions) -> Iterator[None]:
    """One SparkSession for every run of the loop (the Spark resource reuses an active session).

    Without it each run's resource would start and stop its own session. The session starts in
    the background (:func:`~orchestration.dagster.resources.start_in_background`), so the JVM
    starts while the first tick reads the ledger and the broker; the first run waits for it. A
    session that was already active (a test's) or starting in the background (``kprio drain`` starts
    it before it imports Dagster) is left to whoever started it.
    """
    if session_running() or starting_in_background():
        yield
        return
    resource = defs.resources["spark"]
    resource.setup_for_execution(dg.build_init_resource_context())
    starting = start_in_background(resource)
    try:
        yield
    finally:
        starting.join()
        resource.teardown_after_execution(dg.build_init_resource_context())


def execute(defs: dg.Definitions, instance: dg.DagsterInstance, request: RunOrder,
            log_level: str = "DEBUG") -> dg.ExecuteInProcessResult:
    """Execute one requested run of ``drain_job`` in this process, tagged as the daemon would tag it.

    Except for one tag: Dagster's run retries are off for it (``dagster/max_retries=0``). A run that
    fails here is retried by the loop's own tick; the daemon that would honour a retry may not be
    running at all, and a failed run marked ``dagster/will_retry=true`` would make every tick wait for
    a retry that never comes.
    """
    job = defs.resolve_job_def("drain_job")
    tags = {**request.tags, RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: SENSOR_NAME, RUNNER_TAG: this_owner(""),
            **IN_PROCESS_TAGS}
    return job.execute_in_process(
        run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
        instance=instance, partition_key=request.partition_key, tags=tags, raise_on_error=False,
    )


class RunThread:
    """One run executing in a daemon thread of its own; ``done`` is set when it ended, and ``on_end``
    (when given) called from the thread.

    A thread for two reasons: runs of batches that hold different priority slots execute at once
    (an urgent batch beside a bulk one, on the same Spark session, each in its own scheduler pool);
    and Dagster replaces the SIGINT / SIGTERM handlers while a run executes in the main thread (an
    interrupt then kills the batch mid-way), while in another thread it leaves them alone, so a stop
    request reaches the caller's handlers and the batches in flight finish.
    """

    def __init__(self, work: Callable[[], dg.ExecuteInProcessResult],
                 on_end: Callable[[], None] | None = None, name: str = "kprio-run") -> None:
        self.done = threading.Event()
        self._outcome: dict[str, object] = {}

        def target() -> None:
            try:
                self._outcome["result"] = work()
            except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread by result()
                self._outcome["error"] = err
            finally:
                self.done.set()
                if on_end is not None:
                    on_end()

        threading.Thread(target=target, name=name, daemon=True).start()

    def result(self) -> dg.ExecuteInProcessResult:
        if "error" in self._outcome:
            raise self._outcome["error"]  # type: ignore[misc]
        return self._outcome["result"]  # type: ignore[return-value]


@contextmanager
def for_runs_in_threads(instance: dg.DagsterInstance) -> Iterator[dg.DagsterInstance]:
    """An instance on the same storage as ``instance`` whose runs can execute in several threads of this process.

    Two things Dagster does per run are process-wide, and race when two runs start or end at once:

    - each run captures its process's stdout and stderr into its compute log by redirecting file
      descriptors 1 and 2 and restoring them at its end; two runs restore each other's copies, and the
      process was left writing into a finished run's log file (``kprio drain --json`` printed its
      summary there). The runs here capture nothing (``NoOpComputeLogManager``): their structured
      event logs are kept as always, and a log capture of a whole process could not tell two runs apart;
    - each run's log manager calls ``instance.get_handlers()``, which calls ``logging.config.dictConfig``;
      it holds the logging module's lock while it flushes and closes every handler of the process, and a
      run logging in another thread holds its handler's lock while it waits for the module's lock: two
      runs deadlocked (py-spy showed both stacks). The handlers come from the instance's YAML, which
      does not change while it is open, so the first call's handlers serve every run.
    """
    from dagster._serdes import ConfigurableClassData

    ref = instance.get_ref()._replace(compute_logs_data=ConfigurableClassData(
        "dagster._core.storage.noop_compute_log_manager", "NoOpComputeLogManager", "{}"))
    threaded = dg.DagsterInstance.from_ref(ref)
    build, built, lock = threaded.get_yaml_python_handlers, [], threading.Lock()

    def once() -> list:
        with lock:
            if not built:
                built.append(list(build()))
            return built[0]

    threaded.get_yaml_python_handlers = once  # type: ignore[method-assign]
    try:
        yield threaded
    finally:
        threaded.dispose()


def redrain(defs: dg.Definitions, instance: dg.DagsterInstance, batch_id: str,
            log_level: str = "WARNING", config: KprioConfig | None = None) -> BatchOutcome:
    """An operator's re-drain of one batch, here: a failed one is retried whatever its attempts, a
    committed one re-drained (its output replaced, nothing new committed)."""
    config = config or config_of(defs)
    with Ledger(config.ledger.url) as ledger, spark_for_the_loop(defs):
        topic = ledger.get(batch_id).logical_topic
        job = defs.resolve_job_def("drain_job")
        started = time.monotonic()
        result = job.execute_in_process(
            run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
            instance=instance, partition_key=batch_id, tags={TOPIC_TAG: topic, RUNNER_TAG: this_owner(""), **IN_PROCESS_TAGS},
            raise_on_error=False,
        )
        return outcome_of(ledger, batch_id, topic, result, time.monotonic() - started)


def materialized(result: dg.ExecuteInProcessResult, asset: str) -> set[str]:
    """The batch partitions of ``asset`` this run materialized (outputs and logged events alike)."""
    return {e.partition for e in result.get_asset_materialization_events()
            if e.asset_key.to_user_string() == asset and e.partition}


def outcome_of(ledger: Ledger, batch_id: str, topic: str, result: dg.ExecuteInProcessResult,
               seconds: float) -> BatchOutcome:
    """Where a run left its batch, what the batch drained per priority, and what this run itself did.

    A run that succeeded without draining or committing anything found its batch's work done or
    taken by another run (``own`` False): its numbers are that other run's, not this process's.
    """
    batch = ledger.get(batch_id)
    drained, committed = materialized(result, DRAINED_ASSET), materialized(result, COMMITTED_ASSET)
    own = not result.success or batch_id in drained | committed
    drain = batch.drain if own else None
    here: dict[int, int] = {}
    for b in sorted(committed):
        done = ledger.get(b).drain if b != batch_id else batch.drain
        for p, n in (done.written_by_priority() if done is not None else {}).items():
            here[p] = here.get(p, 0) + n
    return BatchOutcome(
        batch_id=batch.batch_id, logical_topic=topic, run_id=result.run_id, success=result.success,
        state=batch.state, records=drain.written_by_priority() if drain is not None else {},
        dead_letters=drain.dead if drain is not None else 0,
        reason=batch.reason or (None if result.success else first_failure(result)), seconds=seconds,
        own=own, committed_here=dict(sorted(here.items(), reverse=True)),
    )


def first_failure(result: dg.ExecuteInProcessResult) -> str:
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
            return event.step_failure_data.error.message.strip().splitlines()[0]
    return "the run failed"


class DrainLoop:
    """The loop (see the module docstring); :func:`drain` runs one."""

    def __init__(self, config: KprioConfig, defs: dg.Definitions, instance: dg.DagsterInstance, ledger: Ledger,
                 edge, *, until: Until, max_batches: int | None, stop: threading.Event, log_level: str,
                 on_batch: Callable[[BatchOutcome], None] | None,
                 on_start: Callable[[str], None] | None = None,
                 on_event: Callable[[str], None] | None = None,
                 on_tick: Callable[[Tick, float], None] | None = None) -> None:
        self.config, self.defs, self.instance, self.ledger, self.edge = config, defs, instance, ledger, edge
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
            RunThread(lambda: execute(self.defs, self.instance, request, self.log_level), on_end=self._ended.set,
                      name=f"kprio-run-{request.partition_key}"))
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


@dataclass(frozen=True)
class Running:
    """A run of the loop still executing: its request, when it started, the priority slots it holds, its thread."""

    request: RunOrder
    started: float
    priorities: frozenset[int]
    thread: RunThread


def slot_priorities(tags: Mapping[str, str]) -> frozenset[int]:
    """The priorities whose slots a run's batch takes, from its slot tags.

    >>> sorted(slot_priorities({"kprio/slot-p0": "orders", "kprio/slot-p2": "orders", "kprio/why": "new"}))
    [0, 2]
    """
    return frozenset(int(k[len(SLOT_TAG_PREFIX):]) for k in tags if k.startswith(SLOT_TAG_PREFIX))


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
    on_tick: Callable[[Tick, float], None] | None = None,
) -> DrainReport:
    """Run the loop on ``instance`` until ``until`` says stop, ``max_batches`` ran, or ``stop`` is set.

    ``config``: the settings ``defs`` were built from (the CLI loads them once; by default read back
    from ``defs``). ``guard`` is entered around the loop (the CLI's stop-on-signal handlers);
    ``on_start`` / ``on_batch`` are called before and after each run, ``on_event`` with a line for a person
    (the ledger's database gone and back), ``on_tick`` with each tick and its seconds (the metrics).
    """
    config = config or config_of(defs)
    with (Ledger(config.ledger.url) as ledger, KafkaEdge(config.kafka) as edge, spark_for_the_loop(defs),
          for_runs_in_threads(instance) as threaded, (guard or nullcontext)()):
        loop = DrainLoop(config, defs, threaded, ledger, edge, until=until, max_batches=max_batches,
                         stop=stop or threading.Event(), log_level=log_level, on_batch=on_batch,
                         on_start=on_start, on_event=on_event, on_tick=on_tick)
        return loop.run()
