"""The threads of ``kprio drain``'s loop: each run it executes in a thread of its own (:class:`RunThread`).

Runs of batches that hold different priority slots execute at once, on one Spark session, each in
its priority's scheduler pool; the Dagster instance they execute on is
:func:`orchestration.dagster.threaded_instance.for_runs_in_threads`'s.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import dagster as dg

from orchestration.runtime.runs import RunOrder
from orchestration.runtime.tags import SLOT_TAG_PREFIX


class RunThread:
    """One run executing in a daemon thread of its own; ``done`` is set when it ended, and ``on_end``
    (when given) called from the thread.

    A thread for two reasons: runs of batches that hold different priority slots execute at once
    (an urgent batch beside a bulk one, on the same Spark session, each in its own scheduler pool);
    and Dagster replaces the SIGINT / SIGTERM handlers while a run executes in the main thread (an
    interrupt then kills the batch mid-way), while in another thread it leaves them alone, so a stop
    request reaches the caller's handlers and the batches in flight finish.
    """

    def __init__(self, work: Callable[[], dg.ExecuteInProcessResult],
                 on_end: Callable[[], None] | None = None, name: str = "kprio-run") -> None:
        self.done = threading.Event()
        self._outcome: dict[str, object] = {}

        def target() -> None:
            try:
                self._outcome["result"] = work()
            except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread by result()
                self._outcome["error"] = err
            finally:
                self.done.set()
                if on_end is not None:
                    on_end()

        threading.Thread(target=target, name=name, daemon=True).start()

    def result(self) -> dg.ExecuteInProcessResult:
        if "error" in self._outcome:
            raise self._outcome["error"]  # type: ignore[misc]
        return self._outcome["result"]  # type: ignore[return-value]


@dataclass(frozen=True)
class Running:
    """A run of the loop still executing: its request, when it started, the priority slots it holds, its thread."""

    request: RunOrder
    started: float
    priorities: frozenset[int]
    thread: RunThread


def slot_priorities(tags: Mapping[str, str]) -> frozenset[int]:
    """The priorities whose slots a run's batch takes, from its slot tags.

    >>> sorted(slot_priorities({"kprio/slot-p0": "orders", "kprio/slot-p2": "orders", "kprio/why": "new"}))
    [0, 2]
    """
    return frozenset(int(k[len(SLOT_TAG_PREFIX):]) for k in tags if k.startswith(SLOT_TAG_PREFIX))
