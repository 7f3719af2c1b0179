"""The warm run workers on the real broker, Spark and Dagster: every run of a drain executes on a long-lived worker
(the same one run after run), a worker replaced after ``workers.max_runs``, a worker killed -9 mid-run (its run
failed at once, its batch resumed with the same ranges by the next tick: nothing lost or doubled), a run terminated
from Dagster (CANCELED, its worker replaced).

Each test has a pool of its own (one worker: the urgent and the bulk lane in one), a Spark Connect client of the
test session's Spark, as the session's pool is."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from kprio_core.config import SparkSettings, WorkersSettings
from orchestration.dagster import drain_loop
from orchestration.dagster.workers.pool import WorkerPool
from orchestration.dagster.workers.protocol import LogRoute
from orchestration.runtime.tags import RUNNER_TAG
from orchestration.services.process import wait_for
from tests.fixtures.spark import WORKERS_SPARK_CONF
from tests.orchestration.conservation import conservation, lag

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]


@pytest.fixture
def own_pool(spark, spark_connect_port: int, tmp_path: Path) -> Iterator:
    """``own_pool(**limits, env={...})``: a pool of the test's own, closed at the end; its log in the test's dir."""
    made: list[WorkerPool] = []

    def make(env: dict[str, str] | None = None, **limits: object) -> WorkerPool:
        settings = SparkSettings(remote=f"sc://127.0.0.1:{spark_connect_port}", conf=WORKERS_SPARK_CONF)
        pool = WorkerPool(settings, WorkersSettings(**{"count": 1, **limits}),
                          log=LogRoute(log_file=str(tmp_path / "workers.log"), inherit=False),
                          env={**os.environ, **(env or {})}, name="test-worker")
        made.append(pool.start())
        assert pool.ready(300), (tmp_path / "workers.log").read_text(errors="replace")[-3000:]
        return pool

    yield make
    for pool in made:
        pool.close()


def runners(instance: dg.DagsterInstance) -> list[str]:
    """The worker each run of the instance executed on (its ``kprio/runner``, minus the run id), oldest first."""
    runs = instance.get_runs()[::-1]
    return [run.tags[RUNNER_TAG].split("@", 1)[1] for run in runs]


def test_the_runs_of_a_drain_execute_on_one_warm_worker(make_topic, kprio_env, dagster_instance, own_pool):
    topic = make_topic(priorities=2, partitions=2, records={1: 20, 0: 40})
    env = kprio_env(topic, planner={"record_budget": 20, "target_batch_s": None})
    pool = own_pool()
    [worker] = pool.pids()

    report = drain_loop.drain(env.defs, dagster_instance, workers=pool)

    assert report.ok and len(report.batches) >= 3, report
    assert {b.state.value for b in report.batches} == {"committed"}
    assert set(runners(dagster_instance)) == {f"{socket.gethostname()}:{worker}"}, "every run, one warm process"
    assert pool.pids() == [worker]
    assert conservation(env.config, topic, env.edge).ok


def test_a_worker_is_replaced_after_its_runs_and_the_next_run_takes_a_fresh_one(
        make_topic, kprio_env, dagster_instance, own_pool):
    topic = make_topic(priorities=1, partitions=1, records={0: 30})
    env = kprio_env(topic, planner={"record_budget": 10, "target_batch_s": None})
    pool = own_pool(max_runs=1)

    report = drain_loop.drain(env.defs, dagster_instance, workers=pool)

    assert report.ok and [b.state.value for b in report.batches] == ["committed"] * 3, report
    used = runners(dagster_instance)
    assert len(used) == 3 and len(set(used)) == 3, f"each run on a fresh worker (workers.max_runs 1): {used}"
    assert lag(topic, env.edge) == {0: 0}
    assert conservation(env.config, topic, env.edge).ok


def test_a_worker_slow_to_leave_holds_up_no_run_and_is_killed_with_its_group_when_the_pool_closes(
        make_topic, kprio_env, dagster_instance, own_pool, tmp_path, monkeypatch):
    """A retired worker that does not leave (stopped as it leaves: ``worker-leaving``) is left to leave on its own:
    the pool starts the fresh worker and hands it the next run meanwhile (it used to wait for the old one under its
    lock, up to 5 s, with no run handed out); the pool closing kills what is still there, its group too."""
    import signal

    import psutil

    from orchestration.dagster.workers import pool as pools

    monkeypatch.setattr(pools, "LEAVE_S", 600.0)  # it would never be killed for overstaying during this test
    topic = make_topic(priorities=1, partitions=1, records={0: 20})
    env = kprio_env(topic, planner={"record_budget": 10, "target_batch_s": None})
    pool = own_pool(max_runs=1, env={"KPRIO_PAUSE_AT": "worker-leaving", "KPRIO_CRASH_ONCE": str(tmp_path / "left")})
    [first] = pool.pids()

    report = drain_loop.drain(env.defs, dagster_instance, workers=pool)

    assert report.ok and [b.state.value for b in report.batches] == ["committed"] * 2, report
    assert (tmp_path / "left").exists(), "the first worker stopped as it left"
    assert psutil.Process(first).status() == psutil.STATUS_STOPPED, "still leaving while the second run executed"
    used = runners(dagster_instance)
    assert len(used) == 2 and used[0].endswith(f":{first}") and used[1] != used[0], used
    pool.close(timeout_s=1.0)
    assert not psutil.pid_exists(first), "killed and reaped when the pool closed"
    with pytest.raises(ProcessLookupError):
        os.killpg(first, signal.SIGCONT)  # its group (its Spark client's processes) is gone too
    assert lag(topic, env.edge) == {0: 0}
    assert conservation(env.config, topic, env.edge).ok


def test_a_worker_killed_mid_run_fails_its_run_and_its_batch_heals_with_the_same_ranges(
        make_topic, kprio_env, dagster_instance, own_pool, tmp_path):
    topic = make_topic(priorities=2, partitions=2, records={1: 15, 0: 30})
    env = kprio_env(topic, planner={"record_budget": 100, "target_batch_s": None})
    killed = tmp_path / "killed"
    pool = own_pool(env={"KPRIO_CRASH_AT": f"after-publish:{topic.name}", "KPRIO_CRASH_ONCE": str(killed)})
    [first_worker] = pool.pids()

    report = drain_loop.drain(env.defs, dagster_instance, workers=pool)

    assert killed.exists(), "the worker was killed after its publish"
    assert report.ok, report.stopped
    died, resumed = report.batches[0], report.batches[-1]
    assert died.batch_id == resumed.batch_id and not died.success and resumed.success, report
    run = dagster_instance.get_run_by_id(died.run_id)
    assert run.status is dg.DagsterRunStatus.FAILURE
    said = [e.message for e in dagster_instance.all_logs(died.run_id) if e.message]
    assert any("the kprio worker executing it" in m and "killed by signal 9" in m for m in said), said
    batch = env.ledger.batches.get(died.batch_id)
    assert batch.state.value == "committed" and batch.attempts == 2, "resumed, not planned again"
    assert pool.pids() != [first_worker], "a fresh worker took the dead one's place"
    assert lag(topic, env.edge) == {1: 0, 0: 0}
    assert conservation(env.config, topic, env.edge).ok, "published before the kill, nothing doubled"


def test_a_run_terminated_from_dagster_is_canceled_and_its_worker_replaced(
        make_topic, kprio_env, dagster_instance, own_pool, tmp_path):
    import psutil

    from orchestration.dagster.sensors import tick

    topic = make_topic(priorities=1, partitions=1, records={0: 10})
    env = kprio_env(topic)
    pool = own_pool(env={"KPRIO_PAUSE_AT": f"before-drain:{topic.name}", "KPRIO_CRASH_ONCE": str(tmp_path / "paused")})
    [worker] = pool.pids()
    [request] = tick(dagster_instance, env.edge, env.ledger, env.config).requests
    dagster_instance.add_dynamic_partitions("kprio_batches", [request.partition_key])
    run_id = drain_loop.launch(env.defs, dagster_instance, pool, request, env.config)
    assert wait_for(lambda: psutil.Process(worker).status() == psutil.STATUS_STOPPED, 120, interval_s=0.1)

    assert pool.terminate(run_id, "terminated from the test")  # killed where it stood, stopped or not

    assert dagster_instance.get_run_by_id(run_id).status is dg.DagsterRunStatus.CANCELED
    assert wait_for(lambda: pool.pids() and pool.pids() != [worker], 60, interval_s=0.1), "a fresh worker"
    report = drain_loop.drain(env.defs, dagster_instance, workers=pool)  # the batch's lease is a dead worker's
    assert report.ok, report.stopped
    assert lag(topic, env.edge) == {0: 0}
    assert conservation(env.config, topic, env.edge).ok


def test_a_fork_server_killed_alone_takes_no_worker_with_it(make_topic, kprio_env, dagster_instance, own_pool,
                                                            caplog):
    """The fork server that forked the workers is killed -9 alone (the OOM killer, a person): the workers run on and
    execute every run of a drain (multiprocessing reads each as ended once its fork server's pipe does: the pool used
    to kill them all, failing their runs); a worker killed after it is still seen to die and is replaced, forked by a
    new fork server."""
    import signal

    import psutil

    topic = make_topic(priorities=2, partitions=1, records={1: 20, 0: 20})
    env = kprio_env(topic, planner={"record_budget": 10, "target_batch_s": None})
    pool = own_pool(count=2)
    workers = pool.pids()
    server = psutil.Process(workers[0]).parent()
    server.kill()  # not reaped here: multiprocessing reaps it when it starts the next one

    def ended() -> bool:
        try:
            return server.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:  # reaped already: a fork started the next one
            return True

    assert wait_for(ended, 30, interval_s=0.05)

    report = drain_loop.drain(env.defs, dagster_instance, workers=pool)

    assert report.ok and len(report.batches) >= 4 and {b.state.value for b in report.batches} == {"committed"}, report
    assert pool.pids() == workers, "the same two workers, alive"
    assert set(runners(dagster_instance)) <= {f"{socket.gethostname()}:{pid}" for pid in workers}
    assert not [m for r in caplog.records if r.name == "kprio.workers" and "is gone" in (m := r.getMessage())]
    assert lag(topic, env.edge) == {1: 0, 0: 0}
    assert conservation(env.config, topic, env.edge).ok

    os.kill(workers[1], signal.SIGKILL)
    assert wait_for(lambda: len(pool.pids()) == 2 and workers[1] not in pool.pids(), 120, interval_s=0.1), \
        "the killed worker was replaced"
    assert pool.ready(120)
    fresh = next(pid for pid in pool.pids() if pid not in workers)
    assert psutil.Process(fresh).parent().pid != server.pid, "forked by a new fork server"
    [gone] = [m for r in caplog.records if r.name == "kprio.workers" and "is gone" in (m := r.getMessage())]
    assert gone.startswith(f"test-worker 1 (pid {workers[1]}) is gone: its "), gone  # its connection, its process
    assert "255" not in gone, "how it ended, nobody knows: its fork server is gone"


POOL_OWNER = """
import sys, time
from kprio_core.config import SparkSettings, WorkersSettings
from orchestration.dagster.workers.pool import WorkerPool
from orchestration.dagster.workers.protocol import LogRoute
spark = SparkSettings(remote=sys.argv[1], conf={"spark.sql.shuffle.partitions": "4"})
pool = WorkerPool(spark, WorkersSettings(count=2), log=LogRoute(inherit=False)).start()
print(*pool.pids(), flush=True) if pool.ready(300) else print("not warm", flush=True)
time.sleep(600)
"""


def test_a_pool_process_killed_takes_its_workers_and_their_fork_server_with_it(spark, spark_connect_port, tmp_path):
    """kill -9 of the process that owns a pool (``kprio drain``, a home's pool server), not of its group: its workers,
    forked by its fork server into sessions of their own, die with it as a run executing in it would (each watches
    its pool's process), and the fork server leaves once they did."""
    import subprocess
    import sys

    import psutil

    stderr = tmp_path / "owner.err"
    with stderr.open("wb") as err:
        owner = subprocess.Popen([sys.executable, "-c", POOL_OWNER, f"sc://127.0.0.1:{spark_connect_port}"],
                                 stdout=subprocess.PIPE, stderr=err, text=True, cwd=Path(__file__).parents[2])
    try:
        said = owner.stdout.readline().split()
        assert len(said) == 2 and all(word.isdigit() for word in said), (said, stderr.read_text()[-2000:])
        workers = [int(word) for word in said]
        tree = psutil.Process(owner.pid).children(recursive=True)
        assert set(workers) <= {p.pid for p in tree}, "forked by the owner's fork server, a child of the owner"
        assert all(os.getsid(pid) == pid for pid in workers), "each in a session of its own"
        owner.kill()
        owner.wait(timeout=30)
    finally:
        owner.kill()
        owner.stdout.close()

    def gone(process: psutil.Process) -> bool:
        try:
            return process.status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    assert wait_for(lambda: all(gone(p) for p in tree), 60, interval_s=0.1), [
        (p.pid, p.cmdline()[:3]) for p in tree if not gone(p)]


def test_every_module_the_fork_server_preloads_is_one():
    """The fork server skips a module it cannot import without a word (an extra not installed, as it should); with
    every extra installed, each name in ``PRELOAD`` must name a module, or a rename would silently send its import
    back to every worker's first run."""
    from importlib.util import find_spec

    from orchestration.dagster.workers.fork import PRELOAD

    assert [name for name in PRELOAD if find_spec(name) is None] == []
