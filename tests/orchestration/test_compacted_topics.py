"""A compacted priority topic after Kafka's log cleaner ran drains to zero lag, every surviving record once.

Offsets the cleaner removed hold no record: counted, never lost, never a failure. Tombstones
(the newest record of a deleted key, value null) survive compaction and are drained as records.
"""

from __future__ import annotations

import pytest

from kprio_core.config import TopicSettings
from orchestration.dagster import drain_loop
from tests.fixtures.kafka import BASE_TS_MS, ROLL_KEY, compacted_topic
from tests.orchestration.conservation import conservation
from tests.orchestration.dagster_env import read_all_dead_letters, read_all_output

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]


def test_a_compacted_topic_drains_every_surviving_record_once(kafka_settings, topic_name, kprio_env,
                                                              dagster_instance, spark):
    # 10 keys per partition written 6 times each; keys 0 and 5 end in a tombstone.
    records = []
    for version in range(6):
        for partition in range(2):
            for k in range(10):
                deleted = version == 5 and k in (0, 5)
                value = None if deleted else f'{{"k": {k}, "v": {version}, "amount": 1.5}}'
                records.append((f"key-{partition}-{k}", value, BASE_TS_MS + version * 1000 + k, partition))
    topic = TopicSettings(name=topic_name, priorities=1, partitions=2)
    compacted = compacted_topic(kafka_settings, topic.priority_topic(0), records, partitions=2)
    survivors = {p: compacted.survivors(p) for p in range(2)}
    assert [len(s) for s in survivors.values()] == [11, 11]  # 10 keys and the roll record per partition
    # 10 offsets per partition and batch: the ranges of versions 0-4 hold no record at all.
    env = kprio_env(topic, planner={"record_budget": 20})

    report = drain_loop.drain(env.defs, dagster_instance)

    assert report.ok and report.stopped == "no backlog left", report.stopped
    snapshot = env.edge.snapshot(topic, now_ms=0)
    assert [(p.committed, p.backlog) for p in snapshot.partitions] == \
        [(compacted.high_watermarks[p], 0) for p in range(2)]
    check = conservation(env.config, topic, env.edge)
    assert check.ok, str(check)
    assert check.expected == 22
    name = topic.priority_topic(0)
    # The newest record of every key is in the output (tombstones too); the roll records, not JSON, are
    # dead letters.
    assert read_all_output(spark, env.config.drain.output_path, topic) == sorted(
        (name, p, offset) for p in range(2) for offset, key, _ in survivors[p] if key != ROLL_KEY.encode())
    assert [row[:3] for row in read_all_dead_letters(spark, env.config.drain.dead_letter_path, topic)] == sorted(
        (name, p, offset) for p in range(2) for offset, key, _ in survivors[p] if key == ROLL_KEY.encode())
    batches = env.ledger.batches.find(topic.name)
    assert sum(b.drain.no_record_offsets for b in batches) == sum(compacted.high_watermarks.values()) - 22
    assert sum(b.drain.lost_offsets for b in batches) == 0
