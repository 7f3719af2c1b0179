"""What really arrived, replayed: the ledger's arrivals of a logical topic as a trace, and the smallest record budget
per batch (and batch interval) that keeps every objective (``kprio simulate --from-ledger``).

What arrived between two plans' snapshots (:class:`BacklogSample`) is the backlog's growth plus what was committed
in between (:class:`DrainedSample`); the first snapshot's backlog arrives at its time. A trace of ``interval_s`` ticks
spreads each span evenly and ends with idle ticks for the last records; an objective of ``o`` s is
``o // interval_s - 1`` ticks (a record arrives at any time of its tick and is drained at the end of another). Snapshots
at 0 s (10 records of priority 0 waiting), 4 s (12 waiting, 6 committed in between) and 8 s (3 waiting, 9 committed):
10, 8 and 0 records arrived.

>>> from datetime import UTC, datetime, timedelta
>>> t0 = datetime(2026, 1, 1, tzinfo=UTC)
>>> at = [t0 + timedelta(seconds=s) for s in (0, 4, 8)]
>>> spans = arrivals([BacklogSample(at[0], {0: 10}), BacklogSample(at[1], {0: 12}), BacklogSample(at[2], {0: 3})],
...                  [DrainedSample(at[0] + timedelta(seconds=2), 0, 6, 0), DrainedSample(at[2], 0, 9, 0)], 1)
>>> [row for _, _, row in spans]
[(10,), (8,), (0,)]
>>> trace = ledger_trace("orders", spans, 2.0, {0: 6.0})
>>> trace.arrivals, trace.objectives
(((10,), (4,), (4,), (0,), (0,), (0,), (0,), (0,)), (2,))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise

from kprio_core.model.priority import Priority
from kprio_core.model.records import BacklogSample, DrainedSample
from kprio_core.simulator import EDF, simulate
from kprio_core.traces import Trace

MIN_SAMPLES = 10
"""Too little history to judge a budget: fewer snapshots than this, or a window under twice the largest objective."""
INTERVALS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300)
"""The batch intervals a replay tries (those within the smallest objective)."""
MAX_TICKS = 20_000
"""An interval that cuts the window into more ticks than this is not tried (each try replays it a few times)."""

Span = tuple[datetime, datetime, tuple[int, ...]]
"""Records arrived per priority between two times."""


def arrivals(backlogs: Sequence[BacklogSample], drained: Sequence[DrainedSample], n_priorities: int) -> list[Span]:
    """What arrived per priority between consecutive snapshots (never below 0: a reset or retention cuts backlogs)."""
    first = backlogs[0]
    out: list[Span] = [(first.at, first.at, tuple(first.backlog.get(p, 0) for p in range(n_priorities)))]
    for before, after in pairwise(backlogs):
        committed = [0] * n_priorities
        for d in drained:
            if before.at < d.at <= after.at and d.priority < n_priorities:
                committed[d.priority] += d.records
        out.append((before.at, after.at, tuple(max(0, after.backlog.get(p, 0) - before.backlog.get(p, 0) + committed[p])
                                                for p in range(n_priorities))))
    return out


def ledger_trace(name: str, spans: Sequence[Span], interval_s: float, objectives_s: Mapping[Priority, float],
                 budget: int = 1) -> Trace:
    """The arrivals as a trace of ticks of ``interval_s`` from the first span, each span spread over its ticks."""
    start = spans[0][0]
    n = len(spans[0][2])

    def tick(at: datetime) -> int:
        return int((at - start).total_seconds() // interval_s)

    rows = [[0] * n for _ in range(tick(spans[-1][1]) + 1)]
    for a, b, row in spans:
        last = tick(b)
        first = min(tick(a) + 1, last) if a < b else last  # arrived after the snapshot before
        for p, count in enumerate(row):
            base, extra = divmod(count, last - first + 1)
            for k in range(first, last + 1):
                rows[k][p] += base + (k - first < extra)
    goals = tuple(None if p not in objectives_s else int(objectives_s[p] // interval_s) - 1 for p in range(n))
    rows += [[0] * n for _ in range(max((g for g in goals if g is not None), default=0) + 1)]  # drain the last ones
    return Trace(name, budget, tuple(map(tuple, rows)), objectives=goals,
                 about=f"arrivals of {name} recorded in the ledger, a tick every {interval_s:g} s")


def keeps_every_objective(trace: Trace, budget: int, policy: str) -> bool:
    return not any(simulate(trace.with_overrides(budget=budget), policy).late.values())


def smallest_budget(trace: Trace, policy: str = EDF) -> int:
    """The smallest budget per tick under which ``policy`` drains no record late (a budget at least every tick's
    arrivals always does; the quotas need ``2^n - 1``).

    >>> smallest_budget(Trace("t", 1, ((9, 0), (0, 0), (0, 0)), objectives=(1, 0)))  # 9 records in 2 ticks
    5
    """
    lo, hi = (1 << trace.n_priorities) - 1, max(max(map(sum, trace.arrivals)), (1 << trace.n_priorities) - 1)
    if keeps_every_objective(trace, lo, policy):
        return lo
    while hi - lo > 1:  # lo breaks an objective, hi keeps them all
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if keeps_every_objective(trace, mid, policy) else (mid, hi)
    return hi


@dataclass(frozen=True)
class Candidate:
    """One batch interval: the smallest budget that keeps every objective, and whether a batch of it drains in time."""

    interval_s: float
    ticks: int
    budget: int
    """Records per batch (the planner keeps every objective under it: earliest deadline first, confirmed by kprio)."""
    late_today: int
    """Records the quotas alone (no objectives) would drain late under the same budget."""
    drain_s: float | None
    """How long a batch of ``budget`` takes at the measured rate plus a batch's fixed cost (None: not measured)."""

    @property
    def fits(self) -> bool:
        return self.drain_s is None or self.drain_s <= self.interval_s


def candidates(name: str, spans: Sequence[Span], objectives_s: Mapping[Priority, float], *, rate: float | None,
               fixed_cost_s: float | None) -> list[Candidate]:
    """Every interval of :data:`INTERVALS_S` within the smallest objective and :data:`MAX_TICKS`, with its budget."""
    window = (spans[-1][1] - spans[0][0]).total_seconds()
    out = []
    for interval in INTERVALS_S:
        if interval > min(objectives_s.values()) or window / interval > MAX_TICKS:
            continue
        trace = ledger_trace(name, spans, interval, objectives_s)
        budget = smallest_budget(trace)
        while not keeps_every_objective(trace, budget, "kprio"):  # the planner is edf unless a priority has none
            budget = max(budget + 1, math.ceil(budget * 1.05))
        today = sum(v or 0 for v in simulate(trace.with_overrides(budget=budget), "kprio_quotas").late.values())
        drain_s = None if not rate else (fixed_cost_s or 0.0) + budget / rate
        out.append(Candidate(interval, trace.ticks, budget, today, drain_s))
    return out


def recommended(found: Sequence[Candidate]) -> Candidate | None:
    """The shortest interval whose batch drains within it (the smallest budget per batch that keeps up)."""
    return next((c for c in found if c.fits), None)
