"""Clear failures of the Kafka edge: each a typed error whose message says what and where."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
from confluent_kafka import KafkaError, KafkaException

from kprio_core.config import KafkaSettings, TopicSettings
from kprio_core.errors import (
    AuthorizationFailed,
    BrokerUnreachable,
    KafkaOperationFailed,
    PartitionCountMismatch,
    TopicMissing,
)
from kprio_core.kafka import KafkaEdge
from kprio_core.kafka.client import client_config, kafka_failure
from kprio_core.model.offsets import OffsetRange as R
from orchestration.services.process import free_port


@pytest.mark.parametrize("call", ["snapshot", "committed", "commit", "window_ranges", "ensure_topics", "topic_ids"])
def test_unreachable_broker_fails_within_the_timeout_naming_bootstrap(call):
    """No call of the edge answers for a cluster it could not ask: ``topic_ids`` said "no id" (read as a deleted
    topic: a batch in flight held its partitions for a person) or raised a bare TimeoutError."""
    bootstrap = f"127.0.0.1:{free_port()}"
    kafka = KafkaSettings(bootstrap_servers=bootstrap, timeout_s=1.5)
    topic = TopicSettings(name="orders", priorities=2, partitions=1)
    calls = {
        "snapshot": lambda e: e.snapshot(topic, now_ms=0),
        "committed": lambda e: e.committed(topic),
        "commit": lambda e: e.commit(topic, [R("orders-1", 0, 0, 1)]),
        "window_ranges": lambda e: e.window_ranges(topic, 0, 1),
        "ensure_topics": lambda e: e.ensure_topics(topic),
        "topic_ids": lambda e: e.topic_ids(["orders-1"]),
    }
    started = time.monotonic()
    with KafkaEdge(kafka) as edge, pytest.raises(BrokerUnreachable) as err:
        calls[call](edge)
    assert time.monotonic() - started < 1.5 + 2.0  # bounded by timeout_s, plus slack for a busy machine
    assert bootstrap in str(err.value)
    assert err.value.code == "broker_unreachable"


ALL_BUT_SPENT = textwrap.dedent("""
    import sys
    from confluent_kafka.admin import OffsetSpec
    from kprio_core.config import KafkaSettings
    from kprio_core.errors import BrokerUnreachable
    from kprio_core.kafka.client import Deadline, new_admin
    from kprio_core.kafka.reads import list_offsets

    kafka = KafkaSettings(bootstrap_servers=sys.argv[1])
    admin = new_admin(kafka)
    for _ in range(2000):
        deadline = Deadline(10.0, kafka.bootstrap_servers, started=0.0, clock=lambda: 10.0 - 0.0009)
        try:
            list_offsets(admin, [(sys.argv[2], 0)], OffsetSpec.latest(), deadline, "list latest offsets")
        except BrokerUnreachable:
            continue
        raise SystemExit("answered within 0.9 ms")
    print("unreachable each time", flush=True)
""")


@pytest.mark.broker
def test_a_deadline_all_but_spent_is_broker_unreachable_not_a_crash(make_topic, kafka_settings):
    """0.9 ms left: a ListOffsets request with that timeout (0 ms to librdkafka) crashed the process within a few
    hundred calls, a segmentation fault or a double free in confluent-kafka (seen in a clean-clone run of the suite: the
    whole test session died)."""
    topic = make_topic(priorities=1, partitions=1, records={0: 3})
    child = subprocess.run([sys.executable, "-c", ALL_BUT_SPENT, kafka_settings.bootstrap_servers,
                            topic.priority_topic(0)], capture_output=True, text=True, timeout=120)
    assert (child.returncode, child.stdout.strip()) == (0, "unreachable each time"), child.stderr[-2000:]


@pytest.mark.broker
def test_a_tls_client_on_the_plaintext_listener_fails_at_once_naming_security_protocol(kafka_settings):
    """The broker only closes the connection of a client of another security protocol: kprio asks the listener what
    it speaks (a TLS handshake, a SaslHandshake) once the broker has been silent a second, long before the timeout."""
    from kprio_core.errors import SecurityProtocolMismatch

    tls = kafka_settings.model_copy(update={"client": {**kafka_settings.client, "security.protocol": "SSL"},
                                            "timeout_s": 30.0})
    started = time.monotonic()
    with KafkaEdge(tls) as edge, pytest.raises(SecurityProtocolMismatch) as err:
        edge.snapshot(TopicSettings(name="orders"), now_ms=0)
    assert time.monotonic() - started < 10
    assert str(err.value).startswith("kafka.client.security.protocol is SSL, but the broker's listener speaks "
                                     "PLAINTEXT (no TLS, no SASL), and closes the connections of SSL clients: set it "
                                     "to PLAINTEXT")
    assert err.value.code == "security_protocol_mismatch" and not err.value.transient


@pytest.mark.broker
def test_missing_priority_topic_is_named(make_topic, kafka_settings):
    topic = make_topic(priorities=2, partitions=1)
    wider = topic.model_copy(update={"priorities": 3})
    with KafkaEdge(kafka_settings) as edge, pytest.raises(TopicMissing) as err:
        edge.snapshot(wider, now_ms=0)
    assert str(err.value) == f"topic '{wider.priority_topic(2)}' does not exist on {kafka_settings.bootstrap_servers}"


@pytest.mark.broker
def test_partition_count_mismatch_when_configured(make_topic, kafka_settings):
    topic = make_topic(priorities=1, partitions=2)
    with KafkaEdge(kafka_settings) as edge:
        with pytest.raises(PartitionCountMismatch, match=r"has 2 partitions, the configuration expects 3"):
            edge.snapshot(topic.model_copy(update={"partitions": 3}), now_ms=0)
        # Without an expectation the cluster's count is taken as it is.
        assert len(edge.snapshot(topic.model_copy(update={"partitions": None}), now_ms=0).partitions) == 2


@pytest.mark.parametrize("code", [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED])
def test_authorization_codes_map_to_authorization_failed(code):
    # The embedded broker has no ACLs, so the mapping is checked on the error values librdkafka raises.
    err = kafka_failure(KafkaException(KafkaError(code)), what="fetch committed offsets of group kprio-orders-2",
                        bootstrap="kafka:9093", timeout_s=5)
    assert isinstance(err, AuthorizationFailed)
    assert "kprio-orders-2" in str(err) and "kafka:9093" in str(err) and KafkaError(code).name() in str(err)


@pytest.mark.parametrize("code", [KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._AUTHENTICATION])
def test_a_request_refused_as_not_authenticated_is_a_sasl_failure_naming_the_settings(code):
    # The clients' own events carry the usual refusals (tests/kprio_core/test_kafka_security.py); a request's
    # error has no client settings at hand, so it names them without the user's name.
    err = kafka_failure(KafkaException(KafkaError(code)), what="list offsets", bootstrap="kafka:9093", timeout_s=5)
    assert err.code == "sasl_authentication_failed"
    assert str(err) == ("SASL authentication failed: the broker refused the user of kafka.client.sasl.username or "
                        "the password of KPRIO_KAFKA_SASL_PASSWORD (kafka:9093)")


def test_other_kafka_errors_keep_their_name_and_place():
    err = kafka_failure(KafkaError(KafkaError.INVALID_PARTITIONS), what="create topic orders-1",
                        bootstrap="kafka:9093", timeout_s=5)
    assert isinstance(err, KafkaOperationFailed)
    assert str(err).startswith("create topic orders-1 on kafka:9093 failed: INVALID_PARTITIONS")


def test_secrets_never_reach_error_messages():
    kafka = KafkaSettings(bootstrap_servers=f"127.0.0.1:{free_port()}", timeout_s=1.0,
                          client={"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                  "sasl.username": "kprio"},
                          secrets={"sasl.password": "hunter2-secret"})
    assert client_config(kafka)["sasl.password"] == "hunter2-secret"  # the client does get it
    with KafkaEdge(kafka) as edge, pytest.raises(BrokerUnreachable) as err:
        edge.snapshot(TopicSettings(name="orders"), now_ms=0)
    assert "hunter2" not in str(err.value) and "hunter2" not in repr(err.value)


def test_client_config_overrides_use_underscores_for_dots():
    kafka = KafkaSettings(bootstrap_servers="b:9092", client={"client.id": "me"})
    assert client_config(kafka, group_id="g", enable_auto_commit=False) == {
        "bootstrap.servers": "b:9092", "client.id": "me", "group.id": "g", "enable.auto.commit": False}


@pytest.mark.parametrize("build", ["admin", "consumer", "producer"])
def test_a_client_setting_librdkafka_refuses_is_a_config_error(build):
    from kprio_core.errors import ConfigError
    from kprio_core.kafka.client import new_admin, new_consumer, new_producer

    kafka = KafkaSettings(bootstrap_servers="127.0.0.1:1", client={"no.such.setting": "1"}, timeout_s=1)
    builders = {"admin": new_admin, "consumer": lambda k: new_consumer(k, "g"), "producer": new_producer}
    with pytest.raises(ConfigError, match=r'kafka\.client: .*"no\.such\.setting"'):
        builders[build](kafka)
