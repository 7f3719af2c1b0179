"""Simulator traces: records arriving per tick per priority, and the budget a policy drains under.

A row is one tick, indexed by priority; arrivals split over partitions by integer weights (a hot one can be modelled).

>>> t = Trace("tiny", budget=10, arrivals=((1, 2), (0, 5)), partition_weights=(3, 1))
>>> t.n_priorities, t.ticks, t.n_partitions
(2, 2, 2)
>>> t.split(9, tick=0)
[7, 2]
>>> steady().arrivals[0], steady().budget
((20, 40, 70), 100)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kprio_core.errors import TraceInvalid, os_reason

DEFAULT_BUDGET = 100
DEFAULT_TICKS = 240


@dataclass(frozen=True)
class Trace:
    """Arrivals ``[tick][priority]`` drained under ``budget`` records per tick."""

    name: str
    budget: int
    arrivals: tuple[tuple[int, ...], ...]
    partition_weights: tuple[int, ...] = (1,)
    about: str = ""
    objectives: tuple[int | None, ...] | None = None
    """Per priority, the largest wait in ticks before a record is late (None: none); ``kprio`` plans by them."""

    def __post_init__(self) -> None:
        where = f"trace {self.name!r}"
        if not isinstance(self.budget, int) or isinstance(self.budget, bool) or self.budget < 1:
            raise TraceInvalid(f"{where}: budget must be an integer >= 1, got {self.budget!r}")
        if not self.arrivals:
            raise TraceInvalid(f"{where}: arrivals is empty, need at least one tick")
        width = len(self.arrivals[0])
        if width < 1:
            raise TraceInvalid(f"{where}: tick 0 has no priorities")
        for tick, row in enumerate(self.arrivals):
            if len(row) != width:
                raise TraceInvalid(f"{where}: tick {tick} has {len(row)} priorities, tick 0 has {width}")
            for priority, n in enumerate(row):
                if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                    raise TraceInvalid(
                        f"{where}: arrivals[{tick}][{priority}] must be an integer >= 0, got {n!r}"
                    )
        if not self.partition_weights or any(
            not isinstance(w, int) or isinstance(w, bool) or w < 1 for w in self.partition_weights
        ):
            raise TraceInvalid(f"{where}: partition weights must be integers >= 1, got {self.partition_weights!r}")
        if self.objectives is not None and (len(self.objectives) != width or any(
                o is not None and (not isinstance(o, int) or isinstance(o, bool) or o < 0) for o in self.objectives)):
            raise TraceInvalid(f"{where}: objectives must be one integer >= 0 (ticks) or null per priority ({width}), "
                               f"got {list(self.objectives)!r}")

    @property
    def n_priorities(self) -> int:
        return len(self.arrivals[0])

    @property
    def ticks(self) -> int:
        return len(self.arrivals)

    @property
    def n_partitions(self) -> int:
        return len(self.partition_weights)

    @property
    def total(self) -> int:
        """Records arriving over the whole trace."""
        return sum(map(sum, self.arrivals))

    def split(self, n: int, tick: int) -> list[int]:
        """``n`` arrivals over the partitions by weight; leftover records go round-robin by tick.

        >>> Trace("t", 1, ((0,),), (1, 1, 1)).split(4, tick=1)
        [1, 2, 1]
        """
        weights, total_w = self.partition_weights, sum(self.partition_weights)
        parts = [n * w // total_w for w in weights]
        left = n - sum(parts)
        # Largest fractional part first; ties rotate with the tick so no partition is favoured forever.
        order = sorted(
            range(len(weights)),
            key=lambda i: (-(n * weights[i] % total_w), (i - tick) % len(weights)),
        )
        for i in order[:left]:
            parts[i] += 1
        return parts

    def with_overrides(self, *, budget: int | None = None, ticks: int | None = None) -> Trace:
        """The same trace under another budget, cut or padded (with idle ticks) to ``ticks``.

        >>> Trace("t", 5, ((1, 2),)).with_overrides(budget=9, ticks=3).arrivals
        ((1, 2), (0, 0), (0, 0))
        """
        arrivals = self.arrivals
        if ticks is not None:
            if ticks < 1:
                raise TraceInvalid(f"trace {self.name!r}: ticks must be >= 1, got {ticks}")
            idle = (0,) * self.n_priorities
            arrivals = arrivals[:ticks] + (idle,) * max(0, ticks - len(arrivals))
        return Trace(
            self.name,
            self.budget if budget is None else budget,
            arrivals,
            self.partition_weights,
            self.about,
            self.objectives,
        )


def _rows(ticks: int, row_at: Callable[[int], Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    return tuple(tuple(int(n) for n in row_at(t)) for t in range(ticks))


def steady(budget: int = DEFAULT_BUDGET, ticks: int = DEFAULT_TICKS) -> Trace:
    """Steady overload: every tick 20% / 40% / 70% of the budget arrive at p0 / p1 / p2 (130% load).

    The urgent two alone exceed the budget: `strict` starves p0; a fair policy drains every priority every tick.

    >>> steady(budget=10, ticks=2).arrivals
    ((2, 4, 7), (2, 4, 7))
    """
    row = (budget * 20 // 100, budget * 40 // 100, budget * 70 // 100)
    return Trace("steady", budget, _rows(ticks, lambda _: row), about=steady.__doc__.splitlines()[0])


def late_burst(budget: int = DEFAULT_BUDGET, ticks: int = DEFAULT_TICKS) -> Trace:
    """Late high-priority burst: p0 / p1 trickle at 5% / 10%; p2 is idle, then bursts at 200%.

    The burst lasts 8 ticks from ``ticks // 2``, p0 at 30% in its 5th and 6th. `flipkart` bursts p2 only after 4 of 6
    maxed-out polls, sized from p0's *past* unused capacity, so p0's surge exceeds the budget; `strict` starves p0, p1.

    >>> t = late_burst(budget=10, ticks=30)
    >>> t.arrivals[14], t.arrivals[15], t.arrivals[19], t.arrivals[23]
    ((0, 1, 0), (0, 1, 20), (3, 1, 20), (0, 1, 0))
    """
    start = ticks // 2

    def row(t: int) -> tuple[int, int, int]:
        in_burst = start <= t < start + 8
        surge = start + 4 <= t < start + 6
        return (
            budget * (30 if surge else 5) // 100,
            budget * 10 // 100,
            budget * 200 // 100 if in_burst else 0,
        )

    return Trace("late_burst", budget, _rows(ticks, row), about=late_burst.__doc__.splitlines()[0])


def idle_high(budget: int = DEFAULT_BUDGET, ticks: int = DEFAULT_TICKS) -> Trace:
    """Idle high priority: p2 sends nothing for 3/4 of the trace while p1 / p0 bring 45% / 35%.

    80% load (work-conserving: no backlog), yet quotas reserve most of the budget for the idle p2 and `flipkart`'s
    burst hands it to the highest maxed-out priority only: p0's backlog grows, budget unused. In the last quarter p2
    wakes at 30% (110% load).

    >>> t = idle_high(budget=10, ticks=8)
    >>> t.arrivals[5], t.arrivals[6]
    ((3, 4, 0), (3, 4, 3))
    """
    wake = ticks * 3 // 4
    quiet = (budget * 35 // 100, budget * 45 // 100, 0)
    awake = (quiet[0], quiet[1], budget * 30 // 100)
    return Trace(
        "idle_high",
        budget,
        _rows(ticks, lambda t: awake if t >= wake else quiet),
        about=idle_high.__doc__.splitlines()[0],
    )


def skewed_partitions(budget: int = DEFAULT_BUDGET, ticks: int = DEFAULT_TICKS) -> Trace:
    """Skewed partitions: 4 partitions per priority, one hot (weights 7:1:1:1), waves of overload.

    Every 40 ticks: 20 at 30% / 40% / 60%, 20 at 10% / 10% / 20%: cold partitions must not wait behind the hot one.

    >>> t = skewed_partitions(budget=10, ticks=40)
    >>> t.arrivals[0], t.arrivals[20], t.split(6, tick=0)
    ((3, 4, 6), (1, 1, 2), [4, 1, 1, 0])
    """
    loud = (budget * 30 // 100, budget * 40 // 100, budget * 60 // 100)
    quiet = (budget * 10 // 100, budget * 10 // 100, budget * 20 // 100)
    return Trace(
        "skewed_partitions",
        budget,
        _rows(ticks, lambda t: loud if t % 40 < 20 else quiet),
        partition_weights=(7, 1, 1, 1),
        about=skewed_partitions.__doc__.splitlines()[0],
    )


BUILT_IN: dict[str, Callable[..., Trace]] = {
    "steady": steady,
    "late_burst": late_burst,
    "idle_high": idle_high,
    "skewed_partitions": skewed_partitions,
}
"""Built-in traces by name, each a function of ``(budget, ticks)``."""


def built_in(name: str, *, budget: int | None = None, ticks: int | None = None) -> Trace:
    """The built-in trace ``name``, optionally under another budget or length.

    >>> built_in("steady", budget=10, ticks=3).ticks
    3
    """
    if name not in BUILT_IN:
        raise TraceInvalid(f"unknown trace {name!r}: choose one of {', '.join(BUILT_IN)}")
    return BUILT_IN[name](budget=budget or DEFAULT_BUDGET, ticks=ticks or DEFAULT_TICKS)


def trace_from_json(data: Any, name: str = "file") -> Trace:
    """A trace from ``{"budget": int, "arrivals": [[n_p0, ...], ...]}``, optional ``partition_weights``, ``objectives``.

    >>> trace_from_json({"budget": 5, "arrivals": [[1, 2], [0, 3]], "objectives": [4, 1]}).objectives
    (4, 1)
    """
    if not isinstance(data, dict):
        raise TraceInvalid(f"{name}: expected a JSON object with 'budget' and 'arrivals', got {type(data).__name__}")
    unknown = set(data) - {"budget", "arrivals", "partition_weights", "objectives", "about"}
    if unknown:
        raise TraceInvalid(f"{name}: unknown key(s) {', '.join(sorted(unknown))}; expected budget, arrivals "
                           "(optional: partition_weights, objectives, about)")
    for key in ("budget", "arrivals"):
        if key not in data:
            raise TraceInvalid(f"{name}: missing key {key!r}")
    arrivals = data["arrivals"]
    if not isinstance(arrivals, list) or not all(isinstance(row, list) for row in arrivals):
        raise TraceInvalid(f"{name}: 'arrivals' must be a list of lists (one row per tick, index = priority)")
    weights = data.get("partition_weights", [1])
    if not isinstance(weights, list):
        raise TraceInvalid(f"{name}: 'partition_weights' must be a list of integers")
    objectives = data.get("objectives")
    if objectives is not None and not isinstance(objectives, list):
        raise TraceInvalid(f"{name}: 'objectives' must be a list of ticks (or null) per priority")
    return Trace(
        name,
        data["budget"],
        tuple(tuple(row) for row in arrivals),
        tuple(weights),
        about=str(data.get("about") or f"trace file {name}"),
        objectives=None if objectives is None else tuple(objectives),
    )


def load_trace_file(path: Path) -> Trace:
    """Read and validate a JSON trace file; every problem is a :class:`TraceInvalid` naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise TraceInvalid(f"cannot read trace file {path}: {os_reason(err)}") from None
    except UnicodeDecodeError:
        raise TraceInvalid(f"{path}: is not UTF-8 text") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise TraceInvalid(f"{path}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno})") from None
    except (ValueError, RecursionError):  # Python's limits: 4,300 digits in an integer, its stack for nesting
        raise TraceInvalid(f"{path}: JSON no trace holds (a number of thousands of digits, or lists nested "
                           "thousands deep)") from None
    return trace_from_json(data, name=str(path))
