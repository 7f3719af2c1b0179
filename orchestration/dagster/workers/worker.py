"""A warm run worker: a long-lived process that executes the runs its pool hands it, one at a time.

Forked for a :class:`~orchestration.dagster.workers.pool.WorkerPool` (:mod:`orchestration.dagster.workers.fork`) with
Dagster, Great Expectations, Spark's client and kprio imported, :func:`serve` on one end of a socket pair; it warms
its Spark client up, so a run it is handed starts at once. A
run executes as Dagster's own run worker executes one (:mod:`orchestration.dagster.workers.dagster_api`), its Spark
resource sharing the worker's session, tagged with this worker as its runner (``kprio/runner``, a lease owner
string: a worker killed mid-run is a dead run process, which kprio's tick tells from the tag).

Under the daemon (``Execute.tick_after``) the worker ticks once a run ended, as the sensor would (its launch
claims keep a second driver from launching a batch twice), and creates the runs requested for its pool to launch
at once, without waiting for the sensor daemon. After ``workers.max_runs`` runs, or above ``workers.max_rss_mib``
with its Spark processes, it retires and the pool starts a fresh one.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import psutil

from orchestration.dagster.workers.protocol import (
    ByConfig,
    ByOrigin,
    CannotStart,
    Ended,
    Execute,
    JobSource,
    Launched,
    Ready,
    Stop,
    Warm,
)
from orchestration.runtime.faults import crash_point

LOGGER = logging.getLogger("kprio.worker")
MIB = 1024 * 1024


def export_secrets(config: Any) -> None:
    """Put a :class:`ByConfig` run's Kafka secrets in this private process's environment, where its resource reads
    them (``dg.EnvVar``): the driver may hold secrets its environment lacks, or have started this worker before."""
    from kprio_core.config.environment import setting_variable

    secrets = config.kafka.secrets.items()
    os.environ.update({setting_variable(name): value.get_secret_value() for name, value in secrets})


def family_rss_mib(pid: int | None = None) -> float:
    """Resident memory of a process and every process it started (a worker: its Spark JVM, the JVM's Python workers)."""
    root = psutil.Process(pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            total += proc.memory_info().rss
        except psutil.Error:  # ended meanwhile
            continue
    return total / MIB


class Worker:
    """The state a worker keeps between runs: its Spark client, the instances, jobs and clients it opened."""

    def __init__(self, warm: Warm) -> None:
        self.warm = warm
        self.runs = 0
        self.provider: Any = None
        self._instances: list[tuple[Any, Any]] = []
        """The instances opened, by their ``InstanceRef`` (a value, not hashable)."""
        self._jobs: list[tuple[Any, Any]] = []
        """The jobs loaded by their code origins (values, not hashable)."""
        self._defs: tuple[Any, Any] | None = None
        """The last ``(config, definitions)`` built for :class:`ByConfig` runs (a drain has one configuration)."""
        self._drivers: dict[Any, Any] = {}
        """Per configuration, what a tick needs that outlives it: the ledger and the Kafka edge."""
        self._watching: tuple[Execute, Any, Any, Any, dict] | None = None
        """After a tick under the daemon (``Warm.watch``): what :meth:`idle` ticks with, and the urgent ends it saw."""
        self._stack = ExitStack()

    def start(self) -> None:
        """Import what every run needs, start the Spark client and run the warm-up job on it."""
        from orchestration.dagster import definitions  # noqa: F401 - Dagster, kprio's assets, the runtime
        from orchestration.runtime.checks import warm_up
        from spark_jobs.session import SparkProvider
        from spark_jobs.warm_up import warm_job

        gx = warm_up()
        self.provider = SparkProvider(self.warm.spark, app_name=f"kprio-{self.warm.name}")
        warm_job(self.provider.session())
        gx.join()

    def execute(self, order: Execute) -> Ended:
        """Execute ``order``'s run to its end here; then tick, when asked, and say whether to retire."""
        import dagster as dg

        from orchestration.dagster.workers import dagster_api
        from orchestration.runtime.leases import this_owner
        from orchestration.runtime.tags import RUNNER_TAG

        instance = self._instance(order.instance)
        job = self._job(order.job)
        instance.add_run_tags(order.run_id, {RUNNER_TAG: this_owner(order.run_id)})
        run = instance.get_run_by_id(order.run_id)
        if run is None:
            return Ended(order.run_id, "NOT_FOUND", retire=self._retire())
        if run.status in (dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.NOT_STARTED):
            dagster_api.execute(job, run, instance)
        else:  # canceled (or ended) while it waited for this worker
            LOGGER.info("run %s is %s: not executed", order.run_id, run.status.value)
        self.runs += 1
        ended = instance.get_run_by_id(order.run_id)
        launched = self._tick(order, instance, job, ended) if order.tick_after else ()
        return Ended(order.run_id, ended.status.value if ended else "NOT_FOUND", launched, self._retire())

    def _retire(self) -> str | None:
        limits = self.warm.limits
        if self.runs >= limits.max_runs:
            return f"{self.runs} runs (workers.max_runs)"
        rss = family_rss_mib()
        if rss > limits.max_rss_mib:
            return f"{rss:,.0f} MiB with its Spark processes (workers.max_rss_mib {limits.max_rss_mib:,})"
        return None

    def _instance(self, ref: Any) -> Any:
        import dagster as dg

        found = next((instance for known, instance in self._instances if known == ref), None)
        if found is None:
            found = self._stack.enter_context(dg.DagsterInstance.from_ref(ref))
            self._instances.append((ref, found))
        return found

    def _job(self, source: JobSource) -> Any:
        from orchestration.dagster.workers import dagster_api

        if isinstance(source, ByOrigin):
            found = next((job for origin, job in self._jobs if origin == source.origin), None)
            if found is None:
                found = dagster_api.from_origin(source.origin)
                self._jobs.append((source.origin, found))
            return found
        from orchestration.dagster.definitions import build_definitions
        from orchestration.dagster.run_logs import logged_job

        if self._defs is None or self._defs[0] != source.config:
            export_secrets(source.config)
            self._defs = (source.config, build_definitions(source.config, spark=self.provider))
        return dagster_api.in_memory(logged_job(self._defs[1], source.job_name))

    def _tick(self, order: Execute, instance: Any, job: Any, ended: Any) -> tuple[str, ...]:
        """The sensor's tick, this worker the driver, its requested runs created; a failed tick launches nothing."""
        from kprio_core.errors import KprioError
        from orchestration.dagster.partitions import BATCH_PARTITIONS_NAME
        from orchestration.dagster.runs import DagsterRuns
        from orchestration.dagster.sensors import SENSOR_NAME
        from orchestration.dagster.tags import (
            PARTITION_TAG,
            RUN_KEY_TAG,
            SENSOR_NAME_TAG,
        )
        from orchestration.dagster.workers import dagster_api
        from orchestration.runtime.leases import this_owner
        from orchestration.runtime.tick import tick

        config = order.job.config if isinstance(order.job, ByConfig) else self._code_location_config()
        ledger, edge = self._driver(config)
        runs = DagsterRuns(instance)
        try:
            turn = tick(runs, edge, ledger, config, driver=this_owner(""), log=LOGGER)
        except KprioError as err:
            LOGGER.warning("the tick after run %s failed: %s", order.run_id, err)
            return ()
        missing = runs.missing_partitions([*turn.partitions, *(r.partition_key for r in turn.requests)])
        if missing:
            instance.add_dynamic_partitions(BATCH_PARTITIONS_NAME, missing)
        if self.warm.watch:
            self._watching = (order, instance, job, ended, urgent_ends(turn.decisions, config))
        created = []
        for request in turn.requests:
            tags = {**request.tags, PARTITION_TAG: request.partition_key, RUN_KEY_TAG: request.run_key,
                    SENSOR_NAME_TAG: SENSOR_NAME}
            created.append(dagster_api.create_run(instance, job, tags=tags, run_config=ended.run_config,
                                                  like=ended).run_id)
        return tuple(created)

    def idle(self) -> tuple[str, ...]:
        """Between runs: when records arrived on a most urgent priority whose slot no batch in flight holds, the
        tick that plans them, and the runs it created (a tick as after a run); else nothing."""
        if self._watching is None:
            return ()
        order, instance, job, ended, seen = self._watching
        config = order.job.config if isinstance(order.job, ByConfig) else self._code_location_config()
        ledger, edge = self._driver(config)
        from kprio_core.errors import KprioError

        try:
            ends = edge.ends(seen)
        except KprioError:
            return ()  # the broker does not answer: the sensor's tick says so
        arrived = {key[0] for key, end in ends.items() if end > seen[key]}
        seen.update(ends)
        tops = {t.priority_topic(t.priorities - 1): t for t in config.topics}
        free = [t for name, t in tops.items() if name in arrived
                and sum(t.priorities - 1 in b.priorities for b in ledger.batches.in_flight(t.name))
                < config.planner.max_in_flight]
        return self._tick(order, instance, job, ended) if free else ()

    def watch_s(self) -> float | None:
        """How long to wait for the pool's next message before :meth:`idle` looks again (None: just wait)."""
        if self._watching is None:
            return None
        order = self._watching[0]
        config = order.job.config if isinstance(order.job, ByConfig) else self._code_location_config()
        return config.sensor.watch_s

    def _code_location_config(self) -> Any:
        from kprio_core.config import load_config

        if "code location" not in self._drivers:
            self._drivers["code location"] = load_config()
        return self._drivers["code location"]

    def _driver(self, config: Any) -> tuple[Any, Any]:
        from kprio_core.kafka import KafkaEdge
        from kprio_core.ledger import Ledger

        key = config.model_dump_json()
        if key not in self._drivers:
            self._drivers[key] = (self._stack.enter_context(Ledger(config.ledger.url)),
                                  self._stack.enter_context(KafkaEdge(config.kafka)))
        return self._drivers[key]

    def close(self) -> None:
        self._stack.close()
        if self.provider is not None:
            self.provider.stop()


def urgent_ends(decisions: Any, config: Any) -> dict[tuple[str, int], int]:
    """The readable end of every partition of each logical topic's most urgent priority, as a tick saw them."""
    tops = {t.name: t.priorities - 1 for t in config.topics}
    return {(p.topic, p.partition): p.readable_end for d in decisions if d.snapshot is not None
            for p in d.snapshot.partitions if p.priority == tops.get(d.topic)}


def orders(conn: Connection, worker: Worker | None = None) -> Iterator[Execute]:
    """The runs the pool hands over, until stop or the pool's end; meanwhile :meth:`Worker.idle` watches."""
    while True:
        try:
            watch_s = worker.watch_s() if worker is not None else None
            if watch_s is not None and not conn.poll(watch_s):
                try:
                    launched = worker.idle()
                except Exception:  # noqa: BLE001 - the watch is a shortcut: the sensor's tick still comes
                    LOGGER.exception("the idle watch of kprio worker %s failed", worker.warm.name)
                    launched = ()
                if launched:
                    conn.send(Launched(launched))
                continue
            message = conn.recv()
        except (EOFError, OSError):  # the pool is gone: nobody would hear of another run
            return
        if isinstance(message, Stop):
            return
        yield message


def serve(conn: Connection) -> int:
    """The worker's life: warm up, then execute what the pool hands it (see the module docstring)."""
    warm: Warm = conn.recv()
    started = time.monotonic()
    if warm.nice:
        os.nice(warm.nice)
    from orchestration.cli.logs import RedactingFormatter, routed_logs
    from orchestration.cli.redaction import Redactor

    with ExitStack() as stack:
        if warm.log.inherit:  # kprio's own lines on the standard error it inherited (the pool's)
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(RedactingFormatter(Redactor.of(os.environ)))
            logging.getLogger("kprio").addHandler(handler)
            logging.getLogger("kprio").setLevel(logging.INFO)
        else:
            stack.enter_context(routed_logs(
                verbose=warm.log.verbose, log_file=Path(warm.log.log_file) if warm.log.log_file else None,
                log_file_from="the pool's log file", debug=warm.log.debug, redact=Redactor.of(os.environ)))
        return _serve(conn, warm, started)


def _serve(conn: Connection, warm: Warm, started: float) -> int:
    worker = Worker(warm)
    try:
        worker.start()
    except Exception as err:  # noqa: BLE001 - one line to the pool, which says it where a person looks
        conn.send(CannotStart(f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"))
        return 1
    conn.send(Ready(os.getpid(), time.monotonic() - started))
    try:
        for order in orders(conn, worker):
            try:
                ended = worker.execute(order)
            except Exception as err:  # noqa: BLE001 - a fault of the worker, not of the run: it fails, the worker leaves
                LOGGER.exception("kprio worker %s failed on run %s", warm.name, order.run_id)
                ended = Ended(order.run_id, "FAILURE", retire=f"an error outside the run: {type(err).__name__}: {err}")
            conn.send(ended)
            if ended.retire:
                break
    finally:
        crash_point("worker-leaving")
        worker.close()
    return 0
