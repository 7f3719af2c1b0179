"""A drain plan: the offset ranges of one batch and every decision that produced them.

Plans travel to the ledger, to Dagster metadata and to Spark, so they round-trip through JSON.

>>> from kprio_core.model.offsets import OffsetRange
>>> plan = DrainPlan(
...     logical_topic="orders", mode=PlanMode.LAG_AWARE, record_budget=50, byte_budget=None,
...     quotas={2: 29, 1: 14, 0: 7}, grants={2: 29, 1: 14, 0: 7},
...     ranges=(PlannedRange(2, OffsetRange("orders-2", 0, 0, 29), est_bytes=5800),),
... )
>>> plan.records, plan.records_by_priority()
(29, {2: 29, 1: 0, 0: 0})
>>> DrainPlan.from_json(plan.to_json()) == plan
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import TypeAdapter

from kprio_core.model.offsets import OffsetRange
from kprio_core.model.priority import Priority


class PlanMode(StrEnum):
    """How the planner grants records over the base quotas (``planner.mode``; see :mod:`kprio_core.planner`)."""

    LAG_AWARE = "lag-aware"
    """The default: unused quota flows at once to the others, most urgent first, after minimum shares."""
    FLIPKART = "flipkart"
    """flipkart's window rule: base quota + burst from the poll history (:mod:`kprio_core.burst`)."""


@dataclass(frozen=True, slots=True)
class PlannedRange:
    """One offset range of a plan, with the priority it serves and its estimated size."""

    priority: Priority
    range: OffsetRange
    est_bytes: int = 0


@dataclass(frozen=True, slots=True)
class BurstDecision:
    """Who got extra records on top of the base quota, how many, and why."""

    priority: Priority | None
    extra: int
    reason: str


@dataclass(frozen=True)
class DrainPlan:
    """The offset ranges of one batch plus the budget, quotas and burst that produced them."""

    logical_topic: str
    mode: PlanMode
    record_budget: int
    byte_budget: int | None
    quotas: Mapping[Priority, int]
    """Base quota per priority (exponential or linear split of the record budget)."""
    grants: Mapping[Priority, int]
    """Records each priority was allowed this batch, after burst / water-filling."""
    ranges: tuple[PlannedRange, ...]
    burst: BurstDecision | None = None
    lost: tuple[OffsetRange, ...] = ()
    """Offsets deleted by retention before they were drained (committed < log start)."""
    backlog_before: Mapping[Priority, int] = field(default_factory=dict)
    snapshot_taken_at_ms: int = 0
    incarnations: Mapping[str, int] = field(default_factory=dict)
    """Incarnation per ``topic[partition]`` when above 1: part of the output's identity, so files never collide."""
    log_changes: tuple[str, ...] = ()
    """Changes of the log kprio did not make, seen and decided since the previous batch (shown in its metadata)."""
    topic_ids: Mapping[str, str] = field(default_factory=dict)
    """Topic ids when planned: a batch whose topic is recreated in flight must notice before it publishes or commits."""
    due: Mapping[Priority, str] = field(default_factory=dict)
    """Per priority with an objective, how close its planned records are to breaking it (``deadlines.due_reasons``)."""

    def __post_init__(self) -> None:
        # A plan written by hand (a replay, a test, a benchmark) may name its mode by value: hold the member.
        object.__setattr__(self, "mode", PlanMode(self.mode))

    def changed_logs(self, now: Mapping[str, str | None]) -> dict[str, str]:
        """The plan's topics whose log is another one now (``now``: topic ids, None: deleted), with what changed.

        >>> r = PlannedRange(2, OffsetRange("orders-2", 0, 0, 5))
        >>> plan = DrainPlan("orders", "lag-aware", 10, None, {}, {}, (r,), topic_ids={"orders-2": "A"})
        >>> plan.changed_logs({"orders-2": "A"}), plan.changed_logs({"orders-2": "B"}), plan.changed_logs({})
        ({}, {'orders-2': 'recreated: topic id A, now B'}, {'orders-2': 'deleted'})
        """
        mine = {r.range.topic for r in self.ranges if r.range.count}
        changed = {}
        for topic, planned in sorted(self.topic_ids.items()):
            if topic not in mine:
                continue
            current = now.get(topic)
            if current is None:
                changed[topic] = "deleted"
            elif current != planned:
                changed[topic] = f"recreated: topic id {planned}, now {current}"
        return changed

    def due_line(self) -> str:
        """Why the priorities with an objective got their records, on one line (empty without objectives).

        >>> DrainPlan("o", "lag-aware", 10, None, {}, {}, (), due={0: "4 records past their objective"}).due_line()
        'priority 0: 4 records past their objective'
        """
        return "; ".join(f"priority {p}: {why}" for p, why in self.due.items())

    def incarnation_of(self, topic: str, partition: int) -> int:
        """The incarnation of ``topic[partition]`` this plan drains (1 unless recorded otherwise)."""
        return self.incarnations.get(f"{topic}[{partition}]", 1)

    @property
    def records(self) -> int:
        return sum(r.range.count for r in self.ranges)

    @property
    def est_bytes(self) -> int:
        return sum(r.est_bytes for r in self.ranges)

    @property
    def is_empty(self) -> bool:
        return not any(r.range.count for r in self.ranges)

    def offset_ranges(self) -> tuple[OffsetRange, ...]:
        return tuple(r.range for r in self.ranges)

    def records_by_priority(self) -> dict[Priority, int]:
        """Planned records per priority, every priority of the quota present."""
        totals = {p: 0 for p in sorted(self.quotas, reverse=True)}
        for r in self.ranges:
            totals[r.priority] = totals.get(r.priority, 0) + r.range.count
        return totals

    def priority_of(self, topic: str) -> Priority:
        for r in self.ranges:
            if r.range.topic == topic:
                return r.priority
        raise KeyError(f"topic {topic!r} is not in the plan of {self.logical_topic!r}")

    def to_json(self) -> str:
        return _ADAPTER.dump_json(self).decode()

    @classmethod
    def from_json(cls, text: str | bytes) -> DrainPlan:
        return _ADAPTER.validate_json(text)


_ADAPTER: TypeAdapter[DrainPlan] = TypeAdapter(DrainPlan)
