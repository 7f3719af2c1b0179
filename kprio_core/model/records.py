"""What the ledger hands out: a :class:`Batch` (one plan and where it stands), its events, holds, samples.

Batch ids are ``b-`` plus the batch number, zero-padded to six digits.

>>> format_batch_id(42), parse_batch_id("b-000042"), format_batch_id(1234567)
('b-000042', 42, 'b-1234567')
>>> parse_batch_id("batch-42") is None
True
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from kprio_core.model.drain_plan import DrainPlan
from kprio_core.model.offsets import OffsetRange, TopicPartitionKey, held_range
from kprio_core.model.priority import Priority
from kprio_core.model.recovery import Lease, LeaseToken
from kprio_core.model.results import CheckReport, CommitReport, DrainResult
from kprio_core.model.states import BatchState

_BATCH_ID = re.compile(r"b-(\d+)")


def format_batch_id(number: int) -> str:
    """The public id of batch ``number``."""
    return f"b-{number:06d}"


def parse_batch_id(batch_id: str) -> int | None:
    """The number of ``batch_id``, or None when it is not a ledger id."""
    match = _BATCH_ID.fullmatch(batch_id) if isinstance(batch_id, str) else None
    return int(match.group(1)) if match else None


def batch_number(batch_id: str) -> int:
    """Sort key of batch ids: their number (0 for a foreign id)."""
    return parse_batch_id(batch_id) or 0


@dataclass(frozen=True)
class Batch:
    """One recorded plan and where it stands. ``attempts``: 1, +1 per retry or replay. ``replay_of_committed``: an
    earlier attempt committed, so a replay's commit adds nothing and its failure holds nothing. ``drain``, ``checks``:
    the current attempt's; ``committed_at``: the first commit; ``parent``: the batch it was split from."""

    batch_id: str
    logical_topic: str
    state: BatchState
    plan: DrainPlan
    attempts: int
    created_at: datetime
    updated_at: datetime
    reason: str | None = None
    transient: bool = False
    """The last failure's cause passes by itself: retried until it is gone, whatever the attempts."""
    transient_streak: int = 0
    """Transient failures in a row up to the last failure (0 when the last one was not transient)."""
    replay_of_committed: bool = False
    parent: str | None = None
    retry_at: datetime | None = None
    lease: Lease | None = None
    lease_epoch: int = 0
    """The number of the lease's fencing token (see :attr:`token`)."""
    drain: DrainResult | None = None
    checks: CheckReport | None = None
    commit: CommitReport | None = None
    committed_at: datetime | None = None

    @property
    def in_flight(self) -> bool:
        """True while the batch reserves its ranges (planned, drained or checked)."""
        return self.state.in_flight

    @property
    def token(self) -> LeaseToken | None:
        """The lease's fencing token (owner, this attempt, the claim's epoch); None when nobody holds the batch."""
        return LeaseToken(self.lease.owner, self.attempts, self.lease_epoch) if self.lease is not None else None

    @property
    def holds(self) -> bool:
        """True when the batch failed and holds its partitions from its ranges' starts."""
        return self.state is BatchState.FAILED and not self.replay_of_committed

    @property
    def priorities(self) -> frozenset[Priority]:
        """Priorities of its ranges: while in flight it takes one slot of each."""
        return frozenset(r.priority for r in self.plan.ranges)

    @property
    def partitions(self) -> frozenset[TopicPartitionKey]:
        return frozenset(r.range.topic_partition for r in self.plan.ranges)


@dataclass(frozen=True, slots=True)
class BatchEvent:
    """One logged step; ``seq`` orders a ledger's events (on SQLite as committed). A lease take-over, a retry of a stuck
    batch and a split keep the state; a recorded (or split-off) batch has ``from_state None``."""

    seq: int
    batch_id: str
    from_state: BatchState | None
    to_state: BatchState
    attempt: int
    at: datetime
    reason: str | None


class HoldReason(enum.Enum):
    """Why kprio holds a partition, in a few words a metric label can carry (the full words go with it)."""

    FAILED_BATCH = "failed_batch"
    """A failed batch holds it and is retried by itself."""
    RETRIES_EXHAUSTED = "retries_exhausted"
    """A failed batch holds it and only a person's ``kprio retry`` moves it."""
    LOST_TO_RETENTION = "lost_to_retention"
    LOG_CHANGE = "log_change"
    """A change of the log kprio did not make waits for a person (or the configured policy)."""

    @classmethod
    def of_batch_hold(cls, exhausted: bool) -> HoldReason:
        """The reason of a hold the ledger made (a failed batch's): retried by itself or not."""
        return cls.RETRIES_EXHAUSTED if exhausted else cls.FAILED_BATCH

    @property
    def waits_for_person(self) -> bool:
        return self is not HoldReason.FAILED_BATCH


@dataclass(frozen=True, slots=True)
class Hold:
    """A partition held from ``start`` on: nothing later on it is planned (a later batch could not commit past it). The
    ledger's holds are failed batches; a caller may add its own (``batch_id`` None).

    >>> h = Hold("orders-0", 1, 120, "b-000007", BatchState.FAILED, "values_match_schema failed", attempts=3,
    ...          retry_at=None, exhausted=True)
    >>> h.range.start, h.range.end == (1 << 63) - 1
    (120, True)
    >>> str(h)
    'orders-0[1] held from offset 120 by failed batch b-000007 (attempt 3, retries exhausted): values_match_schema failed'
    """

    topic: str
    partition: int
    start: int
    batch_id: str | None
    state: BatchState | None
    reason: str | None
    attempts: int
    retry_at: datetime | None
    exhausted: bool
    """True when the batch failed ``max_attempts`` times: only an operator retries it."""
    transient: bool = False
    """The batch's failure has a passing cause: it is retried by itself once the cause is gone."""

    @property
    def range(self) -> OffsetRange:
        """The reservation the planner skips: ``[start, END_OF_LOG)``."""
        return held_range(self.topic, self.partition, self.start)

    def __str__(self) -> str:
        where = f"{self.topic}[{self.partition}] held from offset {self.start}"
        if self.batch_id is None:
            return f"{where}: {self.reason}"
        more = ", retries exhausted" if self.exhausted else ""
        return f"{where} by failed batch {self.batch_id} (attempt {self.attempts}{more}): {self.reason}"


class DrainSample(NamedTuple):
    """How long one committed batch took to drain its records (a throughput sample)."""

    records: int
    """Rows written (output and dead letters)."""
    seconds: float
    """Wall time of the drain: the Spark job's fixed cost and the records."""
    record_seconds: float | None = None
    """The records' share of it: the drain tasks' time on records over the cores they had (None: not measured)."""
    batch_seconds: float | None = None
    """From the batch's plan to its commit, for a batch that committed at its first attempt (else None)."""


class DrainedSample(NamedTuple):
    """Records and bytes one committed batch drained of one priority (a rate-quota sample)."""

    at: datetime
    """When the batch was committed."""
    priority: Priority
    records: int
    """Output rows plus dead letters: both were consumed."""
    bytes: int


class BacklogSample(NamedTuple):
    """The backlog per priority a plan's lag snapshot saw (an arrival sample, :mod:`kprio_core.replay`)."""

    at: datetime
    """When the snapshot was taken."""
    backlog: dict[Priority, int]


class CommitSample(NamedTuple):
    """One partition as a commit left it: the group's offset, when, and where the log ended right after."""

    topic: str
    partition: int
    at: datetime
    committed: int
    log_end: int | None
    """None: not seen (a commit recorded before the ledger kept it)."""


@dataclass(frozen=True, slots=True)
class LogEvent:
    """A change of the log kprio did not make, or a decision about one, as the ledger recorded it."""

    seq: int
    logical_topic: str
    topic: str
    partition: int
    incarnation: int
    state: str
    """A :class:`kprio_core.log_changes.LogState` value."""
    outcome: str
    """A :class:`kprio_core.log_changes.Outcome` value."""
    decided_by: str
    """``rule`` (kprio's stated rule), ``policy`` (drain.on_offset_out_of_range) or ``person`` (kprio reset)."""
    believed: int | None
    committed: int | None
    committed_after: int | None
    log_start: int | None
    high_watermark: int | None
    at: datetime
    note: str | None

    def line(self) -> str:
        """One line for a person.

        >>> from datetime import UTC
        >>> LogEvent(3, "o", "o-2", 0, 1, "reset forward outside kprio", "accept", "rule", 40, 90, None, 0, 120,
        ...          datetime(2026, 3, 1, 12, 0, tzinfo=UTC), "offsets [40,90) skipped by the operator").line()
        'o-2[0] 2026-03-01 12:00:00 UTC reset forward outside kprio -> accept (rule): offsets [40,90) skipped by the operator'
        """
        return (f"{self.topic}[{self.partition}] {self.at:%Y-%m-%d %H:%M:%S} UTC {self.state} -> {self.outcome} "
                f"({self.decided_by}): {self.note or ''}").rstrip(": ")


@dataclass(frozen=True, slots=True)
class LaunchClaim:
    """Who claimed the launch of a run key, for which batch, and until when the claim holds."""

    run_key: str
    batch_id: str
    owner: str
    claimed_at: datetime
    until: datetime

    def live(self, now: datetime, dead: Collection[str] = ()) -> bool:
        """True while the claim holds: not expired, and its owner not known dead."""
        return self.until > now and self.owner not in dead
