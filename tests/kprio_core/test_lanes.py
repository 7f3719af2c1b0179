"""Lanes: Kafka's murmur2 (checked on Kafka's vectors), null keys by offset, columns."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kprio_core.lanes import Lane, Ordering, lane_for, lane_of, lanes_of, murmur2, to_positive

KAFKA_VECTORS = [
    # Kafka's UtilsTest.testMurmur2 (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java)
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS, ids=[v[0].decode()[:12] for v in KAFKA_VECTORS])
def test_murmur2_matches_kafka(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


CASES = [
    # (case, key, offset, lanes, expected, why)
    (1, b"21", 0, 8, to_positive(-973932308) % 8, "keyed: Kafka's partitioner arithmetic"),
    (2, b"21", 999, 8, to_positive(-973932308) % 8, "the offset does not matter for a keyed record"),
    (3, None, 13, 8, 5, "null key: spread by offset, 13 % 8"),
    (4, None, 13, 1, 0, "one lane: everything in lane 0"),
    (5, b"", 0, 4, to_positive(murmur2(b"")) % 4, "an empty key is a key, not a null key"),
    (6, bytearray(b"abc"), 0, 3, 479470107 % 3, "bytearray (as Spark gives binary) hashes like bytes"),
]


@pytest.mark.parametrize(("case", "key", "offset", "lanes", "expected", "why"), CASES, ids=[f"lane-{c[0]}" for c in CASES])
def test_lane_of(case, key, offset, lanes, expected, why) -> None:
    assert lane_of(key, offset, lanes) == expected, why


def test_lane_of_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match="lanes must be >= 1"):
        lane_of(b"k", 0, 0)
    with pytest.raises(TypeError, match="bytes or None, got str"):
        lane_of("k", 0, 4)  # type: ignore[arg-type]


def test_ordering_and_lane_values() -> None:
    assert Ordering("key") is Ordering.KEY and Ordering.PARTITION.value == "partition"
    assert lane_for(Ordering.PARTITION, b"21", 7, 8) == 0
    assert lane_for(Ordering.KEY, b"21", 7, 8) == lane_of(b"21", 7, 8)
    lane = Lane("orders-2", 3, 1)
    assert str(lane) == "orders-2[3]/lane1"
    assert sorted([Lane("a", 1, 0), Lane("a", 0, 2)])[0] == Lane("a", 0, 2)
    assert {lane: 1}[Lane("orders-2", 3, 1)] == 1, "hashable value object"


KEYS = [b"21", None, b"abc", b"21", None]
OFFSETS = [0, 13, 2, 5, 6]
EXPECTED = [lane_of(k, o, 8) for k, o in zip(KEYS, OFFSETS)]


@pytest.mark.parametrize(
    "columns",
    [
        (KEYS, OFFSETS),
        (pa.array(KEYS, type=pa.binary()), pa.array(OFFSETS, type=pa.int64())),
        (pa.chunked_array([KEYS[:2], KEYS[2:]], type=pa.binary()), pa.chunked_array([OFFSETS], type=pa.int64())),
        (pd.Series(KEYS, dtype=object), pd.Series(OFFSETS)),
        (pd.Series([b"21", np.nan, b"abc", b"21", None], dtype=object), np.array(OFFSETS)),
    ],
    ids=["lists", "pyarrow", "pyarrow-chunked", "pandas", "pandas-nan-numpy"],
)
def test_lanes_of_columns(columns) -> None:
    assert lanes_of(*columns, lanes=8) == EXPECTED


def test_lanes_of_checks_lengths() -> None:
    with pytest.raises(ValueError, match="2 keys but 1 offsets"):
        lanes_of([b"a", b"b"], [1], 4)


def test_lanes_are_stable_across_processes() -> None:
    """Python's hash(bytes) changes with PYTHONHASHSEED; lanes must not (Spark executors agree)."""
    code = "from kprio_core.lanes import lanes_of; print(lanes_of([b'a', b'order-42', b'x' * 17], [0, 0, 0], 7))"
    outs = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        outs.add(done.stdout.strip())
    assert outs == {str(lanes_of([b"a", b"order-42", b"x" * 17], [0, 0, 0], 7))}


@given(keys=st.lists(st.one_of(st.none(), st.binary(max_size=40)), max_size=30), lanes=st.integers(1, 64))
def test_lane_properties(keys, lanes) -> None:
    offsets = list(range(100, 100 + len(keys)))
    got = lanes_of(keys, offsets, lanes)
    assert got == [lane_of(k, o, lanes) for k, o in zip(keys, offsets)]
    assert all(0 <= g < lanes for g in got)
    for k, g in zip(keys, got):
        if k is not None:
            assert g == to_positive(murmur2(k)) % lanes
            assert -(2**31) <= murmur2(k) < 2**31
