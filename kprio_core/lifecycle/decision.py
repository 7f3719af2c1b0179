"""What one tick decided for one logical topic: typed actions for a driver to carry out, and what waits.

The actions, in the order a driver carries them out (``orchestration.runtime.tick.apply``):

1. :class:`FailDeadRun` — mark failed the unfinished runs of a batch whose run died (the UI tells the truth);
2. :class:`CarryOutLogChanges` — commit and record what was decided about changes of the log;
3. :class:`Launch` — request a run of a recorded batch (new, retry, resume, commit, re-drain);
4. :class:`RecordPlan` — record a new batch in the ledger, then launch it (why ``new``);
5. :class:`Skip` — nothing is launched: the reason says why (and what waits).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from kprio_core.errors import KprioError
from kprio_core.lifecycle.holds import describe_holds
from kprio_core.lifecycle.log_rules import Decided
from kprio_core.lifecycle.runs import Launch
from kprio_core.log_changes import Change, Superseded
from kprio_core.model.drain_plan import DrainPlan
from kprio_core.model.priority import Priority
from kprio_core.model.records import Batch, Hold
from kprio_core.model.snapshot import LagSnapshot


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


TickAction = FailDeadRun | CarryOutLogChanges | Launch | RecordPlan | Skip


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
    def action(self) -> Verdict:
        """The verdict (the name ``kprio plan --json`` shows it under)."""
        return self.verdict

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
