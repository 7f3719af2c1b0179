"""The case table of ``kprio drain``'s loop rules (kprio_core/lifecycle/loop.py): after a tick, tick again or stop.

One row per case: how the loop runs, what the tick decided, what the loop saw, and the step
expected. The rule each case proves is the number in its id.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from kprio_core.ledger import BatchState, Hold
from kprio_core.lifecycle.decision import Decision, Skip, Verdict
from kprio_core.lifecycle.examples import T0 as NOW
from kprio_core.lifecycle.loop import (
    BLOCKED_GIVE_UP_S,
    MAX_WAIT_S,
    MIN_WAIT_S,
    LoopInputs,
    Others,
    StopLoop,
    TickAgain,
    Until,
    next_step,
)

INTERVAL = 2.0


def decision(verdict: Verdict, *holds: Hold, retry_in_s: float | None = None, cause: str | None = None) -> Decision:
    return Decision("orders", verdict, (Skip(verdict.value),), holds=holds, reason=verdict.value,
                    retry_in_s=retry_in_s, cause=cause)


def hold(*, retry_in_s: float | None = 3.0, exhausted: bool = False, batch_id: str | None = "b-000007",
         transient: bool = False) -> Hold:
    retry_at = NOW + timedelta(seconds=retry_in_s) if retry_in_s is not None else None
    return Hold("orders-0", 1, 120, batch_id, BatchState.FAILED if batch_id else None, "disk full", 1, retry_at,
                exhausted, transient)


IDLE = decision(Verdict.IDLE)
BLOCKED = decision(Verdict.BLOCKED)
THROTTLED = decision(Verdict.THROTTLED, retry_in_s=4.5)
BUSY = decision(Verdict.BUSY)
RETRY_LATER = decision(Verdict.HELD, hold(retry_in_s=3.0))
RETRY_NOW = decision(Verdict.HELD, hold(retry_in_s=-5.0))
RETRY_FAR = decision(Verdict.HELD, hold(retry_in_s=600.0))
NEEDS_A_PERSON = decision(Verdict.HELD, hold(retry_in_s=None, exhausted=True))
LOST_OFFSETS = decision(Verdict.HELD, hold(retry_in_s=None, batch_id=None))
CAUSE_STILL_THERE = decision(Verdict.HELD, hold(retry_in_s=-5.0, transient=True), cause="the output root /o is full")
CAUSE_GONE = decision(Verdict.HELD, hold(retry_in_s=-5.0, transient=True))

EMPTY = LoopInputs(Until.EMPTY, INTERVAL, NOW, runs_so_far=3, reason="tick's reason")
STALLED = replace(EMPTY, since_progress_s=BLOCKED_GIVE_UP_S + 1)

DOWN = "the ledger database does not answer: connection refused (ledger.url postgresql://kprio@db/kprio)"

CASES = [
    # 0: the ledger's database does not answer: the tick could not read it.
    ("0-ledger-down-follow-waits", [], replace(EMPTY, until=Until.FOLLOW, ledger_down=DOWN, blocked_for_s=1e6),
     TickAgain(2 * INTERVAL)),
    ("0-ledger-down-until-empty-waits", [], replace(EMPTY, ledger_down=DOWN, blocked_for_s=30), TickAgain(2 * INTERVAL)),
    ("0-ledger-down-until-empty-too-long", [], replace(EMPTY, ledger_down=DOWN, blocked_for_s=BLOCKED_GIVE_UP_S + 1),
     StopLoop(f"{DOWN} (for more than {BLOCKED_GIVE_UP_S:.0f} s)", ok=False)),
    ("0-ledger-down-once", [], replace(EMPTY, until=Until.ONCE, ledger_down=DOWN), StopLoop(DOWN, ok=False)),
    # 1: the tick's runs were executed.
    ("1-once-after-runs", [IDLE], replace(EMPTY, until=Until.ONCE, requested=2), StopLoop("one tick: 3 runs")),
    ("1-empty-ticks-again-at-once", [IDLE], replace(EMPTY, requested=1), TickAgain(0.0)),
    ("1-follow-ticks-again-at-once", [BLOCKED], replace(EMPTY, until=Until.FOLLOW, requested=1), TickAgain(0.0)),
    # 2: --follow never stops by itself.
    ("2-follow-idle", [IDLE], replace(EMPTY, until=Until.FOLLOW), TickAgain(INTERVAL)),
    ("2-follow-blocked", [BLOCKED], replace(EMPTY, until=Until.FOLLOW, blocked_for_s=1e6), TickAgain(INTERVAL)),
    ("2-follow-held", [NEEDS_A_PERSON], replace(STALLED, until=Until.FOLLOW), TickAgain(INTERVAL)),
    # 3: --once stops with the tick's reason.
    ("3-once-idle", [IDLE], replace(EMPTY, until=Until.ONCE), StopLoop("tick's reason")),
    ("3-once-blocked-not-ok", [BLOCKED, IDLE], replace(EMPTY, until=Until.ONCE), StopLoop("tick's reason", ok=False)),
    # 4: a blocked broker.
    ("4-blocked-from-the-start", [BLOCKED], replace(EMPTY, runs_so_far=0, first_turn=True),
     StopLoop("tick's reason", ok=False)),
    ("4-blocked-after-runs-waits", [BLOCKED], replace(EMPTY, first_turn=True), TickAgain(2 * INTERVAL)),
    ("4-blocked-later-waits", [BLOCKED], replace(EMPTY, runs_so_far=0, blocked_for_s=30), TickAgain(2 * INTERVAL)),
    ("4-blocked-too-long", [BLOCKED, RETRY_LATER], replace(EMPTY, blocked_for_s=BLOCKED_GIVE_UP_S + 0.5),
     StopLoop(f"tick's reason (for more than {BLOCKED_GIVE_UP_S:.0f} s)", ok=False)),
    ("4-wait-capped", [BLOCKED], replace(EMPTY, interval_s=45.0), TickAgain(MAX_WAIT_S)),
    # 5: retries of a cause that does not pass.
    ("5-no-progress-held", [RETRY_LATER], STALLED, "stop-held-no-progress"),
    ("6-no-progress-but-another-process-works", [RETRY_LATER], replace(STALLED, others=Others((9.0,))),
     TickAgain(INTERVAL)),
    ("5-no-progress-slots-busy-nobody-works", [BUSY, IDLE], STALLED,
     StopLoop(f"no progress for {BLOCKED_GIVE_UP_S:.0f} s and no process works on the batches in flight: busy",
              ok=False)),
    ("6-no-progress-slots-busy-another-works", [BUSY], replace(STALLED, others=Others((3.0,))), TickAgain(INTERVAL)),
    ("6-no-progress-but-a-claim-elsewhere", [RETRY_LATER], replace(STALLED, others=Others(claimed_elsewhere=True)),
     TickAgain(INTERVAL)),
    # 6: something goes on later.
    ("6-retry-backoff", [RETRY_LATER], EMPTY, TickAgain(3.0)),
    ("6-retry-due-now", [RETRY_NOW], EMPTY, TickAgain(MIN_WAIT_S)),
    ("6-retry-far-capped", [RETRY_FAR], EMPTY, TickAgain(MAX_WAIT_S)),
    # A transient failure due long ago whose cause a probe still sees: the next probe is the news, not a loop.
    ("6-transient-cause-still-there", [CAUSE_STILL_THERE], EMPTY, TickAgain(INTERVAL)),
    ("6-transient-cause-gone", [CAUSE_GONE], EMPTY, TickAgain(MIN_WAIT_S)),
    ("6-throttled", [THROTTLED], EMPTY, TickAgain(4.5)),
    ("6-soonest-of-several", [THROTTLED, RETRY_LATER], EMPTY, TickAgain(3.0)),
    ("6-another-process-lease", [IDLE], replace(EMPTY, others=Others((0.5, 12.0))), TickAgain(0.5)),
    ("6-another-lease-long", [IDLE], replace(EMPTY, others=Others((40.0,))), TickAgain(INTERVAL)),
    ("6-claimed-elsewhere", [IDLE], replace(EMPTY, others=Others(claimed_elsewhere=True)), TickAgain(INTERVAL)),
    ("6-contended", [IDLE], replace(EMPTY, contended=True), TickAgain(INTERVAL)),
    # Backlog behind slots taken by batches in flight whose lease ended between the tick and this look.
    ("6-slots-busy-no-lease-seen", [BUSY, IDLE], EMPTY, TickAgain(INTERVAL)),
    ("6-held-but-work-elsewhere", [NEEDS_A_PERSON], replace(EMPTY, others=Others((5.0,))), TickAgain(INTERVAL)),
    # 7: only holds that need a person.
    ("7-exhausted", [NEEDS_A_PERSON, IDLE], EMPTY, "stop-held-person"),
    ("7-lost-offsets", [LOST_OFFSETS], EMPTY, "stop-held-person"),
    # 8: done.
    ("8-no-backlog", [IDLE, IDLE], EMPTY, StopLoop("no backlog left")),
    ("8-no-backlog-after-no-progress", [IDLE], STALLED, StopLoop("no backlog left")),
]


@pytest.mark.parametrize(("case", "decisions", "seen", "expected"), CASES, ids=[c[0] for c in CASES])
def test_loop_rules(case, decisions, seen, expected):
    step = next_step(decisions, seen)
    if expected == "stop-held-no-progress":
        assert isinstance(step, StopLoop) and not step.ok, step
        assert step.why.startswith(f"no progress for {BLOCKED_GIVE_UP_S:.0f} s; still held: held: orders-0[1] from 120")
        assert step.held == ("held: orders-0[1] from 120 by b-000007 (failed once: disk full; retried by itself at 00:00:03 UTC)",)
    elif expected == "stop-held-person":
        assert isinstance(step, StopLoop) and not step.ok, step
        assert step.why.startswith("only held partitions are left, they need a person: held: orders-0[1] from 120")
        assert len(step.held) == 1
    else:
        assert step == expected


def test_every_rule_has_a_case():
    assert {int(c[0].split("-")[0]) for c in CASES} == set(range(0, 9))


def test_a_stop_says_each_cause_once_and_counts_its_partitions():
    """A batch of 400 partitions failed for good: the stop's line named every partition, over 1,000 characters; it
    says which batch holds how many partitions of which priorities, and why, once (the JSON's ``held`` keeps each)."""
    from kprio_core.model.snapshot import LagSnapshot, PartitionLag

    holds = [replace(hold(retry_in_s=None, exhausted=True), topic=f"orders-{p % 2}", partition=p, start=100 + p)
             for p in range(400)]
    parts = tuple(PartitionLag(f"orders-{p % 2}", p, p % 2, 0, 1000, 100) for p in range(400))
    held = replace(decision(Verdict.HELD, *holds), snapshot=LagSnapshot("orders", 2, parts))
    step = next_step([held], EMPTY)
    assert isinstance(step, StopLoop) and not step.ok and len(step.held) == 400
    assert step.why == ("only held partitions are left, they need a person: held: 400 partitions of priorities 1, 0 "
                        "(orders-0: 200, orders-1: 200) by b-000007 (failed once: disk full; fix the cause, then kprio "
                        "retry b-000007)"), step.why
