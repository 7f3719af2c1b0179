"""Carry out what a tick decided about changes of the log kprio did not make, and record it in the ledger.

The core rules only decide (``kprio_core.lifecycle.log_rules``); the tick's applier calls :func:`carry_out` with
their :class:`~kprio_core.lifecycle.CarryOutLogChanges` before it records the plan, so the plan's offsets stand
on what was committed here:

- restore (the group's offsets expired) and a policy reset commit, then record the belief and the event;
- an accepted forward move records the skipped offsets and the new belief;
- offsets retention took with nothing after them to drain (``drain.allow_data_loss``) move the group to the
  log's start, and the gap is recorded;
- a moved-back offset puts exactly the drained ranges covering where the group stands back to planned (the whole
  batch, or split off it); the re-drain is recorded once, when decided;
- a hold records the change once (not again while the hold stands);
- what kprio sees for the first time (a topic id, a partition added) becomes a belief;
- a failed batch superseded by a new incarnation is said once (logged in its events and warned).

``kprio reset`` (:func:`reset_partition`) is the person's decision, recorded the same way.
"""

from __future__ import annotations

import logging

from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.errors import ConfigError, KafkaOperationFailed
from kprio_core.ledger import Batch
from kprio_core.lifecycle import CarryOutLogChanges
from kprio_core.lifecycle.log_rules import NEW_LOG
from kprio_core.log_changes import (
    NEEDS_RECORD,
    Belief,
    Change,
    LogState,
    Outcome,
    classify,
    in_flight_blocks_reset,
    parse_target,
    resolve_target,
)
from kprio_core.model.log_state import Decided
from orchestration.runtime.ports import Edge, LedgerPort

LOGGER = logging.getLogger("kprio.log_changes")


def carry_out(edge: Edge, ledger: LedgerPort, topic: TopicSettings, decision: CarryOutLogChanges, *, log=None,
              max_in_flight: int | None = None) -> dict[str, Batch]:
    """Commit, re-drain and record what the tick decided about the log; the batches put back to planned, by id
    (under ``planner.max_in_flight`` like any batch: RangeConflict when another planner took the slot)."""
    log = log or LOGGER
    name = topic.name
    decided = {(d.change.topic, d.change.partition): d for d in decision.decided}
    commits = {tp: d.target for tp, d in decided.items() if d.target is not None}
    if commits:
        # Fenced as a batch's commit is; refused (nothing written) when the group moved since the tick saw it.
        edge.set_committed(topic, commits, expect={tp: decided[tp].change.committed for tp in commits})
    beliefs = ledger.beliefs.of(name)
    fresh: list[Belief] = []
    put_back: dict[str, Batch] = {}
    for c in decision.changes:
        tp = (c.topic, c.partition)
        d = decided.get(tp)
        if d is not None and d.standing:
            continue  # a person's decision still awaited: recorded when it was asked for
        if d is not None and (d.outcome in (Outcome.HOLD, Outcome.WAIT) or c.state is LogState.TOPIC_DELETED):
            if ledger.beliefs.record_change(name, c, d.outcome, decided_by=d.decided_by, note=d.describe()) is not None:
                log.warning(f"{name}: {d.describe()}")
            continue
        if (belief := belief_after(c, d, beliefs.get(tp))) is not None:
            fresh.append(belief)
        if d is None:
            continue
        for r in d.redrain:
            put_back[r.batch.batch_id] = ledger.attempts.redrain(r.batch.batch_id, r.ranges,
                                                                 max_in_flight=max_in_flight)
        if d.continuing:
            continue  # a step of a re-drain decided (and recorded) when the move was first seen
        if c.state in NEEDS_RECORD or d.outcome is Outcome.RECORD_GAP:
            if ledger.beliefs.record_change(name, c, d.outcome, decided_by=d.decided_by, committed_after=d.target,
                                    note=d.describe()) is not None:
                log.warning(f"{name}: {d.describe()}")
    if fresh:
        ledger.beliefs.remember(name, fresh)
    for s in decision.superseded:
        if ledger.moves.note_superseded(s):
            log.warning(f"{name}: {s.describe()}")
    return put_back


def belief_after(c: Change, d: Decided | None, old: Belief | None) -> Belief | None:
    """What kprio believes about ``c``'s partition once ``d`` (None: nothing to decide) is carried out, when new:
    first seen, the offset (and incarnation) a restore or reset committed, an accepted move, a partition added."""
    if d is None:  # ok, or retention (its own rule): remember what kprio sees for the first time
        first = c.state is LogState.OK and (old is None or (old.topic_id is None and c.topic_id is not None))
        return Belief(c.topic, c.partition, c.topic_id, c.incarnation,
                      old.committed if old is not None else c.committed) if first else None
    if d.target is not None:
        topic_id = c.topic_id if d.incarnation > c.incarnation or old is None else old.topic_id
        return Belief(c.topic, c.partition, topic_id or c.topic_id, d.incarnation, d.target)
    if d.outcome is Outcome.ACCEPT:
        return Belief(c.topic, c.partition, old.topic_id if old else c.topic_id, c.incarnation, c.committed)
    if c.state is LogState.PARTITION_ADDED:
        return Belief(c.topic, c.partition, c.topic_id, 1, None)
    return None


def owner_of(config: KprioConfig, priority_topic: str) -> TopicSettings:
    """The logical topic whose priority topic is ``priority_topic``; ConfigError naming them all otherwise."""
    for t in config.topics:
        if priority_topic in t.priority_topics().values():
            return t
    names = sorted(n for t in config.topics for n in t.priority_topics().values())
    raise ConfigError(f"{priority_topic!r} is not a priority topic of this configuration ({', '.join(names)})")


def reset_partition(edge: Edge, ledger: LedgerPort, config: KprioConfig, topic_name: str, partition: int, to: str, *,
                    now_ms: int) -> str:
    """A person's decision for one partition: commit ``to`` (earliest, latest or an offset), record it; one line.

    A reset of a recreated topic, or of a log no longer reaching the committed offset, starts a new incarnation
    (its output never collides with the earlier one's); ValueError while a batch is in flight on the partition; a
    failed batch of the earlier incarnation is then superseded (never runs again, holds nothing). Any other reset
    keeps the incarnation: forwards, the skipped offsets are the person's; backwards, the next tick re-drains
    exactly the committed batches it covers.
    """
    target = parse_target(to)
    topic = owner_of(config, topic_name)
    beliefs = ledger.beliefs.of(topic.name)
    snapshot = edge.snapshot(topic, now_ms=now_ms, deleted_ok={b.topic for b in beliefs.values()})
    lag = next((p for p in snapshot.partitions if (p.topic, p.partition) == (topic_name, partition)), None)
    if lag is None:
        raise KafkaOperationFailed(
            f"{topic_name}[{partition}] does not exist on {edge.bootstrap} (topic deleted, or no such partition): "
            "nothing to reset; create the topic again, then reset it")
    belief = beliefs.get((topic_name, partition))
    change = classify(belief, lag, topic_id=snapshot.topic_ids.get(topic_name),
                      topic_known=any(b.topic == topic_name for b in beliefs.values()))
    offset = resolve_target(target, lag.log_start, lag.high_watermark)
    new_log = change.state in NEW_LOG
    busy = [b.batch_id for b in ledger.batches.in_flight(topic.name)
            if any(r.topic_partition == (topic_name, partition) and r.count for r in b.plan.offset_ranges())]
    wait = in_flight_blocks_reset(change, new_log, busy)
    if wait is not None:
        raise ValueError(f"{wait}; nothing reset (run kprio reset again once it has ended)")
    incarnation = change.incarnation + 1 if new_log else change.incarnation
    outcome = {"earliest": Outcome.RESET_EARLIEST, "latest": Outcome.RESET_LATEST}.get(str(target),
                                                                                     Outcome.RESET_TO_OFFSET)
    edge.set_committed(topic, {(topic_name, partition): offset}, expect={(topic_name, partition): lag.committed})
    believed = belief.committed if belief is not None else None
    # Backwards on the same log: the belief stays, so the next tick re-drains what is moved back over, exactly.
    keep = not new_log and believed is not None and offset < believed
    ledger.beliefs.remember(topic.name, [Belief(topic_name, partition, change.topic_id if new_log or belief is None
                                        else belief.topic_id, incarnation, believed if keep else offset)])
    was = "none" if change.committed is None else change.committed
    mine = "" if believed is None else f" (kprio committed {believed})"
    note = (f"kprio reset {topic_name}[{partition}] --to {to}: committed {was} -> {offset}{mine}"
            + (f", incarnation {incarnation}" if new_log else "")
            + (f" (was {change.state})" if change.state is not LogState.OK else ""))
    ledger.beliefs.record_change(topic.name, Change(topic_name, partition, change.state, believed, change.committed,
                                            lag.log_start, lag.high_watermark, change.incarnation,
                                            change.old_topic_id, change.topic_id),
                         outcome, decided_by="person", committed_after=offset, note=note)
    return note
