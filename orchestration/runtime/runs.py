"""What the runtime needs of an orchestrator's runs: a small port each driver implements.

The tick's rules read the runs of the batches they watch (:class:`~kprio_core.lifecycle.BatchRuns`); the applier
fails the runs that died and requests new ones. Those are the only touches of a run store, so they are this port
(Dagster's: ``orchestration/dagster/runs.py``; none: :class:`NoRuns`). A requested run leaves the runtime as a
:class:`RunOrder`, which each driver turns into its own request.

>>> order = RunOrder("b-000042.attempt-2", "b-000042", {"kprio/why": "retry"})
>>> order.run_key, order.partition_key
('b-000042.attempt-2', 'b-000042')
>>> runs = NoRuns()
>>> runs.of([]).runs, runs.fail("b-000042", ["r1"], "gone"), runs.launched("b-000042"), list(runs.batch_ids())
({}, [], False, [])
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from kprio_core.lifecycle import BatchRuns
from orchestration.runtime.leases import owner_dead

if TYPE_CHECKING:
    from kprio_core.ledger import Batch


@dataclass(frozen=True)
class RunOrder:
    """A run the applier asks for: its deterministic run key, its batch (the partition) and its tags."""

    run_key: str
    partition_key: str
    tags: Mapping[str, str] = field(default_factory=dict)


class Runs(Protocol):
    """An orchestrator's runs of kprio's batches, as the runtime reads and moves them."""

    def of(self, batches: Iterable[Batch]) -> BatchRuns:
        """The runs of each batch (newest first), whatever launched them."""

    def owner_dead(self, owner: str) -> bool:
        """True when a lease or claim owner certainly no longer works (its run ended, its process is gone)."""

    def fail(self, batch_id: str, run_ids: Sequence[str], why: str) -> list[str]:
        """Mark failed the unfinished runs ``run_ids`` of ``batch_id`` whose process is gone; the ids failed."""

    def launched(self, run_key: str) -> bool:
        """True when a run with ``run_key`` exists (another driver launched it)."""

    def batch_ids(self) -> Iterable[str]:
        """Every batch id the orchestrator knows (a fresh ledger numbers its batches after them)."""


class NoRuns:
    """No run store: no runs seen, none to fail; an owner is dead only when its process is gone from this host."""

    def of(self, batches: Iterable[Batch]) -> BatchRuns:
        return BatchRuns()

    def owner_dead(self, owner: str) -> bool:
        return owner_dead(owner)

    def fail(self, batch_id: str, run_ids: Sequence[str], why: str) -> list[str]:
        return []

    def launched(self, run_key: str) -> bool:
        return False

    def batch_ids(self) -> Iterable[str]:
        return ()


class LazyRuns:
    """An orchestrator's runs, opened only once a rule asks about a batch (``open_runs`` makes them).

    A read-only tick with nothing in flight or failed (``kprio plan`` on an idle topic) then skips importing the
    orchestrator (Dagster's import and instance are most of ``kprio plan``'s second).

    >>> opened = []
    >>> runs = LazyRuns(lambda: opened.append(1) or NoRuns())
    >>> runs.of([]).runs, opened
    ({}, [])
    >>> runs.launched("b-000001"), opened
    (False, [1])
    """

    def __init__(self, open_runs: Callable[[], Runs]) -> None:
        self._open, self._runs = open_runs, None

    def _inner(self) -> Runs:
        if self._runs is None:
            self._runs = self._open()
        return self._runs

    def of(self, batches: Iterable[Batch]) -> BatchRuns:
        batches = list(batches)
        return self._inner().of(batches) if batches else BatchRuns()

    def owner_dead(self, owner: str) -> bool:
        return self._inner().owner_dead(owner)

    def fail(self, batch_id: str, run_ids: Sequence[str], why: str) -> list[str]:
        return self._inner().fail(batch_id, run_ids, why)

    def launched(self, run_key: str) -> bool:
        return self._inner().launched(run_key)

    def batch_ids(self) -> Iterable[str]:
        return self._inner().batch_ids()
