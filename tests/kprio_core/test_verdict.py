"""The case table of the lag verdict (kprio_core/verdict.py): Burrow's rules and where a batch drainer differs.

One window per row, with a one-line why: the state, the words of the reason, the rules that hold (kprio's
functions, which carry Burrow's names) and the difference of the module docstring that makes Burrow's state
another, if any: Burrow's state on the same window (the transcription in ``burrow_reference.py``, through
:func:`~tests.kprio_core.verdict_support.burrow_on`) is the row's state wherever the row names none.
``test_verdict_burrow.py`` checks the transcription against Burrow's own cases and kprio against Burrow on
windows hypothesis draws.
"""

from __future__ import annotations

from typing import NamedTuple

import pytest

from kprio_core.verdict import (
    HoldReason,
    LagState,
    Observation,
    PartitionWindow,
    VerdictPolicy,
    check_if_lag_not_decreasing,
    check_if_offsets_stalled,
    check_if_recent_lag_zero,
    commits_of,
    current,
    is_lag_always_not_zero,
    judge,
    judge_partition,
    judge_priority,
    recent_log_ends,
    rewound,
    stopped,
)
from tests.kprio_core.verdict_support import C, L, burrow_on, window

POLICY = VerdictPolicy(expected_commit_s=20)  # recent_s 60
NOW = 1_000.0


# ------------------------------------------------------------------------------------- the case table


class Case(NamedTuple):
    why: str
    seen: tuple[Observation, ...]
    state: LagState
    says: str
    rules: frozenset[str]
    """kprio's rules that hold on the window (:func:`rules_that_hold`)."""
    differs: int | None = None
    """The difference (module docstring) that makes Burrow's state another; None: Burrow's state is this one."""
    others_commit_s: float | None = None
    policy: VerdictPolicy = POLICY


def rules_that_hold(w: PartitionWindow, now_s: float, policy: VerdictPolicy) -> frozenset[str]:
    seen = w.in_order()
    now = current(seen)
    if now is None:
        return frozenset()
    ring = commits_of(seen, policy.intervals)
    held = {
        "recent_lag_zero": check_if_recent_lag_zero(now.next_offset, recent_log_ends(seen, now, now_s, policy.recent_s)),
        "stopped": stopped(seen, ring, now, now_s, policy) is not None,
        "rewind": rewound(ring) is not None,
        "always_lagging": bool(ring) and is_lag_always_not_zero(ring, policy.allowed_lag),
        "stalled": check_if_offsets_stalled(ring),
        "not_decreasing": check_if_lag_not_decreasing(ring),
        "waits_for_person": now.waits_for_person,
    }
    return frozenset(name for name, holds in held.items() if holds)


def R(*names: str) -> frozenset[str]:  # noqa: N802 (a set of rule names)
    return frozenset(names)


RESET = "orders-2[0] reset back outside kprio: waits for kprio reset"
CASES = {
    # -- Burrow's gate: nothing (or no more than allowed) waits
    "01-not-observed": Case("no observation: Burrow's OK for a partition it cannot judge", (), LagState.OK,
                            "not observed yet", R()),
    "02-end-unknown": Case("no look saw the log end: the lag is unknown", (L(900, 10, None),), LagState.OK,
                           "log end not observed", R()),
    "03-caught-up": Case("zero lag now", (C(900, 50, 50), L(1000, 50, 50)), LagState.OK, "caught up",
                         R("recent_lag_zero")),
    "04-zero-lag-beats-stop": Case("no commit for ages but nothing waits (Burrow case 8)",
                                   (C(0, 50, 60), L(1000, 50, 50)), LagState.OK, "caught up",
                                   R("recent_lag_zero", "always_lagging")),
    "05-zero-lag-beats-rewind": Case("moved back, but nothing waits", (C(900, 90, 90), L(950, 40, 40)), LagState.OK,
                                     "caught up", R("recent_lag_zero", "rewind", "not_decreasing")),
    "06-zero-lag-beats-hold": Case("held, but nothing waits", (L(990, 40, 40, held="by b-000003"),), LagState.OK,
                                   "caught up", R("recent_lag_zero", "waits_for_person")),
    "07-allowed-lag": Case("3 waiting, 5 allowed: caught up (Burrow case 12)", (C(0, 50, 53), L(1000, 50, 53)),
                           LagState.OK, "3 records waiting (allowed)", R("stopped"),
                           policy=VerdictPolicy(20, allowed_lag=5)),
    "08-never-committed-empty": Case("never committed, empty log", (L(990, None, 0),), LagState.OK, "caught up",
                                     R("recent_lag_zero")),
    # -- STOP: commits stopped while records wait, longer than the window's span
    "10-stop": Case("committed every 20 s while records waited, then nothing for 140 s > the span of 60 s",
                    (C(800, 100, 300), C(820, 200, 400), C(840, 300, 500), C(860, 400, 600), L(1000, 400, 700)),
                    LagState.STOP, "300 records waiting, no commit for 140 s (committed every 20 s over 60 s before); "
                    "priority 2 committed nothing meanwhile", R("stopped", "always_lagging", "not_decreasing")),
    "11-within-the-span": Case("40 s without a commit is within the span of 60 s: draining",
                               (C(900, 100, 400), C(920, 200, 450), C(940, 300, 500), C(960, 400, 550),
                                L(1000, 400, 700)), LagState.OK, "draining, 300 records waiting",
                               R("always_lagging")),
    "12-stop-after-the-window-span": Case("commits every 10 s: STOP after 20 s, whatever the expected cadence",
                                          (C(940, 100, 400), C(950, 200, 450), C(960, 300, 500), L(1000, 300, 700)),
                                          LagState.STOP, "no commit for 40 s (committed every 10 s over 20 s before)",
                                          R("stopped", "always_lagging")),
    "13-recent-lag-zero": Case("caught up at 950, records arrived since: not late (Burrow's #303)",
                               (C(900, 100, 100), L(950, 100, 100), L(1000, 100, 160)), LagState.OK,
                               "draining, 60 records waiting", R("recent_lag_zero")),
    "14-recent-lag-zero-by-the-oldest-record": Case(
        "the oldest waiting record arrived 20 s ago at a caught-up partition: not late",
        (C(500, 100, 100), L(1000, 100, 160, oldest_pending_s=980)), LagState.OK, "draining", R("recent_lag_zero")),
    "15-arrivals-waited-too-long": Case(
        "records waited 100 s at a partition caught up at its last commit: STOP (the span is 0: recent_s stands in)",
        (C(500, 100, 100), L(1000, 100, 160, oldest_pending_s=900)), LagState.STOP,
        "no commit for 500 s (expected within 60 s)", R("stopped")),
    "16-draining-span-skips-the-wait": Case(
        "difference 1: Burrow's span counts the 700 s the caught-up partition waited for records, kprio's the 20 s "
        "it drained", (C(0, 100, 100), C(700, 200, 300), C(720, 300, 400), L(1000, 300, 500)), LagState.STOP,
        "no commit for 280 s (committed every 20 s over 20 s before)", R("stopped", "not_decreasing"), differs=1),
    "17-one-commit-waits-recent-s": Case(
        "difference 1: one commit is no cadence, recent_s stands in: 10 s since it is not STOP, where Burrow's span "
        "of 0 s is", (C(990, 10, 50), L(1000, 10, 60)), LagState.OK, "draining, 50 records waiting",
        R("always_lagging"), differs=1),
    # -- STALL
    "20-left-behind": Case("difference 4: stopped while the priority committed another partition 10 s ago",
                           (C(800, 10, 90), C(820, 30, 90), L(1000, 30, 95)), LagState.STALL,
                           "committed other partitions 10 s ago", R("stopped", "always_lagging"), differs=4,
                           others_commit_s=990),
    "21-priority-committed-long-ago": Case("the other partitions' last commit is older than the span: STOP",
                                           (C(800, 10, 90), C(820, 30, 90), L(1000, 30, 95)), LagState.STOP,
                                           "committed nothing meanwhile", R("stopped", "always_lagging"),
                                           others_commit_s=900),
    "22-stalled": Case("three commits at one offset while records wait (Burrow cases 5, 6)",
                       (C(900, 10, 50), C(930, 10, 60), C(960, 10, 70), L(1000, 10, 80)), LagState.STALL,
                       "3 commits at offset 10", R("always_lagging", "stalled", "not_decreasing")),
    "23-one-commit-is-no-stall": Case(
        "difference 2: a ring of one commit (its log end unknown) is no stall; Burrow's vacuous rules say STALL",
        (C(990, 10, None), L(995, 10, 10), L(1000, 10, 60)), LagState.OK, "draining",
        R("recent_lag_zero", "always_lagging"), differs=2),
    # -- REWIND
    "30-rewind": Case("moved back from 500 to 100 (a look saw it), drained again to 300, not back at 500",
                      (C(900, 500, 600), L(960, 100, 600), C(990, 300, 600), L(1000, 300, 600)), LagState.REWIND,
                      "moved back from 500 to 100 40 s ago; 300 records waiting (drained again)",
                      R("rewind", "always_lagging")),
    "31-rewind-recovered": Case("moved back, then committed past 500: recovered (Burrow case 7)",
                                (C(900, 500, 700), L(960, 100, 700), C(990, 550, 700), L(1000, 550, 700)),
                                LagState.OK, "draining", R("always_lagging")),
    "32-stop-beats-rewind": Case("moved back and then no commit for longer than the span: STOP (Burrow's order)",
                                 (C(800, 500, 600), L(850, 100, 600), L(1000, 100, 600)), LagState.STOP,
                                 "500 records waiting", R("stopped", "rewind", "always_lagging", "not_decreasing")),
    "33-rewind-held-for-the-move": Case(
        "a move back kprio holds for kprio reset: REWIND, the hold's words with it", (C(900, 500, 600),
        L(1000, 100, 600, held=RESET, hold=HoldReason.LOG_CHANGE)), LagState.REWIND,
        f"moved back from 500 to 100 0 s ago; 500 records waiting, held: {RESET}",
        R("rewind", "always_lagging", "not_decreasing", "waits_for_person")),
    "34-held-for-the-move-stays-rewind": Case(
        "difference 6: no commit follows a move held for a person: still REWIND, where Burrow turns STOP",
        (C(700, 500, 600), L(750, 100, 600), L(1000, 100, 600, held=RESET, hold=HoldReason.LOG_CHANGE)),
        LagState.REWIND, "moved back from 500 to 100 250 s ago",
        R("stopped", "rewind", "always_lagging", "not_decreasing", "waits_for_person"), differs=6),
    "35-rewind-beats-warn": Case("moved back and the lag grew: REWIND explains it",
                                 (C(950, 500, 600), L(960, 100, 700), C(990, 200, 900), L(1000, 200, 900)),
                                 LagState.REWIND, "moved back from 500 to 100",
                                 R("rewind", "always_lagging", "not_decreasing")),
    # -- WARN
    "40-warn": Case("commits every 20 s, the lag at each grew from 100 to 160: the drain does not gain",
                    (C(900, 0, 100), C(920, 100, 220), C(940, 220, 360), C(960, 360, 520), L(1000, 360, 600)),
                    LagState.WARN, "the lag at commits did not fall in 60 s (100 then 160 records",
                    R("always_lagging", "not_decreasing", "recent_lag_zero")),
    "41-warn-needs-the-lag-at-commits": Case(
        "difference 2: the same commits without their log ends (recorded before kprio kept them) say no trend; "
        "Burrow's vacuous rule says WARN", (C(900, 0, None), C(920, 100, None), C(940, 220, None),
                                            C(960, 360, None), L(1000, 360, 600)), LagState.OK, "draining",
        R("always_lagging"), differs=2),
    "42-lag-fell": Case("the lag at commits fell from 300 to 100", (C(950, 0, 300), C(990, 250, 350),
                                                                    L(1000, 250, 350)),
                        LagState.OK, "draining, 100 records waiting", R("always_lagging")),
    "43-caught-up-in-the-window": Case("a commit caught up in the window: no STALL nor WARN (Burrow's rule 1)",
                                       (C(950, 100, 100), C(970, 150, 200), L(1000, 150, 300)), LagState.OK,
                                       "draining", R("not_decreasing", "recent_lag_zero")),
    # -- holds
    "50-held-for-a-person": Case(
        "difference 5: retries spent, kprio waits for a person: ERR at once, where Burrow sees a stopped drain",
        (C(900, 10, 90), L(1000, 10, 90, held="by b-000007 (failed 3 times: disk full): kprio retry",
                           hold=HoldReason.RETRIES_EXHAUSTED)),
        LagState.ERR, "80 records waiting, held: by b-000007", R("stopped", "always_lagging", "waits_for_person"),
        differs=5),
    "51-held-by-a-batch-retried": Case(
        "a failed batch kprio retries by itself: Burrow's rules judge it, the hold's words said",
        (C(960, 10, 90), C(980, 30, 90), L(1000, 30, 95, held="by b-000008 (retried in 5 s)",
                                           hold=HoldReason.FAILED_BATCH)),
        LagState.OK, "draining, 65 records waiting; held: by b-000008 (retried in 5 s)", R("always_lagging")),
    "52-held-by-a-batch-retried-in-vain": Case(
        "the retries do not commit for longer than the span: STOP, the hold's words said",
        (C(900, 10, 90), C(920, 30, 90), L(1000, 30, 95, held="by b-000008 (retried in 5 s)",
                                           hold=HoldReason.FAILED_BATCH)),
        LagState.STOP, "committed nothing meanwhile; held: by b-000008", R("stopped", "always_lagging")),
    "53-ahead-of-log": Case("difference 7: committed beyond the log end is a truncated log, not caught up",
                            (L(990, 500, 30, held="ahead of the log: hold", hold=HoldReason.LOG_CHANGE),),
                            LagState.ERR, "committed offset 500 is ahead of the log end 30",
                            R("recent_lag_zero", "waits_for_person"), differs=7),
    "54-lost-to-retention": Case("difference 5: offsets lost to retention wait for a person",
                                 (C(900, 10, 90), L(1000, 10, 90, log_start=40, held="orders-2[0]@[10,40) lost",
                                                    hold=HoldReason.LOST_TO_RETENTION)),
                                 LagState.ERR, "50 records waiting, held: orders-2[0]@[10,40) lost",
                                 R("stopped", "always_lagging", "waits_for_person"), differs=5),
    # -- partitions never committed
    "60-never-committed-seen-waiting": Case(
        "difference 3: never committed, looks saw the records wait 100 s > recent_s; Burrow does not know it",
        (L(900, None, 90), L(1000, None, 90)), LagState.STOP,
        "no commit in the window, waiting for 100 s (expected within 60 s)", R("stopped"), differs=3),
    "61-never-committed-just-seen": Case("never committed, seen once: no evidence it waited", (L(1000, None, 90),),
                                         LagState.OK, "draining, 90 records waiting", R()),
    "62-log-start-moves": Case("never committed, retention moved the log start: lag from the log start",
                               (L(990, None, 100, log_start=40),), LagState.OK, "60 records waiting", R()),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_the_case_table(case: Case) -> None:
    w = window(*case.seen)
    v = judge_partition(w, now_s=NOW, policy=case.policy, others_commit_s=case.others_commit_s)
    assert v.state is case.state, f"{case.why}: {v.reason}"
    assert case.says in v.reason, f"{case.why}: {v.reason}"
    assert v.reason.startswith("orders-2[0]: ")
    assert rules_that_hold(w, NOW, case.policy) == case.rules, case.why
    theirs = burrow_on(w, NOW, case.policy)
    if case.differs is None:
        assert theirs == v.state.value, f"Burrow says {theirs}: {case.why}"
    else:
        assert theirs != v.state.value, f"difference {case.differs} makes no difference here: {case.why}"


def test_numbers_of_a_verdict() -> None:
    v = judge_partition(CASES["10-stop"].seen and window(*CASES["10-stop"].seen), now_s=NOW, policy=POLICY,
                        others_commit_s=None)
    assert (v.lag, v.committed, v.end, v.since_commit_s, v.span_s) == (300, 400, 700, 140, 60)


def test_worst_partition_decides_the_priority() -> None:
    ok = window(C(950, 10, 10), L(1000, 10, 10), partition=0)
    warn = window(*CASES["40-warn"].seen, partition=1)
    held = window(C(990, 0, 40), L(1000, 0, 40, held="by b-000009"), partition=2)
    rewind = window(*CASES["30-rewind"].seen, partition=3)
    v = judge_priority(2, [ok, warn, held, rewind], now_s=NOW, policy=POLICY)
    assert v.state is LagState.ERR
    assert v.reason == "orders-2[2]: 40 records waiting, held: by b-000009"
    assert [p.state for p in v.partitions] == [LagState.OK, LagState.WARN, LagState.ERR, LagState.REWIND]
    assert v.lag == 0 + 240 + 40 + 300


def test_a_held_partition_does_not_decide_another_priority() -> None:
    """A hold of priority 1's partition (the move) makes priority 1 REWIND; priority 2 keeps its own verdict."""
    moved = PartitionWindow("orders-1", 0, 1, (C(900, 500, 600), L(1000, 100, 600, held=RESET,
                                                                       hold=HoldReason.LOG_CHANGE)))
    urgent = PartitionWindow("orders-2", 0, 2, CASES["11-within-the-span"].seen)
    verdicts = {v.priority: v for v in judge([moved, urgent], now_s=NOW, policy=POLICY)}
    assert verdicts[1].state is LagState.REWIND and verdicts[2].state is LagState.OK


def test_a_stopped_drain_is_stop_even_beside_a_hold() -> None:
    held = window(C(800, 0, 40), L(1000, 0, 40, held="by b-000009"), partition=0)
    stopped_ = window(C(700, 0, 40), C(800, 5, 40), L(1000, 5, 60), partition=1)
    also = window(C(700, 0, 40), C(800, 5, 40), L(1000, 5, 70), partition=2)
    v = judge_priority(2, [held, stopped_, also], now_s=NOW, policy=POLICY)
    assert v.state is LagState.STOP
    assert v.reason.endswith("(and 1 more partition STOP)")
    assert v.worst() is not None and v.worst().partition == 2  # the larger backlog among the worst


def test_one_partition_left_behind_is_stall() -> None:
    moving = window(C(900, 0, 500), C(950, 200, 500), C(995, 400, 500), L(1000, 400, 500), partition=0)
    behind = window(C(800, 0, 90), C(820, 7, 90), L(1000, 7, 90), partition=1)
    v = judge_priority(2, [moving, behind], now_s=NOW, policy=POLICY)
    assert v.state is LagState.STALL
    assert "committed other partitions 5 s ago" in v.reason


def test_judge_orders_priorities_most_urgent_first_with_their_own_policies() -> None:
    urgent = window(L(900, 0, 10), L(1000, 0, 10), priority=2)  # seen waiting 100 s, never committed
    bulk = window(L(900, 0, 10), L(1000, 0, 10), priority=0)
    verdicts = judge([bulk, urgent], now_s=NOW, policy={2: POLICY, 0: VerdictPolicy(expected_commit_s=600)})
    assert [(v.priority, v.state) for v in verdicts] == [(2, LagState.STOP), (0, LagState.OK)]


def test_a_priority_without_partitions_is_ok() -> None:
    v = judge_priority(1, [], now_s=NOW, policy=POLICY)
    assert (v.state, v.reason, v.lag, v.worst()) == (LagState.OK, "no partitions", 0, None)


@pytest.mark.parametrize("bad", [{"expected_commit_s": 0}, {"expected_commit_s": 10, "stop_factor": 0.5},
                                 {"expected_commit_s": 10, "allowed_lag": -1}, {"expected_commit_s": 10, "intervals": 1}])
def test_policy_refuses_nonsense(bad) -> None:
    with pytest.raises(ValueError):
        VerdictPolicy(**bad)


def test_the_ring_is_the_newest_intervals_commits() -> None:
    seen = tuple(C(t, t, t + 10) for t in range(0, 100, 10)) + (L(100, 90, 100), L(105, 40, 100))
    ring = commits_of(seen, 4)
    assert [(o.at_s, o.committed) for o in ring] == [(70, 70), (80, 80), (90, 90), (105, 40)]


