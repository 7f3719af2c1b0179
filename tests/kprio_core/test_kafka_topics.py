"""Creating and verifying priority topics on a real broker."""

from __future__ import annotations

import uuid

import pytest

from kprio_core.config import TopicSettings
from kprio_core.errors import KprioError, PartitionCountMismatch
from kprio_core.kafka import KafkaEdge
from tests.fixtures.kafka import external_bootstrap

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


def test_create_topics_says_which_it_created(kafka_settings):
    topic = fresh(2, 1)
    with KafkaEdge(kafka_settings) as edge:
        assert edge.create_topics(topic) == [f"{topic.name}-0", f"{topic.name}-1"]
        assert edge.create_topics(topic) == [], "a second create creates nothing"
        assert edge.topic_mismatches([topic]) == []


def test_topic_mismatches_lists_every_difference(kafka_settings):
    made = fresh(2, 1)
    with KafkaEdge(kafka_settings) as edge:
        edge.create_topics(made)
        wanted = made.model_copy(update={"priorities": 3, "partitions": 2})
        found = [(m.topic, m.kind, m.expected, m.actual) for m in edge.topic_mismatches([wanted])]
    assert found == [(f"{made.name}-0", "partitions", 2, 1), (f"{made.name}-1", "partitions", 2, 1),
                     (f"{made.name}-2", "missing", None, None)]


def test_unsupported_replication_factor_is_a_clear_error(kafka_settings):
    if external_bootstrap():
        pytest.skip("needs the single-broker embedded cluster (an external one may have 3 brokers)")
    topic = fresh(1, 1).model_copy(update={"replication_factor": 3})
    with KafkaEdge(kafka_settings) as edge, pytest.raises(KprioError, match=f"create topic {topic.name}-0"):
        edge.create_topics(topic)
