"""The simulator: metrics on hand-computed tiny traces, and the done-when properties on built-in traces."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import pytest

from kprio_core.errors import PolicyBroke, TraceInvalid
from kprio_core.planner import Budget, plan_batch
from kprio_core.simulator import (
    POLICIES,
    KprioPolicy,
    TickView,
    fair_split,
    percentile,
    simulate,
    simulate_all,
)
from kprio_core.traces import BUILT_IN, Trace, built_in, load_trace_file, trace_from_json


class Scripted:
    """Drains exactly the scripted records per tick from priority 0, partition 0 (one-priority traces)."""

    def __init__(self, per_tick: Sequence[int]) -> None:
        self.per_tick = per_tick

    def drain(self, view: TickView) -> list[list[int]]:
        return [[self.per_tick[view.tick]]]


def one_priority(arrivals: Sequence[int], budget: int) -> Trace:
    return Trace("tiny", budget, tuple((n,) for n in arrivals))


# --- metrics on tiny hand-computed traces ----------------------------------------------------


def test_record_drained_in_its_arrival_tick_waits_zero() -> None:
    r = simulate(one_priority([3], budget=5), "strict")
    assert r.waits[0] == {0: 3}
    assert asdict(r.wait[0]) == {"p50": 0, "p95": 0, "max": 0}


def test_fifo_inside_a_priority() -> None:
    # Budget 1: A, B arrive at 0, C at 1. FIFO drains A@0 (0), B@1 (1), C@2 (1); LIFO would give C 0 and B 2.
    r = simulate(one_priority([2, 1, 0], budget=1), "strict")
    assert r.waits[0] == {0: 1, 1: 2}
    assert r.wait[0].max == 1


def test_records_left_at_the_end_count_their_wait_so_far() -> None:
    # 3 records at tick 0, 1 per tick over 2 ticks: waits 0 and 1 drained, the last one is still
    # waiting after tick 1 and counts 2 - 0 = 2.
    r = simulate(one_priority([3, 0], budget=1), "strict")
    assert r.waits[0] == {0: 1, 1: 1, 2: 1}
    assert asdict(r.wait[0]) == {"p50": 1, "p95": 2, "max": 2}
    assert r.backlog_by_tick == ((2,), (1,))


def test_utilization_is_drained_over_min_of_budget_and_backlog() -> None:
    # Budget 4, 6 records at tick 0, a policy draining 1 per tick: available 4 + 4 + 4, drained 3.
    r = simulate(one_priority([6, 0, 0], budget=4), Scripted([1, 1, 1]))
    assert r.utilization == pytest.approx(3 / 12)
    # Idle ticks do not count against a policy: only 2 records ever waited, both drained at once.
    assert simulate(one_priority([2, 0, 0], budget=4), "strict").utilization == 1.0


def test_starved_is_the_longest_run_of_ticks_with_backlog_and_nothing_drained() -> None:
    # Backlog the whole time; nothing drained at ticks 1-3 (run 3) and 5-6 (run 2).
    r = simulate(one_priority([10, 0, 0, 0, 0, 0, 0], budget=10), Scripted([1, 0, 0, 0, 1, 0, 0]))
    assert r.starved == {0: 3}


def test_a_tick_without_backlog_ends_a_starvation_run() -> None:
    # Idle tick 2 (nothing waiting) splits the runs: 2 ticks, then 1 tick.
    r = simulate(one_priority([1, 0, 0, 1, 0], budget=1), Scripted([0, 0, 1, 0, 1]))
    assert r.starved == {0: 2}


def test_strict_starves_the_lowest_priority_when_the_top_fills_the_budget() -> None:
    r = simulate(Trace("t", budget=2, arrivals=((1, 2), (1, 2), (0, 0))), "strict")
    assert r.starved == {1: 0, 0: 2}
    assert r.waits[0] == {2: 1, 1: 1}  # both drained at tick 2, once p1 is empty: arrived 0 and 1


def test_cap_violations_are_counted_not_clamped() -> None:
    r = simulate(one_priority([5, 5], budget=2), Scripted([5, 3]))
    assert r.cap_violations == 2
    assert r.drained_by_tick == (5, 3)
    assert r.utilization == pytest.approx(8 / 4)


def test_policy_draining_records_that_are_not_there_is_an_error() -> None:
    with pytest.raises(PolicyBroke, match=r"policy 'Scripted' at tick 0: drains 4 from priority 0 partition 0, which holds 3"):
        simulate(one_priority([3], budget=10), Scripted([4]))


def test_waits_are_exact_for_huge_counts_because_queues_hold_runs() -> None:
    # A billion records: one (tick, count) run, not a billion objects.
    r = simulate(one_priority([10**9, 0, 0], budget=10**8), "strict")
    assert sum(r.waits[0].values()) == 10**9
    assert r.waits[0] == {0: 10**8, 1: 10**8, 2: 10**8, 3: 7 * 10**8}
    assert asdict(r.wait[0]) == {"p50": 3, "p95": 3, "max": 3}


def test_partitions_are_fifo_each_and_waits_are_reported_per_priority() -> None:
    # Weights 1:1 -> 2 records per partition at tick 0; budget 2 drains one of each per tick.
    r = simulate(Trace("t", 2, ((4,), (0,)), partition_weights=(1, 1)), "strict")
    assert r.waits == {0: {0: 2, 1: 2}}


@pytest.mark.parametrize(
    ("histogram", "pct", "expected", "why"),
    [
        ({0: 1}, 50, 0, "one record"),
        ({0: 50, 9: 50}, 50, 0, "rank 50 of 100 is the last 0"),
        ({0: 50, 9: 51}, 50, 9, "rank 51 of 101 is the first 9"),
        ({0: 95, 9: 5}, 95, 0, "exactly 95% at 0"),
        ({0: 94, 9: 6}, 95, 9, "only 94% at 0"),
        ({}, 95, None, "no records"),
    ],
)
def test_percentile_is_nearest_rank(histogram: dict[int, int], pct: int, expected: int | None, why: str) -> None:
    assert percentile(histogram, pct) == expected, why


@pytest.mark.parametrize(
    ("amount", "caps", "start", "expected"),
    [
        (10, [2, 10, 10], 0, [2, 4, 4]),
        (3, [9, 9, 9, 9], 1, [0, 1, 1, 1]),
        (100, [1, 2, 3], 0, [1, 2, 3]),
        (0, [5, 5], 0, [0, 0]),
        (7, [0, 7, 0], 2, [0, 7, 0]),
    ],
)
def test_fair_split(amount: int, caps: list[int], start: int, expected: list[int]) -> None:
    assert fair_split(amount, caps, start) == expected
    assert sum(expected) == min(amount, sum(caps))


def test_round_robin_hands_what_a_light_priority_leaves_to_the_others() -> None:
    # Budget 9 over 3 priorities: p0 has 1, so p1 and p2 share the other 8.
    r = simulate(Trace("t", 9, ((1, 20, 20),)), "round_robin")
    assert r.drained_by_tick == (9,)
    assert r.backlog_by_tick == ((0, 16, 16),)


def test_flipkart_bursts_only_after_the_window_saw_the_top_max_out() -> None:
    # Budget 7 -> quotas {2: 4, 1: 2, 0: 1}. p1 and p0 idle, p2 flooded: 4 per tick until 4 of the
    # last 6 polls maxed out, then 4 + the idle quotas (2 + 1) = 7.
    r = simulate(Trace("t", 7, ((0, 0, 100),) + ((0, 0, 0),) * 5), "flipkart")
    assert r.drained_by_tick == (4, 4, 4, 4, 7, 7)


def test_kprio_policy_drains_what_the_planner_plans() -> None:
    # The simulated snapshot goes through plan_batch unchanged: per-partition counts equal the plan's ranges.
    view = TickView(3, 50, ((40, 1, 1, 1), (0, 0, 0, 0), (30, 2, 0, 2)),
                    ((10, 4, 4, 4), (0, 0, 0, 0), (5, 5, 0, 5)),
                    ((0, 2, 3, 3), (None,) * 4, (1, 2, None, 3)))
    policy = KprioPolicy()
    drained = policy.drain(view)
    plan = plan_batch(policy.snapshot(view), Budget(records=50), mode="lag-aware")
    assert [sum(row) for row in drained] == [plan.records_by_priority()[p] for p in range(3)]
    assert sum(map(sum, drained)) == 50
    # Fair across partitions: the hot partition of p0 does not take the cold ones' records.
    assert drained[0][1:] == [1, 1, 1]
    starts = {(r.range.topic, r.range.partition): r.range.start for r in plan.ranges}
    assert starts[("sim-0", 0)] == 10 and starts[("sim-2", 3)] == 5


# --- the done-when properties on every built-in trace -----------------------------------------

RESULTS = {name: simulate_all(built_in(name)) for name in BUILT_IN}


@pytest.mark.parametrize("name", list(BUILT_IN))
def test_kprio_beats_or_ties_every_policy_on_built_in_traces(name: str) -> None:
    results = RESULTS[name]
    kprio, flipkart = results["kprio"], results["flipkart"]
    top = max(kprio.wait)
    assert kprio.cap_violations == 0
    for other, r in results.items():
        assert kprio.utilization >= r.utilization - 1e-12, f"{other} used more of the budget on {name}"
    assert kprio.wait[top].p95 <= flipkart.wait[top].p95
    assert set(kprio.starved.values()) == {0}


@pytest.mark.parametrize("budget", [20, 37, 1000])
@pytest.mark.parametrize("name", list(BUILT_IN))
def test_kprio_properties_hold_under_other_budgets(name: str, budget: int) -> None:
    results = simulate_all(built_in(name, budget=budget, ticks=120))
    kprio = results["kprio"]
    assert kprio.cap_violations == 0 and set(kprio.starved.values()) == {0}
    assert all(kprio.utilization >= r.utilization - 1e-12 for r in results.values())
    assert kprio.wait[2].p95 <= results["flipkart"].wait[2].p95


def test_strict_starves_the_lowest_priority_where_the_traces_show_it() -> None:
    assert RESULTS["steady"]["strict"].starved[0] == built_in("steady").ticks  # never drained once
    assert RESULTS["late_burst"]["strict"].starved[0] >= 8  # the whole burst
    assert RESULTS["late_burst"]["strict"].starved[1] >= 8
    assert RESULTS["skewed_partitions"]["strict"].starved[0] >= 20  # every loud half-period


def test_built_in_traces_are_not_trivial() -> None:
    """Each trace's point shows in the numbers, so the kprio properties above are not free."""
    for name in BUILT_IN:
        trace = built_in(name)
        assert any(sum(row) > trace.budget for row in trace.arrivals), f"{name} never overloads"
    # late_burst: flipkart waits for history before bursting, and its burst overshoots the budget.
    late = RESULTS["late_burst"]
    assert late["kprio"].wait[2].p95 < late["flipkart"].wait[2].p95
    assert late["flipkart"].cap_violations >= 1
    # idle_high: quota reserved for an idle priority is wasted by flipkart, not by kprio.
    idle = RESULTS["idle_high"]
    assert idle["flipkart"].utilization < 0.8 and idle["kprio"].utilization == 1.0
    assert idle["kprio"].wait[0].max < idle["flipkart"].wait[0].max
    # skewed_partitions: quiet periods exist (backlog can drain) and flipkart wastes budget in them.
    skewed = built_in("skewed_partitions")
    assert any(sum(row) < skewed.budget // 2 for row in skewed.arrivals)
    assert RESULTS["skewed_partitions"]["flipkart"].utilization < 1.0
    # steady: round robin ignores urgency; kprio keeps the top priority ahead of it.
    steady = RESULTS["steady"]
    assert steady["kprio"].wait[2].p95 < steady["round_robin"].wait[2].p95


def test_every_policy_runs_on_every_trace_without_breaking() -> None:
    assert all(set(results) == set(POLICIES) for results in RESULTS.values())


# --- traces ----------------------------------------------------------------------------------


def test_built_in_traces_scale_with_budget_and_ticks() -> None:
    t = built_in("steady", budget=1000, ticks=7)
    assert t.budget == 1000 and t.ticks == 7 and t.arrivals[0] == (200, 400, 700)
    with pytest.raises(TraceInvalid, match="unknown trace 'nope'"):
        built_in("nope")


def test_partition_split_conserves_records() -> None:
    t = built_in("skewed_partitions")
    for tick, n in enumerate([0, 1, 9, 10, 13, 997]):
        parts = t.split(n, tick)
        assert sum(parts) == n and parts[0] == max(parts)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([1, 2], "expected a JSON object"),
        ({"arrivals": [[1]]}, "missing key 'budget'"),
        ({"budget": 0, "arrivals": [[1]]}, "budget must be an integer >= 1"),
        ({"budget": 5, "arrivals": []}, "arrivals is empty"),
        ({"budget": 5, "arrivals": [[1, 2], [3]]}, "tick 1 has 1 priorities, tick 0 has 2"),
        ({"budget": 5, "arrivals": [[1, -2]]}, r"arrivals\[0\]\[1\] must be an integer >= 0"),
        ({"budget": 5, "arrivals": [[1.5]]}, r"arrivals\[0\]\[0\] must be an integer >= 0"),
        ({"budget": 5, "arrivals": [1, 2]}, "must be a list of lists"),
        ({"budget": 5, "arrivals": [[1]], "ticks": 3}, "unknown key"),
    ],
)
def test_bad_trace_data_says_what(data: object, message: str) -> None:
    with pytest.raises(TraceInvalid, match=message):
        trace_from_json(data)


def test_trace_file_round_trip_and_errors(tmp_path) -> None:  # noqa: ANN001
    good = tmp_path / "t.json"
    good.write_text(json.dumps({"budget": 3, "arrivals": [[1, 2], [0, 4]], "partition_weights": [3, 1]}))
    t = load_trace_file(good)
    assert (t.budget, t.arrivals, t.partition_weights) == (3, ((1, 2), (0, 4)), (3, 1))
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    with pytest.raises(TraceInvalid, match=r"bad.json: not valid JSON"):
        load_trace_file(bad)
    with pytest.raises(TraceInvalid, match="cannot read trace file"):
        load_trace_file(tmp_path / "missing.json")


# --- objectives: lateness and the earliest-deadline-first reference ----------------------------------------------


def test_lateness_is_the_wait_beyond_the_objective_and_edf_is_the_bound() -> None:
    # Budget 3, tick 0: 3 records of p0 (objective 0 ticks) and 3 of p1 (3 ticks). strict drains p1 first, so p0's
    # three wait 1 tick: all late by 1. edf drains p0 first (deadline tick 0), p1 next tick (deadline tick 3).
    trace = Trace("t", 3, ((3, 3), (0, 0)), objectives=(0, 3))
    results = simulate_all(trace)
    assert list(results) == ["edf", *POLICIES, "kprio_quotas"]
    strict, edf = results["strict"], results["edf"]
    assert (strict.late, strict.max_lateness) == ({1: 0, 0: 3}, {1: 0, 0: 1})
    assert (edf.late, edf.max_lateness) == ({1: 0, 0: 0}, {1: 0, 0: 0})
    assert edf.waits == {1: {1: 3}, 0: {0: 3}}
    assert strict.to_dict()["late"] == {"1": 0, "0": 3} and strict.to_dict()["max_lateness"] == {"1": 0, "0": 1}
    # The age of the oldest pending record of p0, p1 after each tick: what it would wait if drained next tick.
    assert strict.oldest_by_tick == ((1, 0), (0, 0))


def test_a_priority_without_an_objective_has_no_lateness_and_edf_serves_it_last() -> None:
    trace = Trace("t", 2, ((2, 2), (0, 0)), objectives=(None, 3))
    edf = simulate(trace, "edf")
    assert edf.late == {1: 0, 0: None} and edf.to_dict()["max_lateness"] == {"1": 0, "0": None}
    assert edf.waits == {1: {0: 2}, 0: {1: 2}}
    # A trace without objectives: no edf, no lateness in the JSON (the shape of the issue before objectives).
    plain = simulate_all(Trace("t", 3, ((2, 2),)))
    assert list(plain) == list(POLICIES) and "late" not in plain["kprio"].to_dict()
    assert simulate(Trace("t", 3, ((2, 2),)), "edf").drained_by_tick == (3,), "asked for, edf drains (most urgent first)"


@pytest.mark.parametrize(("objectives", "message"), [
    ([1], "objectives must be one integer >= 0 .ticks. or null per priority .2."),
    ([1, -1], "got \\[1, -1\\]"),
    ([1, 2.5], "got \\[1, 2.5\\]"),
    ("3", "'objectives' must be a list"),
])
def test_bad_objectives_say_what(objectives: object, message: str) -> None:
    with pytest.raises(TraceInvalid, match=message):
        trace_from_json({"budget": 5, "arrivals": [[1, 2]], "objectives": objectives})


def test_objectives_survive_overrides() -> None:
    trace = trace_from_json({"budget": 5, "arrivals": [[1, 2]], "objectives": [None, 2], "about": "two"})
    assert trace.with_overrides(budget=9, ticks=3).objectives == (None, 2) and trace.about == "two"


SHIPPED = sorted((Path(__file__).resolve().parents[2] / "benchmarks" / "traces").glob("*.json"))


@pytest.mark.parametrize("budget", [None, 60, 150])
@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_kprio_keeps_every_objective_edf_keeps_on_the_shipped_traces(path: Path, budget: int | None) -> None:
    trace = load_trace_file(path).with_overrides(budget=budget)
    results = simulate_all(trace)
    edf, kprio = results["edf"], results["kprio"]
    assert kprio.utilization == 1.0 and kprio.cap_violations == 0
    assert all(kprio.max_lateness[p] <= edf.max_lateness[p] + 1 for p in kprio.late)
    if not any(edf.late.values()):
        assert not any(kprio.late.values()), "late where earliest deadline first is not"
        assert all(kprio.starved[p] <= o for p, o in enumerate(trace.objectives)), "drained by its deadlines"


def test_the_shipped_traces_show_what_objectives_change() -> None:
    """Today's split breaks an objective that a plan of the same budget keeps (the issue's two cases)."""
    floods = simulate_all(load_trace_file(SHIPPED[0]))
    assert SHIPPED[0].stem == "floods" and floods["kprio_quotas"].late[0] > 0 and floods["flipkart"].late[0] > 0
    late = simulate_all(load_trace_file(SHIPPED[1]))
    assert SHIPPED[1].stem == "late_urgent" and late["kprio_quotas"].late[2] > 0 and late["flipkart"].late[2] > 0
    assert late["kprio"].late[2] == 0
    overload = simulate_all(load_trace_file(SHIPPED[2]))
    assert SHIPPED[2].stem == "overload" and all(overload["edf"].late.values())  # none can keep every objective
    assert max(overload["kprio"].max_lateness.values()) < max(overload["strict"].max_lateness.values())
