"""The window rule of flipkart's CapacityBurstPriorityKafkaConsumer, with its worked cases as goldens."""

from __future__ import annotations


import pytest
from hypothesis import given
from hypothesis import strategies as st

from kprio_core.burst import (
    PollHistory,
    burst_capacities,
    eligible_to_burst,
    first_eligible,
    maxed_out_count,
    unused_capacity,
)

Q50 = {2: 29, 1: 14, 0: 7}  # budget 50 over 3 priorities, as in flipkart's README

CASES = [
    # (case, windows (oldest first), expected capacities, burster, extra, why)
    (
        1,
        {2: [29] * 6, 1: [14] * 6, 0: [7] * 6},
        {2: 29, 1: 14, 0: 7}, None, 0,
        "flipkart case 1: everyone maxed out, nobody leaves capacity to take",
    ),
    (
        2,
        {2: [29] * 6, 1: [14, 14, 14, 11, 10, 9], 0: [7] * 6},
        {2: 29, 1: 14, 0: 7}, None, 0,
        "flipkart case 2: priority 1 peaked at its quota 14 inside the window, so 0 unused",
    ),
    (
        3,
        {2: [29] * 6, 1: [10, 10, 7, 10, 9, 0], 0: [7] * 6},
        {2: 33, 1: 14, 0: 7}, 2, 4,
        "flipkart case 3: priority 2 takes 14 - 10 = 4 from priority 1",
    ),
    (
        4,
        {2: [20, 25, 25, 20, 15, 10], 1: [10, 10, 7, 10, 9, 0], 0: [7] * 6},
        {2: 29, 1: 14, 0: 15}, 0, 8,
        "flipkart case 4: only priority 0 maxed out; takes (29 - 25) + (14 - 10) = 8",
    ),
    (
        5,
        {},
        {2: 29, 1: 14, 0: 7}, None, 0,
        "empty history: nobody maxed out yet",
    ),
    (
        6,
        {2: [29, 29, 29, 0, 0, 0], 1: [14] * 6, 0: [0] * 6},
        {2: 29, 1: 21, 0: 7}, 1, 7,
        "priority 2 maxed out only 3 times (< 4), so 1 bursts by 0's 7 and 2's 0",
    ),
    (
        7,
        {2: [29, 29, 29, 29, 0, 0], 1: [0] * 6, 0: [0] * 6},
        {2: 50, 1: 14, 0: 7}, 2, 21,
        "exactly at the threshold (4 of 6) is eligible; idle 1 and 0 give 14 + 7",
    ),
    (
        8,
        {2: [29] * 6, 1: [14] * 6, 0: [0] * 6},
        {2: 36, 1: 14, 0: 7}, 2, 7,
        "two eligible levels: only the most urgent bursts (priority 1 gives way)",
    ),
    (
        9,
        {2: [29] * 6, 1: [14] * 6, 0: [7] * 6},
        {2: 29, 1: 14, 0: 7}, None, 0,
        "eligible but nothing to take: lower eligible levels do not get a turn",
    ),
    (
        10,
        {2: [33, 33, 33, 33, 20, 20], 1: [10] * 6, 0: [7] * 6},
        {2: 33, 1: 14, 0: 7}, 2, 4,
        "a burst batch (33 > quota 29) still counts as maxed out",
    ),
]


@pytest.mark.parametrize(
    ("case", "windows", "expected", "burster", "extra", "why"), CASES, ids=[f"case-{c[0]}" for c in CASES]
)
def test_window_rule(
    case: int, windows: dict[int, list[int]], expected: dict[int, int], burster: int | None, extra: int, why: str
) -> None:
    history = PollHistory.from_counts(windows, Q50)
    caps, decision = burst_capacities(Q50, history)
    assert caps == expected, why
    assert (decision.priority, decision.extra) == (burster, extra), why
    assert decision.reason, "every decision says why"
    # the individual rules agree with the answer
    eligible = first_eligible(history.windows, 3, threshold=4)
    if burster is not None:
        assert eligible == burster
        assert extra == sum(unused_capacity(history.windows[p], Q50[p]) for p in Q50 if p != burster)


def test_reason_names_the_donors() -> None:
    history = PollHistory.from_counts({2: [29] * 6, 1: [10, 10, 7, 10, 9, 0], 0: [7] * 6}, Q50)
    reason = burst_capacities(Q50, history)[1].reason
    assert "priority 2 maxed out in 6 of the last 6 batches" in reason
    assert "1: 4, 0: 0" in reason and "29 + 4 = 33" in reason


def test_flipkart_window_sequence() -> None:
    """flipkart's WindowTest.testWindowing, replayed on one priority with quota 50."""
    h = PollHistory(1, window_size=6, maxed_out_threshold=4)
    w = h.windows[0]
    steps = [
        ([], False, 50),
        ([10], False, 40),
        ([10] * 5, False, 40),
        ([30], False, 20),
        ([50] * 3, False, 0),
        ([50], True, 0),
        ([30, 20, 10], False, 0),
    ]
    for adds, eligible, unused in steps:
        for n in adds:
            h.record({0: n}, {0: 50})
        assert eligible_to_burst(w, 4) is eligible, (list(w), eligible)
        assert unused_capacity(w, 50) == unused, (list(w), unused)
    assert h.counts(0) == [50, 50, 50, 30, 20, 10]


def test_record_keeps_the_quota_of_each_batch() -> None:
    h = PollHistory(2, window_size=3, maxed_out_threshold=2)
    h.record({1: 10, 0: 1}, {1: 10, 0: 5})
    h.record({1: 10}, {1: 20, 0: 5})  # budget raised: 10 no longer maxes out; 0 drained nothing
    assert maxed_out_count(h.windows[1]) == 1
    assert h.counts(0) == [1, 0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_priorities": 0}, "at least one priority"),
        ({"n_priorities": 3, "window_size": 0}, "window size must be >= 1"),
        ({"n_priorities": 3, "maxed_out_threshold": 7}, "threshold must be within 1..window size 6"),
        ({"n_priorities": 3, "maxed_out_threshold": 0}, "threshold must be within"),
    ],
)
def test_invalid_history(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PollHistory(**kwargs)


def test_from_counts_refuses_unknown_priorities() -> None:
    with pytest.raises(ValueError, match=r"priorities \[5\] outside 0..2"):
        PollHistory.from_counts({5: [1]}, Q50)


def test_record_needs_every_quota() -> None:
    with pytest.raises(ValueError, match="no quota given for priority 0"):
        PollHistory(3).record({2: 1}, {2: 29, 1: 14})


@given(
    windows=st.fixed_dictionaries(
        {p: st.lists(st.integers(0, 60), max_size=8) for p in range(3)}
    ),
    threshold=st.integers(1, 6),
)
def test_window_rule_properties(windows: dict[int, list[int]], threshold: int) -> None:
    history = PollHistory.from_counts(windows, Q50, window_size=6, maxed_out_threshold=threshold)
    caps, decision = burst_capacities(Q50, history)
    bursting = [p for p in caps if caps[p] != Q50[p]]
    assert len(bursting) <= 1, "only one priority bursts"
    for p in caps:
        assert caps[p] >= Q50[p], "a burst never takes quota away"
    if decision.priority is None:
        assert caps == Q50 and decision.extra == 0
    else:
        p = decision.priority
        assert caps[p] == Q50[p] + decision.extra > Q50[p]
        assert all(not eligible_to_burst(history.windows[q], threshold) for q in range(p + 1, 3)), (
            "no more urgent level was eligible"
        )
        assert decision.extra <= sum(Q50[q] for q in Q50 if q != p), "at most the others' whole quotas"
    assert all(len(history.windows[p]) <= 6 for p in range(3)), "windows keep only the last 6"
