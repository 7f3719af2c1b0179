"""Batch states of the ledger and the one table of allowed transitions.

A batch *in flight* (planned, drained, checked) reserves its ranges and one slot of each of its priorities. A
*failed* batch holds each partition of its ranges from the range's start on (unless it re-drained committed offsets).

>>> BatchState.DRAINED.in_flight, BatchState.FAILED.in_flight
(True, False)
>>> check_transition("b-000007", BatchState.CHECKED, BatchState.COMMITTED)
>>> check_transition("b-000007", BatchState.PLANNED, BatchState.COMMITTED)
Traceback (most recent call last):
...
kprio_core.errors.InvalidTransition: batch b-000007 is planned and cannot become committed (allowed from planned: drained, failed)
"""

from __future__ import annotations

import enum

from kprio_core.errors import InvalidTransition


class BatchState(str, enum.Enum):
    """Where a batch is in its life: planned -> drained -> checked -> committed, or failed."""

    PLANNED = "planned"
    DRAINED = "drained"
    CHECKED = "checked"
    COMMITTED = "committed"
    FAILED = "failed"

    @property
    def in_flight(self) -> bool:
        """True while the batch reserves its ranges (planned, drained, checked)."""
        return self in IN_FLIGHT

    def __str__(self) -> str:
        return self.value


IN_FLIGHT = frozenset({BatchState.PLANNED, BatchState.DRAINED, BatchState.CHECKED})
IN_FLIGHT_VALUES = tuple(sorted(s.value for s in IN_FLIGHT))
REPLAYABLE = frozenset({BatchState.FAILED, BatchState.COMMITTED})

_S = BatchState
TRANSITIONS: dict[tuple[BatchState, BatchState], str] = {
    (_S.PLANNED, _S.DRAINED): "the drain wrote the planned ranges",
    (_S.DRAINED, _S.DRAINED): "a rerun of the drain replaces its output",
    (_S.CHECKED, _S.DRAINED): "a re-drain after the checks replaces the output; checks must run again",
    (_S.DRAINED, _S.CHECKED): "the blocking checks passed and the output was published",
    (_S.CHECKED, _S.COMMITTED): "offsets are committed only after the checks passed",
    (_S.PLANNED, _S.FAILED): "a run can die or fail before draining; the batch holds its partitions",
    (_S.DRAINED, _S.FAILED): "the drain or its checks failed; the batch holds its partitions",
    (_S.CHECKED, _S.FAILED): "the commit failed; the batch holds its partitions",
    (_S.FAILED, _S.PLANNED): "retry or replay: a failed batch reserves the same ranges again",
    (_S.COMMITTED, _S.PLANNED): "replay: an operator re-drains a committed batch; its commit then adds nothing",
}
"""Every allowed (from, to) move with why. Moves to planned happen only through retry and replay."""


def allowed_from(state: BatchState) -> list[BatchState]:
    """The states a batch in ``state`` may move to, in lifecycle order."""
    return [to for to in BatchState if (state, to) in TRANSITIONS]


def check_transition(batch_id: str, current: BatchState, asked: BatchState) -> None:
    """Raise :class:`InvalidTransition` unless ``current -> asked`` is in :data:`TRANSITIONS`."""
    if (current, asked) not in TRANSITIONS:
        allowed = ", ".join(s.value for s in allowed_from(current)) or "nothing"
        raise InvalidTransition(
            f"batch {batch_id} is {current.value} and cannot become {asked.value} "
            f"(allowed from {current.value}: {allowed})"
        )
