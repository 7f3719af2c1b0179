"""When the log changes under kprio: what kprio believes about a partition against what the cluster says now.

Each tick the lag snapshot is compared with kprio's :class:`Belief` of each partition, one rule per question, in this
order (why: a new identity voids every offset comparison; a gone offset has no position; one past the log's end is no
position, whoever wrote it; only then does who moved it matter; retention sees what is left):

1. :func:`topic_deleted` — the topic kprio drained is gone: hold until it is back (or reset);
2. :func:`topic_recreated` — the topic id changed: hold, or reset by ``drain.on_offset_out_of_range``;
3. :func:`committed_gone` — kprio committed, the group has nothing (expired, ``offsets.retention.minutes``): restore;
4. :func:`ahead_of_log` — committed beyond the high watermark (truncated, or recreated without ids): hold or reset;
5. :func:`moved_by_someone` — not kprio's offset: back, re-drain committed ranges exactly; forward, recorded as skipped;
6. retention (``PartitionLag.lost_to_retention``) — held unless ``drain.allow_data_loss``;
7. :func:`partition_added` — a partition kprio never saw on a topic it knows: drained from its start.

>>> from kprio_core.model.snapshot import PartitionLag
>>> b = Belief("orders-2", 0, topic_id="A", incarnation=1, committed=100)
>>> lag = PartitionLag("orders-2", 0, priority=2, log_start=0, high_watermark=30, committed=100)
>>> c = classify(b, lag, topic_id="B", topic_known=True)
>>> c.state, outcome_of(c, OnOffsetOutOfRange.HOLD)
(<LogState.TOPIC_RECREATED: 'topic recreated'>, <Outcome.HOLD: 'hold'>)
>>> print(c.describe())
orders-2[0] topic recreated: its topic id changed from A to B; committed 100; log [0,30)
>>> print(remedy(c))
kprio reset orders-2[0] --to earliest|latest|<offset>
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from kprio_core.config import OnOffsetOutOfRange
from kprio_core.model.log_state import Belief as Belief
from kprio_core.model.log_state import Change as Change
from kprio_core.model.log_state import LogState as LogState
from kprio_core.model.log_state import Outcome as Outcome
from kprio_core.model.log_state import Superseded as Superseded
from kprio_core.model.offsets import OffsetRange, TopicPartitionKey
from kprio_core.model.snapshot import LagSnapshot, PartitionLag

# --- one rule per question ---------------------------------------------------------------------


def topic_deleted(belief: Belief | None, lag: PartitionLag | None) -> bool:
    """kprio drained the partition, and the cluster no longer has it."""
    return belief is not None and lag is None


def topic_recreated(belief: Belief | None, topic_id: str | None) -> bool:
    """Both ids known, and they differ (a cluster without topic ids shows a recreation as :func:`ahead_of_log`).

    >>> topic_recreated(Belief("t", 0, topic_id="A"), "B"), topic_recreated(Belief("t", 0), "B")
    (True, False)
    """
    return belief is not None and belief.topic_id is not None and topic_id is not None and belief.topic_id != topic_id


def committed_gone(belief: Belief | None, lag: PartitionLag) -> bool:
    """kprio committed this partition, the group now has no offset for it."""
    return belief is not None and belief.committed is not None and lag.committed is None


def ahead_of_log(lag: PartitionLag) -> bool:
    """The committed offset is beyond the high watermark: no record there, nor below it, is drained by itself."""
    return lag.committed is not None and lag.committed > lag.high_watermark


def moved_by_someone(belief: Belief | None, lag: PartitionLag) -> int:
    """-1 moved back, +1 forward, 0 where kprio left it or is committing it (or kprio never committed it).

    >>> moved_by_someone(Belief("t", 0, committed=60, committing=frozenset({90})), PartitionLag("t", 0, 0, 0, 99, 90))
    0
    """
    if belief is None or belief.committed is None or lag.committed is None or lag.committed == belief.committed:
        return 0
    if lag.committed in belief.committing:
        return 0
    return -1 if lag.committed < belief.committed else 1


def partition_added(belief: Belief | None, topic_known: bool) -> bool:
    """A partition of a topic kprio already drains, that kprio has not seen before."""
    return belief is None and topic_known


def with_commits_under_way(beliefs: Mapping[TopicPartitionKey, Belief],
                           in_flight: Iterable[OffsetRange]) -> dict[TopicPartitionKey, Belief]:
    """``beliefs`` with the ends of kprio's in-flight ranges added to :attr:`Belief.committing` (its own commits).

    >>> b = with_commits_under_way({("t", 0): Belief("t", 0, committed=60)}, [OffsetRange("t", 0, 60, 90)])
    >>> sorted(b[("t", 0)].committing)
    [90]
    """
    ends: dict[TopicPartitionKey, set[int]] = {}
    for r in in_flight:
        ends.setdefault(r.topic_partition, set()).add(r.end)
    return {tp: (b if tp not in ends else replace(b, committing=b.committing | frozenset(ends[tp])))
            for tp, b in beliefs.items()}


# --- the rules combined ------------------------------------------------------------------------


def classify(belief: Belief | None, lag: PartitionLag | None, *, topic_id: str | None, topic_known: bool) -> Change:
    """The state of one partition, by the module's rules in order (``topic_known``: kprio knows the topic's other
    partitions, so an unknown one was added)."""
    if lag is None:  # rule 1, topic_deleted
        assert belief is not None, "a partition neither believed nor seen"
        return Change(belief.topic, belief.partition, LogState.TOPIC_DELETED, belief.committed, None, None, None,
                      belief.incarnation, belief.topic_id, None)
    incarnation = belief.incarnation if belief is not None else 1
    old_id = belief.topic_id if belief is not None else None
    believed = belief.committed if belief is not None else None

    def change(state: LogState) -> Change:
        return Change(lag.topic, lag.partition, state, believed, lag.committed, lag.log_start, lag.high_watermark,
                      incarnation, old_id, topic_id)

    if topic_recreated(belief, topic_id):
        return change(LogState.TOPIC_RECREATED)
    if committed_gone(belief, lag):
        return change(LogState.COMMITTED_GONE)
    if ahead_of_log(lag):
        return change(LogState.AHEAD_OF_LOG)
    moved = moved_by_someone(belief, lag)
    if moved:
        return change(LogState.MOVED_BACK if moved < 0 else LogState.MOVED_FORWARD)
    if lag.lost_to_retention is not None:
        return change(LogState.LOST_TO_RETENTION)
    if partition_added(belief, topic_known):
        return change(LogState.PARTITION_ADDED)
    return change(LogState.OK)


def outcome_of(change: Change, policy: OnOffsetOutOfRange, *, allow_data_loss: bool = False) -> Outcome:
    """What kprio does about ``change`` under ``drain.on_offset_out_of_range`` and ``drain.allow_data_loss``.

    >>> c = Change("o-0", 0, LogState.AHEAD_OF_LOG, 90, 90, 0, 20)
    >>> [outcome_of(c, p).value for p in OnOffsetOutOfRange]
    ['hold', 'reset to earliest', 'reset to latest']
    """
    state = change.state
    if state in (LogState.AHEAD_OF_LOG, LogState.TOPIC_RECREATED):
        return {OnOffsetOutOfRange.HOLD: Outcome.HOLD, OnOffsetOutOfRange.EARLIEST: Outcome.RESET_EARLIEST,
                OnOffsetOutOfRange.LATEST: Outcome.RESET_LATEST}[policy]
    if state is LogState.TOPIC_DELETED:
        return Outcome.HOLD
    if state is LogState.COMMITTED_GONE:
        return Outcome.RESTORE
    if state is LogState.MOVED_BACK:
        return Outcome.REDRAIN
    if state is LogState.MOVED_FORWARD:
        return Outcome.ACCEPT
    if state is LogState.LOST_TO_RETENTION and not allow_data_loss:
        return Outcome.HOLD
    return Outcome.DRAIN


def reset_target(change: Change, outcome: Outcome) -> int | None:
    """The offset a reset or a restore commits (None for outcomes that commit nothing).

    >>> c = Change("o-0", 0, LogState.COMMITTED_GONE, 70, None, 10, 90)
    >>> reset_target(c, Outcome.RESTORE), reset_target(c, Outcome.RESET_EARLIEST), reset_target(c, Outcome.RESET_LATEST)
    (70, 10, 90)
    """
    if outcome is Outcome.RESTORE:
        return change.believed
    if outcome is Outcome.RESET_EARLIEST:
        return change.log_start
    if outcome is Outcome.RESET_LATEST:
        return change.high_watermark
    return None


def redrain_ranges(start: int, until: int, drained: Iterable[OffsetRange]) -> tuple[OffsetRange, ...] | None:
    """The drained ranges covering ``[start, until)`` without a hole, in order (None: they do not): whole, as a re-drain
    replaces their files and a partial overlap would delete a whole old file.

    >>> R = lambda s, e: OffsetRange("o-0", 0, s, e)
    >>> redrain_ranges(45, 100, [R(0, 30), R(30, 60), R(60, 100)])
    (OffsetRange(topic='o-0', partition=0, start=30, end=60), OffsetRange(topic='o-0', partition=0, start=60, end=100))
    >>> redrain_ranges(10, 100, [R(30, 60), R(60, 100)]) is None
    True
    """
    chosen: list[OffsetRange] = []
    at = start
    for r in sorted(drained, key=lambda r: (r.start, r.end)):
        if r.end <= at or at >= until:
            continue
        if r.start > at:
            return None
        chosen.append(r)
        at = r.end
    return tuple(chosen) if at >= until else None


def hold_reason(change: Change) -> str:
    """Why a partition is held, and the one command that decides (without naming the held offset).

    >>> print(hold_reason(Change("o-2", 0, LogState.AHEAD_OF_LOG, 500, 500, 0, 40)))
    o-2[0] ahead of the log: committed 500 is beyond the log's end 40 (log truncated or topic recreated); log [0,40); decide: kprio reset o-2[0] --to earliest|latest|<offset>
    """
    return f"{change.describe()}; decide: {remedy(change)}"


def remedy(change: Change) -> str:
    """The one command a person runs for a held partition (a deleted topic is created again first).

    >>> remedy(Change("o-1", 0, LogState.TOPIC_DELETED, 8, None, None, None))
    'kprio topics create (the topic again), then kprio reset o-1[0] --to earliest|latest|<offset>'
    """
    reset = f"kprio reset {change.where} --to earliest|latest|<offset>"
    return f"kprio topics create (the topic again), then {reset}" if change.state is LogState.TOPIC_DELETED else reset


def parse_target(text: str) -> str | int:
    """``earliest``, ``latest`` or an offset (>= 0) from the command line.

    >>> parse_target("earliest"), parse_target("120")
    ('earliest', 120)
    >>> parse_target("-3")
    Traceback (most recent call last):
    ...
    ValueError: --to must be earliest, latest or an offset from 0 to 2**63-1, not '-3'
    """
    if text in ("earliest", "latest"):
        return text
    if text.isdigit() and int(text) < 2**63:  # Kafka's offsets are 64-bit
        return int(text)
    raise ValueError(f"--to must be earliest, latest or an offset from 0 to 2**63-1, not {text!r}")


def resolve_target(target: str | int, log_start: int, high_watermark: int) -> int:
    """The offset ``target`` names in the log ``[log_start, high_watermark)``; an offset outside it is refused.

    >>> resolve_target("earliest", 5, 40), resolve_target("latest", 5, 40), resolve_target(12, 5, 40)
    (5, 40, 12)
    >>> resolve_target(41, 5, 40)
    Traceback (most recent call last):
    ...
    ValueError: offset 41 is outside the log [5,40]: choose an offset in it, earliest or latest
    """
    if target == "earliest":
        return log_start
    if target == "latest":
        return high_watermark
    assert isinstance(target, int)
    if not log_start <= target <= high_watermark:
        raise ValueError(f"offset {target} is outside the log [{log_start},{high_watermark}]: choose an offset in "
                         "it, earliest or latest")
    return target


def parse_partition(text: str) -> tuple[str, int]:
    """``orders-2[0]`` -> ``("orders-2", 0)``.

    >>> parse_partition("orders-2[3]")
    ('orders-2', 3)
    >>> parse_partition("orders-2")
    Traceback (most recent call last):
    ...
    ValueError: name one partition as topic[partition], e.g. orders-2[0], not 'orders-2'
    """
    name, bracket, rest = text.partition("[")
    if not bracket or not name or not rest.endswith("]") or not rest[:-1].isdigit() or int(rest[:-1]) >= 2**31:
        raise ValueError(f"name one partition as topic[partition], e.g. orders-2[0], not {text!r}")
    return name, int(rest[:-1])


def observe(snapshot: LagSnapshot, beliefs: Mapping[TopicPartitionKey, Belief]) -> tuple[Change, ...]:
    """Every partition of the snapshot, and every believed partition of a deleted topic, classified.

    >>> from kprio_core.model.snapshot import LagSnapshot
    >>> snap = LagSnapshot("o", 1, (PartitionLag("o-0", 0, 0, 0, 10, 4), PartitionLag("o-0", 1, 0, 0, 5, None)),
    ...                    topic_ids={"o-0": "A"}, deleted=("o-9",))
    >>> beliefs = {("o-0", 0): Belief("o-0", 0, "A", 1, 4), ("o-9", 0): Belief("o-9", 0, "Z", 1, 8)}
    >>> [(c.where, c.state.value) for c in observe(snap, beliefs)]
    [('o-0[0]', 'ok'), ('o-0[1]', 'partition added'), ('o-9[0]', 'topic deleted')]
    """
    known = {b.topic for b in beliefs.values()}
    out = [classify(beliefs.get((p.topic, p.partition)), p, topic_id=snapshot.topic_ids.get(p.topic),
                    topic_known=p.topic in known)
           for p in snapshot.partitions]
    gone = set(snapshot.deleted)
    out += [classify(b, None, topic_id=None, topic_known=True) for b in beliefs.values() if b.topic in gone]
    return tuple(sorted(out, key=lambda c: (c.topic, c.partition)))


# --- batches planned on an earlier incarnation ------------------------------------------------


def is_superseded(planned: int, current: int) -> bool:
    """A batch's range is superseded when its plan's incarnation of the partition is older than the current one.

    >>> is_superseded(1, 2), is_superseded(2, 2), is_superseded(1, 1)
    (True, False, False)
    """
    return planned < current


def superseded(batch_id: str, planned: Mapping[TopicPartitionKey, int],
               current: Mapping[TopicPartitionKey, int]) -> tuple[Superseded, ...]:
    """The partitions on which ``batch_id`` is superseded (empty: it is not), in partition order.

    ``planned``: each partition's plan incarnation; ``current``: kprio's (1 when absent). Superseded anywhere, a batch
    is superseded whole: it never runs again (it would read another log's offsets under the earlier incarnation's file
    names) and holds no partition. Its other ranges are not lost: only a failed batch counts (one in flight stops a
    reset), so they lie past the committed offsets, planned anew, the new publish replacing uncommitted files it
    overlaps. (Narrowing it needs a new ledger move; holding it, a hold no command ends.)

    >>> sup = superseded("b-000007", {("o-2", 0): 1, ("o-1", 0): 1}, {("o-2", 0): 2})
    >>> [(s.where, s.planned, s.current) for s in sup]
    [('o-2[0]', 1, 2)]
    >>> superseded("b-000009", {("o-2", 0): 2}, {("o-2", 0): 2})
    ()
    """
    return tuple(Superseded(batch_id, t, p, inc, current.get((t, p), 1))
                 for (t, p), inc in sorted(planned.items()) if is_superseded(inc, current.get((t, p), 1)))


def in_flight_blocks_reset(change: Change, new_incarnation: bool, in_flight: Sequence[str]) -> str | None:
    """Why a reset of ``change``'s partition must wait, or None: a new incarnation never starts under a batch in flight,
    which fails or finishes on its own first.

    >>> c = Change("o-2", 0, LogState.TOPIC_RECREATED, 30, None, 0, 12, 1, "A", "B")
    >>> print(in_flight_blocks_reset(c, True, ["b-000004"]))
    a reset to a new incarnation waits for b-000004 in flight on o-2[0] to fail or finish
    >>> in_flight_blocks_reset(c, True, []), in_flight_blocks_reset(c, False, ["b-000004"])
    (None, None)
    """
    if not new_incarnation or not in_flight:
        return None
    return (f"a reset to a new incarnation waits for {', '.join(in_flight)} in flight on {change.where} to fail "
            "or finish")


NEEDS_RECORD: frozenset[LogState] = frozenset(LogState) - {LogState.OK, LogState.LOST_TO_RETENTION}
"""States recorded in the ledger as events (retention gaps have their own record: the plan's ``lost``)."""
