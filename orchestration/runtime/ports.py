"""What the runtime needs of the Kafka edge and of the ledger: ports, each a ``typing.Protocol``.

The runtime (``tick``, ``batch``, ``commit``, ``log_changes``, ``adoption``, ``replay``, ``healing``, ``leases``)
is handed an edge and a ledger by its driver and calls only the methods named here, so a reader sees what it asks
of each without reading the adapters (:class:`kprio_core.kafka.KafkaEdge`, :class:`kprio_core.ledger.Ledger` and
its repositories). They satisfy these ports structurally (same names, parameters and annotations:
``tests/orchestration/test_ports.py``), and no runtime module names them in an annotation. A default written
``...`` is the adapter's, written there once.

:class:`LedgerPort` is the ledger's clock and identity and one port per repository (the heartbeat is handed
:class:`LeasesPort` only); their methods are stubs, as in a stub file. The third port, Spark, is a getter of the
session (``Callable[[], SparkSession]``) its driver passes in.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from kprio_core.burst import PollHistory
    from kprio_core.config import TopicSettings
    from kprio_core.errors import KprioError
    from kprio_core.kafka.lag import SnapshotAsk
    from kprio_core.ledger import Batch, BatchState, DrainedSample, DrainSample, Hold, LaunchClaim, LogEvent
    from kprio_core.log_changes import Belief, Change, Outcome, Superseded
    from kprio_core.model.drain_plan import DrainPlan
    from kprio_core.model.offsets import OffsetRange, TopicPartitionKey
    from kprio_core.model.priority import Priority
    from kprio_core.model.recovery import Lease, LeaseToken
    from kprio_core.model.results import CheckReport, CommitReport, DrainResult
    from kprio_core.model.snapshot import LagSnapshot


class Edge(Protocol):
    """The Kafka cluster as the runtime uses it: lag snapshots, topic ids, fenced commits, time windows."""

    @property
    def bootstrap(self) -> str:
        """The cluster's bootstrap servers (named in a message)."""

    @contextmanager
    def one_view(self) -> Iterator[None]:
        """Within it, this thread's snapshots read the cluster's metadata once (a tick over every topic)."""

    def snapshot(self, topic: TopicSettings, *, now_ms: int, avg_record_bytes: Mapping[str, float] | None = ...,
                 with_age: bool = ..., strict: bool = ..., deleted_ok: Collection[str] = ...) -> LagSnapshot:
        """The lag of every partition of ``topic``'s priority topics."""

    def snapshots(self, asks: Iterable[SnapshotAsk], *, now_ms: int) -> dict[str, LagSnapshot | KprioError]:
        """The lag snapshot of each asked logical topic, or the typed error that prevented it, by name."""

    def topic_ids(self, names: Iterable[str]) -> dict[str, str | None]:
        """The topic id of each topic now (None: gone, or a cluster without ids)."""

    def commit(self, topic: TopicSettings, ranges: Iterable[OffsetRange], *,
               before_write: Callable[[], None] | None = ...) -> CommitReport:
        """Commit each range's end to its priority's group, fenced, never backwards."""

    def set_committed(self, topic: TopicSettings, offsets: Mapping[TopicPartitionKey, int], *,
                      expect: Mapping[TopicPartitionKey, int | None] | None = ...,
                      before_write: Callable[[], None] | None = ...) -> None:
        """Write these committed offsets as they are (a recorded decision), fenced; refused if the group moved."""

    def window_ranges(self, topic: TopicSettings, start_ms: int, end_ms: int) -> dict[Priority, list[OffsetRange]]:
        """The offsets of records with timestamps in ``[start_ms, end_ms)``, per priority."""


class BatchesPort(Protocol):
    """The batches: a plan recorded, and the batches read back with what they reserve and hold."""

    def record_plan(self, plan: DrainPlan, *, max_in_flight: int | None = ...) -> Batch: ...
    def get(self, batch_id: str) -> Batch: ...
    def find(self, logical_topic: str | None = ..., states: Iterable[BatchState] | None = ...,
             limit: int | None = ...) -> list[Batch]: ...
    def in_flight(self, logical_topic: str | None = ...) -> list[Batch]: ...
    def ready_to_commit(self, logical_topic: str) -> list[Batch]: ...
    def blocking_predecessors(self, batch_id: str) -> list[Batch]: ...
    def reserved_ranges(self, logical_topic: str) -> list[OffsetRange]: ...
    def holds(self, logical_topic: str, max_attempts: int | None = ...) -> list[Hold]: ...
    def superseded(self, logical_topic: str, states: Iterable[BatchState] = ...) -> list[Superseded]: ...
    def superseded_batch(self, batch_id: str) -> tuple[Superseded, ...]: ...


class MovesPort(Protocol):
    """A batch's state moves (``TRANSITIONS``); a run's carry its lease token as ``fence``."""

    def mark_drained(self, batch_id: str, result: DrainResult, *, fence: LeaseToken | None = ...) -> Batch: ...
    def mark_checked(self, batch_id: str, report: CheckReport, *, fence: LeaseToken | None = ...) -> Batch: ...
    def mark_committed(self, batch_id: str, report: CommitReport, *, fence: LeaseToken | None = ...,
                       log_ends: Mapping[TopicPartitionKey, int] | None = ...,
                       reached: Mapping[TopicPartitionKey, int] | None = ...) -> Batch: ...
    def mark_failed(self, batch_id: str, reason: str, *, retry_at: datetime | None, transient: bool = ...,
                    fence: LeaseToken | None = ...) -> Batch: ...
    def note_superseded(self, found: Superseded) -> bool: ...


class AttemptsPort(Protocol):
    """A batch's new attempts, and the ranges split off or re-drained apart."""

    def retry(self, batch_id: str, *, reason: str, max_in_flight: int | None = ...,
              take_over: Collection[str] = ...) -> Batch: ...
    def retry_now(self, batch_id: str) -> Batch: ...
    def fail_untaken(self, batch_id: str, attempt: int, *, reason: str, retry_at: datetime | None) -> Batch | None: ...
    def replay(self, batch_id: str, *, max_in_flight: int | None = ...) -> Batch: ...
    def redrain(self, batch_id: str, wanted: Iterable[OffsetRange], *, max_in_flight: int | None = ...) -> Batch: ...
    def split(self, batch_id: str, failing: Iterable[OffsetRange], reason: str, *, retry_at: datetime | None,
              transient: bool = ..., fence: LeaseToken | None = ...) -> Batch: ...


class LeasesPort(Protocol):
    """Who works on a batch: its lease, which fences a run's writes."""

    def claim(self, batch_id: str, owner: str, lease_s: float, *, take_over: Collection[str] = ...) -> Batch: ...
    def renew(self, batch_id: str, owner: str, lease_s: float, *, attempt: int | None = ...,
              epoch: int | None = ...) -> Lease: ...
    def release(self, batch_id: str, owner: str) -> bool: ...
    def check(self, batch_id: str, token: LeaseToken, what: str) -> Batch: ...


class LaunchesPort(Protocol):
    """Who launches a run key: its claim."""

    def claim(self, batch_id: str, run_key: str, owner: str, claim_s: float, *,
              take_over: Collection[str] = ...) -> LaunchClaim: ...
    def claims(self, logical_topic: str) -> dict[str, LaunchClaim]: ...


class BeliefsPort(Protocol):
    """What kprio believes about each partition's log, and the changes of it that kprio saw and decided."""

    def of(self, logical_topic: str) -> dict[TopicPartitionKey, Belief]: ...
    def remember(self, logical_topic: str, beliefs: Iterable[Belief]) -> None: ...
    def record_change(self, logical_topic: str, change: Change, outcome: Outcome, *, decided_by: str,
                      committed_after: int | None = ..., note: str | None = ...) -> LogEvent | None: ...
    def open_holds(self, logical_topic: str) -> dict[TopicPartitionKey, LogEvent]: ...
    def last_changes(self, logical_topic: str) -> dict[TopicPartitionKey, LogEvent]: ...
    def log_events(self, logical_topic: str | None = ..., *, after: int = ...) -> list[LogEvent]: ...


class SamplesPort(Protocol):
    """The numbers the rules plan with: what drains took and drained, burst windows, record sizes."""

    def drains(self, logical_topic: str, last_batches: int = ...) -> list[DrainSample]: ...
    def drained_since(self, logical_topic: str, since: datetime) -> list[DrainedSample]: ...
    def poll_history(self, logical_topic: str, n_priorities: int, window_size: int = ...,
                     maxed_out_threshold: int = ...) -> PollHistory: ...
    def avg_record_bytes(self, logical_topic: str, last_batches: int = ...) -> dict[str, float]: ...


class LedgerPort(Protocol):
    """The batch ledger as the runtime uses it: its clock and identity, a fresh ledger's adoption, and its parts."""

    @property
    def ledger_id(self) -> str:
        """Random hex made when the ledger was created."""

    def now(self) -> datetime:
        """The ledger's clock (the database's): leases, backoffs and claims are judged by it."""

    def is_fresh(self) -> bool:
        """True while no batch was ever recorded and no earlier life was adopted."""

    def number_batches_after(self, n: int) -> None: ...
    def mark_adopted(self, note: str) -> None: ...

    # Its repositories, a port each:
    @property
    def batches(self) -> BatchesPort: ...
    @property
    def moves(self) -> MovesPort: ...
    @property
    def attempts(self) -> AttemptsPort: ...
    @property
    def leases(self) -> LeasesPort: ...
    @property
    def launches(self) -> LaunchesPort: ...
    @property
    def beliefs(self) -> BeliefsPort: ...
    @property
    def samples(self) -> SamplesPort: ...
