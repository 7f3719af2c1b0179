"""What the tick knows of the runs of a batch, in kprio's own terms, and the launches it asks for.

An orchestrator reports its runs as :class:`RunSummary` values; the tick reads them through :class:`BatchRuns`
and answers with :class:`Launch` values whose run key is deterministic, so a launch decided twice is one run.

>>> runs = BatchRuns({"b-000007": (RunSummary("r2", RunState.STARTED), RunSummary("r1", RunState.FAILURE))})
>>> runs.active("b-000007").run_id, runs.latest("b-000007").run_id, runs.active("b-000008")
('r2', 'r2', None)
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kprio_core.model.records import Batch


class RunState(str, enum.Enum):
    """Where an orchestrator's run of a batch is (the values are Dagster's names, shown in messages)."""

    QUEUED = "QUEUED"
    NOT_STARTED = "NOT_STARTED"
    MANAGED = "MANAGED"
    STARTING = "STARTING"
    STARTED = "STARTED"
    CANCELING = "CANCELING"
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"
    CANCELED = "CANCELED"

    @property
    def active(self) -> bool:
        """True while the run may still move its batch (not finished).

        >>> RunState.QUEUED.active, RunState.CANCELING.active, RunState.FAILURE.active
        (True, True, False)
        """
        return self not in (RunState.SUCCESS, RunState.FAILURE, RunState.CANCELED)

    def __str__(self) -> str:
        return self.value


class LaunchReason(str, enum.Enum):
    """Why a recorded batch needs a run."""

    NEW = "new"
    """Planned, and no run was ever requested for it."""
    RETRY = "retry"
    """It failed; attempts are left and its backoff is over."""
    RESUME = "resume"
    """It is in flight but its run died: the same attempt's work is taken over by a new attempt."""
    COMMIT = "commit"
    """Checked, and the batches before it on its partitions committed: only the commit is left."""
    REDRAIN = "redrain"
    """Committed, and its group moved back over it outside kprio: its exact ranges drain again, as a new attempt."""

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, text: str | None) -> LaunchReason | None:
        """The reason a ``kprio/why`` tag value names; None when absent or unknown (a tag of another version).

        >>> LaunchReason.parse("retry"), LaunchReason.parse("later"), LaunchReason.parse(None)
        (<LaunchReason.RETRY: 'retry'>, None, None)
        """
        try:
            return cls(text)
        except ValueError:
            return None


Why = LaunchReason
"""The name the run tags and older code use (``kprio/why``)."""


ORCHESTRATOR_RETRY_WAIT_S = 120.0
"""Longest the tick leaves a failed batch to the orchestrator's own retry (which comes within seconds if at all)."""


@dataclass(frozen=True)
class RunSummary:
    """What the tick needs of one orchestrator run of a batch."""

    run_id: str
    state: RunState
    run_key: str | None = None
    runner: str | None = None
    """The kprio process that executes it in process (``kprio drain``), as a lease owner string."""
    will_retry: bool = False
    """It failed and the orchestrator says its own retry of it is on its way."""
    orphaned: bool = False
    """Unfinished, but the kprio process that executed it in process is gone (it never ends by itself)."""
    ended_at: datetime | None = None
    """When it ended (None: not ended, or the orchestrator does not say)."""

    @property
    def active(self) -> bool:
        return self.state.active and not self.orphaned


@dataclass(frozen=True)
class BatchRuns:
    """The runs of some batches (newest first), whatever launched them, and the run keys used."""

    runs: Mapping[str, tuple[RunSummary, ...]] = field(default_factory=dict)

    @property
    def run_keys(self) -> frozenset[str]:
        return frozenset(r.run_key for rs in self.runs.values() for r in rs if r.run_key)

    def of(self, batch_id: str) -> tuple[RunSummary, ...]:
        return tuple(self.runs.get(batch_id, ()))

    def active(self, batch_id: str) -> RunSummary | None:
        return next((r for r in self.of(batch_id) if r.active), None)

    def latest(self, batch_id: str) -> RunSummary | None:
        runs = self.of(batch_id)
        return runs[0] if runs else None

    def orphaned(self, batch_id: str) -> tuple[RunSummary, ...]:
        return tuple(r for r in self.of(batch_id) if r.orphaned)

    def will_retry(self, batch_id: str, now: datetime) -> bool:
        """The latest run failed and the orchestrator promised a retry, less than :data:`ORCHESTRATOR_RETRY_WAIT_S`
        ago: bounded, so a retry daemon that stopped never holds the batch for good.

        >>> from datetime import UTC, datetime, timedelta
        >>> t0 = datetime(2026, 1, 1, tzinfo=UTC)
        >>> runs = BatchRuns({"b-1": (RunSummary("r1", RunState.FAILURE, will_retry=True, ended_at=t0),)})
        >>> runs.will_retry("b-1", t0 + timedelta(seconds=30)), runs.will_retry("b-1", t0 + timedelta(minutes=5))
        (True, False)
        """
        latest = self.latest(batch_id)
        if latest is None or latest.state is not RunState.FAILURE or not latest.will_retry:
            return False
        return latest.ended_at is None or now - latest.ended_at < timedelta(seconds=ORCHESTRATOR_RETRY_WAIT_S)


@dataclass(frozen=True)
class Launch:
    """A run to request for a recorded batch: which attempt it is for, and why."""

    batch: Batch
    why: LaunchReason
    attempt: int
    early: bool = False
    """A transient retry before its backoff ended: the driver ends it first (``Ledger.retry_now``)."""

    @property
    def run_key(self) -> str:
        """Deterministic, so a run key is launched once: ``b-000042``, ``b-000042.attempt-2``, ...

        >>> from types import SimpleNamespace as B
        >>> [Launch(B(batch_id="b-000042"), w, a).run_key
        ...  for w, a in ((Why.NEW, 1), (Why.RETRY, 2), (Why.COMMIT, 2))]
        ['b-000042', 'b-000042.attempt-2', 'b-000042.commit-2']
        """
        return run_key_of(self.batch.batch_id, self.why, self.attempt)

    def describe(self) -> str:
        return f"{self.batch.batch_id} ({self.why}, attempt {self.attempt})"


def run_key_of(batch_id: str, why: LaunchReason, attempt: int) -> str:
    """The run key of a launch (see :attr:`Launch.run_key`)."""
    if why is LaunchReason.COMMIT:
        return f"{batch_id}.commit-{attempt}"
    return batch_id if attempt == 1 else f"{batch_id}.attempt-{attempt}"


def attempt_of_key(batch_id: str, run_key: str | None) -> int | None:
    """The attempt a run of ``batch_id`` was launched for, from its run key (None: a commit run, or no key of kprio's).

    >>> [attempt_of_key("b-000042", k) for k in ("b-000042", "b-000042.attempt-3", "b-000042.commit-2", None)]
    [1, 3, None, None]
    """
    if run_key == batch_id:
        return 1
    prefix = f"{batch_id}.attempt-"
    tail = run_key[len(prefix):] if run_key is not None and run_key.startswith(prefix) else ""
    return int(tail) if tail.isdigit() else None
