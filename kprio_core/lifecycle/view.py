"""The inputs of one tick, gathered once by the driver: the ledger's view of a topic, the lag, the runs, the clock.

A driver (``orchestration.runtime.tick``) reads them once per tick and topic; the rules decide from these values
alone, and a test builds them by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from kprio_core.burst import PollHistory
from kprio_core.errors import BrokerUnreachable, KprioError
from kprio_core.lifecycle.runs import BatchRuns
from kprio_core.log_changes import Belief, Superseded, with_commits_under_way
from kprio_core.model.offsets import OffsetRange, TopicPartitionKey
from kprio_core.model.priority import Priority
from kprio_core.model.records import Batch, DrainedSample, Hold, LaunchClaim, LogEvent, batch_number
from kprio_core.model.snapshot import LagSnapshot


@dataclass(frozen=True)
class LedgerView:
    """Everything the tick's rules read from the ledger about one logical topic, read at one moment."""

    logical_topic: str
    in_flight: tuple[Batch, ...] = ()
    """Planned, drained or checked batches, oldest first."""
    failed: tuple[Batch, ...] = ()
    """Failed batches, newest first."""
    ready_to_commit: tuple[Batch, ...] = ()
    """Checked batches with no blocking predecessor, oldest first."""
    holds: tuple[Hold, ...] = ()
    """Partitions the failed batches hold (``recovery.max_attempts`` decides ``exhausted``)."""
    superseded: tuple[Superseded, ...] = ()
    """Failed batches planned on an earlier incarnation of a partition."""
    beliefs: Mapping[TopicPartitionKey, Belief] = field(default_factory=dict)
    """What kprio believes about each partition (as the ledger stores it)."""
    committed: Mapping[TopicPartitionKey, tuple[Batch, ...]] = field(default_factory=dict)
    """Committed batches and failed re-drains of :func:`~kprio_core.lifecycle.log_rules.needs_committed` only."""
    reserved: tuple[OffsetRange, ...] = ()
    """Non-empty ranges of the batches in flight."""
    throughput: float | None = None
    """Records per second a bulk batch drains at (:func:`~kprio_core.lifecycle.budget.drain_rate`)."""
    fixed_cost_s: float | None = None
    """What a batch costs beside its records (:func:`~kprio_core.lifecycle.budget.batch_fixed_cost`)."""
    poll_history: PollHistory | None = None
    avg_record_bytes: Mapping[str, float] = field(default_factory=dict)
    rate_samples: tuple[DrainedSample, ...] = ()
    """What the batches committed within the rate window drained, in commit order."""
    claims: Mapping[str, LaunchClaim] = field(default_factory=dict)
    """Unexpired launch claims of the topic's batches, by run key."""
    open_holds: Mapping[TopicPartitionKey, LogEvent] = field(default_factory=dict)
    """Partitions a person was asked to decide about and did not yet: the recorded hold, per partition."""
    last_changes: Mapping[TopicPartitionKey, LogEvent] = field(default_factory=dict)
    """Per partition, the last change of its log recorded with what was decided (a wait left aside): a move
    whose re-drain it decided is carried on, not decided again."""

    def believed(self) -> dict[TopicPartitionKey, Belief]:
        """The beliefs with in-flight batches' commits under way: Kafka is told before the ledger, so a group at
        the end of a range in flight is kprio's own commit. Not a re-drain's: its group stays moved back till done."""
        ranges = [r for b in self.in_flight if not b.replay_of_committed for r in b.plan.offset_ranges()]
        return with_commits_under_way(self.beliefs, ranges)

    def slots(self) -> dict[Priority, list[str]]:
        """Per priority, the batches in flight with a range of it (each takes one slot), oldest first."""
        slots: dict[Priority, list[str]] = {}
        for b in sorted(self.in_flight, key=lambda b: batch_number(b.batch_id)):
            for p in b.priorities:
                slots.setdefault(p, []).append(b.batch_id)
        return dict(sorted(slots.items(), reverse=True))

    def watched(self) -> tuple[Batch, ...]:
        """The batches whose runs the tick looks at: in flight and failed."""
        return (*self.in_flight, *self.failed)


Lag = LagSnapshot | KprioError
"""The lag snapshot, or the typed error that prevented it (an unreachable broker, a missing topic)."""


@dataclass(frozen=True)
class TickInputs:
    """One topic's inputs of a tick: the ledger view, the lag, the runs seen, the owners known dead, the clock."""

    view: LedgerView
    lag: Lag
    runs: BatchRuns = field(default_factory=BatchRuns)
    dead: frozenset[str] = frozenset()
    """Lease and claim owners known gone (their run ended, their process left this host)."""
    now: datetime = datetime(1970, 1, 1)
    driver: str = ""
    """This driver's launch claim owner: its own claims do not stop it."""
    fresh_start: bool = False
    """A driver's first tick: transient backoffs are not waited out (a restart after a fix wants a retry now)."""
    cause: str | None = None
    """What the driver's probe found wrong with the outputs (None: nothing, or not probed): transient failures
    wait for it to pass (``orchestration.runtime.healing``)."""
    bulk_running: int = 0
    """In-flight batches of any topic without its most urgent priority: the warm workers' bulk lane
    (:func:`~kprio_core.lifecycle.budget.bulk_lane_free`)."""


def passing_cause(inputs: TickInputs) -> str | None:
    """What a probe sees now that fails a transient retry alike: the outputs' probe, or an unreachable broker."""
    if inputs.cause is not None:
        return inputs.cause
    if isinstance(inputs.lag, BrokerUnreachable):
        return f"the broker is unreachable: {inputs.lag}"
    return None
