"""Freshness objectives: is a priority's oldest pending record younger than its objective, and if not, why.

An objective is ``slo.max_age_s`` of a priority: the age of its oldest pending record (the record at the
committed offset of its most behind partition) may not exceed it. The evaluation passes at or below a warn
threshold, warns above it (``warn_fraction`` of the objective, 0.8 by default: a fifth of the objective
is left to act before it breaks), and fails above the objective. A warning or failure names the priority,
the age, the objective and the likely cause, the first of these that the facts show, in this order:

1. **held partition**: kprio itself does not drain a partition of the priority (a failed batch holds it,
   offsets lost to retention, a change of the log waiting for a person); the most certain cause, and the
   one a person may have to act on;
2. **throttled by a rate quota**: the priority is over its records/s or bytes/s quota, kprio waits on
   purpose (the throttle time says how long);
3. **slot busy**: every slot of the priority is taken by batches in flight, the next batch waits for one;
4. **drain slower than arrivals**: records arrive faster than the priority's batches drain them;
5. **no commit lately**: none of the above, and the priority has not committed for longer than the
   objective (is the drain running?);
6. otherwise **unknown** (a backlog older than the objective arrived at once, or the age was not read).

Facts come first because each is a state kprio knows for sure at the moment; the rates and the time since
the last commit are inferences over a window.

The urgent priority of ``orders`` at 95 s against 60 s, one of its partitions held by a failed batch:

>>> facts = FreshnessFacts(held=("orders-2[1] from 1200 by b-000007 (failed 3 times: disk full)",))
>>> r = evaluate_freshness("orders", 2, age_s=95.0, objective=Objective(60), facts=facts)
>>> r.status.value, r.cause.value
('fail', 'held partition')
>>> r.line
'orders priority 2: oldest pending record 95 s old, objective 60 s: likely cause: held partition orders-2[1] from 1200 by b-000007 (failed 3 times: disk full)'
>>> evaluate_freshness("orders", 2, age_s=50.0, objective=Objective(60)).status.value
'warn'
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kprio_core.model.priority import Priority

DEFAULT_WARN_FRACTION = 0.8
"""Warn once the oldest pending record's age passes this share of the objective."""


class Freshness(enum.Enum):
    """The outcome of one priority's freshness objective (Dagster: passed, WARN severity, ERROR severity)."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"


class Cause(enum.Enum):
    """The likely cause of a warning or failure, first that applies (see the module docstring)."""

    HELD = "held partition"
    THROTTLED = "throttled by a rate quota"
    SLOT_BUSY = "slot busy"
    SLOWER_THAN_ARRIVALS = "drain slower than arrivals"
    NO_COMMIT = "no commit lately"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Objective:
    """``slo.max_age_s`` of a priority and the share of it at which to warn.

    >>> Objective(60).warn_at_s, Objective(60, warn_fraction=0.5).warn_at_s
    (48.0, 30.0)
    """

    max_age_s: float
    warn_fraction: float = DEFAULT_WARN_FRACTION

    def __post_init__(self) -> None:
        if not self.max_age_s > 0:
            raise ValueError(f"max_age_s must be > 0, got {self.max_age_s}")
        if not 0 < self.warn_fraction <= 1:
            raise ValueError(f"warn_fraction must be in (0, 1], got {self.warn_fraction}")

    @property
    def warn_at_s(self) -> float:
        return float(self.max_age_s * self.warn_fraction)


@dataclass(frozen=True, slots=True)
class FreshnessFacts:
    """What a driver knows about a priority when it evaluates the objective (every field optional)."""

    held: tuple[str, ...] = ()
    """One line per held partition of the priority with backlog (``kprio_core.lifecycle.holds.describe_hold``)."""
    throttled_s: float | None = None
    """The throttle time of the priority's rate quota (None or 0: not throttled)."""
    busy: tuple[str, ...] = ()
    """The batches in flight that take every slot of the priority (empty: a slot is free)."""
    arrival_rate: float | None = None
    """Records per second arriving on the priority over the recent window."""
    drain_rate: float | None = None
    """Records per second the priority's committed batches drained over the same window."""
    since_commit_s: float | None = None
    """Seconds since the priority last committed (None: not known, or never)."""
    backlog: int | None = None
    """Records waiting on the priority (0: nothing pending, whatever the age says)."""


@dataclass(frozen=True, slots=True)
class FreshnessResult:
    """The outcome, its numbers, the likely cause (None when it passes) and the one line a person reads."""

    topic: str
    priority: Priority
    status: Freshness
    age_s: float | None
    objective: Objective
    cause: Cause | None
    line: str


def likely_cause(facts: FreshnessFacts, objective: Objective) -> tuple[Cause, str]:
    """The first cause the facts show, with the words that name it (rules 1-6 of the module docstring).

    >>> likely_cause(FreshnessFacts(arrival_rate=900, drain_rate=600), Objective(60))[1]
    'drain slower than arrivals (900 records/s arrive, 600 records/s drained)'
    >>> likely_cause(FreshnessFacts(busy=("b-000012",), throttled_s=4.5), Objective(60))[1]
    'throttled by a rate quota (next batch in 4.5 s)'
    """
    if facts.held:
        more = f" (and {len(facts.held) - 1} more)" if len(facts.held) > 1 else ""
        return Cause.HELD, f"{Cause.HELD.value} {facts.held[0]}{more}"
    if facts.throttled_s:
        return Cause.THROTTLED, f"{Cause.THROTTLED.value} (next batch in {facts.throttled_s:.1f} s)"
    if facts.busy:
        return Cause.SLOT_BUSY, f"{Cause.SLOT_BUSY.value} (every slot taken by {', '.join(facts.busy)})"
    if (facts.arrival_rate is not None and facts.drain_rate is not None
            and facts.arrival_rate > facts.drain_rate):
        return Cause.SLOWER_THAN_ARRIVALS, (f"{Cause.SLOWER_THAN_ARRIVALS.value} ({facts.arrival_rate:.0f} records/s "
                                            f"arrive, {facts.drain_rate:.0f} records/s drained)")
    if facts.since_commit_s is not None and facts.since_commit_s > objective.max_age_s:
        return Cause.NO_COMMIT, (f"{Cause.NO_COMMIT.value} (the last commit was {facts.since_commit_s:.0f} s ago: "
                                 "is the drain running?)")
    return Cause.UNKNOWN, "unknown (no held partition, throttle, busy slot or slow drain seen)"


def evaluate_freshness(topic: str, priority: Priority, *, age_s: float | None, objective: Objective,
                       facts: FreshnessFacts | None = None) -> FreshnessResult:
    """Pass, warn or fail one priority's objective, with its one line; ``age_s`` None: nothing pending, or not read
    (with ``facts.backlog`` > 0 it warns: nobody can say it is fresh).

    >>> evaluate_freshness("orders", 0, age_s=None, objective=Objective(600)).line
    'orders priority 0: nothing pending, objective 600 s'
    >>> evaluate_freshness("orders", 0, age_s=None, objective=Objective(600), facts=FreshnessFacts(backlog=40)).line
    'orders priority 0: 40 records pending of unknown age, objective 600 s'
    """
    facts = facts or FreshnessFacts()
    head = f"{topic} priority {priority}:"
    goal = f"objective {objective.max_age_s:g} s"
    if facts.backlog == 0 or (age_s is None and not facts.backlog):
        return FreshnessResult(topic, priority, Freshness.PASS, None if facts.backlog == 0 else age_s, objective,
                               None, f"{head} nothing pending, {goal}")
    if age_s is None:
        return FreshnessResult(topic, priority, Freshness.WARN, None, objective, Cause.UNKNOWN,
                               f"{head} {facts.backlog} records pending of unknown age, {goal}")
    age = f"oldest pending record {age_s:.0f} s old"
    if age_s <= objective.warn_at_s:
        return FreshnessResult(topic, priority, Freshness.PASS, age_s, objective, None, f"{head} {age}, {goal}")
    status = Freshness.WARN if age_s <= objective.max_age_s else Freshness.FAIL
    cause, words = likely_cause(facts, objective)
    if status is Freshness.WARN:
        goal = f"{goal} (warns above {objective.warn_at_s:g} s)"
    line = f"{head} {age}, {goal}: likely cause: {words}"
    return FreshnessResult(topic, priority, status, age_s, objective, cause, line)
