"""Creating and verifying priority topics on a real broker."""

from __future__ import annotations

import uuid

import pytest

from kprio_core.config import TopicSettings
from kprio_core.errors import PartitionCountMismatch
from kprio_core.kafka import KafkaEdge

pytestmark = pytest.mark.broker


def fresh(priorities: int, partitions: int | None) -> TopicSettings:
    return TopicSettings(name=f"ensure-{uuid.uuid4().hex[:8]}", priorities=priorities, partitions=partitions)


def test_ensure_topics_creates_every_priority_topic_and_is_idempotent(kafka_settings):
    topic = fresh(3, 2)
    with KafkaEdge(kafka_settings) as edge:
        assert edge.ensure_topics(topic) == {0: 2, 1: 2, 2: 2}
        assert edge.ensure_topics(topic) == {0: 2, 1: 2, 2: 2}
        assert set(edge.partitions(topic)) == {0, 1, 2}


def test_ensure_topics_creates_only_the_missing_ones(kafka_settings):
    narrow = fresh(1, 1)
    wide = narrow.model_copy(update={"priorities": 2})
    with KafkaEdge(kafka_settings) as edge:
        edge.ensure_topics(narrow)
        assert edge.ensure_topics(wide) == {0: 1, 1: 1}


def test_ensure_topics_never_alters_an_existing_topic(kafka_settings):
    topic = fresh(1, 1)
    with KafkaEdge(kafka_settings) as edge:
        edge.ensure_topics(topic)
        with pytest.raises(PartitionCountMismatch, match="has 1 partitions, the configuration expects 4"):
            edge.ensure_topics(topic, partitions=4)


def test_ensure_topics_needs_a_partition_count(kafka_settings):
    with KafkaEdge(kafka_settings) as edge, pytest.raises(ValueError, match="how many partitions"):
        edge.ensure_topics(fresh(1, None))
