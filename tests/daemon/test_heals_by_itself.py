"""Under the Dagster daemon: a broker outage of 30 s and a read-only output a person fixes heal with no command run.

The deployment reaches the broker through the session's relay (tests/fixtures/faulty_network.py), so
cutting it is an outage for the deployment alone. The fault lands while a batch's run is in
flight (its lease is seen in the ledger); then the daemon's own run retries meet it, and the
sensor, whose probe sees the cause, waits for it to pass and retries at once. Nobody runs a
command; the test only produces records, makes the fault, takes it away, and watches.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kprio_core.ledger import BatchState, Ledger
from tests.fixtures.daemon import DRAIN_TIMEOUT_S
from tests.fixtures.dagster_dev import wait_until
from tests.fixtures.kafka import faulty_link, fill
from tests.fixtures.small_disks import read_only_dir

pytestmark = [pytest.mark.broker, pytest.mark.dagster, pytest.mark.slow, pytest.mark.deployment("dagster")]

OUTAGE_S = 30.0


def in_flight(daemon, topic) -> bool:
    with Ledger(daemon.config.ledger.url) as ledger:
        return any(b.lease for b in ledger.batches.in_flight(topic.name))


def assert_healed(daemon, topic) -> None:
    daemon.drained(topic)  # zero lag and every run ended, with no command run
    check = daemon.conservation(topic)
    assert check.ok, check
    with Ledger(daemon.config.ledger.url) as ledger:
        assert all(b.state is BatchState.COMMITTED for b in ledger.batches.find(topic.name))


def test_a_broker_outage_of_30_s_under_the_daemon_heals_by_itself(kprio_daemon):
    link = faulty_link()
    if link is None:
        pytest.skip("an external cluster: no relay in front of it to cut")
    topic = kprio_daemon.topics["outage"]
    for priority, records in {0: 800, 2: 100}.items():
        fill(kprio_daemon.kafka, topic.priority_topic(priority), records, partitions=2)
    wait_until(lambda: in_flight(kprio_daemon, topic), DRAIN_TIMEOUT_S, interval_s=0.2, what="a batch in flight")
    with link.outage():
        time.sleep(OUTAGE_S)  # the outage lasts its 30 s, whatever the runs and the sensor do meanwhile
    assert_healed(kprio_daemon, topic)


def test_a_read_only_output_a_person_fixes_under_the_daemon_heals_by_itself(kprio_daemon):
    topic = kprio_daemon.topics["readonly"]
    output = Path(kprio_daemon.config.drain.output_path) / topic.name
    output.parent.mkdir(parents=True, exist_ok=True)
    with read_only_dir(output):  # the topic's directory of the output: its batches' publishes are refused
        for priority, records in {1: 300, 0: 300}.items():
            fill(kprio_daemon.kafka, topic.priority_topic(priority), records, partitions=2)

        def failed_for_it() -> bool:
            with Ledger(kprio_daemon.config.ledger.url) as ledger:
                return any(b.transient and "read-only" in (b.reason or "").lower()
                           for b in ledger.batches.find(topic.name, states=[BatchState.FAILED]))

        wait_until(failed_for_it, DRAIN_TIMEOUT_S, interval_s=0.5, what="a batch failed on the read-only output")
    assert_healed(kprio_daemon, topic)  # a person made it writable again
