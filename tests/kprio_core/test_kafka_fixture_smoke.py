import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import OffsetSpec
from kprio_core.kafka.client import new_admin

pytestmark = pytest.mark.broker


def test_make_topic_produces_exact_counts(make_topic, kafka_settings):
    t = make_topic(priorities=2, partitions=2, records={1: 11, 0: [("a", "x", 5_000, 1)]})
    admin = new_admin(kafka_settings)
    tps = [TopicPartition(t.priority_topic(p), q) for p in range(2) for q in range(2)]
    res = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, request_timeout=10)
    hw = {(k.topic, k.partition): f.result(10).offset for k, f in res.items()}
    assert hw == {(t.priority_topic(1), 0): 6, (t.priority_topic(1), 1): 5, (t.priority_topic(0), 0): 0, (t.priority_topic(0), 1): 1}
