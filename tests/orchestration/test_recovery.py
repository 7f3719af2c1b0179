"""Crash recovery with no operator: ``kprio drain`` killed at random moments and at the worst ones, SIGTERM.

Each case runs ``kprio drain`` as a child process (its own Spark, the session's broker, a ledger
and a Dagster home in tmp_path), kills it, and then runs a plain ``kprio drain --until-empty``
(in the test's process, on its Spark session):
it must finish with zero lag, conservation over output and dead letters, no batch in flight and
no staging directory left, with no operator step in between.
"""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kprio_core.ledger import BatchState, Ledger
from orchestration.cli.main import app
from orchestration.services.process import wait_for
from tests.fixtures.paused import paused as stopped_process
from tests.fixtures.paused import freeze, resume, thaw
from tests.orchestration.conservation import conservation, iceberg_publishes, lag

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT_S = 420  # a loaded 2-core CI machine: Spark start, several batches


def child_config(env, tmp_path: Path, spark: dict) -> Path:
    """The test's kprio.yaml for child processes, ``spark`` over its Spark settings: the ``child_spark`` fixture's (the
    children's warm workers are Spark Connect clients of the test session's Spark, so a child starts no JVM), or a
    local session's (``master`` and ``conf``: ``child_spark``'s quicker JVM start)."""
    raw = env.config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})
    raw["spark"]["conf"].pop("spark.executorEnv.PYTHONPATH", None)
    raw["spark"].update({key: value for key, value in spark.items() if key != "conf"})
    raw["spark"]["conf"].update(spark.get("conf", {}))
    path = tmp_path / "kprio.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def start(config: Path, tmp_path: Path, *args: str, **env: str) -> subprocess.Popen:
    """``kprio drain <args>`` in its own process group (so a kill takes its JVM and workers too); ``--verbose``:
    the runs' log lines (a write refused, a stale lease) come on its stderr too, for :func:`output_of`."""
    log = open(tmp_path / f"drain-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(
        [sys.executable, "-m", "orchestration.cli", "--verbose", "drain", "--config", str(config), *args],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO), **env},
    )


def output_of(proc: subprocess.Popen) -> str:
    proc.stdout and proc.stdout.close()
    logs = sorted(Path(proc.args[proc.args.index("--config") + 1]).parent.glob("drain-*.log"))
    return logs[-1].read_text(errors="replace") if logs else ""


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=60)


def finish(config: Path, tmp_path: Path) -> str:
    """A plain ``kprio drain --until-empty`` must finish by itself (exit 0).

    Run in this process, on the session's warm Spark (the same command and code path as a new
    process, which would add half a minute of Spark start per test): the killed process's leases
    name a pid that is gone, as they would for any new process.
    """
    result = CliRunner().invoke(app, ["drain", "--until-empty", "--config", str(config)],
                                env={"DAGSTER_HOME": str(tmp_path / "home")}, catch_exceptions=False)
    assert result.exit_code == 0, result.output[-3000:]
    return result.output


def assert_converges(proc: subprocess.Popen, env, topic, ledger: Ledger) -> None:
    """The child drain ``proc`` (``--follow``) gets ``topic`` to zero lag on every priority by itself, with no batch
    in flight or failed (within :data:`CHILD_TIMEOUT_S`); else the batches and the child's output."""
    assert wait_for(lambda: lag(topic, env.edge) == dict.fromkeys(range(topic.priorities), 0)
                    and not ledger.batches.in_flight(topic.name)
                    and not ledger.batches.find(topic.name, states=[BatchState.FAILED]),
                    CHILD_TIMEOUT_S, interval_s=0.5), (
        [(b.batch_id, b.state.value, b.reason) for b in ledger.batches.find(topic.name)][:8], output_of(proc)[-3000:])


def assert_healed(env, topic, config: Path) -> None:
    assert lag(topic, env.edge) == dict.fromkeys(range(topic.priorities), 0)
    check = conservation(env.config, topic, env.edge)
    assert check.ok, check
    with Ledger(env.config.ledger.url) as ledger:
        assert ledger.batches.in_flight(topic.name) == []
    for root in (env.config.drain.output_path, env.config.drain.dead_letter_path):
        staging = Path(root) / "_staging"
        assert not staging.exists() or not any(staging.iterdir()), list(staging.rglob("*"))[:5]


def make_backlog(make_topic, kprio_env, tmp_path, spark_conf, records: dict[int, int], record_budget: int,
                 output_format: str = "parquet"):
    topic = make_topic(priorities=3, partitions=2, records=records, schema={"i": "long", "amount": "double"})
    env = kprio_env(topic, planner={"record_budget": record_budget, "target_batch_s": None},
                    recovery={"lease_s": 6, "backoff_s": 0.2, "backoff_max_s": 1, "max_attempts": 5},
                    drain={"format": output_format})
    (tmp_path / "home").mkdir()
    return env, topic, child_config(env, tmp_path, spark_conf)


@pytest.fixture
def backlog(request, make_topic, kprio_env, tmp_path, spark, child_spark):
    """Several batches of every priority: kills at random moments find work in flight. Parquet output, or
    the format an indirect parameter names."""
    return make_backlog(make_topic, kprio_env, tmp_path, child_spark, {2: 600, 1: 1500, 0: 3000}, 1800,
                        getattr(request, "param", "parquet"))


@pytest.fixture
def two_batches(request, make_topic, kprio_env, tmp_path, spark, child_spark):
    """Two batches, each with every priority: the first one in flight, one more after it. Parquet output, or the
    format an indirect parameter names."""
    return make_backlog(make_topic, kprio_env, tmp_path, child_spark, {2: 200, 1: 500, 0: 1000}, 1000,
                        getattr(request, "param", "parquet"))


@pytest.fixture
def many_batches(make_topic, kprio_env, tmp_path, spark, child_spark):
    """The backlog in about 17 batches: three kills, each up to 2.5 s after a batch was taken, find one still in
    flight however fast a batch drains and commits (with 3 batches of 1,800 records, a child whose commits got
    faster drained them all before the first kill)."""
    return make_backlog(make_topic, kprio_env, tmp_path, child_spark, {2: 600, 1: 1500, 0: 3000}, 300)


def test_kill_9_at_random_moments_then_a_plain_restart_finishes(many_batches, tmp_path):
    """Each kill lands a random moment (up to 2.5 s) after the child's run took a batch, while one is in flight:
    while it drains, checks, publishes or commits it, whatever the machine's speed (a kill at a fixed time after
    the start found the whole backlog drained on a fast machine, or Spark still starting on a slow one; one
    between two batches proves nothing)."""
    env, topic, config = many_batches
    rng = random.Random(20261122)
    killed_in_flight = 0
    with Ledger(env.config.ledger.url) as ledger:
        for _ in range(int(os.environ.get("KPRIO_TEST_KILLS", "3"))):  # 6 for the figure; 3 keeps CI short
            before = {b.batch_id: b.attempts for b in ledger.batches.find(topic.name)}
            proc = start(config, tmp_path, "--until-empty")
            # A batch of this child's: a lease on an attempt that was not there before it started.
            taken = wait_for(lambda: proc.poll() is not None or any(
                b.lease and before.get(b.batch_id) != b.attempts for b in ledger.batches.in_flight(topic.name)),
                CHILD_TIMEOUT_S, interval_s=0.1)
            assert taken, output_of(proc)[-2000:]
            if proc.poll() is not None:  # it drained everything by itself before a kill could land
                break
            time.sleep(rng.uniform(0.0, 2.5))
            # Between two batches (a warm worker drains one in well under a second): the kill waits for the next.
            wait_for(lambda: proc.poll() is not None or any(b.lease for b in ledger.batches.in_flight(topic.name)),
                     CHILD_TIMEOUT_S, interval_s=0.02)
            if proc.poll() is not None:
                break
            kill_group(proc)
            # The dead child's lease stays behind until the restart finds its owner gone.
            killed_in_flight += any(b.lease for b in ledger.batches.in_flight(topic.name))
    assert killed_in_flight >= 1, "no kill landed while a batch was in flight"
    finish(config, tmp_path)
    assert_healed(env, topic, config)


@pytest.mark.parametrize(("point", "backlog"), [("after-publish", "parquet"), ("after-kafka-commit", "parquet"),
                                               ("after-publish", "delta"), ("after-publish", "iceberg")],
                         indirect=["backlog"],
                         ids=["after-publish", "after-kafka-commit", "after-publish-delta", "after-publish-iceberg"])
def test_a_kill_at_the_worst_moment_loses_and_doubles_nothing(backlog, tmp_path, point):
    """The process executing the run is killed -9 at the point (the warm worker: it dies as a run process dies);
    kprio drain's pool fails its run, a fresh worker takes its place, and the next tick resumes the batch with the
    same ranges: the drain finishes by itself, nothing lost or doubled, no person needed."""
    env, topic, config = backlog
    crashed = tmp_path / "crashed"
    proc = start(config, tmp_path, "--until-empty", KPRIO_CRASH_AT=point, KPRIO_CRASH_ONCE=str(crashed))
    assert proc.wait(timeout=CHILD_TIMEOUT_S) == 0, output_of(proc)[-3000:]
    text = output_of(proc)
    kill_group(proc)
    assert crashed.exists(), "the worker was killed at the point"
    assert "was killed by signal 9" in text, text[-3000:]  # the pool saw its worker die, and replaced it
    assert_healed(env, topic, config)
    with Ledger(env.config.ledger.url) as ledger:
        # The group moved by kprio's own commit before its ledger knew: no change of the log to report.
        assert ledger.beliefs.log_events(topic.name) == []
        committed = sorted(b.batch_id for b in ledger.batches.find(topic.name))
    if env.config.drain.format == "delta":  # the killed run's publish was its batch's only commit
        from deltalake import DeltaTable

        history = DeltaTable(f"{env.config.drain.output_path}/{topic.name}").history()
        assert sorted(h["kprio.batch_id"] for h in history if "kprio.batch_id" in h) == committed
    if env.config.drain.format == "iceberg":  # one snapshot per batch: the killed run's, never a second one
        snapshots = iceberg_publishes(env.config.drain.iceberg, "output", topic.name)
        assert sorted(s["kprio.batch_id"] for s in snapshots) == committed


@pytest.mark.parametrize(("point", "write", "two_batches"), [("before-publish", "the publish", "parquet"),
                                                             ("before-kafka-commit", "the Kafka commit", "parquet"),
                                                             ("during-kafka-commit", "the Kafka commit", "parquet"),
                                                             ("before-publish", "the publish", "iceberg")],
                         indirect=["two_batches"], ids=["before-publish", "before-kafka-commit", "during-kafka-commit",
                                                        "before-publish-iceberg"])
def test_a_run_paused_past_its_lease_writes_nothing_when_it_wakes(two_batches, tmp_path, point, write):
    """A process stopped (a GC pause, a stopped VM) right before a write, while another run takes its batch over:
    the warm worker executing the run stops itself at the point, then the rest of its host is stopped too.

    ``during-kafka-commit`` stops it after it read the group's offsets and checked its lease, with the write
    about to be sent: the run that takes the batch over and the batch after it commit meanwhile, so the stale
    write would move the group back. No lock kept the others waiting; Kafka refuses the write (the newer
    writer of the group fenced it), and the run, reading again, finds its batch gone."""
    env, topic, config = two_batches
    proc = start(config, tmp_path, "--until-empty", KPRIO_PAUSE_AT=point, KPRIO_CRASH_ONCE=str(tmp_path / "paused"))
    stopped, frozen = None, []
    try:
        assert wait_for(lambda: stopped_process(proc), CHILD_TIMEOUT_S, interval_s=0.2), output_of(proc)[-2000:]
        stopped = stopped_process(proc)  # the worker executing the run
        frozen = freeze(proc, tmp_path)  # and the rest of its host: kprio drain's loop and its other worker
        with Ledger(env.config.ledger.url) as ledger:
            [paused] = [b for b in ledger.batches.in_flight(topic.name) if b.lease]
            # Paused past its lease: nobody renews it any more.
            assert wait_for(lambda: ledger.batches.get(paused.batch_id).lease.expired(datetime.now(UTC)), 30,
                            interval_s=0.2)
        finish(config, tmp_path)  # takes the batch over (its lease expired), then drains everything
        committed = env.edge.committed(topic)
        with Ledger(env.config.ledger.url) as ledger:
            events = ledger.batches.events(paused.batch_id)
        resume(stopped)
        thaw(frozen)
        proc.wait(timeout=120)
        text = output_of(proc)
    finally:
        # An assertion that failed above leaves no process stopped: those in sessions of their own (the workers,
        # Dagster's compute-log tails) outlive the group's kill, and would stay stopped for the rest of the session.
        resume(stopped)
        thaw(frozen)
        kill_group(proc)
    assert f"{write} of batch {paused.batch_id} refused" in text, text[-3000:]
    assert f"the lease of {paused.token} is stale" in text
    assert env.edge.committed(topic) == committed, "the stale run moved no offset (least of all backwards)"
    assert_healed(env, topic, config)
    with Ledger(env.config.ledger.url) as ledger:
        assert ledger.batches.events(paused.batch_id) == events, "and the ledger heard nothing from it"
        assert ledger.batches.get(paused.batch_id).attempts > paused.attempts
        committed = sorted(b.batch_id for b in ledger.batches.find(topic.name))
    if env.config.drain.format == "iceberg":  # the stale attempt appended no second snapshot of its batch
        snapshots = iceberg_publishes(env.config.drain.iceberg, "output", topic.name)
        assert sorted(s["kprio.batch_id"] for s in snapshots) == committed, snapshots


HOLDER = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
print("ready", flush=True)
while True:  # holds the file's lock half of the time, in transactions of 30 ms
    conn.execute("BEGIN EXCLUSIVE"); conn.execute("INSERT INTO t VALUES (1)"); time.sleep(0.03)
    conn.execute("COMMIT"); time.sleep(0.03)
"""


def test_a_host_freeze_lands_outside_every_sqlite_transaction(tmp_path):
    """The paused-run cases freeze a whole host at a moment of their choosing; a freeze inside one of its SQLite
    transactions would keep the takeover out of the ledger (or Dagster's run storage) until the host woke. A real
    process holding a lock half of the time: each freeze leaves the file writable, the process stopped."""
    database = tmp_path / "home" / "runs.db"
    database.parent.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(database)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "ready\n"
        for _ in range(10):
            frozen = freeze(holder, tmp_path)
            try:
                assert [p.pid for p in frozen] == [holder.pid]
                with sqlite3.connect(database, timeout=0) as conn:
                    conn.execute("INSERT INTO t VALUES (2)")  # writable while the holder is stopped
            finally:
                thaw(frozen)
    finally:
        holder.kill()
        holder.wait()


def test_sigterm_finishes_the_batch_in_flight_and_exits_0(backlog, tmp_path):
    env, topic, config = backlog
    proc = start(config, tmp_path, "--follow")
    with Ledger(env.config.ledger.url) as ledger:
        assert wait_for(lambda: any(b.lease for b in ledger.batches.in_flight(topic.name)), 120, interval_s=0.2), \
            output_of(proc)[-2000:]
        [working] = [b.batch_id for b in ledger.batches.in_flight(topic.name) if b.lease]
        proc.send_signal(signal.SIGTERM)  # to kprio drain itself, as `kill <pid>` does
        assert proc.wait(timeout=120) == 0
        text = output_of(proc)
        assert f"stopped on request after finishing {working} (committed)" in text, text[-2000:]
        assert ledger.batches.get(working).state.value == "committed"
    finish(config, tmp_path)
    assert_healed(env, topic, config)
