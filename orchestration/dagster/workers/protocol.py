"""What a worker pool and its warm workers say to each other: small frozen values, pickled over a socket pair.

The pool sends :class:`Warm` once, then one :class:`Execute` at a time (a worker runs one run at a
time) and :class:`Stop`; the worker answers :class:`Ready` (or :class:`CannotStart`) once, then
:class:`Ended` per run. A run is named by its id and the instance it lives in (Dagster's
``InstanceRef``); the job to execute it with comes either from kprio's settings (:class:`ByConfig`:
``kprio drain``'s runs, whose definitions are built in memory) or from the code origin Dagster stored
with the run (:class:`ByOrigin`: runs the daemon created from the code server).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kprio_core.config import KprioConfig, SparkSettings, WorkersSettings


@dataclass(frozen=True)
class ByConfig:
    """The job ``job_name`` of kprio's definitions built from ``config`` (``kprio drain``: runs created in memory)."""

    config: KprioConfig
    job_name: str


@dataclass(frozen=True)
class ByOrigin:
    """The job a run's code origin names (a ``JobPythonOrigin``: the code server's module, imported once)."""

    origin: Any


JobSource = ByConfig | ByOrigin


@dataclass(frozen=True)
class LogRoute:
    """Where a worker's log lines go, as the command that started its pool routes its own
    (:func:`orchestration.cli.logs.routed_logs`): a file, standard error (``verbose``), or nowhere.
    ``inherit``: leave Python's logging as it is (a pool under the Dagster daemon: its terminal)."""

    log_file: str | None = None
    verbose: bool = False
    debug: bool = False
    inherit: bool = True


@dataclass(frozen=True)
class Warm:
    """Start the Spark client of ``spark`` and warm up, ``nice`` steps below the pool's CPU priority (before the
    JVM starts: it and its Python workers inherit it); the worker's limits, its name for log lines, its logs."""

    spark: SparkSettings
    limits: WorkersSettings
    name: str
    nice: int = 0
    log: LogRoute = LogRoute()
    watch: bool = False
    """Between runs under the daemon, watch the ends of the most urgent priorities' partitions (every
    ``sensor.watch_s``) and tick as soon as records arrive there with their slot free (the urgent lane's worker)."""


@dataclass(frozen=True)
class Execute:
    """Execute run ``run_id`` of the instance ``instance`` (an ``InstanceRef``) with ``job``.

    ``tick_after``: once the run ended, tick (the sensor's rules, this worker as the driver) and create the
    runs the tick requests, so the slots the run freed are planned into at once (under the Dagster daemon,
    whose sensor evaluates every 5 s at most); ``kprio drain`` ticks itself as soon as a run ends.
    """

    run_id: str
    instance: Any
    job: JobSource
    tick_after: bool = False


@dataclass(frozen=True)
class Stop:
    """Leave once the run in progress (none: at once) ended."""


@dataclass(frozen=True)
class Ready:
    """The worker imported everything and its Spark client answered a warm-up job."""

    pid: int
    seconds: float


@dataclass(frozen=True)
class CannotStart:
    """The worker could not warm up: one line of why (its Spark client, an import)."""

    why: str


@dataclass(frozen=True)
class Launched:
    """Runs an idle worker's tick created (records arrived on an urgent priority): the pool launches them."""

    run_ids: tuple[str, ...]


@dataclass(frozen=True)
class Ended:
    """Run ``run_id`` ended with Dagster status ``status``.

    ``launched``: the runs the tick after it created (NOT_STARTED) for the pool to launch, in the order the
    tick requested them. ``retire``: why the worker leaves now (its runs or its memory), None when it stays.
    """

    run_id: str
    status: str
    launched: tuple[str, ...] = ()
    retire: str | None = None


# --- what a launcher asks the pool of a Dagster home (orchestration/dagster/workers/server.py) ---------------------


@dataclass(frozen=True)
class Hello:
    """A process that will hand the pool runs (the code location, a daemon): the pool lives while one of them does.

    ``code_location``: the process loaded kprio's code; a new one (a reload) makes every worker load it again.
    """

    pid: int
    code_location: bool = False


@dataclass(frozen=True)
class Submit:
    """Execute run ``run_id`` of ``instance`` (an ``InstanceRef``) with ``job`` on the pool, in ``lane``."""

    pid: int
    run_id: str
    instance: Any
    job: JobSource
    lane: str
    tick_after: bool = True


@dataclass(frozen=True)
class Terminate:
    """Stop run ``run_id``: its worker is killed (a fresh one takes its place), or it leaves the queue."""

    run_id: str
