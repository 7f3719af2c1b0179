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


def tiles(batches, start: int, end: int) -> bool:
    """Whether the batches' ranges (one partition) cover [start, end) exactly: no gap, no offset twice."""
    ranges = sorted((r.start, r.end) for b in batches for r in b.plan.offset_ranges())
    return bool(ranges) and ranges[0][0] == start and ranges[-1][1] == end and all(
        a[1] == b[0] for a, b in zip(ranges, ranges[1:]))


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
            by_daemon = {b.batch_id: b for b in ledger.batches.find(topic.name)}
        # The daemon drained [0,200), in one batch or more (a tick begun before the stop may have planned [0,100)).
        assert tiles(by_daemon.values(), 0, 200), [str(r) for b in by_daemon.values() for r in b.plan.offset_ranges()]

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
        batches = ledger.batches.find(topic.name)
    # The follow drain recorded one batch only, [200,250): its stale plan [0,100) was refused, never recorded.
    added = [b for b in batches if b.batch_id not in by_daemon]
    assert [[str(r) for r in b.plan.offset_ranges()] for b in added] == [[f"{name}[0]@[200,250)"]]
    assert all(b.state is BatchState.COMMITTED for b in batches) and tiles(batches, 0, 250)
    check = daemon.conservation(topic)
    assert check.ok and check.output == 250, check
