"""Two drivers of different kinds on one ledger: the Dagster daemon's sensor beside ``kprio drain --follow``.

The interleaving is forced: the ``kprio drain --follow`` process is stopped right after its tick took its lag
snapshot (``KPRIO_PAUSE_AT=after-snapshot``) while the daemon's sensor plans, drains and commits the same
records, then resumed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import psutil
import pytest

from kprio_core.kafka.produce import Record, produce
from kprio_core.ledger import BatchState, Ledger
from tests.fixtures.daemon import DRAIN_TIMEOUT_S
from tests.fixtures.dagster_dev import REPO, wait_until

pytestmark = [pytest.mark.broker, pytest.mark.dagster, pytest.mark.slow, pytest.mark.deployment("dagster")]


def records(start: int, end: int) -> list[Record]:
    return [Record(f"k{i}", json.dumps({"i": i, "amount": 1.0}), partition=0) for i in range(start, end)]


def test_a_follow_drain_paused_after_its_snapshot_beside_the_daemon_records_no_stale_plan(kprio_daemon, tmp_path):
    """kprio drain --follow sees 100 records of partition 0 and stops; the daemon's sensor then drains and commits
    [0,200) of it. Resumed, the follow drain's plan [0,100) from its old snapshot is refused by the ledger (it
    would have published over the daemon's file of [0,200) and lost offsets 100-199); it drains on from 200."""
    daemon, deployment = kprio_daemon, kprio_daemon.deployment
    topic = daemon.topics["duo"]
    name = topic.priority_topic(0)
    deployment.sensor_running(False)
    produce(daemon.kafka, name, records(0, 100))
    log = open(tmp_path / "follow.log", "wb")  # noqa: SIM115 (closed below)
    env = {**deployment.process_env(), "KPRIO_PAUSE_AT": f"after-snapshot:{topic.name}",
           "KPRIO_CRASH_ONCE": str(tmp_path / "paused")}
    follow = subprocess.Popen([sys.executable, "-m", "orchestration.cli", "drain", "--follow", "--topic", topic.name,
                               "--config", str(deployment.config_file)], cwd=REPO, env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: psutil.Process(follow.pid).status() == psutil.STATUS_STOPPED, DRAIN_TIMEOUT_S,
                   interval_s=0.2, what="kprio drain --follow to stop after its snapshot")
        produce(daemon.kafka, name, records(100, 200))
        deployment.sensor_running(True)
        daemon.wait_zero_lag(topic, DRAIN_TIMEOUT_S, None, deployment.log_tail())
        deployment.sensor_running(False)
        with Ledger(daemon.config.ledger.url) as ledger:
            by_daemon = [str(r) for b in ledger.batches(topic.name) for r in b.plan.offset_ranges()]
        assert by_daemon == [f"{name}[0]@[0,200)"], by_daemon

        os.kill(follow.pid, signal.SIGCONT)
        produce(daemon.kafka, name, records(200, 250))  # drained by the follow drain alone (the sensor is off)
        daemon.wait_zero_lag(topic, DRAIN_TIMEOUT_S, None, (tmp_path / "follow.log").read_text(errors="replace"))
        follow.send_signal(signal.SIGTERM)
        assert follow.wait(timeout=120) == 0, (tmp_path / "follow.log").read_text(errors="replace")[-3000:]
    finally:
        if follow.poll() is None:
            os.killpg(follow.pid, signal.SIGKILL)
            follow.wait(timeout=60)
        log.close()
        deployment.sensor_running(True)
    with Ledger(daemon.config.ledger.url) as ledger:
        batches = sorted(ledger.batches(topic.name), key=lambda b: b.batch_id)
    assert [(b.state, [str(r) for r in b.plan.offset_ranges()]) for b in batches] == [
        (BatchState.COMMITTED, [f"{name}[0]@[0,200)"]), (BatchState.COMMITTED, [f"{name}[0]@[200,250)"])]
    check = daemon.conservation(topic)
    assert check.ok and check.output == 250, check
