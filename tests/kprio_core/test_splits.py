"""Spark input splits (bounded by records and bytes) and Spark's Kafka offsets JSON."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kprio_core.errors import RangeConflict
from kprio_core.model.drain_plan import PlannedRange
from kprio_core.model.offsets import OffsetRange
from kprio_core.splits import merge_by_partition, spark_offsets_json, split_ranges


def pr(start: int, end: int, est: int, prio: int = 1, topic: str = "t-1", partition: int = 0) -> PlannedRange:
    return PlannedRange(prio, OffsetRange(topic, partition, start, end), est)


CASES = [
    # (case, range, max_records, max_bytes, expected [(start, end, est)], why)
    (1, pr(0, 10, 100), 4, 10_000, [(0, 4, 40), (4, 8, 40), (8, 10, 20)], "records bind: 4 per split"),
    (2, pr(0, 10, 100), 100, 25, [(0, 2, 20), (2, 4, 20), (4, 6, 20), (6, 8, 20), (8, 10, 20)],
     "bytes bind: 10 B/record, 25 B -> 2 records per split"),
    (3, pr(5, 8, 3_000), 100, 10, [(5, 6, 1000), (6, 7, 1000), (7, 8, 1000)],
     "a record bigger than max_bytes still makes a split of one (progress)"),
    (4, pr(0, 7, 0), 3, 1, [(0, 3, 0), (3, 6, 0), (6, 7, 0)], "unknown sizes: only records bind"),
    (5, pr(3, 3, 0), 3, 1, [], "empty ranges are dropped"),
    (6, pr(100, 350, 25_000), 100, 8_000, [(100, 180, 8000), (180, 260, 8000), (260, 340, 8000), (340, 350, 1000)],
     "both limits: bytes allow 80 of the 100 records"),
    (7, pr(0, 3, 10), 2, 100, [(0, 2, 6), (2, 3, 4)], "prorated bytes by cumulative floors add up to 10"),
]


@pytest.mark.parametrize(("case", "rng", "max_records", "max_bytes", "expected", "why"), CASES,
                         ids=[f"split-{c[0]}" for c in CASES])
def test_split_ranges(case, rng, max_records, max_bytes, expected, why) -> None:
    pieces = split_ranges([rng], max_records, max_bytes)
    assert [(p.range.start, p.range.end, p.est_bytes) for p in pieces] == expected, why
    assert all(p.priority == rng.priority and p.range.topic_partition == rng.range.topic_partition for p in pieces)


def test_split_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="split limits must be >= 1"):
        split_ranges([pr(0, 1, 1)], 0, 10)


@given(
    start=st.integers(0, 10**6),
    count=st.integers(0, 5000),
    per_record=st.floats(0, 2000),
    max_records=st.integers(1, 700),
    max_bytes=st.integers(1, 100_000),
)
def test_split_properties(start: int, count: int, per_record: float, max_records: int, max_bytes: int) -> None:
    est = int(count * per_record)
    rng = pr(start, start + count, est)
    pieces = split_ranges([rng], max_records, max_bytes)
    # the pieces tile the range exactly, in order
    pos = start
    for p in pieces:
        assert p.range.start == pos and p.range.count >= 1
        pos = p.range.end
        assert p.range.count <= max_records
        assert p.est_bytes <= max_bytes or p.range.count == 1
    assert pos == start + count
    assert sum(p.est_bytes for p in pieces) == est


def test_spark_json_shape() -> None:
    ranges = [
        OffsetRange("orders-2", 10, 5, 9),
        OffsetRange("orders-2", 2, 23, 40),
        OffsetRange("orders-0", 0, 0, 0),
    ]
    start, end = spark_offsets_json(ranges)
    assert start == '{"orders-0":{"0":0},"orders-2":{"2":23,"10":5}}'
    assert end == '{"orders-0":{"0":0},"orders-2":{"2":40,"10":9}}'
    assert json.loads(start)["orders-2"]["2"] == 23


def test_spark_json_joins_adjacent_splits() -> None:
    pieces = split_ranges([pr(100, 350, 0)], 100, 1)
    assert spark_offsets_json(p.range for p in pieces) == ('{"t-1":{"0":100}}', '{"t-1":{"0":350}}')


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ([OffsetRange("t", 0, 0, 10), OffsetRange("t", 0, 12, 20)], "leave a gap"),
        ([OffsetRange("t", 0, 0, 10), OffsetRange("t", 0, 5, 20)], "overlap"),
    ],
)
def test_spark_json_refuses_what_spark_cannot_express(ranges, message) -> None:
    with pytest.raises(RangeConflict, match=message):
        spark_offsets_json(ranges)
    with pytest.raises(RangeConflict):
        merge_by_partition(ranges)
