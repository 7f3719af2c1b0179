"""Rich progress bars while the demo works: one bar per priority (drained of produced), plus a status line.

A record counts as drained once its batch committed, whether it went to the output or the dead letters.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kprio_core.model.priority import Priority, most_urgent_first
from orchestration.demo.producer import Arrival
from orchestration.demo.workload import TIERS

if TYPE_CHECKING:
    from orchestration.dagster.drain_report import BatchOutcome


class DemoProgress:
    """Listener of :func:`orchestration.demo.run.run_demo` drawing bars on stderr; a no-op when disabled."""

    def __init__(self, priorities: int, *, enabled: bool = True, file: Any = None) -> None:
        self.enabled = enabled
        self._file = file
        self._progress: Any = None
        self._tasks: dict[Priority, Any] = {}
        self._status: Any = None
        self._priorities = priorities
        self.batches = 0

    def __enter__(self) -> DemoProgress:
        if not self.enabled:
            return self
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=Console(file=self._file, stderr=self._file is None), transient=False,
        )
        self._progress.__enter__()
        self._status = self._progress.add_task("starting", total=None)
        for p in most_urgent_first(self._priorities):
            self._tasks[p] = self._progress.add_task(f"priority {p} ({TIERS.get(p, p)})", total=0)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
            self._progress = None

    def stage(self, text: str) -> None:
        if self._progress is not None:
            self._progress.update(self._status, description=text)

    def produced(self, arrival: Arrival) -> None:
        if self._progress is not None:
            task = self._tasks[arrival.priority]
            total = self._progress.tasks[task].total or 0
            self._progress.update(task, total=total + arrival.records)

    def drained(self, run: BatchOutcome) -> None:
        """One run ended: a committed batch advances its priorities' bars (output and dead letters)."""
        from kprio_core.ledger import BatchState

        self.batches += 1
        if self._progress is not None:
            if run.state is BatchState.COMMITTED:
                for p, n in run.records.items():
                    self._progress.advance(self._tasks[p], n)
            self.stage(f"run {self.batches}: {run.line()}")
