"""The tick's rules about changes of the log kprio did not make (rule 7 of :mod:`kprio_core.lifecycle.tick`).

:mod:`kprio_core.log_changes` compares kprio's beliefs with the cluster; these rules decide what a tick does, in
order: :func:`decide_changes` (each change decided once, when first seen), :func:`no_run_on_a_deleted_topic`,
:func:`no_run_on_another_log`, :func:`wait_for_the_loss_decision`, :func:`hold_what_changed`, :func:`redrain_moved`.
Why: decisions are carried out before planning, so later rules see the log as it will stand; a batch that cannot
succeed on this log gets no run before holds are counted; re-drains take their slots before the plan. A failed
batch whose group was moved back under it waits for the re-drain (:func:`waits_for_the_group`, the retry rule's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from kprio_core.config import KprioConfig, OnOffsetOutOfRange
from kprio_core.lifecycle.decision import TickState
from kprio_core.lifecycle.runs import Launch, Why
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
from kprio_core.model.log_state import Decided, LogDecisions, Redrain
from kprio_core.model.offsets import OffsetRange, TopicPartitionKey
from kprio_core.model.priority import Priority
from kprio_core.model.records import Batch, Hold, LogEvent, batch_number
from kprio_core.model.recovery import may_retry
from kprio_core.model.snapshot import LagSnapshot
from kprio_core.model.states import BatchState

RESETS = (Outcome.RESET_EARLIEST, Outcome.RESET_LATEST)
NEW_LOG = (LogState.AHEAD_OF_LOG, LogState.TOPIC_RECREATED)
"""States where the log below the old committed offset is another log: a reset starts a new incarnation."""


# --- the rules of the tick, in their order --------------------------------------------------------


def decide_changes(state: TickState) -> TickState:
    """Decide every change of the log; later rules see the snapshot as it stands after the decided restores/resets."""
    log = log_decisions(state.config, state.inputs.view, state.snapshot, now=state.inputs.now)
    return replace(state, log=log, snapshot=after_decisions(state.snapshot, log.decided))


def no_run_on_a_deleted_topic(state: TickState) -> TickState:
    """No run for a batch only on deleted priority topics (every retry would fail); the topic-deleted hold waits."""
    deleted = set(state.snapshot.deleted)
    only_gone = {b.batch_id for b in state.inputs.view.watched() if (on := _topics_of(b)) and on <= deleted}
    return replace(state, launches=tuple(x for x in state.launches if x.batch.batch_id not in only_gone),
                   holds=tuple(h for h in state.holds if h.topic not in deleted))


def no_run_on_another_log(state: TickState) -> TickState:
    """No run, and no hold, for a batch whose every range is on a log recreated since it was planned (topic id
    changed): the recreation's hold asks a person, the reset supersedes it. A batch with other ranges runs (it
    splits those off before it publishes)."""
    other = {b.batch_id: changed for b in state.inputs.view.watched()
             if (changed := b.plan.changed_logs(state.snapshot.topic_ids)) and _topics_of(b) <= set(changed)}
    waits = tuple(f"{x.describe()} waits: it was planned on another log of "
                  + ", ".join(f"{t} ({why})" for t, why in sorted(other[x.batch.batch_id].items()))
                  for x in state.launches if x.batch.batch_id in other)
    return replace(state, launches=tuple(x for x in state.launches if x.batch.batch_id not in other),
                   waiting=state.waiting + waits,
                   holds=tuple(h for h in state.holds if h.batch_id not in other or h.topic not in other[h.batch_id]))


def wait_for_the_loss_decision(state: TickState) -> TickState:
    """No retry of a failed batch into offsets retention deleted (each would fail and spend an attempt): it waits
    for ``drain.allow_data_loss``, the loss's hold says so, then is retried by itself."""
    if state.config.drain.allow_data_loss:
        return state
    lost = {(r.topic, r.partition): r for r in state.snapshot.lost_to_retention()}
    gaps = {h.batch_id: lost[(h.topic, h.partition)] for h in state.holds
            if h.batch_id is not None and (h.topic, h.partition) in lost}
    stopped = [x for x in state.launches if x.why is Why.RETRY and x.batch.batch_id in gaps]
    waits = tuple(f"{x.batch.batch_id} waits for drain.allow_data_loss: offsets [{g.start},{g.end}) of "
                  f"{g.topic}[{g.partition}] were lost to retention" for x in stopped if (g := gaps[x.batch.batch_id]))
    return replace(state, launches=tuple(x for x in state.launches if x not in stopped), waiting=state.waiting + waits,
                   holds=tuple(replace(h, exhausted=True) if h.batch_id in gaps else h for h in state.holds
                               if h.batch_id not in gaps or (h.topic, h.partition) not in lost))


def hold_what_changed(state: TickState) -> TickState:
    """Add the holds of the log's changes and of retention losses (:func:`lost_partitions`)."""
    lost = lost_partitions(state.snapshot, state.config.drain.allow_data_loss)
    return replace(state, holds=state.holds + state.log.holds + lost)


def redrain_moved(state: TickState) -> TickState:
    """Launch this tick's re-drains; they take their priorities' slots like any batch, before the plan."""
    redrains = [r for d in state.log.decided for r in d.redrain]
    return replace(state, launches=state.launches + tuple(Launch(r.batch, Why.REDRAIN, r.batch.attempts + 1)
                                                          for r in redrains),
                   slots=state.taking((r.batch.batch_id, r.priorities) for r in redrains))


def _topics_of(b: Batch) -> set[str]:
    """The priority topics ``b`` reads records of."""
    return {r.topic for r in b.plan.offset_ranges() if r.count}


# --- what they decide from ------------------------------------------------------------------------


def lost_partitions(snapshot: LagSnapshot, allow_data_loss: bool) -> tuple[Hold, ...]:
    """Partitions whose undrained offsets retention deleted (committed ever or not), held unless allow_data_loss."""
    return () if allow_data_loss else tuple(
        Hold(r.topic, r.partition, r.start, None, None, f"offsets [{r.start},{r.end}) lost to retention before they "
             "were drained; set drain.allow_data_loss to drain past them (the gap is recorded)", 0, None, True)
        for r in snapshot.lost_to_retention())


def moved_back(snapshot: object, beliefs: Mapping[TopicPartitionKey, Belief]) -> dict[TopicPartitionKey, int]:
    """Where each group moved back below kprio's commit stands (none if ``snapshot`` is no lag snapshot).

    Until the re-drain brings it back, nothing of kprio's beyond it commits there (it would skip the re-read).

    >>> from kprio_core.model.snapshot import PartitionLag
    >>> lag = LagSnapshot("o", 2, (PartitionLag("o-1", 0, 1, 0, 900, 392), PartitionLag("o-0", 0, 0, 0, 900, 792)))
    >>> moved_back(lag, {("o-1", 0): Belief("o-1", 0, committed=792), ("o-0", 0): Belief("o-0", 0, committed=792)})
    {('o-1', 0): 392}
    """
    if not isinstance(snapshot, LagSnapshot):
        return {}
    return {(c.topic, c.partition): c.committed for c in observe(snapshot, beliefs)
            if c.state is LogState.MOVED_BACK and c.committed is not None}


def waits_for_the_group(batch: Batch, behind: Mapping[TopicPartitionKey, int]) -> str | None:
    """Why failed ``batch`` is not retried now (its range starts above a group moved back: ``behind``), or None.

    >>> from kprio_core.lifecycle.examples import batch
    >>> left = batch("b-000039", state=BatchState.FAILED, priority=1, start=792, end=820, transient=True)
    >>> print(waits_for_the_group(left, {("orders-1", 0): 392}))
    b-000039 waits for the re-drain of orders-1[0] up to 792 (its group was moved back outside kprio to 392)
    >>> waits_for_the_group(left, {("orders-1", 0): 792}) is None, waits_for_the_group(left, {}) is None
    (True, True)
    """
    for r in sorted(batch.plan.offset_ranges()):
        stands = behind.get(r.topic_partition)
        if r.count and stands is not None and r.start > stands:
            return (f"{batch.batch_id} waits for the re-drain of {r.topic}[{r.partition}] up to {r.start} (its group "
                    f"was moved back outside kprio to {stands})")
    return None


def redraining_partitions(in_flight: Iterable[Batch]) -> frozenset[TopicPartitionKey]:
    """Partitions a re-drain of committed offsets is in flight on."""
    return frozenset(r.topic_partition for b in in_flight if b.replay_of_committed for r in b.plan.offset_ranges())


def needs_committed(snapshot: LagSnapshot, view: LedgerView, config: KprioConfig) -> frozenset[TopicPartitionKey]:
    """Partitions whose committed batches rule 7 reads (moved back, no re-drain under way): the driver reads only
    those into :attr:`LedgerView.committed`, after the snapshot."""
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
    """Decide every change that is not ok (:func:`decide_change`), re-drains together (:func:`redrain_steps`);
    retention gaps are :func:`lost_partitions`'. ``drained(topic, partition)``: its committed batches of the
    current incarnation and failed re-drains; ``open_holds``: :meth:`kprio_core.ledger.Ledger.open_holds`.

    >>> c = Change("o-2", 0, LogState.COMMITTED_GONE, 70, None, 0, 90)
    >>> decided, holds = decide_log_changes([c], OnOffsetOutOfRange.HOLD, False, drained=lambda t, q: [],
    ...                                     redraining=())
    >>> [(str(d.outcome), d.target) for d in decided], holds
    ([('restore', 70)], ())
    """
    found = []
    for c in changes:
        tp = (c.topic, c.partition)
        found.append(decide_change(c, policy, allow_data_loss, held=(open_holds or {}).get(tp), drained=drained,
                                   redraining=tp in redraining, in_flight=(in_flight_on or {}).get(tp, ()),
                                   last=(last or {}).get(tp)))
    more, waits = redrain_steps([s for _, _, s in found if s], slots or {}, max_in_flight, now=now,
                                max_attempts=max_attempts)
    return (tuple(sorted([*(d for d, _, _ in found if d), *more], key=lambda d: (d.change.topic, d.change.partition))),
            tuple(sorted([*(h for _, h, _ in found if h), *waits], key=lambda h: (h.topic, h.partition))))


def decide_change(c: Change, policy: OnOffsetOutOfRange, allow_data_loss: bool, *, held: LogEvent | None,
                  drained: Callable[[str, int], list[Batch]], redraining: bool, in_flight: Sequence[str],
                  last: LogEvent | None) -> tuple[Decided | None, Hold | None, RedrainStep | None]:
    """What to do about one change, the hold it makes, or the step of its re-drain (none for an ok partition).

    A person's hold (``held``) stands (:func:`standing_hold`). A moved-back partition re-drains one range at a
    time, the next tick carrying the decision on (:func:`same_move`). A reset to a new incarnation waits, held,
    while a batch is in flight there: it may still publish or commit the earlier one's offsets.
    """
    if held is not None:
        return (*standing_hold(c, held, policy, in_flight), None)
    if c.state is LogState.LOST_TO_RETENTION and allow_data_loss and c.high_watermark == c.log_start:
        # Nothing after the gap to drain: no batch would record it, so the gap is recorded here.
        return Decided(c, Outcome.RECORD_GAP, "policy", c.log_start, c.incarnation), None, None
    if c.state in (LogState.OK, LogState.LOST_TO_RETENTION):
        return None, None, None
    outcome = outcome_of(c, policy, allow_data_loss=allow_data_loss)
    if outcome is Outcome.REDRAIN and redraining:
        return None, change_hold(c, c.committed or 0, f"re-draining after: {c.describe()}", person=False), None
    if outcome is Outcome.REDRAIN:
        step = redrain_step(c, drained(c.topic, c.partition), continuing=same_move(c, last))
        if step is not None:
            return None, None, step
        return (Decided(c, Outcome.HOLD, incarnation=c.incarnation), change_hold(
            c, c.committed or 0, hold_reason(c) + " (the ledger has no drained ranges covering it to re-drain exactly)"),
            None)
    by = "policy" if outcome in RESETS else "rule"
    start = c.committed if c.committed is not None else (c.believed or 0)
    if outcome in RESETS and (wait := in_flight_blocks_reset(c, c.state in NEW_LOG, in_flight)):
        return (Decided(c, Outcome.WAIT, by, incarnation=c.incarnation),
                change_hold(c, start, f"{wait}; after: {c.describe()}", person=False), None)
    hold = change_hold(c, start, hold_reason(c)) if outcome is Outcome.HOLD else None
    incarnation = c.incarnation + 1 if outcome in RESETS and c.state in NEW_LOG else c.incarnation
    return Decided(c, outcome, by, reset_target(c, outcome), incarnation), hold, None


@dataclass(frozen=True)
class RedrainStep:
    """A moved-back partition's next re-drain step: the drained range covering where its group stands, and its batch."""

    change: Change
    range: OffsetRange
    batch: Batch
    continuing: bool
    """The re-drain of this move was decided on an earlier tick (:func:`same_move`)."""


def redrain_step(c: Change, batches: Sequence[Batch], *, continuing: bool) -> RedrainStep | None:
    """The next step of re-draining ``c``'s partition up to kprio's commit, or None if ``batches`` do not cover it.

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
    return RedrainStep(c, chosen[0], by_range[chosen[0]], continuing) if chosen else None


def same_move(c: Change, last: LogEvent | None) -> bool:
    """Whether ``c`` is the move whose re-drain ``last`` decided (same incarnation and commit, the group moved
    forward since only by the re-drain's commits): carried on, not decided again.

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
    """This tick's re-drains: one per drained batch covering moved-back partitions, oldest first, each in a free
    ``planner.max_in_flight`` slot of its ranges' priorities (else it waits, held).

    Only the ranges covering where each group stands: each commits from exactly there (never a gap), taking no
    slot the move did not touch; one per slot, so they commit in offset order. Failed ones: :func:`redrain_due`.
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
    """None when ``b`` (committed, or a failed re-drain) may be re-drained now; else its hold: backing off until
    ``retry_at``, or out of attempts (a person's ``kprio retry``).

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
    """A partition a person was asked to decide about (``held``), whatever its log shows now.

    The hold stands with its words even if the log since changed in a way that alone would not hold it (records
    written since are not the ones a person looked at). Only the configured rule ends it: a log that became another
    is reset when ``drain.on_offset_out_of_range`` says ``earliest``/``latest`` (waiting while a batch is in flight).

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
    """What the group and the log show now, as facts, without the partition's name.

    >>> _now_words(Change("o-0", 0, LogState.MOVED_FORWARD, 121, 421, 0, 571))
    'the group stands at 421, kprio committed 121, log [0,571)'
    """
    group = "no committed offset" if c.committed is None else f"stands at {c.committed}"
    mine = "" if c.believed is None else f", kprio committed {c.believed}"
    return f"the group {group}{mine}, log {c.log}"


def change_hold(c: Change, start: int, reason: str, *, person: bool = True) -> Hold:
    """A hold of a change of the log: from ``start``, ``exhausted`` when only a person ends it."""
    return Hold(c.topic, c.partition, start, None, None, reason, 0, None, person)


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
    return out | {d.change.where: d.incarnation for d in decided if d.incarnation > 1}
