"""The drain policies the simulator replays traces against: what each drains from every partition at a tick.

``strict`` (most urgent first), ``round_robin`` (max-min fair), ``flipkart`` (exponential quotas + window burst),
``kprio`` (the real :func:`~kprio_core.planner.plan_batch`, with the trace's objectives) and, with objectives, ``edf``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from kprio_core.burst import PollHistory, burst_capacities
from kprio_core.deadlines import Objectives
from kprio_core.errors import PolicyBroke
from kprio_core.model.drain_plan import PlanMode
from kprio_core.model.priority import Priority, most_urgent_first
from kprio_core.model.snapshot import LagSnapshot, PartitionLag
from kprio_core.planner import Budget, plan_batch
from kprio_core.quota import Distribution, exponential_quotas
from kprio_core.traces import Trace

Grid = tuple[tuple[int, ...], ...]
"""Numbers per ``[priority][partition]``."""


@dataclass(frozen=True)
class TickView:
    """What a policy sees at one tick: backlog and drained-so-far per partition of each priority."""

    tick: int
    budget: int
    backlog: Grid
    drained: Grid
    """Records drained so far per partition: the committed offset of a simulated partition."""
    oldest: tuple[tuple[int | None, ...], ...]
    """Arrival tick of the oldest waiting record per partition (None: nothing waiting)."""
    runs: tuple[tuple[tuple[tuple[int, int], ...], ...], ...] = ()
    """The waiting records per partition as ``(arrival tick, records)``, oldest first (traces with objectives)."""

    @property
    def n_priorities(self) -> int:
        return len(self.backlog)

    def backlog_of(self, priority: Priority) -> int:
        return sum(self.backlog[priority])


class Policy(Protocol):
    """Decides per tick how many records to drain from every partition of every priority."""

    def drain(self, view: TickView) -> Sequence[Sequence[int]]: ...


def fair_split(amount: int, caps: Sequence[int], start: int = 0) -> list[int]:
    """Split ``amount`` max-min fairly under ``caps``; odd records go one each in index order from ``start``.

    >>> fair_split(10, [2, 10, 10])
    [2, 4, 4]
    >>> fair_split(5, [9, 9, 9], start=2)
    [2, 1, 2]
    >>> fair_split(50, [3, 4])
    [3, 4]
    """
    alloc = [0] * len(caps)
    left = min(amount, sum(caps))
    open_ = [i for i, cap in enumerate(caps) if cap > 0]
    while left > 0 and open_:
        share = left // len(open_)
        if share == 0:
            for i in sorted(open_, key=lambda i: (i - start) % len(caps))[:left]:
                alloc[i] += 1
            break
        for i in open_:
            give = min(share, caps[i] - alloc[i])
            alloc[i] += give
            left -= give
        open_ = [i for i in open_ if alloc[i] < caps[i]]
    return alloc


def _over_partitions(grants: Mapping[Priority, int], view: TickView) -> list[list[int]]:
    # Baselines spread a priority's grant over its partitions max-min fairly, rotating the
    # odd records with the tick, so only the priority-level decision differs between policies.
    return [fair_split(grants.get(p, 0), view.backlog[p], start=view.tick) for p in range(view.n_priorities)]


class StrictPolicy:
    """Highest priority first: each priority takes all it can of what the more urgent ones left.

    >>> v = TickView(0, 10, ((5,), (4,), (8,)), ((0,), (0,), (0,)), ((0,), (0,), (0,)))
    >>> StrictPolicy().drain(v)
    [[0], [2], [8]]
    """

    def drain(self, view: TickView) -> list[list[int]]:
        left, grants = view.budget, {}
        for p in most_urgent_first(view.n_priorities):
            grants[p] = min(left, view.backlog_of(p))
            left -= grants[p]
        return _over_partitions(grants, view)


class RoundRobinPolicy:
    """Max-min fair (work-conserving) shares of the budget; odd records go one each, the first rotating per tick.

    >>> v = TickView(0, 10, ((2,), (9,), (9,)), ((0,), (0,), (0,)), ((0,), (0,), (0,)))
    >>> RoundRobinPolicy().drain(v)
    [[2], [4], [4]]
    """

    def __init__(self) -> None:
        self._turn = 0

    def drain(self, view: TickView) -> list[list[int]]:
        backlog = [view.backlog_of(p) for p in range(view.n_priorities)]
        split = fair_split(view.budget, backlog, start=self._turn)
        self._turn = (self._turn + 1) % view.n_priorities
        return _over_partitions(dict(enumerate(split)), view)


class FlipkartPolicy:
    """Flipkart's client: exponential base quotas plus the window burst; each drains min(capacity, backlog). Capacities
    come from the past window, not the backlog, so the total may exceed the budget.

    >>> v = TickView(0, 50, ((3,), (30,), (90,)), ((0,), (0,), (0,)), ((0,), (0,), (0,)))
    >>> FlipkartPolicy(3).drain(v)
    [[3], [14], [29]]
    """

    def __init__(self, n_priorities: int) -> None:
        self.history = PollHistory(n_priorities)

    def drain(self, view: TickView) -> list[list[int]]:
        quotas = exponential_quotas(view.n_priorities, view.budget)
        capacities, _ = burst_capacities(quotas, self.history)
        grants = {p: min(capacities[p], view.backlog_of(p)) for p in range(view.n_priorities)}
        self.history.record(grants, quotas)
        return _over_partitions(grants, view)


class KprioPolicy:
    """kprio's lag-aware planner on the simulated partitions (``sim-{priority}``: committed = drained, high watermark =
    arrived); its ranges must start at the committed offset and be contiguous, else :class:`PolicyBroke`.

    >>> v = TickView(0, 50, ((3,), (30,), (90,)), ((0,), (0,), (0,)), ((0,), (0,), (0,)))
    >>> [sum(row) for row in KprioPolicy().drain(v)]
    [3, 14, 33]
    """

    def __init__(self, distribution: Distribution = Distribution.EXP, min_share: float = 0.05,
                 objectives: Sequence[int | None] | None = None) -> None:
        self.distribution = distribution
        self.min_share = min_share
        self.objectives = None if objectives is None else Objectives(
            {p: o * 1000 for p, o in enumerate(objectives) if o is not None}, every_ms=1000)

    def snapshot(self, view: TickView) -> LagSnapshot:
        """The lag snapshot of the simulated partitions at this tick (a tick is 1000 ms)."""
        parts = [
            PartitionLag(
                f"sim-{p}", i, priority=p, log_start=0,
                high_watermark=view.drained[p][i] + view.backlog[p][i], committed=view.drained[p][i],
                oldest_pending_ms=None if view.oldest[p][i] is None else view.oldest[p][i] * 1000,
                times=_marks(view.drained[p][i], view.runs[p][i]) if view.runs else (),
            )
            for p in range(view.n_priorities)
            for i in range(len(view.backlog[p]))
        ]
        oldest = {
            p: min((t * 1000 for t in view.oldest[p] if t is not None), default=None)
            for p in range(view.n_priorities)
        }
        return LagSnapshot("sim", view.n_priorities, tuple(parts), view.tick * 1000, oldest)

    def drain(self, view: TickView) -> list[list[int]]:
        plan = plan_batch(
            self.snapshot(view),
            Budget(records=view.budget, min_share=self.min_share),
            mode=PlanMode.LAG_AWARE,
            distribution=self.distribution,
            objectives=self.objectives,
        )
        taken = [[0] * len(row) for row in view.backlog]
        for planned in sorted(plan.ranges, key=lambda r: r.range):
            rng = planned.range
            p, i = int(rng.topic.removeprefix("sim-")), rng.partition
            expected = view.drained[p][i] + taken[p][i]
            if planned.priority != p or rng.start != expected:
                raise PolicyBroke(
                    f"policy 'kprio' at tick {view.tick}: planned {rng} for priority {planned.priority}, "
                    f"expected a range of priority {p} starting at offset {expected}"
                )
            taken[p][i] += rng.count
        return taken


def _marks(drained: int, runs: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """A simulated partition's time marks: the records arrived by each tick end at these offsets (its time index)."""
    out, end = [], drained
    for tick, count in runs:
        end += count
        out.append((tick * 1000, end))
    return tuple(out)


class EdfPolicy:
    """Earliest deadline first, the bound (:mod:`kprio_core.deadlines`): deadline = arrival tick + objective (none:
    last); ties: the more urgent priority first, max-min fair over its partitions.

    >>> runs = ((((0, 4),),), (((0, 4),),))
    >>> v = TickView(0, 5, ((4,), (4,)), ((0,), (0,)), ((0,), (0,)), runs)
    >>> EdfPolicy((1, 3)).drain(v)
    [[4], [1]]
    """

    def __init__(self, objectives: Sequence[int | None]) -> None:
        self.objectives = objectives

    def drain(self, view: TickView) -> list[list[int]]:
        due: dict[tuple[float, int], list[int]] = {}
        for p, partitions in enumerate(view.runs):
            o = self.objectives[p]
            for i, runs in enumerate(partitions):
                for tick, count in runs:
                    due.setdefault((math.inf if o is None else tick + o, -p), [0] * len(partitions))[i] += count
        left, taken = view.budget, [[0] * len(row) for row in view.backlog]
        for (_, neg), caps in sorted(due.items()):
            split = fair_split(left, caps, start=view.tick)
            taken[-neg] = [a + b for a, b in zip(taken[-neg], split)]
            left -= sum(split)
            if not left:
                break
        return taken


POLICIES: dict[str, Callable[[Trace], Policy]] = {
    "strict": lambda trace: StrictPolicy(),
    "round_robin": lambda trace: RoundRobinPolicy(),
    "flipkart": lambda trace: FlipkartPolicy(trace.n_priorities),
    "kprio": lambda trace: KprioPolicy(objectives=trace.objectives),
}
"""Policy factories by name; each run gets a fresh policy (policies may keep history)."""
EDF = "edf"
WITH_OBJECTIVES: dict[str, Callable[[Trace], Policy]] = {
    EDF: lambda trace: EdfPolicy(trace.objectives or (None,) * trace.n_priorities),
    "kprio_quotas": lambda trace: KprioPolicy(),
}
"""With objectives, beside :data:`POLICIES`: ``edf`` (the reference, run first) and ``kprio_quotas`` (no objectives)."""


def make_policy(name: str, trace: Trace) -> Policy:
    factories = POLICIES | WITH_OBJECTIVES
    if name not in factories:
        raise ValueError(f"unknown policy {name!r}: choose one of {', '.join(factories)}")
    return factories[name](trace)
