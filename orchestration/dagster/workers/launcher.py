"""``WarmRunLauncher``: kprio's Dagster run launcher, which hands every run to a warm worker of the home's pool.

Set in the ``dagster.yaml`` ``kprio instance init`` writes (Dagster's ``DefaultRunLauncher`` stays a
choice: delete the block)::

    run_launcher:
      module: orchestration.dagster.workers.launcher
      class: WarmRunLauncher

Dagster's default launcher starts a process per run that imports Dagster, GX, PySpark and kprio and starts a Spark
JVM; this one hands the run to the home's pool (:mod:`orchestration.dagster.workers.home`,
:mod:`orchestration.dagster.workers.server`), where all that is
warm. Run monitoring asks :meth:`WarmRunLauncher.check_run_worker_health`: a run whose worker died is FAILED.
Terminating a run from the UI kills its worker (a fresh one takes its place); the run is CANCELED.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import dagster as dg

from orchestration.dagster.runs import runner_of
from orchestration.dagster.workers.dagster_api import (
    CheckRunHealthResult,
    ConfigurableClass,
    LaunchRunContext,
    RunLauncher,
    WorkerStatus,
)
from orchestration.dagster.workers.lanes import BULK
from orchestration.dagster.workers.protocol import ByOrigin, Hello, Submit, Terminate
from orchestration.dagster.workers.home import WorkerPoolUnavailable, call, ensure
from orchestration.runtime.leases import owner_dead
from orchestration.runtime.tags import LANE_TAG


class WarmRunLauncher(RunLauncher, ConfigurableClass):
    """Launches each run on a warm worker of the Dagster home's pool (see the module docstring)."""

    def __init__(self, inst_data: Any = None) -> None:
        self._inst_data = inst_data
        super().__init__()

    @property
    def inst_data(self) -> Any:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict:
        return {}

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Mapping[str, Any]) -> WarmRunLauncher:
        return cls(inst_data=inst_data)

    @property
    def home(self) -> Path:
        return Path(self._instance.root_directory)

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        if run.job_code_origin is None:
            raise dg.DagsterInvariantViolationError(f"run {run.run_id} has no code origin: kprio's workers load the "
                                                    "job from the code location that created the run")
        ensure(self.home)
        call(self.home, Submit(os.getpid(), run.run_id, self._instance.get_ref(), ByOrigin(run.job_code_origin),
                               run.tags.get(LANE_TAG, BULK)))

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            return False
        self._instance.report_run_canceling(run)
        try:
            return bool(call(self.home, Terminate(run_id)))
        except WorkerPoolUnavailable:
            return False

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        runner = runner_of(run)
        if runner is not None and owner_dead(runner):
            return CheckRunHealthResult(WorkerStatus.FAILED, f"the kprio worker executing it ({runner}) is gone")
        if runner is None:  # waiting for a worker: the pool must be there
            try:
                call(self.home, Hello(os.getpid()), timeout_s=2.0)
            except WorkerPoolUnavailable as err:
                return CheckRunHealthResult(WorkerStatus.FAILED, str(err))
        return CheckRunHealthResult(WorkerStatus.RUNNING)
