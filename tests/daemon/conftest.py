"""The package's deployment under the Dagster daemon, started with the test session (``tests/fixtures/daemon.py``).

These fixtures wait for the stage a test starts from; the package's tests run after every other.
"""

from __future__ import annotations

import pytest

from kprio_core.config import TopicSettings
from tests.fixtures.daemon import Daemon, DaemonInBackground


@pytest.fixture(scope="package")
def kprio_daemon(daemon_in_background: DaemonInBackground) -> Daemon:
    """The running deployment (its live replay launched)."""
    return daemon_in_background.wait("started")


@pytest.fixture(scope="package")
def bulk_drained(daemon_in_background: DaemonInBackground) -> TopicSettings:
    """The ``bulk`` topic with backlogs of every priority, drained by the sensor's runs: 1440 records, four
    batches of 400 or less (the UI's two backfills re-drain two each)."""
    return daemon_in_background.wait("bulk").topics["bulk"]


@pytest.fixture(scope="package")
def crash_drained(daemon_in_background: DaemonInBackground) -> TopicSettings:
    """The ``crash`` topic (300 records of priority 1), drained although the first run to publish a batch of it
    was killed there."""
    return daemon_in_background.wait("crash").topics["crash"]
