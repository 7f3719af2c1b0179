"""A broker outage ``kprio drain`` rides out is two lines: on a real broker of its own, stopped and started again.

The broker is the test's own embedded one (stopping the session's would disturb every other test); the
lines come from :class:`orchestration.cli.outage.OutageLines` probing it as ``kprio drain`` does, while a
kprio consumer keeps polling it, so librdkafka logs its failed connections through ``kprio.kafka`` the
whole time: none of them reaches the terminal, the two lines do.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest

from kprio_core.config import KafkaSettings
from kprio_core.kafka.client import new_consumer
from orchestration.cli.outage import OutageLines, cluster_probe
from orchestration.services.broker import EmbeddedBroker
from orchestration.services.process import free_port, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def test_an_outage_is_one_line_when_it_starts_and_one_when_it_ends(tmp_path: Path, capfd) -> None:
    broker = EmbeddedBroker(tmp_path / "broker", port=free_port(), start_timeout_s=90, stop_timeout_s=20)
    broker.start()
    lines: list[str] = []
    consumer = None
    try:
        kafka = KafkaSettings(bootstrap_servers=broker.bootstrap, timeout_s=2,
                              client={"reconnect.backoff.ms": 100, "reconnect.backoff.max.ms": 500})
        watch = OutageLines(kafka.bootstrap_servers, cluster_probe(kafka), lines.append, interval_s=0.3)
        assert watch.expected, "the healthy cluster's broker answered when the watch began"
        logging.getLogger("kprio.kafka").addHandler(watch)
        consumer = new_consumer(kafka, "kprio-outage-test")
        stop_polling = threading.Event()
        poller = threading.Thread(target=lambda: [consumer.poll(0.1) for _ in iter(stop_polling.is_set, True)])
        poller.start()
        watch.start()
        try:
            broker.stop()
            assert wait_for(lambda: len(lines) == 1, 30), lines
            broker.start()
            assert wait_for(lambda: len(lines) == 2, 60), lines
        finally:
            stop_polling.set()
            poller.join()
            watch.close()
            logging.getLogger("kprio.kafka").removeHandler(watch)
    finally:
        if consumer is not None:
            consumer.close()
        broker.stop()
    down, up = lines
    assert down.startswith(f"kprio drain: the Kafka cluster at {broker.bootstrap} does not answer as it did (since ")
    assert "no broker" in down and down.endswith("; the drain waits for it")
    assert up.startswith(f"kprio drain: the Kafka cluster at {broker.bootstrap} answers again (after ")
    printed = capfd.readouterr()
    assert "Connection refused" not in printed.err + printed.out, "librdkafka's own lines stay off the terminal"
