"""Held partitions: what the planner skips, and the words that tell a person why and what to do.

A partition is held from an offset by a failed batch, offsets lost to retention, or a change of the log only a
person decides (:mod:`kprio_core.lifecycle.log_rules`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kprio_core.model.offsets import OffsetRange, held_range
from kprio_core.model.records import Hold


def describe_holds(holds: Sequence[Hold]) -> str:
    """Which partitions wait, since which offset, for what, and what to do; one clause per cause.

    >>> from types import SimpleNamespace as H
    >>> describe_holds([H(topic="o-0", partition=1, start=1200, batch_id="b-000007", attempts=3,
    ...                   reason="values_match_schema failed", exhausted=True, retry_at=None, transient=False)])
    'held: o-0[1] from 1200 by b-000007 (failed 3 times: values_match_schema failed; fix the cause, then kprio retry b-000007)'
    >>> describe_holds([H(topic="o-0", partition=p, start=10 * p, batch_id="b-000009", attempts=1,
    ...                   reason="drain failed: disk full", exhausted=False, retry_at=None, transient=True)
    ...                   for p in (0, 1)])
    'held: o-0[0] from 0, o-0[1] from 10 by b-000009 (failed once: drain failed: disk full; retried by itself once its cause has passed)'
    """
    clauses: dict[str, list[Hold]] = {}
    for h in holds:
        clauses.setdefault(hold_cause(h), []).append(h)
    return "held: " + "; ".join(
        ", ".join(f"{h.topic}[{h.partition}] from {h.start}" for h in same) + " " + cause
        for cause, same in clauses.items())


def describe_hold(hold: Hold) -> str:
    """One held partition: where, since which offset, and why (:func:`describe_holds` for several)."""
    return f"{hold.topic}[{hold.partition}] from {hold.start} {hold_cause(hold)}"


def hold_cause(hold: Hold) -> str:
    """What holds a partition and what happens next, without naming the partition."""
    if hold.batch_id is None:  # offsets lost to retention, a change of the log
        return f"({hold.reason})"
    if hold.exhausted:
        remedy = f"fix the cause, then kprio retry {hold.batch_id}"
    elif hold.transient:
        remedy = "retried by itself once its cause has passed"
    elif hold.retry_at is not None:
        remedy = f"retried by itself at {hold.retry_at:%H:%M:%S} UTC"
    else:
        remedy = "retried by itself"
    times = "once" if hold.attempts == 1 else f"{hold.attempts} times"
    return f"by {hold.batch_id} (failed {times}: {hold.reason}; {remedy})"


def held_partitions(holds: Iterable[Hold]) -> tuple[OffsetRange, ...]:
    """The planner's reservations for held partitions: from the hold's start on.

    >>> from types import SimpleNamespace as H
    >>> [(r.topic, r.partition, r.start) for r in held_partitions([H(topic="o-0", partition=1, start=1200)])]
    [('o-0', 1, 1200)]
    """
    return tuple(held_range(h.topic, h.partition, h.start) for h in holds)
