"""Held partitions: what the planner skips, and the words that tell a person why and what to do.

A partition is held from an offset on by a failed batch (retried by itself, or after a person's
``kprio retry``), by offsets lost to retention, or by a change of the log only a person decides. A
failed batch on a partition whose group was moved back under it waits for the move's re-drain
(:func:`waits_for_the_group`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from kprio_core.log_changes import Belief, LogState, observe
from kprio_core.model.offsets import OffsetRange, TopicPartitionKey, held_range
from kprio_core.model.records import Batch, Hold
from kprio_core.model.snapshot import LagSnapshot


def describe_holds(holds: Sequence[Hold]) -> str:
    """Which partitions wait, since which offset, for which batch, and what a person does about it.

    The partitions one failure holds share one clause: its reason is said once, not once per partition.

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


def lost_partitions(snapshot: LagSnapshot, allow_data_loss: bool) -> tuple[Hold, ...]:
    """Partitions whose undrained offsets retention deleted, held unless ``drain.allow_data_loss``.

    Reported alike whether or not the partition was ever committed.
    """
    if allow_data_loss:
        return ()
    return tuple(
        Hold(topic=r.topic, partition=r.partition, start=r.start, batch_id=None, state=None,
             reason=f"offsets [{r.start},{r.end}) lost to retention before they were drained; set "
                    "drain.allow_data_loss to drain past them (the gap is recorded)",
             attempts=0, retry_at=None, exhausted=True)
        for r in snapshot.lost_to_retention()
    )


def moved_back(snapshot: object, beliefs: Mapping[TopicPartitionKey, Belief]) -> dict[TopicPartitionKey, int]:
    """Partitions whose group stands below the offset kprio committed, moved back outside kprio: where it stands
    (none when ``snapshot`` is not a lag snapshot: the broker could not be asked).

    Their re-drain brings the group back to what kprio committed; until then nothing of kprio's
    beyond it commits there (it would skip what the move asks to read again).

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
    """Why a failed ``batch`` is not retried now: on a partition moved back under it (``behind``: where its group
    stands), its range starts above the group (its commit would fail alike, an attempt spent each time); None:
    nothing stops it.

    >>> from kprio_core.lifecycle.examples import batch
    >>> from kprio_core.model.states import BatchState
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
