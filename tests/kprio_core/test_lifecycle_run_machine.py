"""The run's state machine, case by case: one numbered row per stage and what its step found, with why."""

from __future__ import annotations

import pytest

from kprio_core.lifecycle.outcome import Cause, GoOn, Publish, Recheck, SplitOff
from kprio_core.lifecycle.run import SLOT_WAIT_S
from kprio_core.lifecycle.run_machine import ENDS, BatchFails, Stage, next_stage
from kprio_core.lifecycle.run_steps import Commit, DoneWhy, Fail, FailWhy, NothingToDo, Wait, WaitWhy, Work
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.states import BatchState

R = OffsetRange("orders-2", 0, 0, 10)
SPLIT = SplitOff((R,), Cause.CHECKS, False)
SLOT = Wait(WaitWhy.SLOT_TAKEN, "priority 2's slot is taken")

# (number, why, stage, what its step found, commit, waited s, next stage)
CASES = [
    (1, "a batch taken with its drain left: drain it", Stage.TAKE, Work.DRAIN, True, 0.0, Stage.DRAIN),
    (2, "a batch an earlier run published: report its checks, only the commit is left", Stage.TAKE, Work.COMMIT,
     True, 0.0, Stage.REPORT),
    (3, "another run holds it, or a slot is taken: the take is asked again after the wait", Stage.TAKE, SLOT, True,
     10.0, Stage.TAKE),
    (4, "... until the wait lasted longer than a run waits", Stage.TAKE, SLOT, True, SLOT_WAIT_S + 1, Stage.GAVE_UP),
    (5, "a backoff is waited out whole, however long", Stage.TAKE, Wait(WaitWhy.BACKOFF, "backing off"), True,
     SLOT_WAIT_S + 1, Stage.TAKE),
    (6, "nothing to do (committed, a later attempt): the run succeeds", Stage.TAKE,
     NothingToDo(DoneWhy.COMMITTED, "committed"), True, 0.0, Stage.DONE),
    (7, "retries exhausted: the run fails with the rule's line, the batch as it is", Stage.TAKE,
     Fail(FailWhy.EXHAUSTED, "failed 3 times"), True, 0.0, Stage.REFUSED),
    (8, "the drain goes on: what it set apart or failed on is split off first", Stage.DRAIN, GoOn((R,)), True, 0.0,
     Stage.ISOLATE),
    (9, "nothing of the drain is left: the batch fails", Stage.DRAIN, BatchFails("drain failed", True), True, 0.0,
     Stage.FAILED),
    (10, "split off after the drain: the rest is checked", Stage.ISOLATE, GoOn((R,)), True, 0.0, Stage.CHECK),
    (11, "a check failed on some ranges: they are split off", Stage.CHECK, Recheck((R,), SPLIT), True, 0.0,
     Stage.ISOLATE),
    (12, "split off after the checks: the rest is checked again, once", Stage.ISOLATE, Recheck((R,), SPLIT), True, 0.0,
     Stage.RECHECK),
    (13, "the checks passed: publish", Stage.CHECK, Publish((R,)), True, 0.0, Stage.PUBLISH),
    (14, "the second check passed: publish", Stage.RECHECK, Publish((R,)), True, 0.0, Stage.PUBLISH),
    (15, "the second check failed too: the batch fails, nothing published", Stage.RECHECK, BatchFails("checks"), True,
     0.0, Stage.FAILED),
    (16, "published: the commit waits for the batches before it", Stage.PUBLISH, BatchState.CHECKED, True, 0.0,
     Stage.ORDER),
    (17, "published by a run that stops there (Airflow's drain task): done, the commit is another run's",
     Stage.PUBLISH, BatchState.CHECKED, False, 0.0, Stage.DONE),
    (18, "only the commit left, in a run that commits", Stage.REPORT, BatchState.CHECKED, True, 0.0, Stage.ORDER),
    (19, "a batch before it is being finished by its own run: asked again after a poll", Stage.ORDER,
     Wait(WaitWhy.PREDECESSOR, "waits for b-1"), True, 10.0, Stage.ORDER),
    (20, "nothing before it left to commit: commit", Stage.ORDER, Commit(), True, 0.0, Stage.COMMIT),
    (21, "the batches before it commit later, and their runs commit it: done", Stage.ORDER,
     NothingToDo(DoneWhy.COMMITS_LATER, "commits later"), True, 0.0, Stage.DONE),
    (22, "an operator's run whose batch cannot commit yet fails (a backfill succeeds only when committed)",
     Stage.ORDER, Fail(FailWhy.NOT_COMMITTED, "not committed"), True, 0.0, Stage.REFUSED),
    (23, "committed: the later batches that waited for it", Stage.COMMIT, "committed", True, 0.0, Stage.LATER),
    (24, "nothing of it committed: the batch fails", Stage.COMMIT, BatchFails("group moved", True), True, 0.0,
     Stage.FAILED),
    (25, "the later batches committed: done", Stage.LATER, None, True, 0.0, Stage.DONE),
]


@pytest.mark.parametrize("n, why, at, found, commit, waited_s, expected", CASES, ids=[f"{c[0]:02d}" for c in CASES])
def test_what_follows_each_stage(n, why, at, found, commit, waited_s, expected):
    assert next_stage(at, found, commit=commit, waited_s=waited_s) is expected, why


def test_the_numbers_are_in_order_and_every_stage_is_reached():
    assert [c[0] for c in CASES] == list(range(1, len(CASES) + 1))
    reached = {Stage.TAKE} | {c[-1] for c in CASES}
    assert reached == set(Stage), set(Stage) - reached
    assert {c[2] for c in CASES} == set(Stage) - ENDS, "every stage that is not an end has a case"


def test_a_run_never_publishes_before_its_checks_nor_commits_before_it_published():
    """Commit after proof, as the machine's paths: every path from the take to the commit goes through a check that
    passed and a publish (or an earlier run's publish, reported), and every path to publish through a check (a wait
    loops on its own stage)."""
    before = {}
    for _, _, at, _, _, _, then in CASES:
        if then is not at:
            before.setdefault(then, set()).add(at)
    assert before[Stage.PUBLISH] == {Stage.CHECK, Stage.RECHECK}
    assert before[Stage.ORDER] == {Stage.PUBLISH, Stage.REPORT}
    assert before[Stage.COMMIT] == {Stage.ORDER}
