"""One run of a batch as a state machine: its stages, and the rule that says which stage follows which.

The runtime (``orchestration.runtime.batch.BatchRun``) carries out one stage at a time, asking its rule
(:mod:`kprio_core.lifecycle.run`, :mod:`kprio_core.lifecycle.outcome`); :func:`next_stage` says what follows:

- take: :class:`~kprio_core.lifecycle.run_steps.Work` left -> drain, or report when only the commit is left;
- drain: ``GoOn`` -> isolate; isolate (the splits carried out): ``GoOn`` -> check, ``Recheck`` -> recheck;
- check: ``Publish`` -> publish, ``Recheck`` -> isolate; recheck (no split again): ``Publish`` -> publish;
- publish, report: checked -> order, or done with ``commit`` False (Airflow's drain task leaves the commit);
- order: ``Commit`` -> commit -> later (the later batches that waited for this one) -> done;
- any stage: ``Wait`` -> itself (gave-up past :func:`~kprio_core.lifecycle.run.waited_too_long`);
  ``NothingToDo`` -> done; ``Fail`` -> refused (batch as it is); :class:`BatchFails` -> failed (batch and run).

The order is the invariants': published only after its checks, committed only after publishing (commit after
proof); failures split off before the rest goes on (isolation); commits in partition order (order).

>>> from kprio_core.lifecycle.outcome import GoOn, Publish
>>> [next_stage(Stage.TAKE, Work.DRAIN), next_stage(Stage.DRAIN, GoOn(())), next_stage(Stage.CHECK, Publish(()))]
[<Stage.DRAIN: 'drain'>, <Stage.ISOLATE: 'isolate'>, <Stage.PUBLISH: 'publish'>]
>>> next_stage(Stage.PUBLISH, BatchState.CHECKED), next_stage(Stage.PUBLISH, BatchState.CHECKED, commit=False)
(<Stage.ORDER: 'order'>, <Stage.DONE: 'done'>)
>>> from kprio_core.lifecycle.run_steps import WaitWhy
>>> next_stage(Stage.TAKE, Wait(WaitWhy.SLOT_TAKEN, "b-7's slot"), waited_s=901.0)
<Stage.GAVE_UP: 'gave-up'>
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from kprio_core.lifecycle.outcome import GoOn, Publish, Recheck
from kprio_core.lifecycle.run import waited_too_long
from kprio_core.lifecycle.run_steps import Commit, Fail, NothingToDo, Wait, Work
from kprio_core.model.states import BatchState


class Stage(enum.StrEnum):
    """Where a run of a batch stands: the step it carries out next, or how it ended."""

    TAKE = "take"
    """Ask what this run is for, move the batch to that attempt and claim its lease."""
    DRAIN = "drain"
    """Drain the ranges to staged files (nothing visible yet) and mark the batch drained."""
    ISOLATE = "isolate"
    """Split the ranges a drain or a check failed on off into failed batches that hold only their partitions."""
    CHECK = "check"
    """The blocking checks on the ranges kept."""
    RECHECK = "recheck"
    """The checks again, once, on what is left after a split: a failure now fails the whole."""
    PUBLISH = "publish"
    """Publish the checked files (readers see them only now) and mark the batch checked."""
    REPORT = "report"
    """An earlier run of this attempt published the batch: report its checks; only the commit is left."""
    ORDER = "order"
    """Wait for the batches before it on its partitions to commit, or leave the commit to their runs."""
    COMMIT = "commit"
    """Commit the offsets, each partition's outcome on its own, and mark the batch committed."""
    LATER = "later"
    """Commit the later batches that only waited for this one."""
    DONE = "done"
    """The run succeeds (with nothing to do, it says why)."""
    REFUSED = "refused"
    """The run fails with the rule's one line; the batch stays as it is."""
    FAILED = "failed"
    """The batch fails (unless it moved on) and the run with it."""
    GAVE_UP = "gave-up"
    """The run waited as long as a wait may last: it fails, the batch stays as it is."""


ENDS = frozenset({Stage.DONE, Stage.REFUSED, Stage.FAILED, Stage.GAVE_UP})


@dataclass(frozen=True)
class BatchFails:
    """A step's verdict that the batch fails: why in one line, whether the cause passes by itself, the error behind."""

    reason: str
    transient: bool = False
    error: BaseException | None = None


FOLLOWS: dict[tuple[Stage, object], Stage] = {
    (Stage.TAKE, Work.DRAIN): Stage.DRAIN,
    (Stage.TAKE, Work.COMMIT): Stage.REPORT,
    (Stage.DRAIN, GoOn): Stage.ISOLATE,
    (Stage.ISOLATE, GoOn): Stage.CHECK,
    (Stage.ISOLATE, Recheck): Stage.RECHECK,
    (Stage.CHECK, Recheck): Stage.ISOLATE,
    (Stage.CHECK, Publish): Stage.PUBLISH,
    (Stage.RECHECK, Publish): Stage.PUBLISH,
    (Stage.ORDER, Commit): Stage.COMMIT,
}
"""The stage after a stage, by what its step found (an answer's type, or a fact's value)."""
ENDED_BY = {NothingToDo: Stage.DONE, Fail: Stage.REFUSED, BatchFails: Stage.FAILED}


def next_stage(at: Stage, found: object, *, commit: bool = True, waited_s: float = 0.0) -> Stage:
    """The stage after ``at`` given what its step ``found`` (the module docstring's table).

    ``commit`` False: stop once published; ``waited_s``: how long the run has waited at ``at``.
    """
    if isinstance(found, Wait):
        return Stage.GAVE_UP if waited_too_long(waited_s, found) else at
    if type(found) in ENDED_BY:
        return ENDED_BY[type(found)]
    if at in (Stage.PUBLISH, Stage.REPORT):
        return Stage.ORDER if commit and found is BatchState.CHECKED else Stage.DONE
    if at in (Stage.COMMIT, Stage.LATER):
        return Stage.LATER if at is Stage.COMMIT else Stage.DONE
    return FOLLOWS[(at, found if isinstance(found, enum.Enum) else type(found))]
