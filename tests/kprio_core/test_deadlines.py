"""Objective-steered planning: the rules in a numbered table, the planner's invariants for any objectives, and the
planner against the earliest-deadline-first reference on random traces."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kprio_core.deadlines import DeadlineShare, Objectives, due_reasons, edf_targets, must_go_now, segments
from kprio_core.model.snapshot import LagSnapshot, PartitionLag
from kprio_core.planner import Budget, fair_shares, min_share_records, plan_batch
from kprio_core.shares import Slot
from kprio_core.simulator import simulate, simulate_all
from kprio_core.traces import Trace
from tests.kprio_core.test_planner import busy, part, scenarios, snap

NOW = 100_000


def timed(prio: int, hw: int, *marks: tuple[int, int], committed: int = 0) -> PartitionLag:
    return PartitionLag(f"t-{prio}", 0, prio, 0, hw, committed, times=marks)


def share(p: PartitionLag, objective_ms: int) -> DeadlineShare:
    return DeadlineShare([Slot(p, p.next_offset, p.backlog)], objective_ms, NOW)


RULES = [
    # (case, rule output, expected, why)
    (1, lambda: segments(Slot(timed(0, 10, (90_000, 4), (99_000, 10)), 0, 10), 6_000, NOW),
     [(96_000, 4), (105_000, 6)], "a record between two marks is given the later mark's time"),
    (2, lambda: segments(Slot(timed(0, 10, (90_000, 4)), 0, 10), 6_000, NOW), [(96_000, 4), (106_000, 6)],
     "after the last mark: the snapshot's time"),
    (3, lambda: segments(Slot(timed(0, 10, (99_000, 4), (80_000, 8)), 0, 10), 6_000, NOW),
     [(86_000, 8), (106_000, 2)], "out-of-order timestamps: a record is as due as the most due one behind it"),
    (4, lambda: segments(Slot(timed(0, 10, (90_000, 4), committed=6), 6, 4), 6_000, NOW), [(106_000, 4)],
     "marks below the plan start count nothing"),
    (5, lambda: edf_targets({0: share(timed(0, 5, (95_000, 5)), 6_000), 2: share(timed(2, 9, (40_000, 9)), 60_000)},
                            6), {2: 6, 0: 0}, "priority 2's records are 100 s due, priority 0's 101 s"),
    (6, lambda: edf_targets({0: share(timed(0, 5, (94_000, 5)), 6_000), 2: share(timed(2, 1, (40_000, 1)), 60_000)},
                            6), {2: 1, 0: 5}, "one deadline (100 s): the more urgent priority first"),
    (7, lambda: must_go_now({0: share(timed(0, 30, (95_000, 10), (99_000, 30)), 6_000)}, 10, NOW, 1_000), 0,
     "10 due at 101 s, 20 more at 105 s: later batches of 10 drain them in time"),
    (8, lambda: must_go_now({0: share(timed(0, 30, (95_000, 10), (99_000, 30)), 6_000)}, 4, NOW, 1_000), 4,
     "batches of 4 cannot: as many as the batch takes"),
    (9, lambda: must_go_now({0: share(timed(0, 30, (95_000, 10), (96_000, 30)), 6_000)}, 10, NOW, 1_000), 10,
     "30 due by 102 s: 2 later batches of 10 leave 10 for now"),
    (10, lambda: due_reasons({0: share(timed(0, 2_400, (97_000, 2_400)), 6_000)}, {0: 2_400}, NOW),
     {0: "2,400 records due within 3 s of their objective"}, "the plan's reason"),
    (11, lambda: due_reasons({0: share(timed(0, 5, (90_000, 2), (99_000, 5)), 6_000)}, {0: 5}, NOW),
     {0: "5 records due within 5 s of their objective (2 past it)"}, "some past their objective already"),
    (12, lambda: due_reasons({0: share(timed(0, 5, (90_000, 5)), 6_000)}, {0: 1}, NOW),
     {0: "1 record past its objective"}, "all past it"),
    (13, lambda: Objectives.of({2: 10, 0: 0.5}, every_s=2.5), Objectives({2: 10_000, 0: 500}, 2_500),
     "seconds as the settings say them"),
]


@pytest.mark.parametrize(("case", "rule", "expected", "why"), RULES, ids=[str(c[0]) for c in RULES])
def test_rules(case, rule, expected, why) -> None:
    assert rule() == expected, why


def test_no_objective_set_plans_as_today() -> None:
    for snapshot in (busy(), busy(hw1=4), busy(avg=100.0)):
        today = plan_batch(snapshot, Budget(50, 3_000))
        assert plan_batch(snapshot, Budget(50, 3_000), objectives=Objectives({})) == today
        # an objective for a priority without backlog changes nothing either
        idle = snap(part(2, 0, 100), part(1, 0, 0), part(0, 0, 100))
        assert plan_batch(idle, Budget(50), objectives=Objectives({1: 5_000})) == plan_batch(idle, Budget(50))


def test_every_priority_with_an_objective_plans_by_deadline() -> None:
    # p0 (6 s) 40 records 5 s old; p2 (60 s) 100 records 30 s old: p0's are due first, then p2's.
    snapshot = LagSnapshot.of("t", 3, [timed(2, 100, (70_000, 100)), timed(0, 40, (95_000, 40))], taken_at_ms=NOW)
    plan = plan_batch(snapshot, Budget(50), objectives=Objectives({2: 60_000, 0: 6_000}))
    assert plan.records_by_priority() == {2: 10, 1: 0, 0: 40}
    assert plan.burst is None
    assert plan.due == {2: "10 records due within 30 s of their objective", 0: "40 records due within 1 s of their objective"}


def test_a_priority_without_an_objective_keeps_its_share_and_the_rest_follows_the_quotas() -> None:
    # p2 has no objective; p0 (10 s): 30 records due within 0.5 s, 30 within 9 s. Batches of 50 every second:
    # the 30 due first must go now (later batches can take the rest), then p2's quota and most urgent first.
    snapshot = LagSnapshot.of("t", 3, [timed(2, 500, (99_000, 500)), timed(0, 60, (90_500, 30), (99_000, 60))],
                              taken_at_ms=NOW)
    plan = plan_batch(snapshot, Budget(50), objectives=Objectives({0: 10_000}))
    assert plan.records_by_priority() == {2: 20, 1: 0, 0: 30}
    assert plan.due == {0: "30 records due within 1 s of their objective"}
    # Nothing due soon: today's split.
    calm = LagSnapshot.of("t", 3, [timed(2, 500, (99_000, 500)), timed(0, 60, (99_000, 60))], taken_at_ms=NOW)
    assert (plan_batch(calm, Budget(50), objectives=Objectives({0: 10_000})).records_by_priority()
            == plan_batch(calm, Budget(50)).records_by_priority() == {2: 43, 1: 0, 0: 7})


# --- the planner's invariants, for any objectives -----------------------------------------------------------------


@st.composite
def with_objectives(draw):
    """A planner scenario whose partitions carry time marks, and objectives for some of its priorities."""
    snapshot, reserved, budget = draw(scenarios())
    parts = []
    for p in snapshot.partitions:
        offsets = sorted(draw(st.lists(st.integers(p.log_start, p.high_watermark), max_size=4)))
        stamps = draw(st.lists(st.integers(0, 2_000), min_size=len(offsets), max_size=len(offsets)))
        parts.append(PartitionLag(p.topic, p.partition, p.priority, p.log_start, p.high_watermark, p.committed,
                                  p.avg_record_bytes, p.oldest_pending_ms, times=tuple(zip(stamps, offsets))))
    snapshot = LagSnapshot.of("t", snapshot.n_priorities, parts, taken_at_ms=2_000)
    ages = draw(st.dictionaries(st.integers(0, snapshot.n_priorities - 1), st.integers(0, 3_000)))
    return snapshot, reserved, budget, Objectives(ages, every_ms=draw(st.sampled_from([1, 250, 1_000])))


@settings(max_examples=200, deadline=None)
@given(with_objectives())
def test_no_plan_exceeds_a_budget_breaks_offset_order_or_starves_a_priority(scenario) -> None:
    snapshot, reserved, budget, objectives = scenario
    plan = plan_batch(snapshot, budget, reserved=reserved, objectives=objectives)
    assert plan.records <= budget.records
    if budget.bytes is not None:
        assert plan.est_bytes <= budget.bytes
    shares = fair_shares(snapshot, reserved)
    seen = set()
    for planned in plan.ranges:  # contiguous from where the partition may start, one range each, in the log
        r = planned.range
        assert r.topic_partition not in seen
        seen.add(r.topic_partition)
        [slot] = [s for s in shares[planned.priority].slots if (s.part.topic, s.part.partition) == r.topic_partition]
        assert r.start == slot.start and r.end <= slot.start + slot.capacity
        assert not any(r.overlaps(x) for x in reserved)
    if budget.bytes is not None:
        return
    got = plan.records_by_priority()
    available = {p: s.capacity for p, s in shares.items()}
    assert plan.records == min(budget.records, sum(available.values())), "work conserving"
    for p, a in available.items():
        if p not in objectives.max_age_ms:
            assert got[p] >= min(a, min_share_records(budget)), f"priority {p} (no objective) below its share"
        elif a and not got[p]:
            assert plan.records == budget.records, f"priority {p} drained nothing while budget was left"
    if all(p in objectives.max_age_ms for p, a in available.items() if a):
        # Earliest deadline first: no record left behind is due before a planned one.
        ordered = {p: DeadlineShare(shares[p].slots, age, snapshot.taken_at_ms)
                   for p, age in objectives.max_age_ms.items() if p in shares}
        last = [s.deadline_of(got[p]) for p, s in ordered.items() if got[p]]
        after = [s.deadline_of(got[p] + 1) for p, s in ordered.items() if got[p] < s.capacity]
        assert max(last, default=0) <= min(after, default=max(last, default=0))


# --- against earliest deadline first, on random traces ------------------------------------------------------------


@st.composite
def traces(draw, every_priority: bool = True):
    n = draw(st.integers(1, 4))
    budget = draw(st.integers((1 << n) - 1, 120))
    ticks = draw(st.integers(1, 30))
    rows = tuple(tuple(draw(st.integers(0, budget * 2)) if draw(st.booleans()) else 0 for _ in range(n))
                 for _ in range(ticks))
    objective = st.integers(0, 12) if every_priority else st.one_of(st.none(), st.integers(0, 12))
    objectives = tuple(draw(objective) for _ in range(n))
    weights = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    return Trace("random", budget, rows, weights, objectives=objectives)


@settings(max_examples=150, deadline=None)
@given(traces())
def test_the_kprio_policy_is_earliest_deadline_first_when_every_priority_has_an_objective(trace) -> None:
    results = simulate_all(trace, ["edf", "kprio"])
    edf, kprio = results["edf"], results["kprio"]
    assert kprio.waits == edf.waits
    assert kprio.late == edf.late and kprio.max_lateness == edf.max_lateness
    assert kprio.utilization == pytest.approx(1.0) and kprio.cap_violations == 0
    if not any(edf.late.values()):
        # Drained by its deadlines: a priority waits with nothing drained at most its objective.
        assert all(kprio.starved[p] <= o for p, o in enumerate(trace.objectives))


@settings(max_examples=100, deadline=None)
@given(traces(every_priority=False))
def test_with_some_priorities_without_an_objective_no_budget_is_wasted_and_none_starves(trace) -> None:
    kprio = simulate(trace, "kprio")
    assert kprio.utilization == pytest.approx(1.0) and kprio.cap_violations == 0
    assert all(kprio.starved[p] == 0 for p, o in enumerate(trace.objectives) if o is None)
