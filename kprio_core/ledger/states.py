"""Batch states of the ledger and the one table of allowed transitions.

A batch is *in flight* (it holds its offset ranges) while planned, drained or checked.
Only :meth:`Ledger.replay` moves a batch back to planned.

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
        """True while the batch holds its ranges (planned, drained, checked)."""
        return self in IN_FLIGHT

    def __str__(self) -> str:
        return self.value


IN_FLIGHT = frozenset({BatchState.PLANNED, BatchState.DRAINED, BatchState.CHECKED})
REPLAYABLE = frozenset({BatchState.FAILED, BatchState.COMMITTED})

_S = BatchState
TRANSITIONS: dict[tuple[BatchState, BatchState], str] = {
    (_S.PLANNED, _S.DRAINED): "the drain wrote the planned ranges",
    (_S.DRAINED, _S.DRAINED): "a rerun of the drain replaces its output",
    (_S.CHECKED, _S.DRAINED): "a re-drain after the checks replaces the output; checks must run again",
    (_S.DRAINED, _S.CHECKED): "the blocking checks passed on the drained output",
    (_S.CHECKED, _S.COMMITTED): "offsets are committed only after the checks passed",
    (_S.PLANNED, _S.FAILED): "an in-flight batch can fail (its ranges are released)",
    (_S.DRAINED, _S.FAILED): "an in-flight batch can fail (its ranges are released)",
    (_S.CHECKED, _S.FAILED): "an in-flight batch can fail (its ranges are released)",
    (_S.FAILED, _S.PLANNED): "replay: a failed batch reserves the same ranges again",
    (_S.COMMITTED, _S.PLANNED): "replay: a committed batch is re-drained, its commit then adds nothing",
}
"""Every allowed (from, to) move with why. Moves to planned happen only through replay."""


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
