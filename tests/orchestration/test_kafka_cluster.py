"""What real Kafka does that the earlier emulator did not, on the embedded brokers kprio tests with:
the log cleaner compacts by key, and a three-node cluster keeps every acknowledged record through
the loss of a partition leader.

The calls are plain confluent-kafka (through the helpers of ``tests.fixtures.kafka`` and
``tests.fixtures.kafka_cluster``): these tests prove the broker and the helpers that later tests build on,
not kprio.
"""

from __future__ import annotations

import pytest

from kprio_core.errors import BrokerUnreachable
from kprio_core.kafka.produce import Record
from tests.fixtures.kafka import (
    BASE_TS_MS,
    ROLL_KEY,
    compacted_topic,
    create_topic,
    produce_acked,
    read_partition,
)
from tests.fixtures.kafka_cluster import partition_isr, partition_leader, wait_for_isr, wait_for_leader

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def keyed_history() -> list[tuple]:
    """Four keys written several times: b and c end deleted (their tombstones are the newest records),
    d is deleted and written again."""
    writes = [("a", "a1"), ("b", "b1"), ("c", "c1"), ("a", "a2"), ("d", "d1"), ("b", None), ("a", "a3"),
              ("c", "c2"), ("d", "d2"), ("c", None), ("d", None), ("d", "d3"), ("a", "a4")]
    return [(key, value, BASE_TS_MS + i * 1000) for i, (key, value) in enumerate(writes)]


def test_a_compacted_topic_keeps_exactly_the_newest_record_per_key(kafka_settings, topic_name):
    history = keyed_history()
    topic = compacted_topic(kafka_settings, topic_name, history)
    high = topic.high_watermarks[0]
    assert high == len(history) + 1, "every write and the roll record got an offset"
    newest = {}
    for offset, (key, value, _) in enumerate(history):
        newest[key.encode()] = (offset, value.encode() if value is not None else None)
    newest[ROLL_KEY.encode()] = (len(history), b"roll")
    read = read_partition(kafka_settings, topic.name, 0)
    assert len(read) < high, f"the cleaner did not run: {len(read)} records left of {high}"
    assert [(r.offset, r.key, r.value) for r in read] == sorted((o, k, v) for k, (o, v) in newest.items()), (
        "a plain read of the compacted topic does not see exactly the newest record of each key")
    # Offsets keep their numbers: the gaps are the replaced records, the tombstones stay (delete.retention.ms).
    assert [r.offset for r in read] == [5, 9, 11, 12, 13]
    assert topic.survivors(0) == [(r.offset, r.key, r.value) for r in read]


def test_compaction_is_per_partition(kafka_settings, topic_name):
    history = [(key, f"{key}-{p}-{n}", BASE_TS_MS + n * 1000, p) for p in (0, 1) for n in range(3) for key in "xy"]
    topic = compacted_topic(kafka_settings, topic_name, history, partitions=2)
    for p in (0, 1):
        read = read_partition(kafka_settings, topic.name, p)
        assert {(r.key, r.value) for r in read} == {(b"x", f"x-{p}-2".encode()), (b"y", f"y-{p}-2".encode()),
                                                    (ROLL_KEY.encode(), b"roll")}


@pytest.fixture
def replicated_topic(cluster_settings, topic_name):
    """One partition, three replicas, min.insync.replicas 2, every replica in sync."""
    create_topic(cluster_settings, topic_name, 1, replication_factor=3, config={"min.insync.replicas": "2"})
    wait_for_isr(cluster_settings, topic_name, 0, {1, 2, 3})
    return topic_name


def test_the_cluster_has_three_nodes_and_replicates_by_default(kafka_cluster, cluster_settings, topic_name):
    status = kafka_cluster.status()
    assert status.running_nodes == 3 and len(set(n.port for n in status.nodes)) == 3
    assert status.bootstrap == kafka_cluster.bootstrap == cluster_settings.bootstrap_servers
    create_topic(cluster_settings, topic_name, 2)  # the cluster's defaults
    for p in (0, 1):
        assert wait_for_isr(cluster_settings, topic_name, p, {1, 2, 3}) == {1, 2, 3}


def test_acknowledged_records_survive_the_partition_leader_being_killed(kafka_cluster, cluster_settings,
                                                                        replicated_topic):
    kafka, name = cluster_settings, replicated_topic
    before = produce_acked(kafka, name, [Record(f"k{i}", f"v{i}", None, 0) for i in range(300)])
    assert not before.failed and len(before.acked) == 300
    leader = partition_leader(kafka, name, 0)
    killed_pid = kafka_cluster.kill_node(leader)
    assert not any(n.running for n in kafka_cluster.status().nodes if n.node_id == leader)

    # Produced while the leader is dead: each waits for the new leader, none is lost or doubled.
    during = produce_acked(kafka, name, [Record(f"k{i}", f"v{i}", None, 0) for i in range(300, 600)])
    assert not during.failed and len(during.acked) == 300, during.failed[:3]
    new_leader = wait_for_leader(kafka, name, 0, not_on=leader)
    assert new_leader != leader
    assert leader not in partition_isr(kafka, name, 0)
    acked = sorted(before.acked + during.acked, key=lambda a: a.offset)
    expected = [(a.offset, a.key, a.value) for a in acked]
    assert [a.value for a in acked] == [f"v{i}".encode() for i in range(600)], "acknowledged out of order"

    read = read_partition(kafka, name, 0)
    assert [(r.offset, r.key, r.value) for r in read] == expected, (
        "a read from offset 0 to the end after the failover does not see every acknowledged record exactly once")

    kafka_cluster.restart_node(leader)
    assert kafka_cluster.status().nodes[leader - 1].pid != killed_pid
    assert wait_for_isr(kafka, name, 0, leader) == {1, 2, 3}, "the restarted node did not rejoin the ISR"
    after = produce_acked(kafka, name, [Record("k600", "v600", None, 0)])
    assert not after.failed and after.acked[0].offset == acked[-1].offset + 1
    read = read_partition(kafka, name, 0)
    assert [(r.offset, r.key, r.value) for r in read] == [*expected, (after.acked[0].offset, b"k600", b"v600")]


def test_a_partition_no_leader_serves_is_never_read_as_a_log(kafka_cluster, cluster_settings, topic_name):
    """Its only replica's node killed, a partition has no leader: librdkafka's ListOffsets then answers -1001 with no
    error, which kprio read as the log [-1001, -1001) (a committed offset "beyond the log's end", held for a
    person). Now the partition is asked again until the deadline, then no broker answered for it: transient."""
    from kprio_core.kafka.client import Deadline, new_admin
    from kprio_core.kafka.reads import high_watermarks, log_starts

    kafka = cluster_settings
    create_topic(kafka, topic_name, 1, replication_factor=1)
    assert not produce_acked(kafka, topic_name, [Record(f"k{i}", f"v{i}", None, 0) for i in range(5)]).failed
    only = partition_leader(kafka, topic_name, 0)
    admin = new_admin(kafka)
    assert (log_starts(admin, [(topic_name, 0)], Deadline(10, kafka.bootstrap_servers)),
            high_watermarks(admin, [(topic_name, 0)], Deadline(10, kafka.bootstrap_servers))) == (
        {(topic_name, 0): 0}, {(topic_name, 0): 5})
    kafka_cluster.kill_node(only)
    try:
        # Long enough for librdkafka to answer (it does within about 5 s) rather than the call to run out.
        with pytest.raises(BrokerUnreachable) as err:
            high_watermarks(admin, [(topic_name, 0)], Deadline(8, kafka.bootstrap_servers))
        assert f"({topic_name}[0])" in str(err.value)  # asked again until the deadline: no answer, no offset made up
    finally:
        kafka_cluster.restart_node(only)
    # Its node back, the partition is served again (asked with a new client, as the next tick's edge would).
    assert high_watermarks(new_admin(kafka), [(topic_name, 0)], Deadline(30, kafka.bootstrap_servers)) == {
        (topic_name, 0): 5}


@pytest.mark.spark
@pytest.mark.dagster
def test_kprio_drains_on_through_a_leader_killed_mid_drain(kafka_cluster, cluster_settings, topic_name, kprio_env,
                                                          dagster_instance):
    """The leader of a priority partition is SIGKILLed while a batch drains: the loop goes on with the new
    leader (a failed attempt is retried by itself), nothing is lost or doubled, and the node rejoins."""
    import threading

    from kprio_core.config import TopicSettings
    from orchestration.dagster import drain_loop
    from tests.orchestration.conservation import conservation

    kafka = cluster_settings
    topic = TopicSettings(name=topic_name, priorities=2, partitions=2)
    for p in range(2):
        name = topic.priority_topic(p)
        create_topic(kafka, name, 2, replication_factor=3, config={"min.insync.replicas": "2"})
        for q in range(2):
            wait_for_isr(kafka, name, q, {1, 2, 3})
        done = produce_acked(kafka, name, [Record(f"k{i}", f'{{"i": {i}}}', None, i % 2) for i in range(1500)])
        assert not done.failed, done.failed[:3]
    env = kprio_env(topic, kafka={"bootstrap_servers": kafka.bootstrap_servers, "timeout_s": 30.0},
                    planner={"record_budget": 400})
    victim = partition_leader(kafka, topic.priority_topic(0), 0)
    runs: list[str] = []
    killed: list[int] = []

    def kill_during_the_second_run(batch: str) -> None:
        runs.append(batch)
        if len(runs) == 2:
            threading.Timer(0.5, lambda: killed.append(kafka_cluster.kill_node(victim))).start()

    report = drain_loop.drain(env.defs, dagster_instance, on_start=kill_during_the_second_run)

    assert killed, "the leader was never killed"
    assert report.ok and report.stopped == "no backlog left", report.stopped
    assert report.records() == {1: 1500, 0: 1500}
    snapshot = env.edge.snapshot(topic, now_ms=0)
    assert [(p.committed, p.backlog) for p in snapshot.partitions] == [(750, 0)] * 4
    check = conservation(env.config, topic, env.edge)
    assert check.ok and check.expected == 3000, str(check)

    kafka_cluster.restart_node(victim)
    for p in range(2):
        for q in range(2):
            assert wait_for_isr(kafka, topic.priority_topic(p), q, victim) == {1, 2, 3}
