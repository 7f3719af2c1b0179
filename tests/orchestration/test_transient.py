"""Causes that pass by themselves (a full disk, a read-only output): one line naming the path, then healing alone.

The output directory is a real tmpfs mount (read-only, or a few KiB): the attempt fails with one
line naming the path and the cause; once the mount is gone the batch is retried by itself and
the topic drains to zero lag, conservation holding. Needs root with permission to mount (CI);
skipped elsewhere, saying why.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest

from kprio_core.ledger import BatchState
from kprio_core.lifecycle.loop import Until
from orchestration.dagster import drain_loop
from orchestration.dagster.sensors import SENSOR_NAME, tick
from orchestration.runtime.healing import CAUSE_SEEN, probe_causes
from orchestration.services.process import wait_for
from tests.fixtures.small_disks import read_only_dir, read_only_in_place, tiny_disk
from tests.orchestration.conservation import conservation, lag

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]


def four_kib_disk(path):
    return tiny_disk(path, size="4k")


def read_only_staging(out):
    """Only the output's staging directory refuses writes (a mount, a person's chmod): the root and the topic's
    directory take files, so a probe of those alone passes while the retry fails alike (then waits out its backoff).
    """
    return read_only_dir(out / "_staging")


@pytest.mark.parametrize(("broken", "cause", "output_format"),
                         [(four_kib_disk, "No space left on device", "parquet"),
                          (read_only_dir, "Read-only file system", "parquet"),
                          (read_only_staging, "Read-only file system", "parquet"),
                          (four_kib_disk, "No space left on device", "delta"),
                          (read_only_dir, "Read-only file system", "delta"),
                          # Iceberg's publish fails on a full disk as on a read-only one (its file moves): one case.
                          (four_kib_disk, "No space left on device", "iceberg")],
                         ids=["full-disk", "read-only", "read-only-staging", "full-disk-delta", "read-only-delta",
                              "full-disk-iceberg"])
def test_the_attempt_fails_in_one_line_naming_the_path_and_the_batch_heals_by_itself(
    make_topic, kprio_env, dagster_instance, tmp_path, broken, cause, output_format
):
    topic = make_topic(priorities=2, partitions=2, records={1: 1500, 0: 1500}, schema={"i": "long", "amount": "double"})
    out = tmp_path / "out"
    # A backoff of a minute: the tick right after the failed attempts finds the retry still waiting, and
    # a fresh drain that does not wait it out proves it retried at once.
    env = kprio_env(topic, drain={"output_path": str(out), "format": output_format},
                    recovery={"max_attempts": 1, "backoff_s": 60, "backoff_max_s": 60, "lease_s": 15})
    with broken(out):
        first = drain_loop.drain(env.defs, dagster_instance, max_batches=1)
        [failed] = env.ledger.batches.find(topic.name, states=[BatchState.FAILED])
        assert f"{cause}: {out}" in failed.reason and "\n" not in failed.reason, failed.reason
        assert failed.transient and failed.transient_streak == 1
        assert failed.retry_at <= datetime.now(UTC), "the first failure of a streak is due as soon as its cause passes"
        assert not first.batches[0].success
        # One attempt was all max_attempts allowed, yet it is retried by itself: the cause passes. While the probe
        # sees the cause, the tick never retries it into it.
        probed = probe_causes(env.ledger, env.config, cause_seen=False)
        assert probed.problem is not None and str(out) in probed.problem, probed
        held = tick(dagster_instance, env.edge, env.ledger, env.config, cause=probed.problem)
        assert not held.requests and "retried by itself once its cause has passed" in held.skip_reason
        # An operator's re-drain in the same state fails alike: the streak's second failure backs off a minute.
        drain_loop.redrain(env.defs, dagster_instance, failed.batch_id, config=env.config)
        again = env.ledger.batches.get(failed.batch_id)
        assert again.state is BatchState.FAILED and again.transient_streak == 2 and again.retry_at > datetime.now(UTC)

    # The cause is gone; a fresh `kprio drain --until-empty` retries the batch on its first tick, its backoff
    # of a minute not waited out.
    waiting_until = again.retry_at
    report = drain_loop.drain(env.defs, dagster_instance)
    assert report.ok, report.stopped
    assert report.batches[0].batch_id == failed.batch_id and report.batches[0].success, report.batches[0]
    assert datetime.now(UTC) < waiting_until, waiting_until  # the whole drain ended before the backoff would have
    assert env.ledger.batches.get(failed.batch_id).state is BatchState.COMMITTED
    assert lag(topic, env.edge) == {1: 0, 0: 0}
    check = conservation(env.config, topic, env.edge)
    assert check.ok, check


@pytest.mark.parametrize(("broken", "said"), [(four_kib_disk, "No space left on device"), (read_only_dir, "read-only")],
                         ids=["full-disk", "read-only"])
def test_a_follow_drain_retries_at_once_when_the_output_takes_files_again(
    make_topic, kprio_env, dagster_instance, tmp_path, broken, said
):
    topic = make_topic(priorities=2, partitions=2, records={1: 300, 0: 300}, schema={"i": "long", "amount": "double"})
    out = tmp_path / "out"
    env = kprio_env(topic, drain={"output_path": str(out)}, recovery={"max_attempts": 1, "backoff_s": 60,
                                                                      "backoff_max_s": 60, "lease_s": 15})
    stop, reports = threading.Event(), []
    follow = threading.Thread(target=lambda: reports.append(
        drain_loop.drain(env.defs, dagster_instance, until=Until.FOLLOW, stop=stop, log_level="WARNING")))
    try:
        with broken(out):
            follow.start()
            assert wait_for(lambda: env.ledger.batches.find(topic.name, states=[BatchState.FAILED]), 180,
                            interval_s=0.5)
            [failed] = env.ledger.batches.find(topic.name, states=[BatchState.FAILED])
            assert failed.transient and said in failed.reason, failed.reason
            failed_at = datetime.now(UTC)
            time.sleep(3)  # a few of the loop's turns find the output still read-only: none retries into it
            assert env.ledger.batches.get(failed.batch_id).state is BatchState.FAILED
            assert env.ledger.batches.get(failed.batch_id).attempts == failed.attempts, (
                "no retry while the cause is seen")
        # The mount is gone, the directory writable: the loop's next probe passes, and it retries at once.
        assert wait_for(lambda: env.ledger.batches.get(failed.batch_id).state is BatchState.COMMITTED, 50,
                        interval_s=0.5)
        assert datetime.now(UTC) < failed_at + timedelta(seconds=60), "retried long before a backoff of a minute"
        assert wait_for(lambda: lag(topic, env.edge) == {1: 0, 0: 0}, 30, interval_s=0.5)
    finally:
        stop.set()
        follow.join(timeout=120)
    assert not follow.is_alive() and reports and reports[0].ok, reports
    check = conservation(env.config, topic, env.edge)
    assert check.ok, check


def test_the_sensor_retries_at_once_when_a_probe_that_failed_passes_again(make_topic, kprio_env, dagster_instance,
                                                                         tmp_path):
    """The daemon's path: the sensor probes before its tick and keeps "a cause was seen" in its cursor."""
    topic = make_topic(priorities=2, partitions=2, records={1: 200, 0: 200}, schema={"i": "long", "amount": "double"})
    out = tmp_path / "out"
    env = kprio_env(topic, drain={"output_path": str(out)}, recovery={"max_attempts": 1, "backoff_s": 60,
                                                                      "backoff_max_s": 60, "lease_s": 15})
    sensor = env.defs.resolve_sensor_def(SENSOR_NAME)

    def evaluate(cursor: str | None) -> dg.SensorResult:
        with dg.build_sensor_context(instance=dagster_instance, cursor=cursor, resources=env.defs.resources) as context:
            result = sensor(context)
        dagster_instance.add_dynamic_partitions("kprio_batches", [r.partition_key for r in result.run_requests or ()])
        return result

    with read_only_dir(out):
        drain_loop.drain(env.defs, dagster_instance, max_batches=1)
        [failed] = env.ledger.batches.find(topic.name, states=[BatchState.FAILED])
        assert failed.transient
        still = evaluate(None)
        assert not still.run_requests and still.cursor == CAUSE_SEEN, (still.skip_reason, still.cursor)
        # A second failure in a row (an operator's re-drain, in the same state) backs off a minute.
        drain_loop.redrain(env.defs, dagster_instance, failed.batch_id, config=env.config)
        failed = env.ledger.batches.get(failed.batch_id)
        assert failed.transient_streak == 2 and failed.retry_at > datetime.now(UTC)
    # Never seen failing, the probe retries nothing early: the backoff of a minute holds.
    calm = evaluate(None)
    assert failed.batch_id not in [r.partition_key for r in calm.run_requests or ()] and calm.cursor == ""
    # Seen failing (the cursor), then passing: the retry is requested on this evaluation.
    healed = evaluate(CAUSE_SEEN)
    [retry] = [r for r in healed.run_requests if r.partition_key == failed.batch_id]
    assert healed.cursor == "" and datetime.now(UTC) < failed.retry_at
    result = env.defs.resolve_job_def("drain_job").execute_in_process(
        instance=dagster_instance, partition_key=retry.partition_key, tags=retry.tags, raise_on_error=False)
    assert result.success
    assert env.ledger.batches.get(failed.batch_id).state is BatchState.COMMITTED


def test_the_sensor_retries_the_first_failure_as_soon_as_the_probe_passes(make_topic, kprio_env, dagster_instance,
                                                                          tmp_path):
    """The first failure of a streak is not backed off: due at once, retried on the first evaluation whose probe
    passes, even one that never saw the cause (the outage was over before the next tick)."""
    topic = make_topic(priorities=1, partitions=1, records={0: 50}, schema={"i": "long", "amount": "double"})
    out = tmp_path / "out"
    env = kprio_env(topic, drain={"output_path": str(out)}, recovery={"max_attempts": 1, "backoff_s": 60,
                                                                      "backoff_max_s": 60, "lease_s": 15})
    sensor = env.defs.resolve_sensor_def(SENSOR_NAME)
    with read_only_dir(out):
        drain_loop.drain(env.defs, dagster_instance, max_batches=1)
    [failed] = env.ledger.batches.find(topic.name, states=[BatchState.FAILED])
    with dg.build_sensor_context(instance=dagster_instance, cursor=None, resources=env.defs.resources) as context:
        result = sensor(context)
    assert [r.partition_key for r in result.run_requests] == [failed.batch_id], result.skip_reason


def test_a_sqlite_ledger_read_only_for_a_while_under_the_sensor_is_a_skip_that_says_so_and_heals(
        make_topic, kprio_env, dagster_instance, tmp_path):
    """The daemon's path (its sensor evaluated and its run executed in process): the ledger's directory turns
    read-only (a remount) after the sensor planned a batch, then writable again. The run fails, the sensor skips
    with one line naming the ledger (not a failed tick); once fixed, the next evaluation launches the batch again
    and the topic drains, with no person."""
    topic = make_topic(priorities=2, partitions=1, records={1: 20, 0: 20})
    place = tmp_path / "ledger"
    place.mkdir()
    url = f"sqlite:///{place / 'ledger.db'}"
    env = kprio_env(topic, ledger={"url": url}, recovery={"lease_s": 5, "backoff_s": 60, "backoff_max_s": 60})
    sensor = env.defs.resolve_sensor_def(SENSOR_NAME)

    def evaluate() -> dg.SensorResult:
        with dg.build_sensor_context(instance=dagster_instance, cursor=None, resources=env.defs.resources) as context:
            result = sensor(context)
        dagster_instance.add_dynamic_partitions("kprio_batches", [r.partition_key for r in result.run_requests or ()])
        return result

    def run(request) -> bool:
        return env.defs.resolve_job_def("drain_job").execute_in_process(
            instance=dagster_instance, partition_key=request.partition_key, tags=request.tags,
            raise_on_error=False).success

    [planned] = evaluate().run_requests
    with read_only_in_place(place):
        assert not run(planned)
        waiting = evaluate()
        said = waiting.skip_reason.skip_message
        assert not waiting.run_requests and said.startswith("the ledger does not answer: "), said
        assert "\n" not in said and str(place) in said, said
    [again] = evaluate().run_requests  # fixed: the same batch, launched again by the sensor alone
    assert again.partition_key == planned.partition_key and run(again)
    assert lag(topic, env.edge) == {1: 0, 0: 0}
    fixed = env.config.model_copy(update={"ledger": env.config.ledger.model_copy(update={"url": url})})
    check = conservation(fixed, topic, env.edge)
    assert check.ok and check.output == 40, check
