"""The broker behaviour kprio relies on, checked against whatever broker the tests use.

Each assertion says which broker behaviour is missing, so a run against a new Kafka-protocol
broker reads as a compatibility report. The calls here are plain confluent-kafka on purpose:
they test the broker, not kprio.
"""

from __future__ import annotations

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import ConfigResource, OffsetSpec, ResourceType

from kprio_core.config import KafkaSettings, TopicSettings
from kprio_core.kafka import KafkaEdge
from kprio_core.kafka.client import Deadline, new_admin, new_consumer, new_producer
from kprio_core.kafka.fetch import peek
from orchestration.services.broker import EmbeddedBroker
from orchestration.services.process import wait_for
from tests.fixtures.kafka import external_bootstrap

pytestmark = pytest.mark.broker

TIMEOUT = 20


def offsets(admin, tps, spec):
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in tps}, request_timeout=TIMEOUT)
    return {(tp.topic, tp.partition): f.result(TIMEOUT).offset for tp, f in futures.items()}


def group_offsets(admin, group, tps):
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in tps])]
    result = admin.list_consumer_group_offsets(request, request_timeout=TIMEOUT)[group].result(TIMEOUT)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}


def test_exact_high_watermarks_after_batched_produce(make_topic, kafka_settings):
    topic = make_topic(priorities=1, partitions=3)
    name = topic.priority_topic(0)
    producer = new_producer(kafka_settings, linger_ms=200, batch_num_messages=500)
    counts = {0: 1000, 1: 1, 2: 257}
    for partition, n in counts.items():
        for i in range(n):
            producer.produce(name, key=f"k{i}".encode(), value=b"x" * 32, partition=partition)
    assert producer.flush(TIMEOUT) == 0, "broker did not acknowledge every produced record in time"
    highs = offsets(new_admin(kafka_settings), [(name, p) for p in counts], OffsetSpec.latest())
    assert highs == {(name, p): n for p, n in counts.items()}, (
        f"broker does not report exact high watermarks after batched produce: produced {counts}, got {highs}")


def test_offset_commit_and_fetch_without_subscribing(make_topic, kafka_settings):
    topic = make_topic(priorities=1, partitions=2, records={0: 10})
    name, group = topic.priority_topic(0), topic.priority_group(0)
    admin = new_admin(kafka_settings)
    assert group_offsets(admin, group, [(name, 0), (name, 1)]) == {(name, 0): -1001, (name, 1): -1001}, (
        "broker does not report 'nothing committed' (-1001) for a fresh group")
    altered = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(name, 0, 3)])], request_timeout=TIMEOUT)[group]
    assert [tp.error for tp in altered.result(TIMEOUT).topic_partitions] == [None], (
        "broker does not support AlterConsumerGroupOffsets for an empty group")
    consumer = new_consumer(kafka_settings, group)
    try:
        result = consumer.commit(offsets=[TopicPartition(name, 1, 4)], asynchronous=False)
        assert [tp.error for tp in result] == [None], "broker refuses an OffsetCommit from a consumer that never joined"
    finally:
        consumer.close()
    assert group_offsets(admin, group, [(name, 0), (name, 1)]) == {(name, 0): 3, (name, 1): 4}, (
        "broker does not return committed offsets through OffsetFetch without a subscription")


def test_offsets_for_times_on_record_timestamps(make_topic, kafka_settings):
    stamps = [5_000, 6_000, 6_000, 9_000]
    topic = make_topic(priorities=1, partitions=1,
                       records={0: [(f"k{i}", "v", ts, 0) for i, ts in enumerate(stamps)]})
    name = topic.priority_topic(0)
    admin = new_admin(kafka_settings)
    cases = {4_000: 0, 5_000: 0, 5_001: 1, 6_000: 1, 7_000: 3, 9_000: 3, 9_001: -1}
    for ts, expected in cases.items():
        got = offsets(admin, [(name, 0)], OffsetSpec.for_timestamp(ts))[(name, 0)]
        assert got == expected, (
            f"broker offsets-for-times is wrong: records stamped {stamps}, asked {ts}, expected {expected}, got {got}")


def test_delete_records_moves_the_log_start(make_topic, kafka_settings):
    topic = make_topic(priorities=1, partitions=1, records={0: 10})
    name = topic.priority_topic(0)
    admin = new_admin(kafka_settings)
    futures = admin.delete_records([TopicPartition(name, 0, 6)], request_timeout=TIMEOUT, operation_timeout=TIMEOUT)
    low = next(iter(futures.values())).result(TIMEOUT).low_watermark
    assert low == 6, f"broker's DeleteRecords did not report the new low watermark 6, got {low}"
    start = offsets(admin, [(name, 0)], OffsetSpec.earliest())[(name, 0)]
    assert start == 6, f"broker does not move the log start offset on DeleteRecords: expected 6, got {start}"
    read = peek(kafka_settings, {(name, 0): 6}, {(name, 0): 10}, 10,
                Deadline(TIMEOUT, kafka_settings.bootstrap_servers), "read after delete")
    assert [r.offset for r in read[(name, 0)]] == [6, 7, 8, 9], "broker does not serve the records after the log start"


KAFKA_RETENTION_CHECK_MS = 300_000
"""Kafka's default log.retention.check.interval.ms: how often a broker deletes what retention.ms expired."""
RETENTION_WAIT_MAX_S = 900
"""Longest this suite waits for a cluster to apply retention (an external one's check interval, plus slack)."""


def retention_wait_s(admin) -> float:
    """How long to wait for the brokers to apply retention.ms: until their next check (their
    ``log.retention.check.interval.ms`` as they report it, one second on the embedded broker), plus slack."""
    broker = str(next(iter(admin.list_topics(timeout=TIMEOUT).brokers)))
    [future] = admin.describe_configs([ConfigResource(ResourceType.BROKER, broker)], request_timeout=TIMEOUT).values()
    entry = future.result(TIMEOUT).get("log.retention.check.interval.ms")
    interval_ms = int(entry.value) if entry is not None and entry.value else KAFKA_RETENTION_CHECK_MS
    return interval_ms / 1000 + 60


def test_time_retention_moves_the_log_start(make_topic, kafka_settings):
    """Records older than retention.ms go, so a committed offset can fall below the log start."""
    admin = new_admin(kafka_settings)
    wait_s = retention_wait_s(admin)
    if wait_s > RETENTION_WAIT_MAX_S:
        pytest.skip(f"the cluster at {kafka_settings.bootstrap_servers} applies retention only every "
                    f"{wait_s - 60:.0f} s (log.retention.check.interval.ms), longer than this suite waits "
                    f"({RETENTION_WAIT_MAX_S} s): lower it on the brokers to run this test")
    topic = make_topic(priorities=1, partitions=1, records={0: 5}, retention_ms=1_000)  # stamped in 2023
    name = topic.priority_topic(0)

    def log_start():
        return offsets(admin, [(name, 0)], OffsetSpec.earliest())[(name, 0)]

    # Kafka also deletes the active segment once all of it expired (it rolls a new one first).
    assert wait_for(lambda: log_start() == 5, wait_s, interval_s=1.0), (
        f"broker did not apply retention.ms to records older than it within {wait_s:.0f} s: "
        f"log start still {log_start()}")


@pytest.fixture
def own_broker(tmp_path):
    if external_bootstrap():
        pytest.skip("restart contract needs the embedded broker (an external cluster is never restarted)")
    broker = EmbeddedBroker(tmp_path / "restart", start_timeout_s=60)
    try:
        yield broker.start()
    finally:
        broker.stop()


def _fill_and_restart(broker):
    kafka = KafkaSettings(bootstrap_servers=broker.bootstrap, timeout_s=TIMEOUT)
    topic = TopicSettings(name="survivor", priorities=1, partitions=1)
    name = topic.priority_topic(0)
    with KafkaEdge(kafka) as edge:
        edge.ensure_topics(topic, config={"retention.ms": "-1"})  # the records below are stamped in 1970
        producer = new_producer(kafka, linger_ms=20)
        for i in range(10):
            producer.produce(name, key=f"k{i}".encode(), value=f"v{i}".encode(), timestamp=1_000 + i)
        assert producer.flush(TIMEOUT) == 0
        edge.admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(topic.priority_group(0), [TopicPartition(name, 0, 4)])],
            request_timeout=TIMEOUT)[topic.priority_group(0)].result(TIMEOUT)
    broker.stop()
    broker.start()
    return kafka, topic, name


def test_offsets_survive_a_broker_restart(own_broker):
    kafka, topic, name = _fill_and_restart(own_broker)
    with KafkaEdge(kafka) as edge:
        snap = edge.snapshot(topic, now_ms=0, avg_record_bytes={name: 1.0})
    part = snap.partitions[0]
    assert part.high_watermark == 10, f"broker lost its high watermark on restart: expected 10, got {part.high_watermark}"
    assert part.committed == 4, f"broker lost the group's committed offset on restart: expected 4, got {part.committed}"


def test_records_survive_a_broker_restart(own_broker):
    kafka, topic, name = _fill_and_restart(own_broker)
    with KafkaEdge(kafka) as edge:
        start = edge.snapshot(topic, now_ms=0, avg_record_bytes={name: 1.0}).partitions[0].log_start
    assert start == 0, f"broker dropped records on restart: the log start moved from 0 to {start}"
    read = peek(kafka, {(name, 0): 0}, {(name, 0): 10}, 10, Deadline(TIMEOUT, kafka.bootstrap_servers), "read back")
    assert [r.offset for r in read[(name, 0)]] == list(range(10)), "broker does not serve records after a restart"
