"""Rule 7 of the tick: what to do about changes of the log kprio did not make (``kprio_core.log_changes``).

A held partition waits for ``kprio reset``; a policy reset that would start a new incarnation under
a batch in flight on the partition waits (held) until that batch fails or finishes; a restore, a
policy reset or an accepted move is decided here and carried out by the driver (which records it)
before the plan; a moved-back offset re-drains its committed batches' exact ranges, one step at a
time in a free slot (:func:`redrain_steps`).

Each change is decided once, when it is first seen: a group moved back is re-drained (or held for a
person when the ledger has no exact ranges covering it), and the ticks after carry that decision on,
step by step, without deciding or recording it again (:func:`same_move`), until the group stands
where kprio left it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from kprio_core.config import KprioConfig, OnOffsetOutOfRange
from kprio_core.lifecycle.view import LedgerView
from kprio_core.log_changes import (
    Belief,
    Change,
    LogState,
    Outcome,
    hold_reason,
    in_flight_blocks_reset,
    observe,
    outcome_of,
    redrain_ranges,
    reset_target,
)
from kprio_core.model.offsets import OffsetRange, TopicPartitionKey
from kprio_core.model.priority import Priority
from kprio_core.model.records import Batch, Hold, LogEvent, batch_number
from kprio_core.model.recovery import may_retry
from kprio_core.model.snapshot import LagSnapshot
from kprio_core.model.states import BatchState

RESETS = (Outcome.RESET_EARLIEST, Outcome.RESET_LATEST)
NEW_LOG = (LogState.AHEAD_OF_LOG, LogState.TOPIC_RECREATED)
"""States where the log below the old committed offset is another log: a reset starts a new incarnation."""


@dataclass(frozen=True)
class Redrain:
    """Ranges of one drained batch to drain again after their group moved back outside kprio: every range of
    it (a replay of the batch), or those ranges alone, split off it into a batch of their own
    (:meth:`kprio_core.ledger.Ledger.redrain`)."""

    batch: Batch
    ranges: tuple[OffsetRange, ...]

    @property
    def priorities(self) -> frozenset[Priority]:
        """The priorities of these ranges: the slots their re-drain takes."""
        mine = set(self.ranges)
        return frozenset(r.priority for r in self.batch.plan.ranges if r.range in mine)


@dataclass(frozen=True)
class Decided:
    """One change of the log and what this tick does about it (carried out by the driver, shown by ``kprio plan``)."""

    change: Change
    outcome: Outcome
    decided_by: str = "rule"
    """``rule`` or ``policy`` (``drain.on_offset_out_of_range``)."""
    target: int | None = None
    """The offset a restore or a reset commits."""
    incarnation: int = 1
    """The incarnation drained after this decision (+1 after a reset of a recreated or truncated log)."""
    redrain: tuple[Redrain, ...] = ()
    """Drained ranges re-drained (exactly) after the committed offset moved back: this tick's step."""
    standing: bool = False
    """A hold a person was asked to decide, still standing: nothing new to record (its event is in the ledger)."""
    continuing: bool = False
    """A re-drain decided on an earlier tick for this same move, carried on: nothing new to record."""

    def describe(self) -> str:
        """What was seen and what is done.

        >>> c = Change("o-2", 0, LogState.COMMITTED_GONE, 70, None, 0, 90)
        >>> Decided(c, Outcome.RESTORE, target=70).describe()
        'o-2[0] committed offsets gone: the group has no committed offset, kprio committed 70 (expired after offsets.retention.minutes without a commit); log [0,90) -> restore 70 (rule)'
        """
        what = str(self.outcome)
        if self.target is not None:
            what += f" {self.target}"
        if self.redrain:
            what += " " + ", ".join(f"{r.batch.batch_id}" for r in self.redrain)
        if self.incarnation > self.change.incarnation:
            what += f", incarnation {self.incarnation}"
        return f"{self.change.describe()} -> {what} ({self.decided_by})"


@dataclass(frozen=True)
class LogDecisions:
    """Every partition's log state this tick, what is done about the changes, and the partitions they hold."""

    changes: tuple[Change, ...] = ()
    decided: tuple[Decided, ...] = ()
    holds: tuple[Hold, ...] = ()
    redraining: frozenset[TopicPartitionKey] = frozenset()


def redraining_partitions(in_flight: Iterable[Batch]) -> frozenset[TopicPartitionKey]:
    """Partitions a re-drain of committed offsets is in flight on."""
    return frozenset(r.topic_partition for b in in_flight if b.replay_of_committed for r in b.plan.offset_ranges())


def needs_committed(snapshot: LagSnapshot, view: LedgerView, config: KprioConfig) -> frozenset[TopicPartitionKey]:
    """Partitions whose committed batches rule 7 reads (their group moved back and no re-drain is under way).

    The driver reads only those from the ledger (:attr:`LedgerView.committed`), after the snapshot.
    """
    redraining = redraining_partitions(view.in_flight)
    drain = config.drain
    return frozenset((c.topic, c.partition) for c in observe(snapshot, view.believed())
                     if c.state not in (LogState.OK, LogState.LOST_TO_RETENTION)
                     and outcome_of(c, drain.on_offset_out_of_range, allow_data_loss=drain.allow_data_loss)
                     is Outcome.REDRAIN and (c.topic, c.partition) not in redraining)


def committed_on(view: LedgerView, beliefs: Mapping[TopicPartitionKey, Belief], topic: str,
                 partition: int) -> list[Batch]:
    """Committed batches (and failed re-drains of committed offsets) with a range on ``topic[partition]`` of its
    current incarnation, oldest first."""
    belief = beliefs.get((topic, partition))
    incarnation = belief.incarnation if belief is not None else 1
    return [b for b in view.committed.get((topic, partition), ())
            if b.plan.incarnation_of(topic, partition) == incarnation
            and any(r.topic_partition == (topic, partition) for r in b.plan.offset_ranges())]


def log_decisions(config: KprioConfig, view: LedgerView, snapshot: LagSnapshot, *,
                  max_in_flight: int | None = None, now: datetime | None = None) -> LogDecisions:
    """Rule 7 over the topic's snapshot: observe every partition, decide about every change."""
    beliefs = view.believed()
    changes = observe(snapshot, beliefs)
    redraining = redraining_partitions(view.in_flight)
    in_flight_on: dict[TopicPartitionKey, list[str]] = {}
    for b in view.in_flight:
        for tp in sorted({r.topic_partition for r in b.plan.offset_ranges() if r.count}):
            in_flight_on.setdefault(tp, []).append(b.batch_id)
    decided, holds = decide_log_changes(
        changes, config.drain.on_offset_out_of_range, config.drain.allow_data_loss,
        drained=lambda t, q: committed_on(view, beliefs, t, q), redraining=redraining, slots=view.slots(),
        max_in_flight=config.planner.max_in_flight if max_in_flight is None else max_in_flight,
        in_flight_on=in_flight_on, open_holds=view.open_holds, last=view.last_changes, now=now,
        max_attempts=config.recovery.max_attempts)
    return LogDecisions(changes, decided, holds, redraining)


def decide_log_changes(changes: Iterable[Change], policy: OnOffsetOutOfRange, allow_data_loss: bool, *,
                       drained: Callable[[str, int], list[Batch]],
                       redraining: Collection[tuple[str, int]],
                       slots: Mapping[Priority, Sequence[str]] | None = None,
                       max_in_flight: int | None = None,
                       in_flight_on: Mapping[tuple[str, int], Sequence[str]] | None = None,
                       open_holds: Mapping[tuple[str, int], LogEvent] | None = None,
                       last: Mapping[tuple[str, int], LogEvent] | None = None,
                       now: datetime | None = None, max_attempts: int | None = None,
                       ) -> tuple[tuple[Decided, ...], tuple[Hold, ...]]:
    """What to do about every change that is not ok, and the partitions it holds.

    ``drained(topic, partition)``: the committed batches of that partition's current incarnation
    (a moved-back offset re-drains their exact ranges), with the failed re-drains; ``redraining``:
    partitions whose re-drain is in flight (held until it is done, without deciding again). Retention
    gaps are left to :func:`kprio_core.lifecycle.holds.lost_partitions`.

    A moved-back partition is re-drained one step at a time (:func:`redrain_steps`): the drained range
    covering the offset the group stands at. Its commit moves the group to that range's end, so the
    next tick sees the partition still moved back and carries the same decision on (``last``: the
    partition's last recorded change, :func:`same_move`), until the group stands where kprio left it.

    ``in_flight_on``: the batches in flight per partition. A policy reset that would start a new
    incarnation waits, held, while one is (it fails or finishes on its own; a new incarnation
    never starts under a batch that may still publish or commit the earlier one's offsets).

    ``open_holds``: per partition, the hold a person was asked to decide and did not yet
    (:meth:`kprio_core.ledger.Ledger.open_holds`). It stands whatever the log does meanwhile
    (:func:`standing_hold`): only a person's ``kprio reset``, or the rule the user configured, ends it.

    >>> c = Change("o-2", 0, LogState.COMMITTED_GONE, 70, None, 0, 90)
    >>> decided, holds = decide_log_changes([c], OnOffsetOutOfRange.HOLD, False, drained=lambda t, q: [],
    ...                                     redraining=())
    >>> [(str(d.outcome), d.target) for d in decided], holds
    ([('restore', 70)], ())
    """
    decided: list[Decided] = []
    holds: list[Hold] = []
    back: list[RedrainStep] = []
    for c in changes:
        tp = (c.topic, c.partition)
        held = (open_holds or {}).get(tp)
        if held is not None:
            d, h = standing_hold(c, held, policy, (in_flight_on or {}).get(tp, ()))
            decided.append(d)
            holds += [h] if h is not None else []
            continue
        if c.state is LogState.LOST_TO_RETENTION and allow_data_loss and c.high_watermark == c.log_start:
            # Nothing after the gap to drain: no batch would record it, so the gap is recorded here.
            decided.append(Decided(c, Outcome.RECORD_GAP, "policy", c.log_start, c.incarnation))
            continue
        if c.state in (LogState.OK, LogState.LOST_TO_RETENTION):
            continue
        outcome = outcome_of(c, policy, allow_data_loss=allow_data_loss)
        by = "policy" if outcome in RESETS else "rule"
        if outcome is Outcome.REDRAIN and tp in redraining:
            holds.append(change_hold(c, c.committed or 0, f"re-draining after: {c.describe()}", person=False))
            continue
        if outcome is Outcome.REDRAIN:
            step = redrain_step(c, drained(c.topic, c.partition), continuing=same_move(c, (last or {}).get(tp)))
            if step is None:
                holds.append(change_hold(c, c.committed or 0, hold_reason(c) + " (the ledger has no drained "
                                         "ranges covering it to re-drain exactly)"))
                decided.append(Decided(c, Outcome.HOLD, incarnation=c.incarnation))
            else:
                back.append(step)
            continue
        if outcome in RESETS and (wait := in_flight_blocks_reset(c, c.state in NEW_LOG,
                                                                  (in_flight_on or {}).get(tp, ()))):
            start = c.committed if c.committed is not None else (c.believed or 0)
            holds.append(change_hold(c, start, f"{wait}; after: {c.describe()}", person=False))
            decided.append(Decided(c, Outcome.WAIT, by, incarnation=c.incarnation))
            continue
        if outcome is Outcome.HOLD:
            start = c.committed if c.committed is not None else (c.believed or 0)
            holds.append(change_hold(c, start, hold_reason(c)))
        incarnation = c.incarnation + 1 if outcome in RESETS and c.state in NEW_LOG else c.incarnation
        decided.append(Decided(c, outcome, by, reset_target(c, outcome), incarnation))
    more, waits = redrain_steps(back, slots or {}, max_in_flight, now=now, max_attempts=max_attempts)
    return (tuple(sorted([*decided, *more], key=lambda d: (d.change.topic, d.change.partition))),
            tuple(sorted([*holds, *waits], key=lambda h: (h.topic, h.partition))))


@dataclass(frozen=True)
class RedrainStep:
    """A moved-back partition's next re-drain step: the drained range covering where its group stands, and its batch."""

    change: Change
    range: OffsetRange
    batch: Batch
    continuing: bool
    """The re-drain of this move was decided on an earlier tick (:func:`same_move`)."""


def redrain_step(c: Change, batches: Sequence[Batch], *, continuing: bool) -> RedrainStep | None:
    """The next step of re-draining ``c``'s partition from where its group stands back to what kprio committed,
    or None when ``batches`` (its drained batches) do not cover that span with exact ranges.

    >>> from kprio_core.lifecycle.examples import batch
    >>> done = [batch(f"b-00000{i}", state=BatchState.COMMITTED, start=10 * i, end=10 * i + 10) for i in range(3)]
    >>> step = redrain_step(Change("orders-2", 0, LogState.MOVED_BACK, 30, 14, 0, 40), done, continuing=False)
    >>> step.batch.batch_id, str(step.range)
    ('b-000001', 'orders-2[0]@[10,20)')
    >>> redrain_step(Change("orders-2", 0, LogState.MOVED_BACK, 40, 14, 0, 40), done, continuing=False) is None
    True
    """
    tp = (c.topic, c.partition)
    by_range = {r: b for b in batches for r in b.plan.offset_ranges() if r.topic_partition == tp and r.count}
    chosen = redrain_ranges(c.committed or 0, c.believed or 0, by_range)
    if not chosen:
        return None
    return RedrainStep(c, chosen[0], by_range[chosen[0]], continuing)


def same_move(c: Change, last: LogEvent | None) -> bool:
    """Whether ``c`` (a group moved back) is the move whose re-drain the partition's ``last`` recorded change decided:
    the same incarnation and offset kprio committed, the group moved forward since only (by the re-drain's
    commits). Its re-drain is then carried on, not decided again.

    >>> from datetime import UTC, datetime
    >>> decided = LogEvent(7, "o", "o-1", 0, 1, "reset back outside kprio", "redrain", "rule", 792, 392, None, 0,
    ...                    900, datetime(2026, 1, 1, tzinfo=UTC), None)
    >>> [same_move(Change("o-1", 0, LogState.MOVED_BACK, 792, g, 0, 950), decided) for g in (392, 420, 100)]
    [True, True, False]
    """
    return (last is not None and last.state == LogState.MOVED_BACK.value and last.outcome == Outcome.REDRAIN.value
            and last.incarnation == c.incarnation and last.believed == c.believed and last.committed is not None
            and c.committed is not None and last.committed <= c.committed)


def redrain_steps(steps: Sequence[RedrainStep], slots: Mapping[Priority, Sequence[str]], max_in_flight: int | None, *,
                  now: datetime | None = None, max_attempts: int | None = None,
                  ) -> tuple[list[Decided], list[Hold]]:
    """This tick's re-drains of moved-back partitions: one per drained batch that covers some of them, oldest first,
    each in a free ``planner.max_in_flight`` slot of the priorities of the ranges it re-drains.

    Only the ranges covering where each moved group stands are re-drained (a batch's ranges on other
    partitions or priorities stay as they are): so every re-drain commits from exactly where its group
    stands, on every partition it re-drains (never a gap), and takes the slot of no priority the move
    did not touch. A re-drain that failed is drained again after its backoff while it has attempts
    left (a person's ``kprio retry`` after that: :func:`redrain_due`). Why one at a time per slot: the
    re-drains of one partition then commit in offset order, and each takes a slot like any batch
    (``slots``: the batches in flight per priority); a re-drain whose priority has no free slot waits,
    held, for a later tick.
    """
    in_use = {p: list(ids) for p, ids in slots.items()}
    decided: list[Decided] = []
    holds: list[Hold] = []
    by_batch: dict[str, list[RedrainStep]] = {}
    for s in steps:
        by_batch.setdefault(s.batch.batch_id, []).append(s)
    for batch_id in sorted(by_batch, key=batch_number):
        mine = by_batch[batch_id]
        step = Redrain(mine[0].batch, tuple(sorted({s.range for s in mine})))
        due = redrain_due(step.batch, now=now, max_attempts=max_attempts)
        busy = sorted(p for p in step.priorities
                      if max_in_flight is not None and len(in_use.get(p, ())) >= max_in_flight)
        go = due is None and not busy
        if go:
            for p in step.priorities:
                in_use.setdefault(p, []).append(batch_id)
        for i, s in enumerate(mine):
            c = s.change
            decided.append(Decided(c, Outcome.REDRAIN, incarnation=c.incarnation, continuing=s.continuing,
                                   redrain=(step,) if go and i == 0 else ()))
            if due is not None:  # held as its failed batch holds: the loop waits for its retry, or names kprio retry
                holds.append(dataclasses.replace(due, topic=c.topic, partition=c.partition, start=c.committed or 0))
                continue
            said = (f"re-drain of {batch_id} waits for a slot of priority {', '.join(map(str, busy))} "
                    f"({', '.join(in_use[busy[0]])} in flight)") if busy else \
                f"re-draining {batch_id}'s {', '.join(map(str, step.ranges))}"
            holds.append(change_hold(c, c.committed or 0, f"{said} after: {c.describe()}", person=False))
    return decided, holds


def redrain_due(b: Batch, *, now: datetime | None, max_attempts: int | None) -> Hold | None:
    """None when ``b``, a committed batch or a failed re-drain, may be re-drained now; else how it holds the
    partition meanwhile: a failed re-drain backing off (retried by itself at its ``retry_at``), or out of
    attempts (a person's ``kprio retry``), as the ledger's holds of failed batches say it.

    >>> from kprio_core.lifecycle.examples import T0, batch
    >>> spent = batch("b-000004", state=BatchState.FAILED, replay_of_committed=True, attempts=3)
    >>> h = redrain_due(spent, now=T0, max_attempts=3)
    >>> h.batch_id, h.exhausted, redrain_due(batch("b-000005", state=BatchState.COMMITTED), now=T0, max_attempts=3)
    ('b-000004', True, None)
    """
    if b.state is not BatchState.FAILED:
        return None
    spent = not b.transient and max_attempts is not None and not may_retry(attempts=b.attempts,
                                                                           max_attempts=max_attempts)
    early = b.retry_at is not None and now is not None and b.retry_at > now
    if not spent and not early:
        return None
    first = min(b.plan.offset_ranges())
    return Hold(first.topic, first.partition, first.start, b.batch_id, BatchState.FAILED, b.reason, b.attempts,
                b.retry_at, spent, b.transient)


def standing_hold(c: Change, held: LogEvent, policy: OnOffsetOutOfRange,
                  in_flight: Sequence[str]) -> tuple[Decided, Hold | None]:
    """A partition a person was asked to decide about (``held``, the recorded hold), whatever its log shows now.

    The hold stands, with the words it was decided with, even when the log changed since in a way
    that alone would not hold it (the log's end grew past a committed offset that was beyond it: the
    records written since are not the ones a person looked at). The rule the user configured ends
    it: a log that became another log (truncated, recreated) is reset by ``drain.on_offset_out_of_range``
    when that says ``earliest`` or ``latest`` (waiting while a batch is in flight on it).

    >>> from datetime import UTC, datetime
    >>> from kprio_core.model.records import LogEvent
    >>> held = LogEvent(1, "o", "o-0", 0, 1, "ahead of the log", "hold", "rule", 121, 421, None, 0, 121,
    ...                 datetime(2026, 1, 1, 9, 51, tzinfo=UTC), None)
    >>> now = Change("o-0", 0, LogState.MOVED_FORWARD, 121, 421, 0, 571)   # 450 records later
    >>> d, h = standing_hold(now, held, OnOffsetOutOfRange.HOLD, ())
    >>> str(d.outcome), d.standing, h.start, h.exhausted
    ('hold', True, 121, True)
    >>> print(h.reason)
    o-0[0] ahead of the log: committed 421 is beyond the log's end 121 (log truncated or topic recreated); log [0,121); decide: kprio reset o-0[0] --to earliest|latest|<offset> (held since 2026-01-01 09:51:00 UTC; now: the group stands at 421, kprio committed 121, log [0,571))
    >>> d, h = standing_hold(now, held, OnOffsetOutOfRange.EARLIEST, ())
    >>> str(d.outcome), d.target, d.incarnation, d.decided_by, h
    ('reset to earliest', 0, 2, 'policy', None)
    """
    then = Change(held.topic, held.partition, LogState(held.state), held.believed, held.committed, held.log_start,
                  held.high_watermark, held.incarnation, c.old_topic_id, c.topic_id)
    kind = c.state if then.state is LogState.TOPIC_DELETED else then.state
    if kind in NEW_LOG and policy is not OnOffsetOutOfRange.HOLD:
        as_held = dataclasses.replace(c, state=kind)
        outcome = outcome_of(as_held, policy)
        wait = in_flight_blocks_reset(as_held, True, in_flight)
        if wait is None:
            return Decided(as_held, outcome, "policy", reset_target(as_held, outcome), c.incarnation + 1), None
        start = c.committed if c.committed is not None else (c.believed or 0)
        return (Decided(as_held, Outcome.WAIT, "policy", incarnation=c.incarnation),
                change_hold(c, start, f"{wait}; after: {hold_reason(then)}", person=False))
    known = [x for x in (c.committed, c.believed, then.believed) if x is not None]
    since = f"held since {held.at:%Y-%m-%d %H:%M:%S} UTC"
    now = "" if (c.state, c.committed, c.log_start, c.high_watermark) == (
        then.state, then.committed, then.log_start, then.high_watermark) else f"; now: {_now_words(c)}"
    return (Decided(c, Outcome.HOLD, incarnation=c.incarnation, standing=True),
            change_hold(c, min(known, default=0), f"{hold_reason(then)} ({since}{now})"))


def _now_words(c: Change) -> str:
    """What the group and the log show now, as facts (no rule's reading of them), without the partition's name.

    >>> _now_words(Change("o-0", 0, LogState.MOVED_FORWARD, 121, 421, 0, 571))
    'the group stands at 421, kprio committed 121, log [0,571)'
    """
    group = "no committed offset" if c.committed is None else f"stands at {c.committed}"
    mine = "" if c.believed is None else f", kprio committed {c.believed}"
    return f"the group {group}{mine}, log {c.log}"


def change_hold(c: Change, start: int, reason: str, *, person: bool = True) -> Hold:
    """A hold of a change of the log: from ``start``, ``exhausted`` when only a person ends it."""
    return Hold(topic=c.topic, partition=c.partition, start=start, batch_id=None, state=None, reason=reason,
                attempts=0, retry_at=None, exhausted=person)


def after_decisions(snapshot: LagSnapshot, decided: Iterable[Decided]) -> LagSnapshot:
    """The snapshot as it stands once the driver has committed the restores and resets decided."""
    targets = {(d.change.topic, d.change.partition): d.target for d in decided if d.target is not None}
    if not targets:
        return snapshot
    parts = tuple(dataclasses.replace(p, committed=targets[(p.topic, p.partition)])
                  if (p.topic, p.partition) in targets else p for p in snapshot.partitions)
    return dataclasses.replace(snapshot, partitions=parts)


def incarnations(beliefs: Mapping[tuple[str, int], Belief], decided: Iterable[Decided]) -> dict[str, int]:
    """Incarnation per partition (``topic[partition]``) above 1, after this tick's decisions (the output identity).

    >>> incarnations({("o-2", 0): Belief("o-2", 0, incarnation=2), ("o-1", 0): Belief("o-1", 0)}, [])
    {'o-2[0]': 2}
    """
    out = {f"{b.topic}[{b.partition}]": b.incarnation for b in beliefs.values() if b.incarnation > 1}
    for d in decided:
        if d.incarnation > 1:
            out[d.change.where] = d.incarnation
    return out
