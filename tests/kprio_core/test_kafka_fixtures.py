"""The broker fixtures themselves: make_topic creates what it says and produces exactly what it says."""

from __future__ import annotations

import pytest

from kprio_core.kafka import KafkaEdge
from kprio_core.model.offsets import OffsetRange
from tests.fixtures.kafka import BASE_TS_MS

pytestmark = pytest.mark.broker


def test_make_topic_creates_priority_topics_and_produces_exact_counts(make_topic, kafka_settings):
    topic = make_topic(priorities=2, partitions=2, records={1: 11, 0: [("a", "x", 5_000, 1)]})
    assert topic.partitions == 2
    with KafkaEdge(kafka_settings) as edge:
        snap = edge.snapshot(topic, now_ms=0, avg_record_bytes={})
    highs = {(p.topic, p.partition): p.high_watermark for p in snap.partitions}
    # 11 generated records go round-robin: 6 to partition 0, 5 to partition 1.
    assert highs == {
        (topic.priority_topic(1), 0): 6,
        (topic.priority_topic(1), 1): 5,
        (topic.priority_topic(0), 0): 0,
        (topic.priority_topic(0), 1): 1,
    }


def test_generated_records_carry_their_timestamps(make_topic, kafka_settings):
    topic = make_topic(priorities=1, partitions=1, records={0: 4})
    with KafkaEdge(kafka_settings) as edge:
        # Record i is stamped BASE_TS_MS + i s, so the window [+2 s, +3 s) is offset 2 alone.
        assert edge.window_ranges(topic, BASE_TS_MS + 2_000, BASE_TS_MS + 3_000) == {
            0: [OffsetRange(topic.priority_topic(0), 0, 2, 3)]}


def test_second_topic_of_a_test_gets_its_own_name(make_topic):
    first, second = make_topic(priorities=1, partitions=1), make_topic(priorities=1, partitions=1)
    assert first.name != second.name


def test_fixture_topics_keep_old_records(make_topic, kafka_settings):
    """Generated records are stamped in 2023: the topics must not apply time retention to them."""
    from confluent_kafka.admin import ConfigResource

    topic = make_topic(priorities=1, partitions=1)
    admin = KafkaEdge(kafka_settings).admin
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic.priority_topic(0))
    configs = admin.describe_configs([resource], request_timeout=10)[resource].result(10)
    assert configs["retention.ms"].value == "-1"
