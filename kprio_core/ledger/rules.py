"""The ledger's rules about who may take which offsets, one small pure function each.

Every rule reads :class:`Taken` entries (a topic's ranges in flight or failed). :func:`room_for` checks slots
first (cheaper, and names no range), then overlap with ranges in flight, then with held partitions. b-000001
drains orders-2[0]@[0,10); b-000002 failed on orders-2[1] from offset 5:

>>> from kprio_core.model.offsets import OffsetRange as R
>>> taken = [Taken(R("orders-2", 0, 0, 10), 2, "b-000001", BatchState.DRAINED),
...          Taken(R("orders-2", 1, 5, 9), 2, "b-000002", BatchState.FAILED)]
>>> slots_in_use(taken)
{2: ['b-000001']}
>>> overlaps([R("orders-2", 0, 8, 12), R("orders-2", 1, 20, 30), R("orders-2", 1, 0, 5)], taken)
['orders-2[0]@[8,12) overlaps orders-2[0]@[0,10) held by batch b-000001 (drained)', \
'orders-2[1]@[20,30) is on orders-2[1], held from offset 5 by failed batch b-000002 (retry it first)']
>>> predecessors([R("orders-2", 1, 9, 12)], taken, me="b-000003")
['b-000002']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kprio_core.errors import RangeConflict
from kprio_core.model.offsets import OffsetRange, TopicPartitionKey
from kprio_core.model.priority import Priority
from kprio_core.model.records import batch_number
from kprio_core.model.states import BatchState


@dataclass(frozen=True, slots=True)
class Taken:
    """One range of a batch in flight or failed (empty ranges included: they take slots, not offsets)."""

    range: OffsetRange
    priority: Priority
    batch_id: str
    state: BatchState
    replay_of_committed: bool = False
    superseded: bool = False
    """Planned on an earlier incarnation (:func:`kprio_core.log_changes.superseded`): never runs, holds nothing."""

    @property
    def in_flight(self) -> bool:
        return self.state.in_flight

    @property
    def holding(self) -> bool:
        """A failed batch holds its partition from the range's start on, unless it re-drained committed offsets
        or is superseded."""
        return (self.state is BatchState.FAILED and not self.replay_of_committed and not self.superseded
                and bool(self.range.count))

    @property
    def blocks(self) -> bool:
        """True when later ranges of its partition cannot commit before it (a re-drain blocks nothing)."""
        return (self.in_flight or self.holding) and not self.replay_of_committed and bool(self.range.count)


def self_overlap(ranges: Iterable[OffsetRange]) -> str | None:
    """Two ranges of one plan holding the same offset (the ledger could not tell them apart).

    >>> R = OffsetRange
    >>> self_overlap([R("t", 0, 0, 10), R("t", 0, 5, 15)]), self_overlap([R("t", 0, 0, 5), R("t", 0, 5, 9)])
    ('t[0]@[0,10) overlaps t[0]@[5,15) of the same plan', None)
    """
    previous: OffsetRange | None = None
    for r in sorted(r for r in ranges if r.count):
        if previous is not None and previous.overlaps(r):
            return f"{previous} overlaps {r} of the same plan"
        previous = r
    return None


def slots_in_use(taken: Iterable[Taken]) -> dict[Priority, list[str]]:
    """Per priority, the batches in flight with a range of it (each takes one slot), oldest first."""
    slots: dict[Priority, set[str]] = {}
    for t in taken:
        if t.in_flight:
            slots.setdefault(t.priority, set()).add(t.batch_id)
    return {p: sorted(ids, key=batch_number) for p, ids in sorted(slots.items(), reverse=True)}


def full(slots: Mapping[Priority, list[str]], max_in_flight: int) -> dict[Priority, list[str]]:
    """The priorities whose ``max_in_flight`` slots are all taken.

    >>> full({2: ["b-000001"], 0: ["b-000002", "b-000003"]}, max_in_flight=2)
    {0: ['b-000002', 'b-000003']}
    """
    return {p: ids for p, ids in slots.items() if len(ids) >= max_in_flight}


def overlaps(wanted: Iterable[OffsetRange], taken: Iterable[Taken], *, new: bool = True) -> list[str]:
    """One line per wanted range that overlaps a range in flight or lies on a held partition.

    ``new=False`` (a retry or replay) checks only held ranges, not what a hold reserves after them: a retry never
    waits for another's (two could hold each other's partition), it commits after it.

    >>> R, failed = OffsetRange, Taken(OffsetRange("t", 0, 5, 9), 2, "b-000002", BatchState.FAILED)
    >>> overlaps([R("t", 0, 10, 20)], [failed]), overlaps([R("t", 0, 10, 20)], [failed], new=False)
    (['t[0]@[10,20) is on t[0], held from offset 5 by failed batch b-000002 (retry it first)'], [])
    """
    taken = list(taken)
    found = []
    for w in sorted(r for r in wanted if r.count):  # an empty range holds no offset
        for t in taken:
            if (t.in_flight or t.holding) and t.range.count and w.overlaps(t.range):
                found.append(f"{w} overlaps {t.range} held by batch {t.batch_id} ({t.state.value})")
            elif new and t.holding and w.topic_partition == t.range.topic_partition and w.end > t.range.start:
                found.append(f"{w} is on {t.range.topic}[{t.range.partition}], held from offset {t.range.start} "
                             f"by failed batch {t.batch_id} (retry it first)")
    return found


def room_for(what: str, ranges: Sequence[OffsetRange], priorities: Iterable[Priority], taken: Sequence[Taken],
             max_in_flight: int | None, *, new: bool = True) -> None:
    """Raise :class:`RangeConflict` naming the first rule that refuses ``ranges`` (``what`` says whose)."""
    if max_in_flight is not None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1 or None, got {max_in_flight}")
        busy = {p: ids for p, ids in full(slots_in_use(taken), max_in_flight).items() if p in set(priorities)}
        if busy:
            p, ids = next(iter(busy.items()))
            raise RangeConflict(
                f"{what}: priority {p} already has {len(ids)} batch(es) in flight (max_in_flight={max_in_flight} "
                f"per priority): {', '.join(ids)}"
            )
    found = overlaps(ranges, taken, new=new)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise RangeConflict(f"{what}: {found[0]}{more}")


def below_committed(wanted: Iterable[OffsetRange], incarnation_of: Mapping[TopicPartitionKey, int],
                    believed: Mapping[TopicPartitionKey, tuple[int, int | None]]) -> list[str]:
    """One line per wanted range below kprio's commit on its partition, or on an earlier incarnation.

    Another driver may have committed them since the snapshot: the plan would publish over their output (a
    shorter range replacing a longer one's file: offsets lost). ``believed``: (incarnation, last commit).

    >>> R = OffsetRange
    >>> below_committed([R("t", 0, 0, 150), R("t", 1, 200, 300)], {}, {("t", 0): (1, 200), ("t", 1): (1, 200)})
    ['t[0]@[0,150) starts below offset 200, which kprio committed on t[0] (planned from an older lag snapshot)']
    >>> below_committed([R("t", 0, 0, 5)], {("t", 0): 1}, {("t", 0): (2, 0)})
    ['t[0]@[0,5) is planned on incarnation 1 of t[0], kprio drains incarnation 2 (planned before the reset)']
    """
    found = []
    for w in sorted(r for r in wanted if r.count):
        tp = w.topic_partition
        if tp not in believed:
            continue
        incarnation, committed = believed[tp]
        mine = incarnation_of.get(tp, 1)
        if mine != incarnation:
            found.append(f"{w} is planned on incarnation {mine} of {w.topic}[{w.partition}], kprio drains "
                         f"incarnation {incarnation} (planned before the reset)")
        elif committed is not None and w.start < committed:
            found.append(f"{w} starts below offset {committed}, which kprio committed on {w.topic}[{w.partition}] "
                         "(planned from an older lag snapshot)")
    return found


def predecessors(mine: Iterable[OffsetRange], taken: Iterable[Taken], me: str) -> list[str]:
    """Batches in flight or holding with an earlier range on ``mine``'s partitions: committing past them would
    skip their records."""
    starts: dict[TopicPartitionKey, int] = {}
    for r in mine:
        if r.count:
            starts[r.topic_partition] = min(r.start, starts.get(r.topic_partition, r.start))
    found = {t.batch_id for t in taken
             if t.batch_id != me and t.blocks and t.range.start < starts.get(t.range.topic_partition, -1)}
    return sorted(found, key=batch_number)
