"""What a run of a batch decides from, and the typed steps it decides (:func:`kprio_core.lifecycle.run.decide_run`,
:func:`kprio_core.lifecycle.run.before_commit`): who launched it (``Intent``), the batch as the ledger has it
(``BatchView``), and ``Drain``, ``Wait``, ``NothingToDo``, ``Fail``, ``Commit``, each with why.

>>> Intent(Launcher.OPERATOR)
Intent(kind=<Launcher.OPERATOR: 'operator'>, attempt=None, why=None)
>>> BatchView("b-000007", BatchState.CHECKED, attempts=1).in_flight
True
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from kprio_core.lifecycle.runs import LaunchReason
from kprio_core.model.recovery import Lease
from kprio_core.model.states import BatchState

if TYPE_CHECKING:
    from kprio_core.model.records import Batch


# -- who launched the run --------------------------------------------------------------------------


class Launcher(str, enum.Enum):
    """Who asked for a run of a batch."""

    SENSOR = "sensor"
    """The tick (priority_lag_sensor, ``kprio drain``, the Airflow DAG's plan task): for a given attempt."""
    ORCHESTRATOR_RETRY = "orchestrator-retry"
    """The orchestrator's own retry after a failed run: Dagster's run-retry daemon, an Airflow task's retry."""
    OPERATOR = "operator"
    """A person: the asset page, the asset graph, the job page, a backfill, ``kprio retry``."""


@dataclass(frozen=True)
class Intent:
    """Who launched a run, and for which attempt and why when the sensor did."""

    kind: Launcher
    attempt: int | None = None
    why: LaunchReason | None = None


# -- the inputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchView:
    """The batch as the ledger has it, as far as a run's decision needs it."""

    batch_id: str
    state: BatchState
    attempts: int
    lease: Lease | None = None
    holds: bool = False
    """Failed, and it holds its partitions (a failed re-drain of committed offsets holds nothing)."""
    transient: bool = False
    """Its last failure's cause passes by itself: retried however many attempts it took."""
    retry_at: datetime | None = None
    reason: str | None = None
    superseded: str | None = None
    """Why it never runs again (planned on an earlier incarnation of its log), None while it is current."""

    @classmethod
    def of(cls, batch: Batch, superseded: str | None = None) -> BatchView:
        return cls(batch.batch_id, batch.state, batch.attempts, batch.lease, batch.holds, batch.transient,
                   batch.retry_at, batch.reason, superseded)

    @property
    def in_flight(self) -> bool:
        return self.state.in_flight


# -- the steps -------------------------------------------------------------------------------------


class DrainFrom(str, enum.Enum):
    """How a run that drains gets the attempt it works on."""

    AS_IS = "as-is"
    """The batch stands where this run goes on from (its own lease, or nobody took this attempt yet)."""
    RETRY = "retry"
    """A failed batch: the next attempt, with the same ranges (the ledger's retry)."""
    TAKE_OVER = "take-over"
    """In flight, but its run died: the next attempt, its lease taken over (the ledger's retry)."""
    REDRAIN = "redrain"
    """An operator's re-drain of a committed or failed batch (the ledger's replay)."""


class WaitWhy(str, enum.Enum):
    """Why a run waits before it decides again."""

    LEASE_HELD = "lease-held"
    """Another live run owns the batch: its outcome decides what this run does."""
    SLOT_TAKEN = "slot-taken"
    """A priority slot (``planner.max_in_flight``) or the batch's ranges are taken by another batch."""
    BACKOFF = "backoff"
    """A failed batch waits for its retry time."""
    PREDECESSOR = "predecessor"
    """A batch before it on its partitions is being finished by its own run: its commit comes first."""


class DoneWhy(str, enum.Enum):
    """Why a run has nothing (more) to do."""

    COMMITTED = "committed"
    FINISHED_ELSEWHERE = "finished-elsewhere"
    """Another run, which this one waited for, committed or failed it."""
    LATER_ATTEMPT = "later-attempt"
    """The ledger is past the attempt this run was launched for."""
    HOLDS_NOTHING = "holds-nothing"
    """A failed re-drain of committed offsets: nothing waits for it."""
    COMMITS_LATER = "commits-later"
    """Checked and published; it commits once the batches before it commit (their runs commit it)."""


class FailWhy(str, enum.Enum):
    """Why a run fails without trying."""

    SUPERSEDED = "superseded"
    EXHAUSTED = "exhausted"
    NOT_COMMITTED = "not-committed"
    """An operator's run whose batch cannot commit yet (a backfill is Succeeded only when committed)."""


@dataclass(frozen=True)
class Drain:
    """Take the batch (as ``how`` says), claim its lease, and carry out the work left
    (:func:`~kprio_core.lifecycle.run.work_left`)."""

    how: DrainFrom
    take_over: tuple[str, ...] = ()
    """Owners known dead whose lease this run may take."""
    reason: str = ""
    """The ledger's reason for a new attempt (retry, take-over)."""
    note: str = ""
    """What the run says about it (a re-drain)."""


@dataclass(frozen=True)
class Wait:
    """Wait, then decide again (up to :data:`~kprio_core.lifecycle.run.SLOT_WAIT_S`, a backoff excepted)."""

    why: WaitWhy
    message: str
    owner: str | None = None
    """LEASE_HELD: the run this one waits for."""
    until: datetime | None = None
    """BACKOFF: when the retry is due."""


@dataclass(frozen=True)
class NothingToDo:
    """The run's work is done, or not this run's: it says so and succeeds."""

    why: DoneWhy
    message: str


@dataclass(frozen=True)
class Fail:
    """The run fails with ``message``, the batch left as it is."""

    why: FailWhy
    message: str


class Commit:
    """Commit the batch's offsets now."""

    def __repr__(self) -> str:
        return "Commit()"


Step = Drain | Wait | NothingToDo | Fail
CommitStep = Commit | Wait | NothingToDo | Fail


class Work(str, enum.Enum):
    """What is left of a claimed batch's work."""

    DRAIN = "drain"
    """Drain, isolate, check, publish, then commit."""
    COMMIT = "commit"
    """Checked and published by an earlier run of this attempt: only the commit is left."""
