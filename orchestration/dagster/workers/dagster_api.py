"""The one adapter over Dagster's internal modules that kprio's warm run workers need (Dagster 1.13).

Dagster has no public function that executes a run someone else created, nor one that creates a run of a job not
loaded from a code server; its run worker (``dagster api execute_run``, ``dagster/_cli/api.py``) and
``JobDefinition.execute_in_process`` call the functions below, and this module calls them exactly as those do.
Nothing else in kprio imports a ``dagster._`` module (``tests/orchestration/test_layers.py``);
``tests/orchestration/test_workers_dagster_api.py`` runs each function on a real instance, so a Dagster that
moves or changes one fails there, not in a deployment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import dagster as dg
from dagster._core.definitions.job_base import IJob, InMemoryJob
from dagster._core.events import EngineEventData
from dagster._core.execution.api import create_execution_plan, execute_run_iterator
from dagster._core.launcher import (
    CheckRunHealthResult,
    LaunchRunContext,
    RunLauncher,
    WorkerStatus,
)
from dagster._core.origin import JobPythonOrigin
from dagster._serdes import ConfigurableClass
from dagster._utils.hosted_user_process import recon_job_from_origin

DAGSTER_MINOR = "1.13"
"""The Dagster release this adapter was written against (``pyproject.toml`` pins ``dagster==1.13.*``)."""

__all__ = [
    "DAGSTER_MINOR", "CheckRunHealthResult", "ConfigurableClass", "IJob", "JobPythonOrigin", "LaunchRunContext",
    "RunLauncher", "WorkerStatus", "create_run", "execute", "in_memory", "from_origin", "mark_starting",
]


def in_memory(job: dg.JobDefinition) -> IJob:
    """A job built in this process, as ``execute_in_process`` wraps one."""
    return InMemoryJob(job)


def from_origin(origin: JobPythonOrigin) -> IJob:
    """The job a run's code origin names (its module imported here once), as ``dagster api execute_run`` loads it."""
    return recon_job_from_origin(origin)


def create_run(instance: dg.DagsterInstance, job: IJob, *, tags: Mapping[str, str],
               run_config: Mapping[str, object] | None = None, like: dg.DagsterRun | None = None) -> dg.DagsterRun:
    """A new run of ``job`` in ``instance`` (NOT_STARTED), plan and snapshots recorded as ``execute_in_process`` does;
    ``like``: a daemon-created run whose code origins it takes, so it can be re-executed from the UI as that one."""
    config = dict(run_config or {})
    plan = create_execution_plan(job, run_config=config, instance_ref=instance.get_ref())
    job_def = job.get_definition()
    return instance.create_run_for_job(
        job_def=job_def, execution_plan=plan, run_config=config, tags={**job_def.run_tags, **tags},
        remote_job_origin=like.remote_job_origin if like is not None else None,
        job_code_origin=like.job_code_origin if like is not None else None,
    )


def mark_starting(instance: dg.DagsterInstance, run: dg.DagsterRun) -> None:
    """What ``DagsterInstance.launch_run`` records before it hands a run to the launcher (the run is STARTING)."""
    event = dg.DagsterEvent(event_type_value=dg.DagsterEventType.PIPELINE_STARTING.value, job_name=run.job_name)
    instance.report_dagster_event(event, run_id=run.run_id)


def execute(job: IJob, run: dg.DagsterRun, instance: dg.DagsterInstance) -> None:
    """Execute ``run`` of ``job`` here, to its end, as ``dagster api execute_run`` does; its events go to the
    instance's event log as they happen, and its failure is recorded there, not raised."""
    instance.report_engine_event(f"Started process for run (pid: {os.getpid()}).", run,
                                 EngineEventData.in_process(os.getpid()))
    for _event in execute_run_iterator(job, run, instance):
        pass
