"""The one adapter over Dagster's internal modules (orchestration/dagster/workers/dagster_api.py), proven on a real
instance: each function it wraps creates, marks and executes a run as Dagster's own run worker would. A Dagster
release that moves or changes one of them fails here, not in a deployment; so does a release other than the one the
adapter names (read the adapter against it, then raise ``DAGSTER_MINOR``)."""

from __future__ import annotations

import dagster as dg
import pytest

from orchestration.dagster.workers import dagster_api
from tests.fixtures.dagster_instances import fresh_instance

pytestmark = [pytest.mark.dagster]


@dg.op
def say_hello(context) -> str:  # noqa: ANN001 - Dagster reads the annotation as a type (from __future__)
    context.log.info("hello from the worker")
    return "hello"


@dg.job(executor_def=dg.in_process_executor)  # as kprio's jobs: one step, one process
def hello_job() -> None:
    say_hello()


def test_the_adapter_names_the_dagster_release_installed():
    assert ".".join(dg.__version__.split(".")[:2]) == dagster_api.DAGSTER_MINOR, (
        f"Dagster {dg.__version__}: check every function of dagster_api against it, then set DAGSTER_MINOR")


def test_a_run_created_marked_and_executed_through_the_adapter_is_an_ordinary_run():
    with fresh_instance() as instance:
        job = dagster_api.in_memory(hello_job)
        run = dagster_api.create_run(instance, job, tags={"kprio/lane": "urgent"})
        assert run.status is dg.DagsterRunStatus.NOT_STARTED and run.tags["kprio/lane"] == "urgent"
        assert run.execution_plan_snapshot_id and run.job_snapshot_id
        dagster_api.mark_starting(instance, run)
        run = instance.get_run_by_id(run.run_id)
        assert run.status is dg.DagsterRunStatus.STARTING
        dagster_api.execute(job, run, instance)
        done = instance.get_run_by_id(run.run_id)
        assert done.status is dg.DagsterRunStatus.SUCCESS
        messages = [e.message for e in instance.all_logs(run.run_id)]
        assert any(m.startswith("Started process for run (pid: ") for m in messages), messages
        assert any("hello from the worker" in m for m in messages)


def test_a_job_loads_from_the_code_origin_a_run_stores():
    recon = dg.reconstructable(hello_job)
    with fresh_instance() as instance:
        run = dagster_api.create_run(instance, recon, tags={})
        origin = recon.get_python_origin()
        loaded = dagster_api.from_origin(origin)
        assert loaded.get_definition().name == "hello_job"
        dagster_api.mark_starting(instance, run)
        dagster_api.execute(loaded, instance.get_run_by_id(run.run_id), instance)
        assert instance.get_run_by_id(run.run_id).status is dg.DagsterRunStatus.SUCCESS


def test_kprios_launcher_loads_from_a_dagster_yaml_and_answers_run_monitoring():
    from orchestration.dagster.workers.launcher import WarmRunLauncher

    overrides = {"run_launcher": {"module": "orchestration.dagster.workers.launcher", "class": "WarmRunLauncher"}}
    with fresh_instance(overrides=overrides) as instance:
        launcher = instance.run_launcher
        assert isinstance(launcher, WarmRunLauncher) and isinstance(launcher, dagster_api.RunLauncher)
        assert launcher.supports_check_run_worker_health
        import socket

        run = dagster_api.create_run(instance, dagster_api.in_memory(hello_job), tags={})
        instance.add_run_tags(run.run_id, {"kprio/runner": f"{run.run_id}@nohost-that-is-not-this-one:1"})
        # A runner on another host is left to its lease; one of this host whose process is gone is a dead worker.
        health = launcher.check_run_worker_health(instance.get_run_by_id(run.run_id))
        assert health.status is dagster_api.WorkerStatus.RUNNING, health

        gone = dagster_api.create_run(instance, dagster_api.in_memory(hello_job), tags={})
        instance.add_run_tags(gone.run_id, {"kprio/runner": f"{gone.run_id}@{socket.gethostname()}:999999999"})
        health = launcher.check_run_worker_health(instance.get_run_by_id(gone.run_id))
        assert health.status is dagster_api.WorkerStatus.FAILED and "is gone" in health.msg, health
