"""What ``kprio drain``'s loop does after a tick: tick again (now, or after a wait), or stop, and why.

From the tick's decisions and :class:`LoopInputs` (no I/O, no clock), numbered rules, first match wins:

0. the ledger's database did not answer: ``--once`` stops, not ok; ``--until-empty`` stops, not ok, after
   :data:`BLOCKED_GIVE_UP_S`; else tick again after twice the interval (runs in flight ride it out on their
   leases; one whose lease lapsed is taken over, same ranges, once the ledger answers);
1. the tick requested runs: ``--once`` stops after its one tick (the loop lets its runs finish);
2. runs of this loop still execute (a thread each, so an urgent batch runs beside a bulk one): tick again
   when one ends, when records arrive on a priority none holds (:func:`records_arrived`), or after
   ``sensor.interval_s``; never stop while they run;
3. the tick requested runs that already ended: tick again at once;
4. ``--follow`` ticks again after ``sensor.interval_s`` (sooner when records arrive), whatever the tick said;
5. ``--once`` stops with the tick's reason (not ok when the broker blocked it);
6. the broker or a topic blocks planning: stop, not ok, at once if so from the first tick (nothing to
   finish), or after :data:`BLOCKED_GIVE_UP_S`; else tick again after twice the interval, :data:`MAX_WAIT_S` at most;
7. retries whose cause does not pass (a disk that stays full), or slots held by batches nobody moves: stop,
   not ok, naming what is held, when nothing committed for :data:`BLOCKED_GIVE_UP_S` and no other driver works;
8. something waited for goes on later (a throttle, a backoff, an untaken batch, another process's lease or
   claim, another driver that planned first, full slots): tick again then (:data:`MIN_WAIT_S` to :data:`MAX_WAIT_S`);
9. only held partitions that need a person are left: stop, not ok, naming them;
10. no backlog left: stop, ok.

>>> from kprio_core.lifecycle.decision import Decision, Skip, Verdict
>>> from kprio_core.lifecycle.examples import T0 as NOW
>>> idle = (Decision("orders", Verdict.IDLE, (Skip("no backlog"),), reason="no backlog"),)
>>> next_step(idle, LoopInputs(Until.EMPTY, interval_s=2, now=NOW))
StopLoop(why='no backlog left', ok=True, held=())
>>> next_step(idle, LoopInputs(Until.FOLLOW, interval_s=2, now=NOW))
TickAgain(after_s=2.0)
>>> next_step(idle, LoopInputs(Until.EMPTY, interval_s=2, now=NOW, others=Others(lease_ends_in_s=(7.5,))))
TickAgain(after_s=2.0)
>>> next_step(idle, LoopInputs(Until.EMPTY, interval_s=2, now=NOW, running=1))
TickAgain(after_s=2.0)
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from kprio_core.lifecycle.decision import Decision, Verdict
from kprio_core.lifecycle.holds import describe_hold, describe_holds, hold_cause
from kprio_core.model.offsets import TopicPartitionKey
from kprio_core.model.priority import Priority
from kprio_core.model.records import Hold

MAX_WAIT_S = 60.0
"""Longest single wait between two ticks (a throttle, a backoff, another process's batch)."""
MIN_WAIT_S = 0.2
"""Shortest wait between two ticks that found nothing to run (a backoff that just ended)."""
BLOCKED_GIVE_UP_S = 120.0
"""``--until-empty`` stops, not ok, after the broker stayed unreachable this long, or after this long
without a commit while only retries of a cause that does not pass are left."""


class Until(enum.Enum):
    """When the loop stops."""

    EMPTY = "until-empty"
    """Until no backlog is left outside held partitions (``--until-empty``)."""
    ONCE = "once"
    """After one tick and the runs it requested (``--once``)."""
    FOLLOW = "follow"
    """Never: tick for ever, a stop request ends it (``--follow``)."""


@dataclass(frozen=True)
class Others:
    """What other drivers hold on the loop's topics, read from the ledger."""

    lease_ends_in_s: tuple[float, ...] = ()
    """Seconds until each live lease of a batch in flight ends (another process works on it)."""
    claimed_elsewhere: bool = False
    """Another driver's live launch claim of a batch in flight (its run is about to start)."""

    @property
    def working(self) -> bool:
        return bool(self.lease_ends_in_s) or self.claimed_elsewhere


@dataclass(frozen=True)
class LoopInputs:
    """What the loop saw on this turn, besides the tick's decisions."""

    until: Until
    interval_s: float
    """``sensor.interval_s``."""
    now: datetime
    requested: int = 0
    """Runs the tick requested (and the loop started) on this turn."""
    runs_so_far: int = 0
    """Runs the loop started since it began, this turn's included."""
    running: int = 0
    """Runs of this loop still executing after the tick (this turn's included)."""
    first_turn: bool = False
    blocked_for_s: float = 0.0
    """How long the ticks have been blocked, this one included (0 on the first blocked turn)."""
    since_progress_s: float = 0.0
    """Seconds since a run of this loop last committed a batch (or since the loop started)."""
    contended: bool = False
    """Another driver planned or launched first on this tick: its batch is news on the next."""
    others: Others = field(default_factory=Others)
    reason: str = "no backlog"
    """Why the tick launched nothing, in its words (the Dagster sensor's skip reason)."""
    ledger_down: str | None = None
    """Why the ledger's database did not answer this turn (None: it did): rule 0."""


@dataclass(frozen=True)
class TickAgain:
    """Tick again after ``after_s`` seconds (0: at once)."""

    after_s: float


@dataclass(frozen=True)
class StopLoop:
    """Stop the loop: why, whether that is a success, and the holds a person must see."""

    why: str
    ok: bool = True
    held: tuple[str, ...] = ()


LoopStep = TickAgain | StopLoop


def blocked(decisions: Sequence[Decision]) -> bool:
    """Whether the broker or a missing topic blocked planning for some topic (rule 6)."""
    return any(d.verdict is Verdict.BLOCKED for d in decisions)


def next_step(decisions: Sequence[Decision], seen: LoopInputs) -> LoopStep:
    """What the loop does after a tick that decided ``decisions`` (the rules of the module docstring)."""
    interval, reason = float(seen.interval_s), seen.reason
    if seen.ledger_down is not None:  # 0
        if seen.until is Until.ONCE:
            return StopLoop(seen.ledger_down, ok=False)
        if seen.until is Until.EMPTY and seen.blocked_for_s > BLOCKED_GIVE_UP_S:
            return StopLoop(f"{seen.ledger_down} (for more than {BLOCKED_GIVE_UP_S:.0f} s)", ok=False)
        return TickAgain(min(interval * 2, MAX_WAIT_S))
    if seen.requested and seen.until is Until.ONCE:  # 1
        return StopLoop(f"one tick: {seen.runs_so_far} runs")
    if seen.running:  # 2
        return TickAgain(interval)
    if seen.requested:  # 3
        return TickAgain(0.0)
    if seen.until is Until.FOLLOW:  # 4
        return TickAgain(interval)
    if seen.until is Until.ONCE:  # 5
        return StopLoop(reason, ok=not blocked(decisions))
    if blocked(decisions):  # 6
        if seen.first_turn and not seen.runs_so_far:
            return StopLoop(reason, ok=False)
        if seen.blocked_for_s > BLOCKED_GIVE_UP_S:
            return StopLoop(f"{reason} (for more than {BLOCKED_GIVE_UP_S:.0f} s)", ok=False)
        return TickAgain(min(interval * 2, MAX_WAIT_S))
    held = [h for d in decisions for h in d.holds]
    busy = [d.reason for d in decisions if d.verdict is Verdict.BUSY]
    waits = _waits(decisions, seen, interval)
    if waits and seen.since_progress_s > BLOCKED_GIVE_UP_S and not seen.others.working:  # 7
        if held:
            return StopLoop(f"no progress for {BLOCKED_GIVE_UP_S:.0f} s; still held: "
                            f"{held_line(held, priorities_of(decisions))}", ok=False, held=_each(held))
        if busy:
            return StopLoop(f"no progress for {BLOCKED_GIVE_UP_S:.0f} s and no process works on the batches in "
                            f"flight: {'; '.join(busy)}", ok=False)
    if waits:  # 8
        return TickAgain(min(max(min(waits), MIN_WAIT_S), MAX_WAIT_S))
    if held:  # 9
        return StopLoop("only held partitions are left, they need a person: "
                        f"{held_line(held, priorities_of(decisions))}", ok=False, held=_each(held))
    return StopLoop("no backlog left")  # 10


Watched = Mapping[TopicPartitionKey, tuple[str, Priority, int]]
"""Each priority partition the loop watches between ticks: its logical topic, priority and readable end at the tick."""


def watched(decisions: Sequence[Decision]) -> dict[TopicPartitionKey, tuple[str, Priority, int]]:
    """What the loop's watch compares against: every partition of the tick's lag snapshots, with its readable end."""
    return {(p.topic, p.partition): (d.topic, p.priority, p.readable_end)
            for d in decisions if d.snapshot is not None for p in d.snapshot.partitions}


def records_arrived(at_tick: Watched, ends: Mapping[TopicPartitionKey, int],
                    busy: Collection[tuple[str, Priority]]) -> bool:
    """Whether records arrived since the tick on a priority that a new batch could take (rule 2, 4).

    ``busy``: (logical topic, priority) held by running batches or throttled (a tick would plan nothing there).
    A partition the tick did not see, or with no end read, wakes nothing.

    >>> at_tick = {("orders.p2", 0): ("orders", 2, 10), ("orders.p0", 0): ("orders", 0, 500)}
    >>> records_arrived(at_tick, {("orders.p2", 0): 10, ("orders.p0", 0): 900}, busy={("orders", 0)})
    False
    >>> records_arrived(at_tick, {("orders.p2", 0): 11, ("orders.p0", 0): 900}, busy={("orders", 0)})
    True
    """
    for key, end in ends.items():
        seen = at_tick.get(key)
        if seen is not None and end > seen[2] and (seen[0], seen[1]) not in busy:
            return True
    return False


def _waits(decisions: Sequence[Decision], seen: LoopInputs, interval: float) -> list[float]:
    """Seconds until something the loop waits for can go on (rule 8)."""
    waits = [d.retry_in_s for d in decisions if d.verdict is Verdict.THROTTLED and d.retry_in_s]
    for d in decisions:
        for h in d.holds:
            if h.batch_id is None or h.exhausted:
                continue
            if h.transient and d.cause is not None:
                waits.append(interval)  # its cause is still there: the next probe, not its (past) retry time
            else:
                waits.append((h.retry_at - seen.now).total_seconds() if h.retry_at else 0.0)
    if any(d.untaken for d in decisions):  # failed before a run took them: the next tick sees them held
        waits.append(0.0)
    if seen.others.lease_ends_in_s:  # another process works on them: their end (or expiry) is the next news
        waits.append(min(interval, min(seen.others.lease_ends_in_s)))
    if seen.others.claimed_elsewhere or seen.contended:
        waits.append(interval)
    if any(d.verdict is Verdict.BUSY for d in decisions):
        # Never "no backlog left": the lease that kept their slots may have ended since the tick.
        waits.append(interval)
    return waits


def _each(held: Sequence[Hold]) -> tuple[str, ...]:
    return tuple(describe_holds([h]) for h in held)


HELD_CAUSES_SHOWN = 3
"""The causes a stopped loop's line names; the others are counted (``kprio lag`` shows every partition)."""


def held_line(holds: Sequence[Hold], priorities: Mapping[str, Priority]) -> str:
    """The holds a stopped loop names, in one line: each cause once, several partitions counted by priority topic
    (listing each ran to 1,000+ characters), at most :data:`HELD_CAUSES_SHOWN` causes (:func:`priorities_of`).

    >>> from types import SimpleNamespace as H
    >>> failed = dict(batch_id="b-000009", attempts=1, reason="drain failed: disk full", exhausted=False,
    ...               retry_at=None, transient=True)
    >>> held_line([H(topic=f"o-{p % 2}", partition=p, start=10 * p, **failed) for p in range(48)], {"o-0": 0, "o-1": 1})
    'held: 48 partitions of priorities 1, 0 (o-0: 24, o-1: 24) by b-000009 (failed once: drain failed: disk full; \
retried by itself once its cause has passed)'
    >>> held_line([H(topic="o-1", partition=3, start=120, **failed)], {"o-1": 1})
    'held: o-1[3] from 120 by b-000009 (failed once: drain failed: disk full; retried by itself once its cause has passed)'
    >>> lost = [H(topic="o-0", partition=p, start=0, batch_id=None, reason=f"offsets [0,{p + 5}) lost to retention")
    ...         for p in range(5)]
    >>> held_line(lost, {"o-0": 0})
    'held: o-0[0] from 0 (offsets [0,5) lost to retention); o-0[1] from 0 (offsets [0,6) lost to retention); \
o-0[2] from 0 (offsets [0,7) lost to retention); 2 more held for other causes (kprio lag shows each)'
    """
    causes: dict[str, list[Hold]] = {}
    for h in holds:
        causes.setdefault(hold_cause(h), []).append(h)
    clauses = []
    for cause, same in list(causes.items())[:HELD_CAUSES_SHOWN]:
        if len(same) == 1:
            clauses.append(describe_hold(same[0]))
            continue
        topics = sorted({h.topic for h in same})
        levels = sorted({priorities[t] for t in topics if t in priorities}, reverse=True)
        of = f" of priorit{'y' if len(levels) == 1 else 'ies'} {', '.join(map(str, levels))}" if levels else ""
        counts = ", ".join(f"{t}: {sum(h.topic == t for h in same)}" for t in topics)
        clauses.append(f"{len(same)} partitions{of} ({counts}) {cause}")
    more = sum(len(same) for same in list(causes.values())[HELD_CAUSES_SHOWN:])
    return "held: " + "; ".join(clauses) + (f"; {more} more held for other causes (kprio lag shows each)"
                                            if more else "")


def priorities_of(decisions: Sequence[Decision]) -> dict[str, Priority]:
    """The priority of each priority topic the decisions' snapshots saw."""
    return {p.topic: p.priority for d in decisions if d.snapshot is not None for p in d.snapshot.partitions}
