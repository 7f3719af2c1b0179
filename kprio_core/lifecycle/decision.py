"""What one tick decided for a topic (typed actions, what waits), and :class:`TickState`, the decision in the making.

The actions, in the order a driver carries them out (``orchestration.runtime.tick.apply``):

1. :class:`FailDeadRun` — mark failed the unfinished runs of a batch whose run died (the UI tells the truth);
   :class:`FailUntaken` — fail a batch whose run for its next attempt ended before it took it (the attempt is spent);
2. :class:`CarryOutLogChanges` — commit and record what was decided about changes of the log;
3. :class:`Launch` — request a run of a recorded batch (new, retry, resume, commit, re-drain);
4. :class:`RecordPlan` — record a new batch in the ledger, then launch it (why ``new``);
5. :class:`Skip` — nothing is launched: the reason says why (and what waits).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.errors import KprioError
from kprio_core.lifecycle.holds import describe_holds
from kprio_core.lifecycle.runs import Launch
from kprio_core.lifecycle.view import TickInputs, passing_cause
from kprio_core.model.drain_plan import DrainPlan
from kprio_core.model.log_state import Change, Decided, LogDecisions, Superseded
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.priority import Priority
from kprio_core.model.records import Batch, Hold
from kprio_core.model.snapshot import LagSnapshot
from kprio_core.model.states import BatchState


class Verdict(str, enum.Enum):
    """The outcome of a tick for one logical topic, in a word."""

    LAUNCH = "launch"
    """Recorded batches need runs (new, retried, resumed or to commit); a plan may come too."""
    PLAN = "plan"
    """A new batch."""
    THROTTLED = "throttled"
    """Every priority with backlog is over its rate quota: wait ``retry_in_s``."""
    BUSY = "busy"
    """Every priority with backlog has its slots taken by batches in flight."""
    HELD = "held"
    """The only backlog left is on partitions held by failed batches or lost offsets."""
    BLOCKED = "blocked"
    """Nothing can be planned: the broker is unreachable or a topic is missing."""
    IDLE = "idle"
    """No backlog."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class FailDeadRun:
    """A batch in flight whose run died: its unfinished runs (``run_ids``) are marked failed; a resume follows."""

    batch: Batch
    why: str
    run_ids: tuple[str, ...] = ()
    """The run that held its lease and runs orphaned by a killed kprio process (the driver skips finished ones)."""


@dataclass(frozen=True)
class FailUntaken:
    """A batch whose run for ``attempt`` ended before taking it: it fails there, transient, holding its partitions,
    retried at ``retry_at`` (tick rule 1b)."""

    batch: Batch
    attempt: int
    why: str
    retry_at: datetime | None

    def as_failed(self) -> Batch:
        """The batch as the ledger holds it once this is carried out (``Attempts.fail_untaken``)."""
        return replace(self.batch, state=BatchState.FAILED, attempts=self.attempt, reason=self.why, transient=True,
                       transient_streak=self.batch.transient_streak + 1, retry_at=self.retry_at, lease=None)


@dataclass(frozen=True)
class CarryOutLogChanges:
    """Commit the restores and resets decided, record the beliefs and events, re-plan re-drains."""

    changes: tuple[Change, ...]
    decided: tuple[Decided, ...]
    superseded: tuple[Superseded, ...] = ()


@dataclass(frozen=True)
class RecordPlan:
    """Record ``plan`` as a new batch (the ledger refuses it when another planner got there first), then launch it."""

    plan: DrainPlan


@dataclass(frozen=True)
class Skip:
    """Nothing launched this tick, and why."""

    reason: str


TickAction = FailDeadRun | FailUntaken | CarryOutLogChanges | Launch | RecordPlan | Skip


@dataclass(frozen=True)
class Decision:
    """The outcome for one topic: the actions, what waits and why, and what the rules saw."""

    topic: str
    verdict: Verdict
    actions: tuple[TickAction, ...] = ()
    holds: tuple[Hold, ...] = ()
    waiting: tuple[str, ...] = ()
    """Why some work waits (retries waiting for a backoff or a slot, full priorities, throttles, claims)."""
    reason: str | None = None
    snapshot: LagSnapshot | None = None
    throttled: Mapping[Priority, float] = field(default_factory=dict)
    retry_in_s: float | None = None
    error: KprioError | None = None
    """The typed error behind a blocked decision, for callers that raise it (``kprio plan``)."""
    changes: tuple[Change, ...] = ()
    """Every partition's log state this tick (``kprio lag`` shows them; ok ones included)."""
    decided: tuple[Decided, ...] = ()
    """What this tick does about changes of the log kprio did not make (the driver carries them out first)."""
    superseded: tuple[Superseded, ...] = ()
    """Failed batches planned on an earlier incarnation of a partition: never run again, hold nothing."""
    cause: str | None = None
    """What a probe sees now that transient failures wait for (an output root, the broker), if anything."""

    @property
    def acts(self) -> bool:
        """True when a driver has something to carry out for the topic (anything but a skip).

        >>> Decision("orders", Verdict.IDLE, (Skip("no backlog"),)).acts
        False
        """
        return any(not isinstance(a, Skip) for a in self.actions)

    @property
    def launch(self) -> tuple[Launch, ...]:
        """Runs of recorded batches to request."""
        return tuple(a for a in self.actions if isinstance(a, Launch))

    @property
    def stuck(self) -> tuple[tuple[Batch, str], ...]:
        """Batches whose run died, with why."""
        return tuple((a.batch, a.why) for a in self.actions if isinstance(a, FailDeadRun))

    @property
    def untaken(self) -> tuple[FailUntaken, ...]:
        """Batches whose run ended before it took them: failed at that attempt."""
        return tuple(a for a in self.actions if isinstance(a, FailUntaken))

    @property
    def plan(self) -> DrainPlan | None:
        """The first new batch to record, if any (see :attr:`plans`)."""
        return next(iter(self.plans), None)

    @property
    def plans(self) -> tuple[DrainPlan, ...]:
        """Every new batch to record: one, or two when the tick planned caught-up priorities apart."""
        return tuple(a.plan for a in self.actions if isinstance(a, RecordPlan))

    def describe(self) -> str:
        """One line: the topic, what happens for it, and what waits."""
        return f"{self.topic}: {self.summary()}"

    def summary(self) -> str:
        """What happens, and what waits (without the topic's name).

        >>> Decision("orders", Verdict.IDLE, (Skip("no backlog"),), reason="no backlog").describe()
        'orders: no backlog'
        """
        parts = []
        if self.launch:
            parts.append("launch " + ", ".join(x.describe() for x in self.launch))
        for plan in self.plans:
            by_p = ", ".join(f"p{p}={n}" for p, n in plan.records_by_priority().items() if n)
            parts.append(f"plan {plan.records} records ({by_p})")
        if not parts and self.reason:
            parts.append(self.reason)
        if self.holds:
            parts.append(describe_holds(self.holds))
        return "; ".join(parts)


@dataclass(frozen=True)
class TickState:
    """One tick of one logical topic as :data:`kprio_core.lifecycle.tick.RULES` pass it on; :meth:`decision` answers."""

    config: KprioConfig
    topic: TopicSettings
    inputs: TickInputs
    wanted: frozenset[Priority]
    """The priorities a plan may take: every one, or those a person asked for (the manual plan job)."""
    record_budget: int | None = None
    """A person's record budget (the manual plan job); None: the configured one."""
    manual: bool = False
    """A person's plan: the one batch asked for, never split."""
    dead_runs: tuple[FailDeadRun, ...] = ()
    untaken: tuple[FailUntaken, ...] = ()
    launches: tuple[Launch, ...] = ()
    waiting: tuple[str, ...] = ()
    holds: tuple[Hold, ...] = ()
    slots: Mapping[Priority, tuple[str, ...]] = field(default_factory=dict)
    """Per priority, the batches that take its slots: in flight, then those this tick retries or re-drains."""
    log: LogDecisions = LogDecisions()
    snapshot: LagSnapshot | None = None
    """The lag snapshot as it stands once the log's decisions are carried out (None: there is none)."""
    reserved: tuple[OffsetRange, ...] = ()
    """What no plan takes: the ranges in flight and the held partitions."""
    backlog: Mapping[Priority, int] = field(default_factory=dict)
    free: frozenset[Priority] = frozenset()
    """The priorities the plan takes: with backlog outside the reservations, then a free slot, not throttled."""
    throttled: Mapping[Priority, float] = field(default_factory=dict)
    plans: tuple[DrainPlan, ...] = ()
    verdict: Verdict | None = None
    reason: str | None = None
    error: KprioError | None = None
    retry_in_s: float | None = None

    @classmethod
    def start(cls, config: KprioConfig, topic: TopicSettings, inputs: TickInputs, *,
              priorities: Iterable[Priority] | None = None, record_budget: int | None = None) -> TickState:
        """Nothing decided yet: the slots the batches in flight take."""
        wanted = frozenset(range(topic.priorities) if priorities is None else priorities)
        return cls(config, topic, inputs, wanted, record_budget, priorities is not None or record_budget is not None,
                   slots={p: tuple(ids) for p, ids in inputs.view.slots().items()})

    @property
    def full(self) -> dict[Priority, tuple[str, ...]]:
        """The priorities whose ``planner.max_in_flight`` slots are all taken, with the batches taking them."""
        return {p: ids for p, ids in self.slots.items() if len(ids) >= self.config.planner.max_in_flight}

    def taking(self, taken: Iterable[tuple[str, Iterable[Priority]]]) -> dict[Priority, tuple[str, ...]]:
        """The slots once each batch of ``taken`` (its id, its priorities) takes one of each of its priorities."""
        slots = dict(self.slots)
        for batch_id, priorities in taken:
            for p in priorities:
                slots[p] = (*slots.get(p, ()), batch_id)
        return slots

    def ends(self, verdict: Verdict, reason: str | None = None, **more: object) -> TickState:
        """The state with its verdict settled: no rule after this one plans."""
        return replace(self, verdict=verdict, reason=reason, **more)

    def decision(self) -> Decision:
        """The answer: a plan-less verdict becomes LAUNCH when runs are to be requested (not when blocked)."""
        assert self.verdict is not None, "a tick ends with a verdict"
        verdict, superseded = self.verdict, tuple(self.inputs.view.superseded)
        if self.plans:
            verdict = Verdict.LAUNCH if self.launches else Verdict.PLAN
        elif self.launches and verdict is not Verdict.BLOCKED:
            verdict = Verdict.LAUNCH
        actions: list[TickAction] = [*self.dead_runs, *self.untaken]
        if self.log.changes or self.log.decided or superseded:
            actions.append(CarryOutLogChanges(self.log.changes, self.log.decided, superseded))
        actions += [*self.launches, *(RecordPlan(p) for p in self.plans)]
        if not self.launches and not self.plans:
            actions.append(Skip(self.reason or str(verdict)))
        return Decision(self.inputs.view.logical_topic, verdict, tuple(actions), self.holds, self.waiting, self.reason,
                        snapshot=self.snapshot, throttled=self.throttled, retry_in_s=self.retry_in_s, error=self.error,
                        changes=self.log.changes, decided=self.log.decided, superseded=superseded,
                        cause=passing_cause(self.inputs))
