"""The planner: a numbered table of cases (each with why), then hypothesis properties per invariant."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kprio_core.burst import PollHistory
from kprio_core.errors import QuotaError
from kprio_core.model.drain_plan import DrainPlan
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.snapshot import LagSnapshot, PartitionLag
from kprio_core.planner import (
    Budget,
    fair_shares,
    min_share_records,
    min_share_targets,
    plan_batch,
    plan_start,
    quota_targets,
    reserved_ends,
    water_fill_targets,
    window_rule_targets,
)
from kprio_core.quota import base_quotas

Q50 = {2: 29, 1: 14, 0: 7}


def part(prio: int, partition: int, hw: int, committed: int | None = 0, log_start: int = 0,
         avg: float = 0.0, ts: int | None = None) -> PartitionLag:
    return PartitionLag(f"t-{prio}", partition, prio, log_start, hw, committed, avg, ts)


def snap(*parts: PartitionLag, n: int = 3) -> LagSnapshot:
    return LagSnapshot.of("t", n, parts, taken_at_ms=123)


def busy(hw2: int = 100, hw1: int = 100, hw0: int = 100, avg: float = 0.0) -> LagSnapshot:
    return snap(part(2, 0, hw2, avg=avg), part(1, 0, hw1, avg=avg), part(0, 0, hw0, avg=avg))


RULES = [
    # (case, rule output, expected, why)
    (1, lambda: min_share_targets({2: 100, 1: 1, 0: 0}, Budget(100)), {2: 5, 1: 1, 0: 0},
     "5% of 100, capped by backlog; an idle priority needs nothing"),
    (2, lambda: min_share_targets({2: 9, 1: 9, 0: 9}, Budget(7)), {2: 1, 1: 1, 0: 1},
     "a tiny budget still guarantees one record each"),
    (3, lambda: min_share_targets({2: 9}, Budget(50, min_share=0.0)), {2: 0}, "min share 0: no guarantee"),
    (4, lambda: quota_targets({2: 100, 1: 4, 0: 100}, Q50, {2: 2, 1: 2, 0: 2}, 50), {2: 29, 1: 4, 0: 7},
     "quota capped by backlog"),
    (5, lambda: quota_targets({1: 99, 0: 99}, {1: 2, 0: 1}, {1: 1, 0: 2}, 3), {1: 1, 0: 2},
     "a floor above the quota is paid by the most urgent level"),
    (6, lambda: water_fill_targets({2: 7, 1: 0}), {2: 7, 1: 0}, "water-filling aims at the whole backlog"),
    (7, lambda: window_rule_targets({2: 100, 1: 3, 0: 100}, {2: 33, 1: 14, 0: 7}), {2: 33, 1: 3, 0: 7},
     "window capacity capped by backlog"),
    (8, lambda: reserved_ends([OffsetRange("t", 0, 0, 10), OffsetRange("t", 0, 10, 25), OffsetRange("t", 1, 3, 4)]),
     {("t", 0): 25, ("t", 1): 4}, "the furthest reservation per partition"),
    (9, lambda: plan_start(part(0, 0, 100, committed=10), 5), 10, "a reservation behind the committed offset is moot"),
    (10, lambda: plan_start(part(0, 0, 100, committed=5, log_start=20), None), 20, "retention moved the start"),
]


@pytest.mark.parametrize(("case", "rule", "expected", "why"), RULES, ids=[f"rule-{c[0]}" for c in RULES])
def test_rules(case, rule, expected, why) -> None:
    assert rule() == expected, why


LAG_AWARE = [
    # (case, snapshot, budget, kwargs, expected records per priority, expected ranges or None, why)
    (1, busy(), Budget(50), {}, {2: 29, 1: 14, 0: 7},
     ["t-2[0]@[0,29)", "t-1[0]@[0,14)", "t-0[0]@[0,7)"],
     "everyone busy: the exponential quotas exactly"),
    (2, busy(hw1=4), Budget(50), {}, {2: 39, 1: 4, 0: 7}, None,
     "priority 1 has 4 waiting: its 10 unused records go to the most urgent"),
    (3, busy(hw2=0), Budget(50), {}, {2: 0, 1: 43, 0: 7}, None,
     "priority 2 idle: its 29 go to priority 1 first (most urgent with backlog)"),
    (4, busy(0, 0, 0), Budget(50), {}, {2: 0, 1: 0, 0: 0}, [],
     "nothing waiting: an empty plan"),
    (5, busy(10, 5, 3), Budget(50), {}, {2: 10, 1: 5, 0: 3}, None,
     "less backlog than budget: drain it all"),
    (6, snap(*(part(p, 0, 1000) for p in range(5)), n=5), Budget(100), {},
     {4: 52, 3: 25, 2: 12, 1: 6, 0: 5}, None,
     "min share 5% = 5 lifts priority 0 over its quota 3; the top level pays the 2"),
    (7, busy(avg=10.0), Budget(50, bytes=300), {}, {2: 26, 1: 2, 0: 2}, None,
     "300 bytes at 10 B/record fit 30 records: minimum shares first, then the most urgent"),
    (8, snap(part(2, 0, 100), part(2, 1, 100)), Budget(50), {"reserved": [OffsetRange("t-2", 0, 0, 20)]},
     {2: 50, 1: 0, 0: 0}, ["t-2[0]@[20,45)", "t-2[1]@[0,25)"],
     "a batch in flight holds [0,20): partition 0 continues at 20, never re-planned"),
    (9, busy(), Budget(50), {"reserved": [OffsetRange("t-2", 0, 0, 100)]}, {2: 0, 1: 43, 0: 7}, None,
     "the whole backlog of priority 2 is in flight: it has nothing left to plan"),
    (10, snap(part(1, 0, 20, committed=3, log_start=10)), Budget(50), {}, {2: 0, 1: 10, 0: 0},
     ["t-1[0]@[10,20)"],
     "committed 3 below log start 10: plan from 10 (the gap is reported as lost)"),
    (11, snap(part(2, 0, 1000), part(2, 1, 1000), part(2, 2, 3)), Budget(50), {}, {2: 50, 1: 0, 0: 0},
     ["t-2[0]@[0,24)", "t-2[1]@[0,23)", "t-2[2]@[0,3)"],
     "max-min fair over partitions: the short one drains, the rest split evenly, partition 0 breaks the tie"),
    (12, snap(part(0, 0, 1000, ts=500), part(0, 1, 1000, ts=100), n=1), Budget(7), {}, {0: 7},
     ["t-0[0]@[0,3)", "t-0[1]@[0,4)"],
     "tie-break: the partition with the oldest pending record (ts 100) gets the odd record"),
    (13, snap(part(2, 0, 100, committed=None, log_start=40)), Budget(50), {}, {2: 50, 1: 0, 0: 0},
     ["t-2[0]@[40,90)"],
     "nothing committed: start at the log start, as auto.offset.reset=earliest"),
    (14, busy(), Budget(50), {"distribution": "linear"}, {2: 26, 1: 16, 0: 8}, None,
     "linear split 3:2:1"),
    (15, busy(), Budget(50, bytes=1), {}, {2: 29, 1: 14, 0: 7}, None,
     "unknown record sizes (avg 0) cannot make the byte budget bind"),
    (16, snap(part(2, 0, 1000), part(1, 0, 1000), part(0, 0, 1000)), Budget(50, min_share=0.0), {},
     {2: 29, 1: 14, 0: 7}, None,
     "min share off: quotas unchanged when everyone is busy"),
    (17, busy(hw0=1), Budget(50), {}, {2: 35, 1: 14, 0: 1}, None,
     "a priority with one record gets it (min share capped by backlog), the rest flows up"),
    (18, busy(avg=100.0), Budget(50, bytes=99), {}, {2: 0, 1: 0, 0: 0}, [],
     "a byte budget below one record: empty plan, never over budget"),
]


@pytest.mark.parametrize(
    ("case", "snapshot", "budget", "kwargs", "expected", "ranges", "why"),
    LAG_AWARE,
    ids=[f"lag-{c[0]}" for c in LAG_AWARE],
)
def test_lag_aware(case, snapshot, budget, kwargs, expected, ranges, why) -> None:
    plan = plan_batch(snapshot, budget, **kwargs)
    assert plan.records_by_priority() == expected, why
    assert plan.grants == expected, "lag-aware grants are what each priority takes"
    if ranges is not None:
        assert [str(r.range) for r in plan.ranges] == ranges, why
    assert plan.mode == "lag-aware" and plan.snapshot_taken_at_ms == 123


FLIPKART = [
    # (case, snapshot, history counts, expected records, expected grants, burster, why)
    (1, busy(hw1=4), None, {2: 29, 1: 4, 0: 7}, Q50, None,
     "no history: base quotas capped by backlog, unused quota is not handed on"),
    (2, busy(hw1=10), {2: [29] * 6, 1: [10, 10, 7, 10, 9, 0], 0: [7] * 6}, {2: 33, 1: 10, 0: 7},
     {2: 33, 1: 14, 0: 7}, 2, "flipkart case 3: priority 2 bursts to 33, priority 1 drains its 10"),
    (3, busy(), {2: [29] * 6, 1: [10, 10, 7, 10, 9, 0], 0: [7] * 6}, {2: 29, 1: 14, 0: 7},
     {2: 33, 1: 14, 0: 7}, 2, "the burst was priced on 1's history, but 1 is busy now: the budget caps the burst"),
    (4, busy(hw2=25, hw1=10), {2: [20, 25, 25, 20, 15, 10], 1: [10, 10, 7, 10, 9, 0], 0: [7] * 6},
     {2: 25, 1: 10, 0: 15}, {2: 29, 1: 14, 0: 15}, 0, "flipkart case 4: priority 0 bursts to 15"),
    (5, busy(), {2: [29] * 6, 1: [14] * 6, 0: [7] * 6}, Q50, Q50, None, "flipkart case 1: no burst"),
    (6, busy(), {2: [29] * 6, 1: [14, 14, 14, 11, 10, 9], 0: [7] * 6}, Q50, Q50, None, "flipkart case 2: no burst"),
]


@pytest.mark.parametrize(
    ("case", "snapshot", "counts", "expected", "grants", "burster", "why"),
    FLIPKART,
    ids=[f"flipkart-{c[0]}" for c in FLIPKART],
)
def test_flipkart_mode(case, snapshot, counts, expected, grants, burster, why) -> None:
    history = None if counts is None else PollHistory.from_counts(counts, Q50)
    plan = plan_batch(snapshot, Budget(50), mode="flipkart", history=history)
    assert plan.records_by_priority() == expected, why
    assert dict(plan.grants) == grants, why
    assert plan.burst is not None and plan.burst.priority == burster, why
    assert plan.records <= 50


def test_lost_offsets_are_reported_not_skipped() -> None:
    plan = plan_batch(snap(part(1, 0, 20, committed=3, log_start=10)), Budget(50))
    assert plan.lost == (OffsetRange("t-1", 0, 3, 10),)


def test_water_filling_explains_itself() -> None:
    plan = plan_batch(busy(hw1=4), Budget(50))
    assert plan.burst is not None and (plan.burst.priority, plan.burst.extra) == (2, 10)
    assert "1 left 10 of its quota unused (backlog 4)" in plan.burst.reason
    assert plan_batch(busy(), Budget(50)).burst is None, "nobody above quota: no burst to report"


def test_plan_records_backlog_and_round_trips() -> None:
    plan = plan_batch(busy(hw1=4, avg=12.5), Budget(50, bytes=10_000))
    assert plan.backlog_before == {0: 100, 1: 4, 2: 100}
    assert [r.est_bytes for r in plan.ranges] == [488, 50, 88], "ceil(count * 12.5): 487.5, 50, 87.5"
    assert plan.est_bytes == 626
    assert DrainPlan.from_json(plan.to_json()) == plan


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: plan_batch(busy(), Budget(50, min_share=0.5)), "min_share 0.5 x 3 priorities"),
        (lambda: plan_batch(busy(), Budget(50), mode="greedy"), "unknown plan mode 'greedy'"),
        (lambda: plan_batch(busy(), Budget(6)), "need at least 2\\^3 - 1 = 7"),
        (lambda: plan_batch(busy(), Budget(50), mode="flipkart", history=PollHistory(2)), "poll history has 2"),
        (lambda: plan_batch(snap(part(5, 0, 10)), Budget(50)), r"t-5\[0\] has priority 5, outside 0..2"),
        (lambda: Budget(0), "record budget must be >= 1"),
        (lambda: Budget(10, bytes=0), "byte budget must be >= 1"),
        (lambda: Budget(10, min_share=1.5), "min_share must be within"),
    ],
    ids=["min-share-too-big", "unknown-mode", "budget-too-small", "history-mismatch", "bad-priority",
         "zero-budget", "zero-bytes", "bad-min-share"],
)
def test_errors(call, message: str) -> None:
    with pytest.raises(QuotaError, match=message):
        call()


# --- properties ---------------------------------------------------------------------------------


@st.composite
def scenarios(draw):
    """A snapshot, some batches in flight, and a budget."""
    n = draw(st.integers(1, 4))
    parts: list[PartitionLag] = []
    reserved: list[OffsetRange] = []
    for prio in range(n):
        for partition in range(draw(st.integers(0, 4))):
            log_start = draw(st.integers(0, 50))
            hw = log_start + draw(st.integers(0, 300))
            committed = draw(st.one_of(st.none(), st.integers(0, hw)))
            avg = draw(st.sampled_from([0.0, 1.0, 7.5, 100.0, 333.3]))
            ts = draw(st.one_of(st.none(), st.integers(0, 1000)))
            p = PartitionLag(f"t-{prio}", partition, prio, log_start, hw, committed, avg, ts)
            parts.append(p)
            if draw(st.booleans()):
                # a batch in flight holds a prefix of the pending offsets (as the planner made it)
                length = draw(st.integers(0, 400))
                reserved.append(OffsetRange(p.topic, partition, p.next_offset, p.next_offset + length))
    minimum = (1 << n) - 1
    records = draw(st.integers(minimum, 600))
    nbytes = draw(st.one_of(st.none(), st.integers(1, 30_000)))
    min_share = draw(st.sampled_from([0.0, 0.05, 1 / n]))
    snapshot = LagSnapshot.of("t", n, parts, taken_at_ms=1)
    return snapshot, reserved, Budget(records, nbytes, min_share)


def _available(snapshot: LagSnapshot, reserved: list[OffsetRange]) -> dict[tuple[str, int], tuple[int, int]]:
    ends = reserved_ends(reserved)
    out = {}
    for p in snapshot.partitions:
        start = plan_start(p, ends.get((p.topic, p.partition)))
        out[(p.topic, p.partition)] = (start, max(0, p.high_watermark - start))
    return out


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_budget_contiguity_and_no_overlap(scenario) -> None:
    snapshot, reserved, budget = scenario
    plan = plan_batch(snapshot, budget, reserved=reserved)
    # budget
    assert plan.records <= budget.records
    if budget.bytes is not None:
        assert plan.est_bytes <= budget.bytes
    # contiguity from the committed offset (or the end of the batch in flight), inside the log
    avail = _available(snapshot, reserved)
    by_tp = {(p.topic, p.partition): p for p in snapshot.partitions}
    seen = set()
    for planned in plan.ranges:
        r = planned.range
        assert r.topic_partition not in seen, "one range per partition"
        seen.add(r.topic_partition)
        lag = by_tp[r.topic_partition]
        start, _ = avail[r.topic_partition]
        assert r.start == start
        assert lag.next_offset <= r.start < r.end <= lag.high_watermark
        assert planned.priority == lag.priority
        # no overlap with what is in flight
        assert not any(r.overlaps(x) for x in reserved)
    assert plan.lost == snapshot.lost_to_retention()
    assert DrainPlan.from_json(plan.to_json()) == plan


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_no_starvation_and_work_conservation(scenario) -> None:
    snapshot, reserved, budget = scenario
    plan = plan_batch(snapshot, budget, reserved=reserved)
    got = plan.records_by_priority()
    shares = fair_shares(snapshot, reserved)
    available = {p: s.capacity for p, s in shares.items()}
    total = sum(available.values())
    if budget.bytes is None:
        floor_ = min_share_records(budget)
        for p, a in available.items():
            assert got[p] >= min(a, floor_), f"priority {p} starved"
        assert plan.records == min(budget.records, total), "work conserving"
    elif plan.records < min(budget.records, total):
        # only the byte budget may stop the plan: no priority's next fair record fits
        left = budget.bytes - plan.est_bytes
        for p, s in shares.items():
            if got[p] < s.capacity:
                assert s.bytes_for(got[p] + 1) - s.bytes_for(got[p]) > left


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_fair_across_partitions(scenario) -> None:
    snapshot, reserved, budget = scenario
    plan = plan_batch(snapshot, budget, reserved=reserved)
    avail = _available(snapshot, reserved)
    counts: dict[int, dict[tuple[str, int], int]] = defaultdict(dict)
    for p in snapshot.partitions:
        counts[p.priority][(p.topic, p.partition)] = 0
    for r in plan.ranges:
        counts[r.priority][r.range.topic_partition] = r.range.count
    for per_partition in counts.values():
        for tp_i, c_i in per_partition.items():
            for c_j in per_partition.values():
                if c_i < c_j - 1:
                    assert c_i == avail[tp_i][1], "a partition got less than another only because it ran dry"


@settings(max_examples=100, deadline=None)
@given(scenarios(), st.dictionaries(st.integers(0, 3), st.lists(st.integers(0, 400), max_size=7)))
def test_flipkart_mode_properties(scenario, counts) -> None:
    snapshot, reserved, budget = scenario
    n = snapshot.n_priorities
    quotas = base_quotas(n, budget.records, "exp")
    history = PollHistory.from_counts({p: c for p, c in counts.items() if p < n}, quotas)
    plan = plan_batch(snapshot, budget, mode="flipkart", history=history, reserved=reserved)
    got = plan.records_by_priority()
    available = {p: s.capacity for p, s in fair_shares(snapshot, reserved).items()}
    assert plan.records <= budget.records
    if budget.bytes is not None:
        assert plan.est_bytes <= budget.bytes
    for p in range(n):
        assert got[p] <= min(plan.grants[p], available[p]), "capacity and backlog cap every priority"
        if budget.bytes is None:
            assert got[p] >= min(quotas[p], available[p]), "the base quota is always honoured"
            if plan.burst is None or plan.burst.priority != p:
                assert got[p] == min(quotas[p], available[p]), "no redistribution without a burst"


def test_plan_is_json_ready_for_spark() -> None:
    from kprio_core.splits import spark_offsets_json

    plan = plan_batch(busy(), Budget(50))
    start, end = spark_offsets_json(plan.offset_ranges())
    assert json.loads(start) == {"t-0": {"0": 0}, "t-1": {"0": 0}, "t-2": {"0": 0}}
    assert json.loads(end) == {"t-0": {"0": 7}, "t-1": {"0": 14}, "t-2": {"0": 29}}
