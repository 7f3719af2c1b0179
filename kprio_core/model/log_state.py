"""What kprio believes about a partition's log, what it finds changed and what a tick decides about it: the values
the log rules (:mod:`kprio_core.log_changes`, :mod:`kprio_core.lifecycle.log_rules`) and the ledger pass around.

>>> b = Belief("orders-2", 0, topic_id="A", incarnation=1, committed=100)
>>> print(Change(b.topic, b.partition, LogState.TOPIC_RECREATED, b.committed, 100, 0, 30,
...              old_topic_id=b.topic_id, topic_id="B").describe())
orders-2[0] topic recreated: its topic id changed from A to B; committed 100; log [0,30)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kprio_core.model.offsets import OffsetRange, TopicPartitionKey
from kprio_core.model.priority import Priority
from kprio_core.model.records import Batch, Hold


class LogState(str, enum.Enum):
    """What the comparison of belief and snapshot found for one partition."""

    OK = "ok"
    LOST_TO_RETENTION = "lost to retention"
    AHEAD_OF_LOG = "ahead of the log"
    TOPIC_RECREATED = "topic recreated"
    MOVED_BACK = "reset back outside kprio"
    MOVED_FORWARD = "reset forward outside kprio"
    COMMITTED_GONE = "committed offsets gone"
    PARTITION_ADDED = "partition added"
    TOPIC_DELETED = "topic deleted"

    def __str__(self) -> str:
        return self.value


class Outcome(str, enum.Enum):
    """What kprio does about a state (see :func:`kprio_core.log_changes.outcome_of`)."""

    DRAIN = "drain"
    """Nothing to decide: drain on from the committed offset (or the log start)."""
    HOLD = "hold"
    """The partition waits for a person: ``kprio reset``."""
    RESTORE = "restore"
    """Re-commit the offset kprio last committed (the group's offsets expired)."""
    REDRAIN = "redrain"
    """Re-drain the committed batches' exact ranges from the moved-back offset, then go on."""
    ACCEPT = "accept"
    """The offsets someone skipped are recorded as skipped by the operator; drain on from there."""
    RESET_EARLIEST = "reset to earliest"
    RESET_LATEST = "reset to latest"
    RESET_TO_OFFSET = "reset to an offset"
    """Only a person's ``kprio reset --to <offset>``."""
    RECORD_GAP = "record the gap"
    """Retention took undrained offsets and nothing follows them: the group moves to the log start, the gap is
    recorded (``drain.allow_data_loss``; a batch draining past a gap records it in its plan instead)."""
    WAIT = "wait"
    """Waits for what kprio sees end by itself (a batch in flight): held meanwhile, decided again, never a person's."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Belief:
    """What kprio believes about one partition: topic identity, incarnation, the offset it last committed."""

    topic: str
    partition: int
    topic_id: str | None = None
    """The Kafka topic id kprio saw (None: the cluster reports none, or kprio never looked)."""
    incarnation: int = 1
    committed: int | None = None
    """The offset kprio last committed itself (None: kprio never committed this partition)."""
    committing: frozenset[int] = frozenset()
    """Offsets kprio may have committed before its ledger knows (Kafka is told first): its in-flight ranges' ends."""


@dataclass(frozen=True, slots=True)
class Change:
    """One partition's state, with what was believed and what was seen (the facts a message names)."""

    topic: str
    partition: int
    state: LogState
    believed: int | None
    """The committed offset kprio last wrote."""
    committed: int | None
    """The group's committed offset now (None: none)."""
    log_start: int | None
    high_watermark: int | None
    incarnation: int = 1
    old_topic_id: str | None = None
    topic_id: str | None = None

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]"

    @property
    def log(self) -> str:
        """The log's range, ``[0,30)``, or ``gone`` for a deleted topic."""
        return "gone" if self.log_start is None else f"[{self.log_start},{self.high_watermark})"

    def describe(self) -> str:
        """One line: where, what changed, the committed offset and the log's range.

        >>> Change("o-1", 2, LogState.MOVED_FORWARD, 40, 90, 0, 120).describe()
        'o-1[2] reset forward outside kprio: the group stands at 90, kprio committed 40 (offsets [40,90) skipped by the operator); log [0,120)'
        """
        what = {
            LogState.OK: "ok",
            LogState.LOST_TO_RETENTION: "offsets deleted by retention before they were drained",
            LogState.AHEAD_OF_LOG: f"committed {self.committed} is beyond the log's end {self.high_watermark} "
                                   "(log truncated or topic recreated)",
            LogState.TOPIC_RECREATED: f"its topic id changed from {self.old_topic_id} to {self.topic_id}",
            LogState.MOVED_BACK: f"the group stands at {self.committed}, kprio committed {self.believed}",
            LogState.MOVED_FORWARD: f"the group stands at {self.committed}, kprio committed {self.believed} "
                                    f"(offsets [{self.believed},{self.committed}) skipped by the operator)",
            LogState.COMMITTED_GONE: f"the group has no committed offset, kprio committed {self.believed} "
                                     "(expired after offsets.retention.minutes without a commit)",
            LogState.PARTITION_ADDED: "a partition kprio had not seen",
            LogState.TOPIC_DELETED: "the topic no longer exists on the cluster",
        }[self.state]
        says_committed = (LogState.MOVED_BACK, LogState.MOVED_FORWARD, LogState.AHEAD_OF_LOG, LogState.COMMITTED_GONE)
        committed = "" if self.state in says_committed else f"committed {_offset(self.committed)}; "
        return f"{self.where} {self.state}: {what}; {committed}log {self.log}"


def _offset(offset: int | None) -> str:
    return "none" if offset is None else str(offset)


# --- what a tick decides about the changes -----------------------------------------------------


@dataclass(frozen=True)
class Redrain:
    """Ranges of one drained batch to drain again after the group moved back: all (a replay), or these alone split
    off into a batch of their own (:meth:`kprio_core.ledger.Ledger.redrain`)."""

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


# --- batches planned on an earlier incarnation ------------------------------------------------


@dataclass(frozen=True, slots=True)
class Superseded:
    """A batch planned on an earlier incarnation of one of its partitions than the one kprio drains now."""

    batch_id: str
    topic: str
    partition: int
    planned: int
    """The incarnation the batch's plan drains on this partition."""
    current: int
    """The incarnation kprio believes the partition is at (after a reset of a recreated or truncated log)."""

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]"

    def describe(self) -> str:
        """One line: the batch, the partition, both incarnations and why it never runs again.

        >>> print(Superseded("b-000007", "orders-2", 0, 1, 2).describe())
        b-000007 is superseded on orders-2[0]: planned on incarnation 1, the partition is at incarnation 2 (its log was replaced and reset); it never runs again and holds no partition (the rest of its offsets are planned anew)
        """
        return (f"{self.batch_id} is superseded on {self.where}: planned on incarnation {self.planned}, the "
                f"partition is at incarnation {self.current} (its log was replaced and reset); it never runs "
                "again and holds no partition (the rest of its offsets are planned anew)")
