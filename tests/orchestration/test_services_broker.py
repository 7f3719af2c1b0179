"""The embedded Apache Kafka broker: start, status, stop, restarts that keep the data, stale state,
port conflicts and clear failures.

Each test runs its own EmbeddedBroker in its own data dir, so the session broker is untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic

from kprio_core.config import KafkaSettings
from kprio_core.kafka.client import new_admin, new_consumer
from kprio_core.kafka.produce import produce
from orchestration.services.broker import (
    CONFIG_FILE,
    STATE_FILE,
    BrokerProcessError,
    EmbeddedBroker,
    answers_metadata,
    live_brokers,
)
from orchestration.services.process import pid_alive, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.slow]


@pytest.fixture
def broker(tmp_path):
    b = EmbeddedBroker(tmp_path / "broker", start_timeout_s=120)
    try:
        yield b
    finally:
        b.stop()


def dead_pid() -> int:
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(finished.stdout)


def test_start_status_stop(broker):
    broker.start()
    status = broker.status()
    assert status.running and status.bootstrap == broker.bootstrap
    assert live_brokers(broker.bootstrap, timeout_s=5) == {1}
    assert "Kafka Server started" in broker.log_path.read_text(), "the broker's own log goes to broker.log"
    state = json.loads((broker.data_dir / STATE_FILE).read_text())
    assert [(n["node_id"], n["pid"], n["port"]) for n in state["nodes"]] == [(1, status.pid, status.port)]
    assert status.nodes[0].controller_port not in (None, status.port)
    pid = status.pid
    assert broker.stop() is True
    assert not pid_alive(pid), "stop left the broker process behind"
    assert not (broker.data_dir / STATE_FILE).exists(), "stop keeps no state file of a stopped broker"
    assert not broker.status().running
    assert broker.stop() is False  # stopping a stopped broker is a no-op


def test_the_config_is_a_single_node_kraft_broker_for_tests(broker):
    broker.start()
    props = dict(line.split("=", 1) for line in (broker.data_dir / CONFIG_FILE).read_text().splitlines()
                 if line and not line.startswith("#"))
    assert props["process.roles"] == "broker,controller"
    assert props["controller.quorum.voters"] == f"1@127.0.0.1:{broker.status().nodes[0].controller_port}"
    assert (props["offsets.topic.replication.factor"], props["transaction.state.log.replication.factor"],
            props["transaction.state.log.min.isr"], props["group.initial.rebalance.delay.ms"]) == ("1", "1", "1", "0")
    assert props["log.dirs"] == str(broker.data_dir / "kafka-logs")


def test_a_restart_keeps_topics_records_and_committed_offsets(broker):
    broker.start()
    kafka = KafkaSettings(bootstrap_servers=broker.bootstrap, timeout_s=20)
    admin = new_admin(kafka)
    [created] = admin.create_topics([NewTopic("kept", 2, 1)], request_timeout=20).values()
    created.result(20)
    assert produce(kafka, "kept", [("k", f"v{i}", None, i % 2) for i in range(6)]) == 6
    consumer = new_consumer(kafka, "kept-group")
    try:
        consumer.commit(offsets=[TopicPartition("kept", 0, 2)], asynchronous=False)
    finally:
        consumer.close()
    port, first_pid = broker.status().port, broker.status().pid
    broker.stop()
    again = EmbeddedBroker(broker.data_dir, start_timeout_s=120).start()
    assert again.status().pid != first_pid
    assert again.bootstrap == f"127.0.0.1:{port}", "a restart takes the last port again when it is free"
    consumer = new_consumer(kafka, "kept-group")
    try:
        marks = [consumer.get_watermark_offsets(TopicPartition("kept", p), timeout=20) for p in (0, 1)]
        assert marks == [(0, 3), (0, 3)], "the records did not survive the restart"
        [committed] = consumer.committed([TopicPartition("kept", 0)], timeout=20)
        assert committed.offset == 2
    finally:
        consumer.close()


def test_start_twice_reuses_the_running_broker(broker):
    first = broker.start().status().pid
    again = EmbeddedBroker(broker.data_dir)
    assert again.start().status().pid == first
    assert again.bootstrap == broker.bootstrap


def test_another_port_for_a_running_data_dir_is_refused(broker):
    broker.start()
    with pytest.raises(BrokerProcessError, match="already runs in"):
        EmbeddedBroker(broker.data_dir, port=broker.status().port + 1).start()


def test_a_killed_broker_does_not_block_the_next_start(broker):
    broker.start()
    pid = broker.status().pid
    os.kill(pid, signal.SIGKILL)  # our own broker, killed as a crash would
    assert wait_for(lambda: not pid_alive(pid), 10)
    assert (broker.data_dir / STATE_FILE).exists(), "a killed broker leaves kprio's state file"
    assert not broker.status().running
    broker.start()
    assert broker.status().running and broker.status().pid != pid
    assert answers_metadata(broker.bootstrap, timeout_s=5)


def test_a_stale_state_file_with_a_dead_pid_is_cleaned_up(broker):
    broker.data_dir.mkdir(parents=True)
    stale = {"host": "127.0.0.1", "nodes": [{"node_id": 1, "port": 1, "controller_port": 2, "pid": dead_pid()}]}
    (broker.data_dir / STATE_FILE).write_text(json.dumps(stale))
    assert not broker.status().running
    assert broker.stop() is False
    assert not (broker.data_dir / STATE_FILE).exists(), "stop left the stale state file"
    (broker.data_dir / STATE_FILE).write_text(json.dumps(stale))
    broker.start()
    assert broker.status().running and broker.status().pid != stale["nodes"][0]["pid"]


def test_a_live_pid_of_another_program_is_not_the_broker(broker):
    broker.data_dir.mkdir(parents=True)
    stale = {"host": "127.0.0.1", "nodes": [{"node_id": 1, "port": 1, "controller_port": 2, "pid": os.getpid()}]}
    (broker.data_dir / STATE_FILE).write_text(json.dumps(stale))
    assert not broker.status().running, "a reused pid (here: pytest's own) was taken for the broker"
    assert broker.stop() is False
    assert pid_alive(os.getpid())


def test_a_busy_port_fails_fast_with_the_broker_reason(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        b = EmbeddedBroker(tmp_path / "busy", port=port, start_timeout_s=60)
        with pytest.raises(BrokerProcessError, match=rf"port {port} is already in use") as err:
            b.start()
    assert str(tmp_path / "busy") in str(err.value)
    assert not b.status().running


def test_missing_java_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    b = EmbeddedBroker(tmp_path / "nojava", port=19_876)
    with pytest.raises(BrokerProcessError, match="Java is not installed") as err:
        b.start()
    assert str(tmp_path / "nojava") in str(err.value) and "19876" in str(err.value)
    assert not b.status().running


def test_unresolvable_jars_are_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KPRIO_CACHE_DIR", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("JAVA_HOME", str(Path(shutil.which("java")).resolve().parents[1]))
    monkeypatch.setenv("PATH", os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                               if not os.path.exists(os.path.join(p, "mvn"))))
    b = EmbeddedBroker(tmp_path / "nojars", port=19_877)
    with pytest.raises(BrokerProcessError, match="jars are not available") as err:
        b.start()
    assert "Maven (mvn) is not installed" in str(err.value) and str(tmp_path / "nojars") in str(err.value)


def test_a_broker_that_exits_while_starting_names_the_reason(tmp_path, monkeypatch):
    # An option the JVM refuses: the process exits at once, its output is the reason.
    monkeypatch.setenv("KPRIO_BROKER_JVM_OPTS", "-XX:+NoSuchOptionForKprio")
    b = EmbeddedBroker(tmp_path / "exits", start_timeout_s=60)
    with pytest.raises(BrokerProcessError, match=r"exited with code 1 while starting.*NoSuchOptionForKprio"):
        b.start()
    assert not b.status().running
    assert not (b.data_dir / STATE_FILE).exists()


def test_context_manager_stops_on_exit(tmp_path):
    with EmbeddedBroker(tmp_path / "ctx", start_timeout_s=120) as b:
        pid = b.status().pid
        assert answers_metadata(b.bootstrap, timeout_s=5)
    assert not pid_alive(pid)
