"""Replay a trace tick by tick against drain policies and measure waits, utilization and starvation.

Each tick: the tick's arrivals join FIFO queues (one per partition of each priority, held as
runs of ``(arrival tick, count)`` so long traces stay cheap); the policy sees the backlog and
says how many records to drain from each partition; the queues give up their oldest records.

Policies (:data:`POLICIES`): ``strict`` (most urgent first), ``round_robin`` (max-min fair
shares), ``flipkart`` (exponential quotas + window burst, as flipkart's client) and ``kprio``
(the real lag-aware :func:`~kprio_core.planner.plan_batch` on a snapshot of the simulated
partitions). Baselines spread a priority's records max-min fairly over its partitions; kprio
drains exactly the planner's ranges. Order is FIFO per partition; metrics are per priority.

Metrics, per policy:

- wait of a record = drain tick - arrival tick (drained the tick it arrived: 0); a record still
  waiting after the last tick ``T - 1`` counts ``T - arrival``, the wait it would have had if
  drained on the very next tick (a lower bound of its real wait);
- ``utilization`` = records drained / sum over ticks of min(budget, backlog after arrivals);
- ``starved[p]`` = longest run of consecutive ticks in which p had backlog and drained nothing;
- ``cap_violations`` = ticks in which the policy drained more than the budget (counted, never
  clamped away).

>>> from kprio_core.traces import Trace
>>> r = simulate(Trace("t", budget=2, arrivals=((1, 2), (0, 0))), "strict")
>>> r.drained_by_tick, r.wait[1], r.wait[0], r.starved
((2, 1), WaitStats(p50=0, p95=0, max=0), WaitStats(p50=1, p95=1, max=1), {1: 0, 0: 1})
>>> round(r.utilization, 3), r.cap_violations
(1.0, 0)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Protocol

from pydantic import TypeAdapter

from kprio_core.burst import PollHistory, burst_capacities
from kprio_core.errors import PolicyBroke, QuotaError
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

    @property
    def n_priorities(self) -> int:
        return len(self.backlog)

    def backlog_of(self, priority: Priority) -> int:
        return sum(self.backlog[priority])


class Policy(Protocol):
    """Decides per tick how many records to drain from every partition of every priority."""

    def drain(self, view: TickView) -> Sequence[Sequence[int]]: ...


def fair_split(amount: int, caps: Sequence[int], start: int = 0) -> list[int]:
    """Split ``amount`` max-min fairly under ``caps``: equal shares, what a small cap leaves goes to the others.

    Records that do not divide evenly go one each, in index order rotated to begin at ``start``.

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
    """Equal shares of the budget; what a priority with less backlog leaves goes to the others.

    This is max-min fairness, so the policy is work-conserving; records that do not divide
    evenly go one each to the priorities in turn, the starting priority rotating every tick.

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
    """Flipkart's client: exponential base quotas plus the poll-history window burst.

    Each priority drains min(capacity, backlog); the history records what was drained, so a
    priority "maxes out" only when it drained its whole quota. Capacities come from the past
    window, not from the backlog, so the total may exceed the budget.

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
    """kprio's lag-aware planner, fed a :class:`LagSnapshot` of the simulated partitions each tick.

    A simulated partition is topic ``sim-{priority}``: log start 0, committed offset = records
    drained so far, high watermark = records arrived so far. The plan's ranges must start at
    the committed offset and be contiguous, or the policy broke (records skipped or repeated).

    >>> v = TickView(0, 50, ((3,), (30,), (90,)), ((0,), (0,), (0,)), ((0,), (0,), (0,)))
    >>> [sum(row) for row in KprioPolicy().drain(v)]
    [3, 14, 33]
    """

    def __init__(self, distribution: Distribution = Distribution.EXP, min_share: float = 0.05) -> None:
        self.distribution = distribution
        self.min_share = min_share

    def snapshot(self, view: TickView) -> LagSnapshot:
        """The lag snapshot of the simulated partitions at this tick (a tick is 1000 ms)."""
        parts = [
            PartitionLag(
                f"sim-{p}", i, priority=p, log_start=0,
                high_watermark=view.drained[p][i] + view.backlog[p][i], committed=view.drained[p][i],
                oldest_pending_ms=None if view.oldest[p][i] is None else view.oldest[p][i] * 1000,
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


@dataclass
class WaitStats:
    """Nearest-rank percentiles of the waits (ticks) of one priority; None when it had no records."""

    p50: int | None
    p95: int | None
    max: int | None


def percentile(histogram: Mapping[int, int], pct: int) -> int | None:
    """Nearest-rank percentile of a ``{wait: count}`` histogram: the least w with >= pct% of counts <= w.

    >>> percentile({0: 90, 7: 10}, 50), percentile({0: 90, 7: 10}, 95), percentile({}, 50)
    (0, 7, None)
    """
    total = sum(histogram.values())
    if total == 0:
        return None
    rank = max(1, -(-pct * total // 100))
    seen = 0
    for wait in sorted(histogram):
        seen += histogram[wait]
        if seen >= rank:
            return wait
    raise AssertionError("unreachable: rank <= total")


def wait_stats(histogram: Mapping[int, int]) -> WaitStats:
    """p50 / p95 / max of a wait histogram.

    >>> wait_stats({0: 3, 2: 1})
    WaitStats(p50=0, p95=2, max=2)
    """
    return WaitStats(percentile(histogram, 50), percentile(histogram, 95), max(histogram, default=None))


@dataclass(frozen=True)
class PolicyResult:
    """What one policy did on one trace."""

    policy: str
    budget: int
    utilization: float
    cap_violations: int
    wait: dict[Priority, WaitStats]
    starved: dict[Priority, int]
    drained_by_tick: tuple[int, ...]
    backlog_by_tick: Grid
    """Backlog per priority at the end of each tick ``[tick][priority]`` (after draining)."""
    waits: dict[Priority, dict[int, int]] = field(repr=False)
    """Full wait histogram ``{wait: records}`` per priority."""

    def to_dict(self) -> dict[str, object]:
        """The JSON shape of ``kprio simulate --json``: priorities as string keys, most urgent first.

        >>> from kprio_core.traces import Trace
        >>> simulate(Trace("t", budget=2, arrivals=((1, 2),)), "strict").to_dict()["wait"]
        {'1': {'p50': 0, 'p95': 0, 'max': 0}, '0': {'p50': 1, 'p95': 1, 'max': 1}}
        """
        return _json().dump_python(self, mode="json", include={"utilization", "cap_violations", "wait", "starved"})


@cache
def _json() -> TypeAdapter[PolicyResult]:
    return TypeAdapter(PolicyResult)


class _Queue:
    """FIFO of one partition as runs ``[arrival tick, count]``."""

    __slots__ = ("runs", "size")

    def __init__(self) -> None:
        self.runs: deque[list[int]] = deque()
        self.size = 0

    def push(self, tick: int, n: int) -> None:
        if n:
            self.runs.append([tick, n])
            self.size += n

    def pop(self, n: int, tick: int, waits: dict[int, int]) -> None:
        self.size -= n
        while n:
            run = self.runs[0]
            take = min(n, run[1])
            waits[tick - run[0]] = waits.get(tick - run[0], 0) + take
            n -= take
            run[1] -= take
            if not run[1]:
                self.runs.popleft()


def _checked(decision: Sequence[Sequence[int]], view: TickView, name: str) -> list[list[int]]:
    where = f"policy {name!r} at tick {view.tick}"
    if len(decision) != view.n_priorities:
        raise PolicyBroke(f"{where}: answered {len(decision)} priorities, the trace has {view.n_priorities}")
    out = []
    for p, row in enumerate(decision):
        if len(row) != len(view.backlog[p]):
            raise PolicyBroke(f"{where}: priority {p} answered {len(row)} partitions, expected {len(view.backlog[p])}")
        for i, n in enumerate(row):
            if not 0 <= n <= view.backlog[p][i]:
                raise PolicyBroke(
                    f"{where}: drains {n} from priority {p} partition {i}, which holds {view.backlog[p][i]}"
                )
        out.append([int(n) for n in row])
    return out


def simulate(trace: Trace, policy: str | Policy, name: str | None = None) -> PolicyResult:
    """Replay ``trace`` against ``policy`` (a name of :data:`POLICIES` or a policy object)."""
    if isinstance(policy, str):
        name = name or policy
        policy = make_policy(policy, trace)
    name = name or type(policy).__name__
    n_pri, n_part, budget = trace.n_priorities, trace.n_partitions, trace.budget
    queues = [[_Queue() for _ in range(n_part)] for _ in range(n_pri)]
    drained_so_far = [[0] * n_part for _ in range(n_pri)]
    waits: list[dict[int, int]] = [{} for _ in range(n_pri)]
    run = [0] * n_pri
    starved = [0] * n_pri
    available = drained_total = violations = 0
    drained_by_tick: list[int] = []
    backlog_by_tick: list[tuple[int, ...]] = []

    for tick, row in enumerate(trace.arrivals):
        for p, n in enumerate(row):
            for i, part in enumerate(trace.split(n, tick)):
                queues[p][i].push(tick, part)
        view = TickView(
            tick,
            budget,
            tuple(tuple(q.size for q in queues[p]) for p in range(n_pri)),
            tuple(map(tuple, drained_so_far)),
            tuple(tuple(q.runs[0][0] if q.runs else None for q in queues[p]) for p in range(n_pri)),
        )
        available += min(budget, sum(map(sum, view.backlog)))
        try:
            decision = _checked(policy.drain(view), view, name)
        except QuotaError as err:
            raise QuotaError(f"policy {name!r} on trace {trace.name!r}: {err}") from None
        tick_total = 0
        for p in range(n_pri):
            for i, n in enumerate(decision[p]):
                if n:
                    queues[p][i].pop(n, tick, waits[p])
                    drained_so_far[p][i] += n
            drained_p = sum(decision[p])
            tick_total += drained_p
            # A tick without backlog ends a starvation run: the priority was not waiting.
            run[p] = run[p] + 1 if view.backlog_of(p) and not drained_p else 0
            starved[p] = max(starved[p], run[p])
        violations += tick_total > budget
        drained_total += tick_total
        drained_by_tick.append(tick_total)
        backlog_by_tick.append(tuple(sum(q.size for q in queues[p]) for p in range(n_pri)))

    end = trace.ticks
    for p in range(n_pri):
        for q in queues[p]:
            for arrived, count in q.runs:
                waits[p][end - arrived] = waits[p].get(end - arrived, 0) + count

    return PolicyResult(
        policy=name,
        budget=budget,
        utilization=drained_total / available if available else 1.0,
        cap_violations=violations,
        wait={p: wait_stats(waits[p]) for p in most_urgent_first(n_pri)},
        starved={p: starved[p] for p in most_urgent_first(n_pri)},
        drained_by_tick=tuple(drained_by_tick),
        backlog_by_tick=tuple(backlog_by_tick),
        waits={p: dict(sorted(waits[p].items())) for p in most_urgent_first(n_pri)},
    )


POLICIES: dict[str, Callable[[Trace], Policy]] = {
    "strict": lambda trace: StrictPolicy(),
    "round_robin": lambda trace: RoundRobinPolicy(),
    "flipkart": lambda trace: FlipkartPolicy(trace.n_priorities),
    "kprio": lambda trace: KprioPolicy(),
}
"""Policy factories by name; each run gets a fresh policy (policies may keep history)."""


def make_policy(name: str, trace: Trace) -> Policy:
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}: choose one of {', '.join(POLICIES)}")
    return POLICIES[name](trace)


def simulate_all(trace: Trace, policies: Iterable[str] | None = None) -> dict[str, PolicyResult]:
    """Every policy (default: all of :data:`POLICIES`) on one trace, by policy name."""
    return {name: simulate(trace, name) for name in (policies or POLICIES)}
