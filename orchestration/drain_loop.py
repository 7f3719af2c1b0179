"""The in-process drain loop behind ``kprio drain``: the sensor's tick and the runs it requests, in one process.

Each turn evaluates :func:`orchestration.sensors.tick` (the sensor's own logic: heal, retry,
plan) and executes the requested runs of ``drain_job`` here with ``execute_in_process``, tagged
as a daemon-launched run is (so neither the sensor nor the daemon launches them again), on one
warm Spark session. Three ways to run it:

- ``Until.EMPTY`` (``--until-empty``): until no backlog is left outside held partitions;
  retries after their backoff, throttles and batches another process finishes are waited for;
  it stops early, not ok, when only partitions that need a person are left, or when the broker
  stays unreachable;
- ``Until.ONCE`` (``--once``): what one tick requests;
- ``Until.FOLLOW`` (``--follow``): tick for ever, the way to run kprio as a service without the
  Dagster daemon (systemd, a Kubernetes deployment); a stop request finishes the batch in flight.

A restart after a crash needs nothing special: the tick sees batches whose lease owner is gone
(this host) or expired, marks their runs failed, and resumes them with the same ranges. Staging
left by killed attempts is removed when the loop starts.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime

import dagster as dg

from kprio_core.ledger import BatchState, Ledger
from orchestration.decide import Action, Decision, describe_holds
from orchestration.leases import this_owner
from orchestration.resources import session_running
from orchestration.sensors import SENSOR_NAME, tick
from orchestration.tags import RUN_KEY_TAG, RUNNER_TAG, SENSOR_NAME_TAG, TOPIC_TAG

MAX_WAIT_S = 60.0
"""Longest single wait between two ticks (a throttle, a backoff, another process's batch)."""
BLOCKED_GIVE_UP_S = 120.0
"""``--until-empty`` stops, not ok, after the broker stayed unreachable this long."""


class Until(enum.Enum):
    """When the loop stops."""

    EMPTY = "until-empty"
    ONCE = "once"
    FOLLOW = "follow"


@dataclass(frozen=True)
class BatchOutcome:
    """One executed run: its batch, what it drained per priority, and where the ledger left the batch."""

    batch_id: str
    logical_topic: str
    run_id: str
    success: bool
    state: BatchState
    records: dict[int, int]
    dead_letters: int = 0
    reason: str | None = None
    seconds: float = 0.0

    def line(self) -> str:
        """One line per run for the operator.

        >>> BatchOutcome("b-000003", "orders", "run-1", True, BatchState.COMMITTED, {0: 7, 2: 29}, 2, None, 1.25).line()
        'b-000003 orders: 36 records [p2=29 p0=7] + 2 dead letters -> committed (1.2 s)'
        """
        by_p = " ".join(f"p{p}={n}" for p, n in sorted(self.records.items(), reverse=True))
        dead = f" + {self.dead_letters} dead letters" if self.dead_letters else ""
        tail = f": {self.reason}" if self.reason and self.state is not BatchState.COMMITTED else ""
        return (f"{self.batch_id} {self.logical_topic}: {sum(self.records.values())} records [{by_p}]{dead} "
                f"-> {self.state.value} ({self.seconds:.1f} s){tail}")

    def to_dict(self) -> dict:
        return {"batch_id": self.batch_id, "logical_topic": self.logical_topic, "run_id": self.run_id,
                "success": self.success, "state": self.state.value,
                "records": {str(p): n for p, n in sorted(self.records.items(), reverse=True)},
                "dead_letters": self.dead_letters, "reason": self.reason, "seconds": round(self.seconds, 3)}


@dataclass
class DrainReport:
    """Every run the loop executed, why it stopped, and what still waits for a person."""

    batches: list[BatchOutcome] = field(default_factory=list)
    stopped: str = ""
    ok: bool = True
    held: list[str] = field(default_factory=list)

    def records(self) -> dict[int, int]:
        """Records committed per priority (output and dead letters: both were drained)."""
        totals: dict[int, int] = {}
        for b in self.batches:
            if b.state is BatchState.COMMITTED:
                for p, n in b.records.items():
                    totals[p] = totals.get(p, 0) + n
        return dict(sorted(totals.items(), reverse=True))


@contextmanager
def spark_for_the_loop(defs: dg.Definitions) -> Iterator[None]:
    """One SparkSession for every run of the loop (the Spark resource reuses an active session).

    Without it each run's resource would start and stop its own session. A session that was
    already active (a test's) is left running.
    """
    if session_running():
        yield
        return
    resource = defs.resources["spark"]
    resource.setup_for_execution(dg.build_init_resource_context())
    try:
        resource.session  # noqa: B018 (starts the session now)
        yield
    finally:
        resource.teardown_after_execution(dg.build_init_resource_context())


def execute(defs: dg.Definitions, instance: dg.DagsterInstance, request: dg.RunRequest,
            log_level: str = "DEBUG") -> dg.ExecuteInProcessResult:
    """Execute one requested run of ``drain_job`` in this process, tagged as the daemon would tag it."""
    job = defs.resolve_job_def("drain_job")
    tags = {**request.tags, RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: SENSOR_NAME, RUNNER_TAG: this_owner("")}
    return job.execute_in_process(
        run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
        instance=instance, partition_key=request.partition_key, tags=tags, raise_on_error=False,
    )


def in_worker_thread(work: Callable[[], dg.ExecuteInProcessResult]) -> dg.ExecuteInProcessResult:
    """Run ``work`` in a thread of its own and wait for it, waking twice a second.

    Dagster replaces the SIGINT / SIGTERM handlers while a run executes in the main thread (an
    interrupt then kills the batch mid-way); in another thread it leaves them alone, so a stop
    request reaches the caller's handlers and the batch in flight finishes.
    """
    outcome: dict[str, object] = {}

    def target() -> None:
        try:
            outcome["result"] = work()
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = err

    worker = threading.Thread(target=target, name="kprio-run", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.5)
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["result"]  # type: ignore[return-value]


def redrain(defs: dg.Definitions, instance: dg.DagsterInstance, batch_id: str,
            log_level: str = "WARNING") -> BatchOutcome:
    """An operator's re-drain of one batch, here: a failed one is retried whatever its attempts, a
    committed one re-drained (its output replaced, nothing new committed)."""
    with Ledger(defs.resources["ledger"].url) as ledger, spark_for_the_loop(defs):
        topic = ledger.get(batch_id).logical_topic
        job = defs.resolve_job_def("drain_job")
        started = time.monotonic()
        result = job.execute_in_process(
            run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
            instance=instance, partition_key=batch_id, tags={TOPIC_TAG: topic, RUNNER_TAG: this_owner("")},
            raise_on_error=False,
        )
        return outcome_of(ledger, batch_id, topic, result, time.monotonic() - started)


def outcome_of(ledger: Ledger, batch_id: str, topic: str, result: dg.ExecuteInProcessResult,
               seconds: float) -> BatchOutcome:
    """Where a run left its batch, with what the batch drained per priority."""
    batch = ledger.get(batch_id)
    drain = batch.drain
    return BatchOutcome(
        batch_id=batch.batch_id, logical_topic=topic, run_id=result.run_id, success=result.success,
        state=batch.state, records=drain.written_by_priority() if drain is not None else {},
        dead_letters=drain.dead if drain is not None else 0,
        reason=batch.reason or (None if result.success else first_failure(result)), seconds=seconds,
    )


def first_failure(result: dg.ExecuteInProcessResult) -> str:
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
            return event.step_failure_data.error.message.strip().splitlines()[0]
    return "the run failed"


class DrainLoop:
    """The loop (see the module docstring); :func:`drain` runs one."""

    def __init__(self, defs: dg.Definitions, instance: dg.DagsterInstance, ledger: Ledger, *, until: Until,
                 max_batches: int | None, stop: threading.Event, log_level: str,
                 on_batch: Callable[[BatchOutcome], None] | None,
                 on_start: Callable[[str], None] | None = None) -> None:
        self.defs, self.instance, self.ledger = defs, instance, ledger
        self.until, self.max_batches, self.stop = until, max_batches, stop
        self.log_level, self.on_batch, self.on_start = log_level, on_batch, on_start
        kafka = defs.resources["kafka"]
        self.edge = kafka.edge
        self.config = defs.resources["kprio"].config(kafka)
        self.report = DrainReport()
        self._blocked_since: float | None = None
        self._turns = 0
        self._progress = time.monotonic()
        """When a run last committed a batch (a loop without progress for long stops)."""

    def run(self) -> DrainReport:
        self.sweep_staging()
        while not self._done():
            turn = tick(self.instance, self.edge, self.ledger, self.config)
            self._turns += 1
            if turn.partitions:
                self.instance.add_dynamic_partitions("kprio_batches", list(turn.partitions))
            if turn.requests:
                self._blocked_since = None
                for request in turn.requests:
                    if self._done():
                        break
                    self._execute(request)
                if self.until is Until.ONCE:
                    return self._stop(f"one tick: {len(self.report.batches)} runs")
                continue
            if self.until is Until.ONCE:
                return self._stop(turn.skip_reason, ok=not any(d.action is Action.BLOCKED for d in turn.decisions))
            wait = self._idle(turn.decisions, turn.skip_reason)
            if wait is None:
                return self.report
            self.stop.wait(wait)
        if self.stop.is_set():
            return self._stop(self._stopped_on_request())
        return self._stop(f"stopped after {len(self.report.batches)} runs (--max-batches)")

    def _done(self) -> bool:
        return self.stop.is_set() or (self.max_batches is not None and len(self.report.batches) >= self.max_batches)

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

    def _execute(self, request: dg.RunRequest) -> None:
        if self.on_start is not None:
            self.on_start(request.partition_key)
        started = time.monotonic()
        result = in_worker_thread(lambda: execute(self.defs, self.instance, request, self.log_level))
        outcome = outcome_of(self.ledger, request.partition_key, request.tags[TOPIC_TAG], result,
                             time.monotonic() - started)
        self.report.batches.append(outcome)
        if outcome.state is BatchState.COMMITTED:
            self._progress = time.monotonic()
        if self.on_batch is not None:
            self.on_batch(outcome)

    def _idle(self, decisions: tuple[Decision, ...], why: str) -> float | None:
        """Seconds to wait before the next tick, or None when the loop stops here."""
        interval = float(self.config.sensor.interval_s)
        if self.until is Until.FOLLOW:
            return interval
        actions = {d.action for d in decisions}
        if Action.BLOCKED in actions:
            if not self.report.batches and self._blocked_since is None and self._turns == 1:
                return self._give_up(why)  # blocked from the start: say so now, there is nothing to finish
            self._blocked_since = self._blocked_since or time.monotonic()
            if time.monotonic() - self._blocked_since > BLOCKED_GIVE_UP_S:
                return self._give_up(f"{why} (for more than {BLOCKED_GIVE_UP_S:.0f} s)")
            return min(interval * 2, MAX_WAIT_S)
        self._blocked_since = None
        waits = self._waits(decisions)
        held = [h for d in decisions for h in d.holds]
        stalled = time.monotonic() - self._progress > BLOCKED_GIVE_UP_S
        if waits and held and stalled and not self._others_working():
            # Retries of a cause that does not pass (a disk that stays full): say what waits and stop.
            self.report.held = [describe_holds([h]) for h in held]
            return self._give_up(f"no progress for {BLOCKED_GIVE_UP_S:.0f} s; still held: {describe_holds(held)}")
        if waits:
            return min(max(min(waits), 0.2), MAX_WAIT_S)
        if held:
            self.report.held = [describe_holds([h]) for h in held]
            return self._give_up(f"only held partitions are left, they need a person: {describe_holds(held)}")
        self._stop("no backlog left")
        return None

    def _waits(self, decisions: tuple[Decision, ...]) -> list[float]:
        """Seconds until something this loop waits for can go on (retries, throttles, other processes)."""
        now = datetime.now(UTC)
        waits = [d.retry_in_s for d in decisions if d.action is Action.THROTTLED and d.retry_in_s]
        for d in decisions:
            for h in d.holds:
                if h.batch_id is not None and not h.exhausted:
                    waits.append((h.retry_at - now).total_seconds() if h.retry_at else 0.0)
        leased = self._leased(now)
        if leased:  # another process works on them: their end (or their lease's expiry) is the next news
            waits.append(min(float(self.config.sensor.interval_s),
                             min((b.lease.until - now).total_seconds() for b in leased)))
        return waits

    def _leased(self, now: datetime) -> list:
        return [b for t in self.config.topics for b in self.ledger.in_flight(t.name)
                if b.lease is not None and not b.lease.expired(now)]

    def _others_working(self) -> bool:
        return bool(self._leased(datetime.now(UTC)))

    def _give_up(self, why: str) -> None:
        self._stop(why, ok=False)
        return None

    def sweep_staging(self) -> list[str]:
        """Remove the staging of attempts that are no longer in flight (killed runs leave theirs)."""
        from spark_jobs.drain import sweep_staging

        live = {(b.batch_id, b.attempts) for t in self.config.topics for b in self.ledger.in_flight(t.name)}
        drain = self.config.drain
        return sweep_staging((drain.output_path, drain.dead_letter_path),
                             keep=lambda batch_id, attempt: (batch_id, attempt) in live)


def drain(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    *,
    until: Until = Until.EMPTY,
    max_batches: int | None = None,
    stop: threading.Event | None = None,
    log_level: str = "DEBUG",
    on_batch: Callable[[BatchOutcome], None] | None = None,
    on_start: Callable[[str], None] | None = None,
    guard: Callable[[], AbstractContextManager] | None = None,
) -> DrainReport:
    """Run the loop on ``instance`` until ``until`` says stop, ``max_batches`` ran, or ``stop`` is set.

    ``guard`` is entered around the loop (the CLI's stop-on-signal handlers); ``on_start`` /
    ``on_batch`` are called before and after each run.
    """
    with Ledger(defs.resources["ledger"].url) as ledger, spark_for_the_loop(defs), (guard or nullcontext)():
        loop = DrainLoop(defs, instance, ledger, until=until, max_batches=max_batches,
                         stop=stop or threading.Event(), log_level=log_level, on_batch=on_batch,
                         on_start=on_start)
        return loop.run()
