"""Property: any sequence of record / claim / drain / check / commit / fail / retry / replay / split keeps
every offset in at most one batch in flight or holding, never commits an offset twice, and the ledger
accepts or refuses exactly what a small model of its rules predicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, multiple, rule

from kprio_core.errors import BatchBusy, InvalidTransition, RangeConflict
from kprio_core.ledger import TRANSITIONS, BatchState, Ledger
from kprio_core.model.drain_plan import DrainPlan, PlannedRange
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import CheckReport, CommitReport, DrainResult, RangeStats

S = BatchState
LEASE_S = 30
OWNERS = ("run-a@h:1", "run-b@h:2")

# (topic, partition, offset after the committed offset, length): plans start at or after the
# committed offset of their partition, as the planner's do, or before it, as a plan made from a lag
# snapshot older than another driver's commit does (the ledger refuses those); 0-length ranges hold nothing.
spans = st.tuples(st.sampled_from(["orders-2", "orders-1"]), st.integers(0, 1), st.integers(-4, 12), st.integers(0, 8))
limits = st.none() | st.integers(1, 3)


def plan_of(ranges: list[OffsetRange]) -> DrainPlan:
    planned = tuple(PlannedRange(int(r.topic[-1]), r, est_bytes=r.count) for r in ranges)
    return DrainPlan("orders", "lag-aware", 100, None, {2: 67, 1: 33}, {2: 67, 1: 33}, planned)


def drained(batch_id: str, attempt: int, ranges: list[OffsetRange]) -> DrainResult:
    stats = tuple(RangeStats(int(r.topic[-1]), r, output=r.count, dead=0, distinct=r.count,
                             first=r.start if r.count else None, last=r.end - 1 if r.count else None) for r in ranges)
    return DrainResult(batch_id, attempt, "orders", stats, staging="/staging", seconds=0.5)


@dataclass
class Model:
    """What the test believes one batch is."""

    state: BatchState
    ranges: list[OffsetRange]
    attempts: int = 1
    redrain: bool = False
    lease: tuple[str, datetime] | None = None
    committed: bool = False

    @property
    def holding(self) -> bool:
        return self.state is S.FAILED and not self.redrain

    @property
    def taking(self) -> bool:
        return self.state.in_flight or self.holding

    @property
    def priorities(self) -> set[int]:
        return {int(r.topic[-1]) for r in self.ranges}


def overlapping(wanted: list[OffsetRange], model: dict[str, Model], but: str | None, *, new: bool) -> bool:
    for b, m in model.items():
        if b == but or not m.taking:
            continue
        for w in (w for w in wanted if w.count):
            for r in (r for r in m.ranges if r.count):
                if w.overlaps(r) or (new and m.holding and w.topic_partition == r.topic_partition and w.end > r.start):
                    return True
    return False


def slots_full(priorities: set[int], model: dict[str, Model], limit: int | None, but: str | None = None) -> bool:
    if limit is None:
        return False
    return any(sum(p in m.priorities for b, m in model.items() if m.state.in_flight and b != but) >= limit
               for p in priorities)


@dataclass
class Clock:
    now: datetime = field(default_factory=lambda: datetime(2025, 1, 2, tzinfo=UTC))

    def __call__(self) -> datetime:
        return self.now


class LedgerRules(RuleBasedStateMachine):
    batch_ids = Bundle("batch_ids")

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.ledger = Ledger("sqlite://", clock=self.clock)
        self.model: dict[str, Model] = {}
        self.committed: dict[tuple[str, int], int] = {}  # Kafka's committed offset per partition

    def predecessors(self, batch_id: str) -> set[str]:
        me = self.model[batch_id]
        if me.redrain:
            return set()
        starts: dict[tuple[str, int], int] = {}
        for r in (r for r in me.ranges if r.count):
            starts[r.topic_partition] = min(r.start, starts.get(r.topic_partition, r.start))
        return {b for b, m in self.model.items() if b != batch_id and m.taking and not m.redrain
                for r in m.ranges if r.count and r.start < starts.get(r.topic_partition, -1)}

    def lease_live(self, m: Model) -> bool:
        return m.lease is not None and m.lease[1] > self.clock.now

    # ------------------------------------------------------------------------------ rules

    @rule(target=batch_ids, raw=st.lists(spans, min_size=1, max_size=3), limit=limits)
    def record(self, raw, limit):
        starts = [max(0, self.committed.get((t, p), 0) + d) for t, p, d, _ in raw]
        ranges = [OffsetRange(t, p, start, start + n) for (t, p, _, n), start in zip(raw, starts, strict=True)]
        self_overlap = any(a.count and b.count and a.overlaps(b) for i, a in enumerate(ranges) for b in ranges[i + 1:])
        stale = any(r.count and r.start < self.committed.get(r.topic_partition, 0) for r in ranges)
        refused = (self_overlap or slots_full({int(r.topic[-1]) for r in ranges if r.count}, self.model, limit)
                   or overlapping(ranges, self.model, None, new=True) or stale)
        try:
            batch = self.ledger.batches.record_plan(plan_of(ranges), max_in_flight=limit)
        except RangeConflict:
            assert refused, f"refused a plan the rules allow: {ranges}"
            event("record: refused")
            return multiple()
        assert not refused, f"accepted a plan the rules refuse: {ranges}"
        # Empty ranges hold no offset: the ledger records only the others.
        self.model[batch.batch_id] = Model(S.PLANNED, [r for r in ranges if r.count])
        return batch.batch_id

    @rule(batch_id=batch_ids, owner=st.sampled_from(OWNERS))
    def claim(self, batch_id, owner):
        m = self.model[batch_id]
        try:
            self.ledger.leases.claim(batch_id, owner, LEASE_S)
        except InvalidTransition:
            assert not m.state.in_flight
            return
        except BatchBusy:
            assert self.lease_live(m) and m.lease[0] != owner
            event("claim: busy")
            return
        assert m.state.in_flight and not (self.lease_live(m) and m.lease[0] != owner)
        m.lease = (owner, self.clock.now + timedelta(seconds=LEASE_S))

    @rule(seconds=st.integers(1, 40))
    def tick(self, seconds):
        self.clock.now += timedelta(seconds=seconds)

    @rule(batch_id=batch_ids, action=st.sampled_from(["drain", "check", "fail"]))
    def move(self, batch_id, action):
        m = self.model[batch_id]
        asked = {"drain": S.DRAINED, "check": S.CHECKED, "fail": S.FAILED}[action]
        allowed = (m.state, asked) in TRANSITIONS
        try:
            if action == "drain":
                self.ledger.moves.mark_drained(batch_id, drained(batch_id, m.attempts, m.ranges))
            elif action == "check":
                self.ledger.moves.mark_checked(batch_id, CheckReport(()))
            else:
                self.ledger.moves.mark_failed(batch_id, "property test", retry_at=None)
        except InvalidTransition:
            assert not allowed, f"{m.state.value} -> {asked.value} was refused but is allowed"
            return
        assert allowed, f"{m.state.value} -> {asked.value} went through"
        m.state = asked
        if asked is S.FAILED:
            m.lease = None

    @rule(batch_id=batch_ids)
    def commit(self, batch_id):
        m = self.model[batch_id]
        blocking = {b.batch_id for b in self.ledger.batches.blocking_predecessors(batch_id)}
        assert blocking == self.predecessors(batch_id)
        if blocking and m.state is S.CHECKED:
            event("commit: waits for a predecessor")
            return  # the caller waits (ready_to_commit does not list it)
        ends: dict[tuple[str, int], int] = {}
        for r in (r for r in m.ranges if r.count):
            ends[r.topic_partition] = max(r.end, ends.get(r.topic_partition, 0))
        report = CommitReport.of({tp: (self.committed.get(tp), end) for tp, end in ends.items()}, {})
        try:
            self.ledger.moves.mark_committed(batch_id, report)
        except InvalidTransition:
            assert m.state is not S.CHECKED
            return
        assert m.state is S.CHECKED
        event("commit: done")
        m.state, m.lease, m.committed = S.COMMITTED, None, True
        for r in m.ranges:
            self.committed[r.topic_partition] = max(self.committed.get(r.topic_partition, 0), r.end)

    @rule(batch_id=batch_ids)
    def finish(self, batch_id):
        """The happy path of one run: drain and check a batch in flight, commit it unless it must wait."""
        if not self.model[batch_id].state.in_flight:
            return
        for action in ("drain", "check"):
            self.move(batch_id, action)
        self.commit(batch_id)

    @rule()
    def commit_ready(self):
        """What the sensor does: commit every batch ready to commit, oldest first."""
        for batch in self.ledger.batches.ready_to_commit("orders"):
            self.commit(batch.batch_id)

    @rule(batch_id=batch_ids, limit=limits)
    def retry(self, batch_id, limit):
        m = self.model[batch_id]
        try:
            got = self.ledger.attempts.retry(batch_id, reason="property retry", max_in_flight=limit)
        except InvalidTransition:
            assert m.state is S.COMMITTED
            return
        except BatchBusy:
            assert m.state.in_flight and self.lease_live(m)
            return
        except RangeConflict:
            assert m.state is S.FAILED and (slots_full(m.priorities, self.model, limit, but=batch_id)
                                            or overlapping(m.ranges, self.model, batch_id, new=False))
            return
        event(f"retry: of a {m.state.value} batch")
        if m.state is S.FAILED:
            assert not slots_full(m.priorities, self.model, limit, but=batch_id)
            m.state = S.PLANNED
        else:
            assert m.state.in_flight and not self.lease_live(m)
        m.attempts += 1
        m.lease = None
        assert (got.state, got.attempts) == (m.state, m.attempts)

    @rule(batch_id=batch_ids, limit=limits)
    def replay(self, batch_id, limit):
        m = self.model[batch_id]
        try:
            self.ledger.attempts.replay(batch_id, max_in_flight=limit)
        except InvalidTransition:
            assert m.state.in_flight
            return
        except RangeConflict:
            assert slots_full(m.priorities, self.model, limit, but=batch_id) or overlapping(
                m.ranges, self.model, batch_id, new=False)
            return
        assert not m.state.in_flight
        event(f"replay: of a {m.state.value} batch")
        m.redrain = m.redrain or m.state is S.COMMITTED
        m.state, m.attempts, m.lease = S.PLANNED, m.attempts + 1, None

    @rule(target=batch_ids, batch_id=batch_ids, pick=st.lists(st.booleans(), min_size=3, max_size=3))
    def split(self, batch_id, pick):
        m = self.model[batch_id]
        failing = [r for r, p in zip(m.ranges, pick) if p]
        try:
            child = self.ledger.attempts.split(batch_id, failing, "property split", retry_at=None)
        except InvalidTransition:
            assert not m.state.in_flight
            return multiple()
        except ValueError:
            assert not failing or len(set(failing)) == len(set(m.ranges))
            return multiple()
        assert m.state.in_flight and failing and set(failing) != set(m.ranges)
        event("split: done")
        moved = set(failing)
        self.model[child.batch_id] = Model(S.FAILED, [r for r in m.ranges if r in moved], m.attempts, m.redrain)
        m.ranges = [r for r in m.ranges if r not in moved]
        assert child.plan.offset_ranges() == tuple(self.model[child.batch_id].ranges)
        return child.batch_id

    # ------------------------------------------------------------------------------ invariants

    @invariant()
    def no_offset_is_taken_or_committed_twice(self):
        batches = self.ledger.batches.find()  # one read for both (the invariants run after every step)
        taken = sorted(r for b in batches if b.in_flight or b.holds for r in b.plan.offset_ranges() if r.count)
        for a, b in pairwise(taken):
            assert not a.overlaps(b), f"{a} and {b} are both in flight or held"
        done = sorted(r for b in batches if b.committed_at is not None for r in b.plan.offset_ranges() if r.count)
        for a, b in pairwise(done):
            assert not a.overlaps(b), f"{a} and {b} were both committed"

    @invariant()
    def the_ledger_matches_the_model(self):
        assert {b.batch_id for b in self.ledger.batches.in_flight()} == {
            b for b, m in self.model.items() if m.state.in_flight}
        assert self.ledger.batches.reserved_ranges("orders") == sorted(
            r for m in self.model.values() if m.state.in_flight for r in m.ranges if r.count)
        assert {h.batch_id for h in self.ledger.batches.holds("orders")} == {
            b for b, m in self.model.items() if m.holding and any(r.count for r in m.ranges)}
        ready = [b.batch_id for b in self.ledger.batches.ready_to_commit("orders")]
        assert set(ready) == {b for b, m in self.model.items() if m.state is S.CHECKED and not self.predecessors(b)}

    def teardown(self) -> None:
        self.ledger.close()


LedgerRules.TestCase.settings = settings(
    max_examples=80, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_ledger_rules = LedgerRules.TestCase
