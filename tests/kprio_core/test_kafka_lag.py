"""Lag snapshots on a real broker: exact offsets, batched calls, record sizes, ages, retention gaps."""

from __future__ import annotations

import inspect
from collections import Counter

import pytest

from kprio_core.errors import DataLostToRetention
from kprio_core.kafka import KafkaEdge, oldest_pending_age_ms
from kprio_core.model.offsets import OffsetRange as R
from tests.fixtures.kafka import BASE_TS_MS, delete_topics

pytestmark = pytest.mark.broker


class CountingAdmin:
    """The real AdminClient, counting which admin calls a snapshot makes."""

    def __init__(self, admin):
        self._admin, self.calls = admin, Counter()

    def __getattr__(self, name):
        found = getattr(self._admin, name)
        if inspect.ismethod(found) or inspect.isbuiltin(found):  # calls, not the attributes kprio keeps on it
            self.calls[name] += 1
        return found


def test_snapshot_reports_exact_offsets_of_every_partition(make_topic, kafka_settings):
    topic = make_topic(priorities=3, partitions=2, records={2: 9, 1: 4})
    t2 = topic.priority_topic(2)
    with KafkaEdge(kafka_settings) as edge:
        edge.commit(topic, [R(t2, 0, 0, 2)])
        snap = edge.snapshot(topic, now_ms=123, avg_record_bytes={})
    rows = {(p.priority, p.partition): (p.log_start, p.high_watermark, p.committed, p.backlog) for p in snap.partitions}
    assert rows == {
        (2, 0): (0, 5, 2, 3), (2, 1): (0, 4, None, 4),
        (1, 0): (0, 2, None, 2), (1, 1): (0, 2, None, 2),
        (0, 0): (0, 0, None, 0), (0, 1): (0, 0, None, 0),
    }
    assert snap.taken_at_ms == 123
    assert snap.backlog_by_priority() == {2: 7, 1: 4, 0: 0}
    assert snap.oldest_pending_ms == {}  # age is opt-in


def test_snapshot_uses_batched_calls_whatever_the_partition_count(make_topic, kafka_settings, monkeypatch):
    import kprio_core.kafka.client as client

    topic = make_topic(priorities=3, partitions=4, records={2: 8, 0: 8})
    fetched: list[tuple[str, int]] = []
    real = client.new_consumer

    class Counted:
        def __init__(self, consumer):
            self._consumer = consumer

        def committed(self, partitions, timeout):
            fetched.append((self._consumer.memberid() or "", len(partitions)))
            return self._consumer.committed(partitions, timeout=timeout)

        def __getattr__(self, name):
            return getattr(self._consumer, name)

    monkeypatch.setattr(client, "new_consumer", lambda *a, **kw: Counted(real(*a, **kw)))
    with KafkaEdge(kafka_settings) as edge:
        counting = CountingAdmin(edge.admin)
        edge._admin = counting
        edge.snapshot(topic, now_ms=0, avg_record_bytes={name: 10.0 for name in topic.priority_topics().values()})
    # 12 partitions: still one metadata call, one ListOffsets per spec (earliest, latest, and latest under
    # read_committed: the last stable offsets), one DescribeTopics (the topic ids kprio checks for a recreated
    # topic), one OffsetFetch per priority group (by a consumer of the group).
    assert counting.calls == Counter({"list_topics": 1, "list_offsets": 3, "describe_topics": 1})
    assert [n for _, n in fetched] == [4, 4, 4]


def test_snapshots_within_one_view_ask_the_cluster_s_metadata_once(make_topic, kafka_settings):
    """A tick over many logical topics: one metadata request (each lists every topic of the cluster), not one per
    topic; outside the view, and in another thread during it, each snapshot asks anew."""
    import threading

    first, second = make_topic(priorities=2, partitions=2, records={1: 3}), make_topic(priorities=2, partitions=2)
    sizes = {name: 10.0 for t in (first, second) for name in t.priority_topics().values()}
    with KafkaEdge(kafka_settings) as edge:
        counting = CountingAdmin(edge.admin)
        edge._admin = counting
        with edge.one_view():
            snaps = [edge.snapshot(t, now_ms=0, avg_record_bytes=sizes) for t in (first, second)]
            elsewhere = threading.Thread(target=edge.snapshot, args=(first,), kwargs={"now_ms": 0,
                                                                                      "avg_record_bytes": sizes})
            elsewhere.start()
            elsewhere.join()
        assert counting.calls["list_topics"] == 2  # the view's one, and the other thread's own
        edge.snapshot(second, now_ms=0, avg_record_bytes=sizes)
        assert counting.calls["list_topics"] == 3
    assert [s.backlog_by_priority() for s in snaps] == [{1: 3, 0: 0}, {1: 0, 0: 0}]


def test_offset_fetches_of_new_groups_go_side_by_side_and_of_known_ones_one_after_the_other(make_topic,
                                                                                           kafka_settings):
    """A new process's first snapshot: each priority group's consumer finds its coordinator at the same time."""
    import threading

    from kprio_core.kafka.client import Deadline
    from kprio_core.kafka.reads import GroupOffsets

    topic = make_topic(priorities=3, partitions=2, records={2: 4})
    with KafkaEdge(kafka_settings) as edge:
        edge.commit(topic, [R(topic.priority_topic(2), 0, 0, 3)])
    groups, threads = GroupOffsets(kafka_settings), []
    real = groups.fetch

    def fetch(group, parts, deadline):
        threads.append(threading.current_thread().name)
        return real(group, parts, deadline)

    groups.fetch = fetch
    wanted = {topic.priority_group(p): [(topic.priority_topic(p), q) for q in (0, 1)] for p in range(3)}
    try:
        cold = groups.fetch_all(wanted, Deadline(kafka_settings.timeout_s, kafka_settings.bootstrap_servers))
        warm = groups.fetch_all(wanted, Deadline(kafka_settings.timeout_s, kafka_settings.bootstrap_servers))
    finally:
        groups.close()
    assert cold == warm and cold[(topic.priority_topic(2), 0)] == 3 and cold[(topic.priority_topic(0), 1)] is None
    assert all(name.startswith("kprio-offset-fetch") for name in threads[:3]), threads
    assert threads[3:] == [threading.current_thread().name] * 3


def test_given_record_sizes_are_used_and_missing_ones_sampled(make_topic, kafka_settings):
    # key "k<i>" + JSON value: sizes differ per record, so compute what the tail sample must average.
    records = [("key1", "x" * 40, BASE_TS_MS, 0)] * 10 + [("key2", "y" * 96, BASE_TS_MS, 0)] * 5
    topic = make_topic(priorities=2, partitions=1, records={1: records, 0: 3})
    t1, t0 = topic.priority_topic(1), topic.priority_topic(0)
    with KafkaEdge(kafka_settings) as edge:
        snap = edge.snapshot(topic, now_ms=0, avg_record_bytes={t0: 77.5})
    sizes = {p.topic: p.avg_record_bytes for p in snap.partitions}
    # The sample reads the last 5 records of the fullest partition: all "key2" + 96 bytes = 100.
    assert sizes == {t1: 100.0, t0: 77.5}


def test_empty_topics_have_no_size_estimate(make_topic, kafka_settings):
    topic = make_topic(priorities=1, partitions=2)
    with KafkaEdge(kafka_settings) as edge:
        snap = edge.snapshot(topic, now_ms=0)
    assert [p.avg_record_bytes for p in snap.partitions] == [0.0, 0.0]


def test_age_of_oldest_pending_record_per_priority(make_topic, kafka_settings):
    # Priority 1: partition 0 records at +0 s, +2 s, +4 s; partition 1 at +1 s, +3 s.
    topic = make_topic(priorities=2, partitions=2, records={1: 5})
    t1 = topic.priority_topic(1)
    with KafkaEdge(kafka_settings) as edge:
        edge.commit(topic, [R(t1, 0, 0, 2)])  # partition 0 now pending from its record at +4 s
        now = BASE_TS_MS + 60_000
        snap = edge.snapshot(topic, now_ms=now, avg_record_bytes={}, with_age=True)
    assert snap.oldest_pending_ms == {1: BASE_TS_MS + 1_000, 0: None}
    assert {(p.partition, p.priority): p.oldest_pending_ms for p in snap.of_priority(1)} == {
        (0, 1): BASE_TS_MS + 4_000, (1, 1): BASE_TS_MS + 1_000}
    assert oldest_pending_age_ms(snap, now) == {0: None, 1: 59_000}


def test_offsets_lost_to_retention_are_reported_and_strict_raises(make_topic, kafka_settings):
    topic = make_topic(priorities=1, partitions=1, records={0: 10})
    t0 = topic.priority_topic(0)
    with KafkaEdge(kafka_settings) as edge:
        edge.commit(topic, [R(t0, 0, 0, 3)])
        assert edge.delete_records({(t0, 0): 7}) == {(t0, 0): 7}
        snap = edge.snapshot(topic, now_ms=0, avg_record_bytes={})
        assert snap.lost_to_retention() == (R(t0, 0, 3, 7),)
        assert snap.partitions[0].backlog == 3
        with pytest.raises(DataLostToRetention, match=rf"\(4 records\): {t0}\[0\]@\[3,7\)"):
            edge.snapshot(topic, now_ms=0, avg_record_bytes={}, strict=True)


def test_snapshots_of_many_topics_share_one_set_of_requests(make_topic, kafka_settings):
    """A tick over many logical topics asks ListOffsets, DescribeTopics and the sample once for all of them; a
    topic the cluster lacks gets its own error, and the others their snapshots."""
    from kprio_core.config import TopicSettings
    from kprio_core.errors import TopicMissing
    from kprio_core.kafka.lag import SnapshotAsk

    first, second = make_topic(priorities=2, partitions=2, records={1: 3}), make_topic(priorities=3, partitions=1,
                                                                                       records={0: 5, 2: 1})
    never = TopicSettings(name=f"{first.name}-never-made", priorities=2, partitions=1)
    with KafkaEdge(kafka_settings) as edge:
        counting = CountingAdmin(edge.admin)
        edge._admin = counting
        found = edge.snapshots([SnapshotAsk(first), SnapshotAsk(never), SnapshotAsk(second)], now_ms=7)
    assert counting.calls == Counter({"list_topics": 1, "list_offsets": 3, "describe_topics": 1})
    assert list(found) == [first.name, never.name, second.name]
    assert isinstance(found[never.name], TopicMissing)
    assert found[first.name].backlog_by_priority() == {1: 3, 0: 0}
    assert found[second.name].backlog_by_priority() == {2: 1, 1: 0, 0: 5}
    assert {p.topic: p.avg_record_bytes > 0 for p in found[second.name].partitions} == {
        second.priority_topic(0): True, second.priority_topic(1): False, second.priority_topic(2): True}
    assert set(found[second.name].topic_ids) == set(second.priority_topics().values())


def test_a_failure_of_the_batched_requests_stays_with_the_topic_that_caused_it(make_topic, kafka_settings):
    """A priority topic deleted after the metadata was read fails the batched ListOffsets: each topic is then
    asked alone, the deleted one gets the error, the other its snapshot."""
    from kprio_core.errors import KprioError
    from kprio_core.kafka.client import cluster_metadata
    from kprio_core.kafka.lag import SnapshotAsk, take_snapshots

    kept, doomed = make_topic(priorities=2, partitions=1, records={0: 4}), make_topic(priorities=2, partitions=1)
    with KafkaEdge(kafka_settings) as edge:
        metadata = cluster_metadata(edge.admin, edge.deadline())
        delete_topics(kafka_settings, [doomed.priority_topic(1)])
        found = take_snapshots(edge.admin, kafka_settings, [SnapshotAsk(doomed), SnapshotAsk(kept)], edge.deadline(),
                               now_ms=0, groups=edge.groups, metadata=metadata)
    assert isinstance(found[doomed.name], KprioError), found[doomed.name]
    assert doomed.priority_topic(1) in str(found[doomed.name])
    assert found[kept.name].backlog_by_priority() == {1: 0, 0: 4}


def test_offsets_of_many_partitions_are_asked_in_chunks_sent_at_once(make_topic, kafka_settings, monkeypatch):
    """librdkafka matches an answer's partitions against its request one by one (quadratic): ListOffsets goes
    out in chunks of LIST_OFFSETS_CHUNK partitions, every chunk sent before any answer is awaited."""
    import kprio_core.kafka.reads as reads

    topic = make_topic(priorities=2, partitions=4, records={1: 9, 0: 5})
    with KafkaEdge(kafka_settings) as edge:
        whole = edge.snapshot(topic, now_ms=0, avg_record_bytes={})
        monkeypatch.setattr(reads, "LIST_OFFSETS_CHUNK", 3)
        events: list[str] = []
        real = edge.admin.list_offsets

        class Awaited:
            def __init__(self, future):
                self._future = future

            def result(self, timeout=None):
                events.append("wait")
                return self._future.result(timeout=timeout)

        class Watching:
            def list_offsets(self, request, **kwargs):
                events.append(f"send {len(request)}")
                return {tp: Awaited(f) for tp, f in real(request, **kwargs).items()}

            def __getattr__(self, name):
                return getattr(edge.admin, name)

        chunked = reads.log_starts(Watching(), [(t, q) for t in topic.priority_topics().values() for q in range(4)],
                                   edge.deadline())
    assert chunked == {(p.topic, p.partition): p.log_start for p in whole.partitions}
    assert events[:3] == ["send 3", "send 3", "send 2"] and set(events[3:]) == {"wait"}  # every chunk out first
