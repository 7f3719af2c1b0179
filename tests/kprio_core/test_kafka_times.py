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
