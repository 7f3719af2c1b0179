"""Time windows mapped to offset ranges through offsets-for-times, on a real broker."""

from __future__ import annotations

import pytest

from kprio_core.kafka import KafkaEdge
from kprio_core.model.offsets import OffsetRange as R

pytestmark = pytest.mark.broker

S = 1_000  # one second in ms


def records(times_s: list[int], partition: int) -> list[tuple]:
    return [(f"k{i}", f"v{i}", t * S, partition) for i, t in enumerate(times_s)]


@pytest.fixture
def timed_topic(make_topic):
    # Priority 1: partition 0 stamped 10..14 s, partition 1 stamped 20, 30 s. Priority 0: empty.
    return make_topic(priorities=2, partitions=2, records={1: records([10, 11, 12, 13, 14], 0) + records([20, 30], 1)})


@pytest.mark.parametrize(("start_s", "end_s", "expected", "why"), [
    (11, 13, [(0, 1, 3)], "[11 s, 13 s) holds offsets 1, 2 of partition 0 (end is exclusive)"),
    (12.5, 100, [(0, 3, 5), (1, 0, 2)], "a start between two records begins at the first record after it"),
    (0, 100, [(0, 0, 5), (1, 0, 2)], "a window around everything is every record"),
    (14, 25, [(0, 4, 5), (1, 0, 1)], "spans both partitions"),
    (25, 31, [(1, 1, 2)], "past partition 0's last record: nothing from it"),
    (40, 50, [], "after every record: no range"),
    (12, 12, [], "an empty window"),
])
def test_window_ranges(timed_topic, kafka_settings, start_s, end_s, expected, why):
    t1 = timed_topic.priority_topic(1)
    with KafkaEdge(kafka_settings) as edge:
        ranges = edge.window_ranges(timed_topic, int(start_s * S), end_s * S)
    assert ranges == {1: [R(t1, p, a, b) for p, a, b in expected], 0: []}, why


def test_window_end_before_start_is_an_error(timed_topic, kafka_settings):
    with KafkaEdge(kafka_settings) as edge, pytest.raises(ValueError, match="before its start"):
        edge.window_ranges(timed_topic, 20 * S, 10 * S)


def test_time_marks_say_how_old_the_records_below_an_offset_are_and_the_snapshot_carries_them(timed_topic,
                                                                                               kafka_settings):
    from kprio_core.deadlines import Objectives
    from kprio_core.kafka.lag import SnapshotAsk
    from kprio_core.kafka.times import time_marks
    from kprio_core.model.offsets import END_OF_LOG

    t1 = timed_topic.priority_topic(1)
    with KafkaEdge(kafka_settings) as edge:
        marks = time_marks(edge.admin, {(t1, 0): [9 * S, 12 * S, 100 * S], (t1, 1): [25 * S]}, edge.deadline())
        # offsets below 0 are at most 9 s old (none), below 3 at most 12 s (10, 11, 12 s), every one 100 s
        assert marks == {(t1, 0): ((9 * S, 0), (12 * S, 3), (100 * S, END_OF_LOG)), (t1, 1): ((25 * S, 1),)}
        # A tick at 40 s, priority 1's objective 30 s, a batch every 10 s: the records at most 10 s old break it now,
        # those at most 20 s old within a batch (the next mark, 4 batches away, is past the objective)
        ask = SnapshotAsk(timed_topic, objectives=Objectives({1: 30 * S}, every_ms=10 * S))
        [snap] = edge.snapshots([ask], now_ms=40 * S).values()
    assert {(p.partition, p.times) for p in snap.partitions if p.priority == 1} == {
        (0, ((10 * S, 1), (20 * S, END_OF_LOG))), (1, ((10 * S, 0), (20 * S, 1)))}
    assert all(p.times == () for p in snap.partitions if p.priority == 0), "no objective (and no backlog): no marks"
