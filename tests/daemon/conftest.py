"""The package's deployment under the Dagster daemon, started with the test session (``tests/fixtures/daemon.py``).

Its tests are marked ``deployment("dagster")``, so they run after every other test; these fixtures wait for the stage a test starts from.
"""

from __future__ import annotations

import pytest

from kprio_core.config import TopicSettings
from tests.fixtures.daemon import DRAIN_TIMEOUT_S, Daemon
from tests.fixtures.deployments import Stages

STAGE_TIMEOUT_S = 2 * DRAIN_TIMEOUT_S + 300  # a start, then two drains one after the other


@pytest.fixture(scope="package")
def kprio_daemon(daemon_in_background: Stages) -> Daemon:
    """The running deployment, once its thread is done: the live replay launched, the ``bulk`` and ``crash``
    backlogs drained by the sensor's runs. Its sensor runs again (the thread stops it until the package's tests)."""
    daemon = daemon_in_background.wait("idle", STAGE_TIMEOUT_S)["daemon"]
    daemon.deployment.sensor_running(True)
    return daemon


@pytest.fixture(scope="package")
def bulk_drained(kprio_daemon: Daemon) -> TopicSettings:
    """The ``bulk`` topic with backlogs of every priority, drained by the sensor's runs: 1440 records, four
    batches of 400 or less (the UI's two backfills re-drain two each)."""
    return kprio_daemon.topics["bulk"]


@pytest.fixture(scope="package")
def crash_drained(kprio_daemon: Daemon) -> TopicSettings:
    """The ``crash`` topic (300 records of priority 1), drained although the first run to publish a batch of it
    was killed there."""
    return kprio_daemon.topics["crash"]
