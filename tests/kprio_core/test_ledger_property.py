"""Property: any sequence of record / mark / fail / replay keeps in-flight batches disjoint,
and the ledger accepts or refuses exactly what a tiny model of the rules predicts."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, multiple, rule

from kprio_core.errors import InvalidTransition, RangeConflict
from kprio_core.ledger import TRANSITIONS, BatchState, Ledger
from kprio_core.offsets import OffsetRange
from kprio_core.drain_plan import DrainPlan, PlannedRange

S = BatchState
TARGET = {"drain": S.DRAINED, "check": S.CHECKED, "commit": S.COMMITTED, "fail": S.FAILED, "replay": S.PLANNED}

spans = st.builds(
    lambda topic, partition, start, length: OffsetRange(topic, partition, start, start + length),
    st.sampled_from(["orders-2", "orders-1"]),
    st.integers(0, 1),
    st.integers(0, 30),
    st.integers(0, 8),  # 0: empty ranges hold nothing and never conflict
)


def plan_of(ranges: list[OffsetRange]) -> DrainPlan:
    planned = tuple(PlannedRange(int(r.topic[-1]), r, est_bytes=r.count) for r in ranges)
    return DrainPlan("orders", "lag-aware", 100, None, {2: 67, 1: 33}, {2: 67, 1: 33}, planned)


def overlapping(a: list[OffsetRange], b: list[OffsetRange]) -> bool:
    return any(x.count and y.count and x.overlaps(y) for x in a for y in b)


class LedgerRules(RuleBasedStateMachine):
    batch_ids = Bundle("batch_ids")

    def __init__(self) -> None:
        super().__init__()
        self.ledger = Ledger("sqlite://")
        self.model: dict[str, tuple[BatchState, list[OffsetRange]]] = {}

    def held(self, but: str | None = None) -> list[OffsetRange]:
        return [r for b, (s, rs) in self.model.items() if s.in_flight and b != but for r in rs]

    def flying(self) -> int:
        return sum(s.in_flight for s, _ in self.model.values())

    @rule(target=batch_ids, ranges=st.lists(spans, min_size=1, max_size=3), limit=st.none() | st.integers(1, 3))
    def record(self, ranges: list[OffsetRange], limit: int | None):
        refused = (
            any(overlapping([a], [b]) for i, a in enumerate(ranges) for b in ranges[i + 1 :])
            or (limit is not None and self.flying() >= limit)
            or overlapping(ranges, self.held())
        )
        try:
            batch = self.ledger.record_plan(plan_of(ranges), max_in_flight=limit)
        except RangeConflict:
            assert refused, f"refused a plan the rules allow: {ranges}"
            return multiple()
        assert not refused, f"accepted a plan the rules refuse: {ranges}"
        self.model[batch.batch_id] = (S.PLANNED, ranges)
        return batch.batch_id

    @rule(batch_id=batch_ids, action=st.sampled_from(sorted(TARGET)))
    def move(self, batch_id: str, action: str):
        state, ranges = self.model[batch_id]
        asked = TARGET[action]
        allowed = (state, asked) in TRANSITIONS
        conflict = action == "replay" and allowed and overlapping(ranges, self.held(but=batch_id))
        try:
            if action == "drain":
                got = self.ledger.mark_drained(batch_id, {"ranges": []})
            elif action == "check":
                got = self.ledger.mark_checked(batch_id, {})
            elif action == "commit":
                got = self.ledger.mark_committed(batch_id, {})
            elif action == "fail":
                got = self.ledger.mark_failed(batch_id, "property test")
            else:
                got = self.ledger.replay(batch_id)
        except InvalidTransition:
            assert not allowed, f"{state.value} -> {asked.value} was refused but is allowed"
            return
        except RangeConflict:
            assert conflict, f"replay of {batch_id} refused without an overlap"
            return
        assert allowed and not conflict, f"{state.value} -> {asked.value} went through"
        assert got.state is asked
        self.model[batch_id] = (asked, ranges)

    @invariant()
    def in_flight_batches_are_disjoint_and_match_the_model(self):
        reserved = self.ledger.reserved_ranges("orders")
        for a, b in zip(reserved, reserved[1:]):
            assert not a.overlaps(b), f"{a} and {b} are both in flight"
        assert {b.batch_id for b in self.ledger.in_flight()} == {b for b, (s, _) in self.model.items() if s.in_flight}
        assert reserved == sorted(r for r in self.held() if r.count)

    def teardown(self) -> None:
        self.ledger.close()


LedgerRules.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_ledger_rules = LedgerRules.TestCase
