"""The in-process drain loop: evaluate ``priority_lag_sensor``, execute the runs it requests, repeat.

This is what the Dagster daemon does with the sensor, done in one process on the given
instance: apply the tick's dynamic partition requests, then execute each requested run of
``drain_job`` with ``execute_in_process`` (tagged with its run key and the sensor's name, as a
daemon-launched run is, so neither the sensor nor the daemon launches it again). The loop
stops when every topic is idle (no backlog), after ``max_batches`` batches, when a run fails,
or when a topic is blocked or busy elsewhere; a throttled topic is waited for.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import dagster as dg

from kprio_core.ledger import BatchState, Ledger
from orchestration.planning import BLOCKED, BUSY, IDLE, THROTTLED
from orchestration.resources import session_running
from orchestration.sensors import BATCH_TAG, RUN_KEY_TAG, SENSOR_NAME, TOPIC_TAG

SENSOR_NAME_TAG = "dagster/sensor_name"
MAX_THROTTLE_WAIT_S = 60.0
"""Longest single wait for a throttled topic (the sensor is asked again afterwards)."""


@dataclass(frozen=True)
class BatchRun:
    """One executed batch: its run, what it drained per priority, and where the ledger left it."""

    batch_id: str
    logical_topic: str
    run_id: str
    success: bool
    state: str
    records: dict[int, int]
    reason: str | None = None

    def line(self) -> str:
        """One line per batch for the operator.

        >>> BatchRun("b-000003", "orders", "run-1", True, "committed", {0: 7, 2: 29}).line()
        'b-000003 orders: 36 records [p2=29 p0=7] -> committed'
        """
        by_p = " ".join(f"p{p}={n}" for p, n in sorted(self.records.items(), reverse=True))
        total = sum(self.records.values())
        tail = f" ({self.reason})" if self.reason else ""
        return f"{self.batch_id} {self.logical_topic}: {total} records [{by_p}] -> {self.state}{tail}"

    def to_dict(self) -> dict:
        return {
            "batch_id": self.batch_id,
            "logical_topic": self.logical_topic,
            "run_id": self.run_id,
            "success": self.success,
            "state": self.state,
            "records": {str(p): n for p, n in sorted(self.records.items(), reverse=True)},
            "reason": self.reason,
        }


@dataclass
class DrainReport:
    """Every batch the loop ran, and why it stopped."""

    batches: list[BatchRun] = field(default_factory=list)
    stopped: str = ""
    ok: bool = True

    def records(self) -> dict[int, int]:
        totals: dict[int, int] = {}
        for b in self.batches:
            if b.state == BatchState.COMMITTED.value:
                for p, n in b.records.items():
                    totals[p] = totals.get(p, 0) + n
        return dict(sorted(totals.items(), reverse=True))


@contextmanager
def sensor_context(defs: dg.Definitions, instance: dg.DagsterInstance) -> Iterator[dg.SensorEvaluationContext]:
    with dg.build_sensor_context(
        instance=instance, resources=dict(defs.resources), definitions=defs, sensor_name=SENSOR_NAME
    ) as context:
        yield context


def tick(defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.SensorResult:
    """Evaluate the sensor once and apply its dynamic partition requests to ``instance``."""
    sensor = defs.resolve_sensor_def(SENSOR_NAME)
    with sensor_context(defs, instance) as context:
        result = sensor(context)
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    return result


def execute(
    defs: dg.Definitions, instance: dg.DagsterInstance, request: dg.RunRequest, log_level: str = "DEBUG"
) -> dg.ExecuteInProcessResult:
    """Execute one requested run of ``drain_job`` in this process (``log_level`` of the console logger)."""
    job = defs.resolve_job_def("drain_job")
    tags = {**request.tags, RUN_KEY_TAG: request.run_key, SENSOR_NAME_TAG: SENSOR_NAME}
    return job.execute_in_process(
        run_config={"loggers": {"console": {"config": {"log_level": log_level}}}},
        instance=instance,
        partition_key=request.partition_key,
        tags=tags,
        raise_on_error=False,
    )


def drain(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    *,
    max_batches: int | None = None,
    once: bool = False,
    log_level: str = "DEBUG",
    on_batch: Callable[[BatchRun], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> DrainReport:
    """Tick and run until every topic is idle, ``max_batches`` ran, a run failed or a topic is blocked.

    ``once``: execute what the first tick requests (waiting out nothing), then stop. ``log_level``:
    of the runs' console logger (the events are stored in the instance whatever it is).
    """
    with Ledger(defs.resources["ledger"].url) as ledger, spark_for_the_loop(defs):
        return _drain(defs, instance, ledger, max_batches, once, log_level, on_batch, sleep)


@contextmanager
def spark_for_the_loop(defs: dg.Definitions) -> Iterator[None]:
    """One SparkSession for every run of the loop (the Spark resource reuses an active session).

    Without it each run's resource would start and stop its own JVM session. A session that
    was already active (a test's) is left running.
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


def _drain(defs, instance, ledger: Ledger, max_batches, once, log_level, on_batch, sleep) -> DrainReport:
    report = DrainReport()
    while max_batches is None or len(report.batches) < max_batches:
        result = tick(defs, instance)
        requests = list(result.run_requests or [])
        if not requests:
            state = json.loads(result.cursor or "{}")
            kinds = {v["kind"] for v in state.values()}
            reason = result.skip_reason.skip_message if result.skip_reason else "nothing to launch"
            if kinds <= {IDLE}:
                report.stopped = "no backlog left"
                return report
            if kinds & {BLOCKED, BUSY}:
                report.stopped, report.ok = reason, False
                return report
            if THROTTLED in kinds and once:
                report.stopped = reason
                return report
            if THROTTLED in kinds:
                # Waiting out a rate quota is the point of the quota, not a synchronisation sleep.
                waits = [v["retry_in_s"] for v in state.values() if v["kind"] == THROTTLED and v["retry_in_s"]]
                sleep(min(min(waits, default=1.0), MAX_THROTTLE_WAIT_S))
                continue
            report.stopped, report.ok = reason, False
            return report
        for request in requests:
            if max_batches is not None and len(report.batches) >= max_batches:
                break
            run = execute(defs, instance, request, log_level)
            batch = ledger.get(request.tags[BATCH_TAG])
            done = BatchRun(
                batch_id=batch.batch_id,
                logical_topic=request.tags[TOPIC_TAG],
                run_id=run.run_id,
                success=run.success,
                state=batch.state.value,
                records=drained_records(batch),
                reason=batch.reason or (None if run.success else first_failure(run)),
            )
            report.batches.append(done)
            if on_batch is not None:
                on_batch(done)
            if not run.success:
                report.stopped, report.ok = f"batch {done.batch_id} failed: {done.reason}", False
                return report
        if once:
            report.stopped = f"one tick: {len(report.batches)} batches"
            return report
    report.stopped = f"stopped after {len(report.batches)} batches (--max-batches)"
    return report


def drained_records(batch) -> dict[int, int]:
    """Records per priority the batch drained (from its drain stats), else as planned."""
    stats = batch.drain_stats or {}
    if "records_by_priority" in stats:
        return {int(p): int(n) for p, n in stats["records_by_priority"].items()}
    return {p: n for p, n in batch.plan.records_by_priority().items() if n}


def first_failure(result: dg.ExecuteInProcessResult) -> str:
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
            return event.step_failure_data.error.message.strip().splitlines()[0]
    return "the run failed"
