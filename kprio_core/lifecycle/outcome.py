"""What follows a drain and its checks, as pure rules: go on, split failing ranges off, fail the whole, publish.

A run drains its batch, then checks what it wrote; a replay does the same with no batch. Both ask, in order:

1. **after the drain** (:func:`after_drain`): ranges on a topic deleted or recreated since the plan (``moved``)
   and ranges whose drain failed are split off, one batch per kind (failed drains also per priority) holding
   only their partitions; the rest goes on to the checks. No range left: the whole fails, for the log change
   if any (a person decides), else the failed drains. A replay cannot split: any failure fails it whole;
2. **after the checks** (:func:`after_checks`): a pass publishes; failing ranges are split off and the rest is
   checked again, once, while some range passes and each failure names its ranges; else the whole fails and
   nothing is published;
3. **after the commit** (:func:`after_commit`): per partition: written or found committed: committed; group
   below the batch's start (moved back, or offsets gone): split off to wait for the group (the log-change rules
   re-drain or restore it first); topic deleted or recreated: split off for a person. One split per cause and
   priority, so one priority's moved group never holds another's ranges. Nothing committed: the whole fails;
4. **whether a failure passes by itself** (:func:`passes_by_itself`): failed drains only when every cause does
   (:func:`~kprio_core.lifecycle.run.transient_failure`); a group behind always (the re-drain brings it back);
   a log change or a check's verdict never; a run that died when its error's type says so, or the batch was
   split to find the cause (neither spends ``recovery.max_attempts``).

Why this order: what read another log is set apart before a failed drain is judged (it says nothing of this
log's records); at the commit, another log first (no offset of it may be written), then a group behind. No I/O,
no clock: the runtime (``orchestration.runtime.batch``, ``.replay``) words the reasons and acts.

A batch of three ranges whose second range's drain failed (the broker went away while reading it):

>>> from kprio_core.model.offsets import OffsetRange
>>> a, b, c = (OffsetRange("orders-2", p, 0, 10) for p in range(3))
>>> after_drain([RangeDrained(a), RangeDrained(b, failed=True, transient=True), RangeDrained(c)])
GoOn(kept=(OffsetRange(topic='orders-2', partition=0, start=0, end=10), \
OffsetRange(topic='orders-2', partition=2, start=0, end=10)), \
splits=(SplitOff(ranges=(OffsetRange(topic='orders-2', partition=1, start=0, end=10),), \
cause=<Cause.DRAIN: 'drain'>, transient=True),))

The same drain in a replay fails it whole:

>>> after_drain([RangeDrained(a), RangeDrained(b, failed=True, transient=True), RangeDrained(c)], may_split=False)
FailWhole(cause=<Cause.DRAIN: 'drain'>, transient=True)
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from kprio_core.lifecycle.run import transient_failure
from kprio_core.model.offsets import OffsetRange, TopicPartitionKey


class Cause(str, enum.Enum):
    """Why ranges are split off, or a whole batch fails."""

    LOG_CHANGED = "log-changed"
    """Their topic was deleted or recreated since the plan: they read another log."""
    DRAIN = "drain"
    """Their drain failed (its typed error says why)."""
    CHECKS = "checks"
    """They failed a blocking check."""
    GROUP_BEHIND = "group-behind"
    """Their group stands below their start at the commit (moved back, or offsets gone, while in flight):
    committing would skip what the move asks to read again."""
    COMMIT = "commit"
    """Their commit wrote nothing for another reason (their records are below the log's start by now)."""


# -- the inputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RangeDrained:
    """One planned range as its drain left it."""

    range: OffsetRange
    failed: bool = False
    """Its drain failed (its stats carry a failure)."""
    transient: bool | None = None
    """Its failure's cause passes by itself (the executor's typed record); None: no record of it."""


# -- the answers -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SplitOff:
    """Split these ranges off into a new failed batch that holds only their partitions."""

    ranges: tuple[OffsetRange, ...]
    cause: Cause
    transient: bool


@dataclass(frozen=True)
class FailWhole:
    """Fail the whole batch (or the replay of a topic): nothing of it is published."""

    cause: Cause
    transient: bool


@dataclass(frozen=True)
class GoOn:
    """Check ``kept`` after splitting off ``splits``, in their order."""

    kept: tuple[OffsetRange, ...]
    splits: tuple[SplitOff, ...] = ()


@dataclass(frozen=True)
class Recheck:
    """Split ``split`` off and check ``kept`` again."""

    kept: tuple[OffsetRange, ...]
    split: SplitOff


@dataclass(frozen=True)
class Publish:
    """Publish the checked output of ``ranges``."""

    ranges: tuple[OffsetRange, ...]


@dataclass(frozen=True)
class MarkCommitted:
    """Mark the batch committed with ``kept`` after splitting off ``splits`` (ranges its commit left for later)."""

    kept: tuple[OffsetRange, ...]
    splits: tuple[SplitOff, ...] = ()


AfterDrain = GoOn | FailWhole
AfterChecks = Publish | Recheck | FailWhole
AfterCommit = MarkCommitted | FailWhole


# -- the rules -------------------------------------------------------------------------------------


def after_drain(ranges: Sequence[RangeDrained], *, moved: Collection[OffsetRange] = (),
                may_split: bool = True) -> AfterDrain:
    """What follows a drain of ``ranges`` (rule 1); ``may_split`` False (a replay): any failure fails the whole."""
    moved = frozenset(moved)
    failed = [r for r in ranges if r.failed and r.range not in moved]
    kept = tuple(r.range for r in ranges if not r.failed and r.range not in moved)
    transient = passes_by_itself(Cause.DRAIN, [r.transient for r in failed])
    set_apart = sorted(r.range for r in ranges if r.range in moved)
    if not may_split and (failed or set_apart):
        return FailWhole(Cause.LOG_CHANGED if set_apart else Cause.DRAIN, False if set_apart else transient)
    if not kept and ranges:
        return FailWhole(Cause.LOG_CHANGED, False) if set_apart else FailWhole(Cause.DRAIN, transient)
    splits = []
    if set_apart:
        splits.append(SplitOff(tuple(set_apart), Cause.LOG_CHANGED, False))
    for topic in sorted({r.range.topic for r in failed}):  # one split per priority: each passes by itself or not
        mine = [r for r in failed if r.range.topic == topic]
        splits.append(SplitOff(tuple(r.range for r in mine), Cause.DRAIN, passes_by_itself(Cause.DRAIN,
                                                                                           [r.transient for r in mine])))
    return GoOn(kept, tuple(splits))


def after_checks(kept: Sequence[OffsetRange], *, passed: bool, failing: Collection[OffsetRange],
                 may_split: bool = True) -> AfterChecks:
    """What follows the checks of ``kept`` (rule 2); ``may_split`` False (a recheck, a replay): fail whole.

    >>> a, b = OffsetRange("o-0", 0, 0, 5), OffsetRange("o-0", 1, 0, 5)
    >>> after_checks([a, b], passed=False, failing={b})
    Recheck(kept=(OffsetRange(topic='o-0', partition=0, start=0, end=5),), \
split=SplitOff(ranges=(OffsetRange(topic='o-0', partition=1, start=0, end=5),), cause=<Cause.CHECKS: 'checks'>, \
transient=False))
    >>> after_checks([a, b], passed=False, failing={a, b})
    FailWhole(cause=<Cause.CHECKS: 'checks'>, transient=False)
    """
    if passed:
        return Publish(tuple(kept))
    bad = set(failing)
    if may_split and bad and len(bad) < len(kept):
        return Recheck(tuple(r for r in kept if r not in bad),
                       SplitOff(tuple(sorted(bad)), Cause.CHECKS, passes_by_itself(Cause.CHECKS)))
    return FailWhole(Cause.CHECKS, passes_by_itself(Cause.CHECKS))


def after_commit(ranges: Sequence[OffsetRange], *, written: Collection[TopicPartitionKey],
                 stands: Mapping[TopicPartitionKey, int | None], other_log: Collection[str] = ()) -> AfterCommit:
    """What follows the Kafka commit of a batch's ``ranges``, partition by partition (rule 3).

    ``written``: partitions this commit wrote; ``stands``: each one's committed offset after it (None: none);
    ``other_log``: topics deleted or recreated since the plan. A partition written, or standing at its end or
    beyond, is committed whatever the group shows after (a later move is the log-change rules' to see).

    >>> a, b = OffsetRange("o-2", 0, 40, 50), OffsetRange("o-1", 0, 80, 90)
    >>> after_commit([a, b], written={("o-2", 0)}, stands={("o-2", 0): 50, ("o-1", 0): 30})
    MarkCommitted(kept=(OffsetRange(topic='o-2', partition=0, start=40, end=50),), \
splits=(SplitOff(ranges=(OffsetRange(topic='o-1', partition=0, start=80, end=90),), \
cause=<Cause.GROUP_BEHIND: 'group-behind'>, transient=True),))
    """
    starts: dict[TopicPartitionKey, int] = {}
    ends: dict[TopicPartitionKey, int] = {}
    for r in ranges:
        if r.count:
            starts[r.topic_partition] = min(r.start, starts.get(r.topic_partition, r.start))
            ends[r.topic_partition] = max(r.end, ends.get(r.topic_partition, r.end))
    why = {tp: commit_cause(tp, starts[tp], ends[tp], written=written, stands=stands.get(tp), other_log=other_log)
           for tp in starts}
    kept = tuple(r for r in ranges if why.get(r.topic_partition) is None)
    splits = tuple(SplitOff(tuple(r for r in ranges if why.get(r.topic_partition) is cause and r.topic == topic), cause,
                            passes_by_itself(cause))
                   for cause in (Cause.LOG_CHANGED, Cause.GROUP_BEHIND, Cause.COMMIT)
                   for topic in sorted({tp[0] for tp, c in why.items() if c is cause}))
    if not kept and splits:
        return FailWhole(splits[0].cause, all(s.transient for s in splits))
    return MarkCommitted(kept, splits)


def commit_cause(tp: TopicPartitionKey, start: int, end: int, *, written: Collection[TopicPartitionKey],
                 stands: int | None, other_log: Collection[str]) -> Cause | None:
    """Why one partition of a batch, its ranges ``[start, end)``, is not committed by its commit (None: it is).

    >>> tp = ("o-1", 0)
    >>> [commit_cause(tp, 80, 90, written=(), stands=s, other_log=()) for s in (95, 90, None, 30)]
    [None, None, <Cause.GROUP_BEHIND: 'group-behind'>, <Cause.GROUP_BEHIND: 'group-behind'>]
    >>> commit_cause(tp, 80, 90, written=[tp], stands=30, other_log=())   # the move came after the write
    >>> commit_cause(tp, 80, 90, written=(), stands=85, other_log=()), commit_cause(tp, 80, 90, written=(),
    ...                                                                            stands=95, other_log=["o-1"])
    (<Cause.COMMIT: 'commit'>, <Cause.LOG_CHANGED: 'log-changed'>)
    """
    if tp[0] in other_log:
        return Cause.LOG_CHANGED
    if tp in written or (stands is not None and stands >= end):
        return None
    if stands is None or stands < start:
        return Cause.GROUP_BEHIND
    return Cause.COMMIT


def passes_by_itself(cause: Cause, transient: Sequence[bool | None] = ()) -> bool:
    """Whether a split or a whole failure for ``cause`` passes by itself (rule 4); ``transient``: None is unknown.

    >>> passes_by_itself(Cause.DRAIN, [True, True]), passes_by_itself(Cause.DRAIN, [True, None])
    (True, False)
    >>> passes_by_itself(Cause.CHECKS), passes_by_itself(Cause.LOG_CHANGED, [True])
    (False, False)
    >>> passes_by_itself(Cause.GROUP_BEHIND)
    True
    """
    if cause is Cause.GROUP_BEHIND:
        return True  # the log-change rules bring the group back (a re-drain, a restore); no attempt is spent meanwhile
    return cause is Cause.DRAIN and transient_failure(transient)


def run_failure_passes(error_transient: bool, *, isolated: bool) -> bool:
    """Whether a run that died with an error fails its batch as a passing failure (rule 4).

    >>> run_failure_passes(False, isolated=True), run_failure_passes(True, isolated=False)
    (True, True)
    >>> run_failure_passes(False, isolated=False)
    False
    """
    return error_transient or isolated
