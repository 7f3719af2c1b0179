"""What a worker pool and its warm workers say to each other: small frozen values, pickled over a socket pair.

The pool sends :class:`Warm` once, then one :class:`Execute` at a time (a worker runs one run at a time) and
:class:`Stop`; the worker answers :class:`Ready` (or :class:`CannotStart`) once, then :class:`Ended` per run. A
run is named by its id and its instance's ``InstanceRef``; its job comes from kprio's settings (:class:`ByConfig`)
or from the code origin Dagster stored with it (:class:`ByOrigin`).
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
    """Where a worker's log lines go, as its pool's command routes its own (:func:`orchestration.cli.logs.routed_logs`):
    a file, standard error (``verbose``), nowhere; ``inherit``: Python's logging as it is (under the daemon)."""

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
    """Between runs under the daemon (the urgent lane), tick once records arrive on a free most urgent priority."""


@dataclass(frozen=True)
class Execute:
    """Execute run ``run_id`` of ``instance`` (an ``InstanceRef``) with ``job``; ``tick_after``: then tick (this
    worker the driver) and create the runs requested, so freed slots are planned into at once (the daemon's sensor
    evaluates every 5 s at most; ``kprio drain`` ticks itself)."""

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
    """Run ``run_id`` ended with Dagster status ``status``; ``launched``: the runs its tick created (NOT_STARTED),
    for the pool to launch in order; ``retire``: why the worker leaves now (runs, memory), None when it stays."""

    run_id: str
    status: str
    launched: tuple[str, ...] = ()
    retire: str | None = None


# --- what a launcher asks the pool of a Dagster home (orchestration/dagster/workers/server.py) ---------------------


@dataclass(frozen=True)
class Hello:
    """A process that will hand the pool runs: the pool lives while one does; a new ``code_location`` process (a
    reload) makes every worker load the code again."""

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
