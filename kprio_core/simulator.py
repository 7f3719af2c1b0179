"""Replay a trace tick by tick against drain policies and measure waits, utilization and starvation.

Each tick the arrivals join FIFO queues (one per partition of each priority, runs of ``(arrival tick, count)`` so
long traces stay cheap), a policy (:mod:`kprio_core.policies`) says how many to drain from each. Metrics:

- wait = drain tick - arrival tick; one still waiting after the last tick counts ``T - arrival`` (a lower bound);
- ``utilization`` = records drained / sum over ticks of min(budget, backlog after arrivals);
- ``starved[p]`` = longest run of consecutive ticks in which p had backlog and drained nothing;
- ``cap_violations`` = ticks in which the policy drained more than the budget (counted, never clamped away);
- with objectives, ``late[p]`` = records that waited past p's objective, ``max_lateness[p]`` the largest excess.

>>> from kprio_core.traces import Trace
>>> r = simulate(Trace("t", budget=2, arrivals=((1, 2), (0, 0))), "strict")
>>> r.drained_by_tick, r.wait[1], r.wait[0], r.starved
((2, 1), WaitStats(p50=0, p95=0, max=0), WaitStats(p50=1, p95=1, max=1), {1: 0, 0: 1})
>>> round(r.utilization, 3), r.cap_violations
(1.0, 0)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

from pydantic import TypeAdapter

from kprio_core.errors import PolicyBroke, QuotaError
from kprio_core.model.priority import Priority, most_urgent_first
from kprio_core.policies import (  # noqa: F401 - the policies, where the simulator's users find them
    EDF,
    POLICIES,
    WITH_OBJECTIVES,
    EdfPolicy,
    FlipkartPolicy,
    Grid,
    KprioPolicy,
    Policy,
    RoundRobinPolicy,
    StrictPolicy,
    TickView,
    fair_split,
    make_policy,
)
from kprio_core.traces import Trace


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
    late: dict[Priority, int | None] = field(default_factory=dict)
    """Records per priority that waited longer than its objective (None: no objective; ``{}``: a trace without)."""
    max_lateness: dict[Priority, int | None] = field(default_factory=dict)
    """The largest wait beyond the objective per priority, in ticks (0: none late)."""
    oldest_by_tick: Grid = field(default=(), repr=False)
    """Per tick ``[tick][priority]``, the wait the oldest pending record would have if drained next tick (0: none)."""

    def to_dict(self) -> dict[str, object]:
        """The JSON shape of ``kprio simulate --json``: priorities as string keys, most urgent first.

        >>> from kprio_core.traces import Trace
        >>> simulate(Trace("t", budget=2, arrivals=((1, 2),)), "strict").to_dict()["wait"]
        {'1': {'p50': 0, 'p95': 0, 'max': 0}, '0': {'p50': 1, 'p95': 1, 'max': 1}}
        """
        shown = {"utilization", "cap_violations", "wait", "starved", *(("late", "max_lateness") if self.late else ())}
        return _json().dump_python(self, mode="json", include=shown)


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


class _Replay:
    """A replay's state: per-partition queues and drained counts, per-priority wait histograms and starvation runs."""

    def __init__(self, n_pri: int, n_part: int) -> None:
        self.queues = [[_Queue() for _ in range(n_part)] for _ in range(n_pri)]
        self.drained_so_far = [[0] * n_part for _ in range(n_pri)]
        self.waits: list[dict[int, int]] = [{} for _ in range(n_pri)]
        self.run = [0] * n_pri
        self.starved = [0] * n_pri

    def arrive(self, trace: Trace, tick: int, row: Sequence[int]) -> None:
        """Queue a tick's arrivals, each priority's split over its partitions as the trace splits them."""
        for p, n in enumerate(row):
            for i, part in enumerate(trace.split(n, tick)):
                self.queues[p][i].push(tick, part)

    def view(self, tick: int, budget: int, deadlines: bool) -> TickView:
        """What a policy sees at ``tick``; the queued runs themselves only for a policy that sees arrival ticks."""
        queues, n_pri = self.queues, len(self.queues)
        return TickView(
            tick,
            budget,
            tuple(tuple(q.size for q in queues[p]) for p in range(n_pri)),
            tuple(map(tuple, self.drained_so_far)),
            tuple(tuple(q.runs[0][0] if q.runs else None for q in queues[p]) for p in range(n_pri)),
            tuple(tuple(tuple(map(tuple, q.runs)) for q in queues[p]) for p in range(n_pri)) if deadlines else (),
        )

    def drain(self, decision: Sequence[Sequence[int]], tick: int, view: TickView) -> int:
        """Take what the policy decided from the queues (oldest first); the records drained in the tick."""
        tick_total = 0
        for p in range(len(self.queues)):
            for i, n in enumerate(decision[p]):
                if n:
                    self.queues[p][i].pop(n, tick, self.waits[p])
                    self.drained_so_far[p][i] += n
            drained_p = sum(decision[p])
            tick_total += drained_p
            # A tick without backlog ends a starvation run: the priority was not waiting.
            self.run[p] = self.run[p] + 1 if view.backlog_of(p) and not drained_p else 0
            self.starved[p] = max(self.starved[p], self.run[p])
        return tick_total

    def backlogs(self) -> tuple[int, ...]:
        return tuple(sum(q.size for q in ps) for ps in self.queues)

    def oldest_ages(self, tick: int) -> tuple[int, ...]:
        """Per priority, the age of its oldest queued record at the end of ``tick`` (0: nothing queued)."""
        return tuple(tick + 1 - min((q.runs[0][0] for q in ps if q.runs), default=tick + 1) for ps in self.queues)

    def count_left(self, end: int) -> None:
        """Records still queued after the last tick count ``end - arrival``: their wait if drained at ``end``."""
        for p in range(len(self.queues)):
            for q in self.queues[p]:
                for arrived, count in q.runs:
                    self.waits[p][end - arrived] = self.waits[p].get(end - arrived, 0) + count


def _decided(policy: Policy, view: TickView, name: str, trace: Trace) -> list[list[int]]:
    """The policy's decision at this tick, checked; a quota error names the policy and the trace."""
    try:
        return _checked(policy.drain(view), view, name)
    except QuotaError as err:
        raise QuotaError(f"policy {name!r} on trace {trace.name!r}: {err}") from None


def simulate(trace: Trace, policy: str | Policy, name: str | None = None) -> PolicyResult:
    """Replay ``trace`` against ``policy`` (a name of :data:`POLICIES` or a policy object)."""
    if isinstance(policy, str):
        name = name or policy
        policy = make_policy(policy, trace)
    name = name or type(policy).__name__
    n_pri, n_part, budget = trace.n_priorities, trace.n_partitions, trace.budget
    deadlines = bool(trace.objectives) or isinstance(policy, EdfPolicy)  # the policies that see arrival ticks
    replay = _Replay(n_pri, n_part)
    available = drained_total = violations = 0
    drained_by_tick: list[int] = []
    backlog_by_tick: list[tuple[int, ...]] = []
    oldest_by_tick: list[tuple[int, ...]] = []

    for tick, row in enumerate(trace.arrivals):
        replay.arrive(trace, tick, row)
        view = replay.view(tick, budget, deadlines)
        available += min(budget, sum(map(sum, view.backlog)))
        tick_total = replay.drain(_decided(policy, view, name, trace), tick, view)
        violations += tick_total > budget
        drained_total += tick_total
        drained_by_tick.append(tick_total)
        backlog_by_tick.append(replay.backlogs())
        oldest_by_tick.append(replay.oldest_ages(tick))

    replay.count_left(trace.ticks)
    waits = replay.waits
    return PolicyResult(
        policy=name,
        budget=budget,
        utilization=drained_total / available if available else 1.0,
        cap_violations=violations,
        wait={p: wait_stats(waits[p]) for p in most_urgent_first(n_pri)},
        starved={p: replay.starved[p] for p in most_urgent_first(n_pri)},
        drained_by_tick=tuple(drained_by_tick),
        backlog_by_tick=tuple(backlog_by_tick),
        waits={p: dict(sorted(waits[p].items())) for p in most_urgent_first(n_pri)},
        late={p: lateness(waits[p], trace.objectives[p])[0] for p in most_urgent_first(n_pri)} if trace.objectives
        else {},
        max_lateness={p: lateness(waits[p], trace.objectives[p])[1] for p in most_urgent_first(n_pri)}
        if trace.objectives else {},
        oldest_by_tick=tuple(oldest_by_tick),
    )


def lateness(histogram: Mapping[int, int], objective: int | None) -> tuple[int | None, int | None]:
    """``(records late, largest lateness)`` of a wait histogram under an objective in ticks (None: no objective).

    >>> lateness({0: 5, 3: 2, 7: 1}, 2), lateness({0: 5}, 2), lateness({0: 5}, None)
    ((3, 5), (0, 0), (None, None))
    """
    if objective is None:
        return None, None
    late = [w for w in histogram if w > objective]
    return sum(histogram[w] for w in late), max(late, default=objective) - objective


def simulate_all(trace: Trace, policies: Iterable[str] | None = None) -> dict[str, PolicyResult]:
    """Each policy by name (default: :data:`POLICIES`; with objectives :data:`EDF` first, ``kprio_quotas`` last)."""
    chosen = policies or ([EDF, *POLICIES, *(n for n in WITH_OBJECTIVES if n != EDF)] if trace.objectives else list(POLICIES))
    return {name: simulate(trace, name) for name in chosen}
