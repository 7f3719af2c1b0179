"""The case table of the lag verdict (kprio_core/verdict.py): Burrow's states from a window of observations.

One row per case: a partition's window, when the priority last committed elsewhere, the state expected
and words its reason must hold. The rule a case proves is the number in its id (the module docstring's
rules: 1 caught up / ahead of the log, 2 held, 3 stuck (STOP, STALL), 4 rewind, 5 growing, 6 OK); the
properties below hold for any window.
"""

from __future__ import annotations

from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kprio_core.verdict import (
    LagState,
    Observation,
    PartitionWindow,
    VerdictPolicy,
    commit_times,
    judge,
    judge_partition,
    judge_priority,
    rewound,
    stuck_for,
)

POLICY = VerdictPolicy(expected_commit_s=20)  # stuck after 60 s
NOW = 1_000.0
O = Observation


def window(*seen: Observation, partition: int = 0, priority: int = 2) -> PartitionWindow:
    return PartitionWindow(f"orders-{priority}", partition, priority, tuple(seen))


class Case(NamedTuple):
    why: str
    seen: tuple[Observation, ...]
    state: LagState
    says: str
    priority_commit_s: float | None = None
    policy: VerdictPolicy = POLICY


CASES = {
    "0-not-observed": Case("no observation: Burrow's OK for a partition it cannot judge", (), LagState.OK,
                           "not observed yet"),
    "0-end-unknown": Case("only ledger commits, no snapshot: the lag is unknown", (O(900, 10, None),),
                          LagState.OK, "log end not observed"),
    "1-caught-up": Case("zero lag now", (O(900, 50, 50), O(1000, 50, 50)), LagState.OK, "caught up"),
    "1-zero-lag-beats-stop": Case("zero lag is OK even with no commit for ages (Burrow case 8)",
                                  (O(0, 50, 50), O(1000, 50, 50)), LagState.OK, "caught up"),
    "1-zero-lag-beats-rewind": Case("moved back, but nothing waits", (O(900, 90, 90), O(950, 40, 40)),
                                    LagState.OK, "caught up"),
    "1-zero-lag-beats-hold": Case("held, but nothing waits", (O(990, 40, 40, held="by b-000003"),),
                                  LagState.OK, "caught up"),
    "1-allowed-lag": Case("3 waiting, 5 allowed: caught up (Burrow case 12)", (O(0, 50, 53), O(1000, 50, 53)),
                          LagState.OK, "3 records waiting (allowed)", policy=VerdictPolicy(20, allowed_lag=5)),
    "1-never-committed-empty": Case("never committed, empty log", (O(990, None, 0),), LagState.OK, "caught up"),
    "1-ahead-of-log": Case("committed beyond the log end: a truncated log is not caught up",
                           (O(990, 500, 30, held="ahead of the log: hold"),), LagState.ERR,
                           "committed offset 500 is ahead of the log end 30"),
    "2-held": Case("a failed batch holds it: ERR with the hold's words, before STOP",
                   (O(0, 10, 90), O(1000, 10, 90, held="by b-000007 (failed 3 times: disk full)")), LagState.ERR,
                   "80 records waiting, held: by b-000007 (failed 3 times: disk full)"),
    "2-held-reset-back": Case("a reset back kprio holds for a person is ERR, the hold names the reset",
                              (O(900, 500, 600), O(950, 100, 600, held="reset back outside kprio: hold")),
                              LagState.ERR, "reset back outside kprio"),
    "3-stop": Case("backlog, no commit for 100 s > 60 s, the priority committed nothing",
                   (O(900, 10, 90), O(1000, 10, 95)), LagState.STOP, "no commit for 100 s (expected every 20 s)"),
    "3-stop-never-committed": Case("never committed, waiting the whole window", (O(900, None, 90), O(1000, None, 90)),
                                   LagState.STOP, "90 records waiting"),
    "3-stop-after-commits": Case("committed at 910, then nothing for 90 s",
                                 (O(900, 10, 90), O(910, 50, 90), O(1000, 50, 120)), LagState.STOP,
                                 "no commit for 90 s"),
    "3-stop-priority-committed-long-ago": Case("the priority's last commit is older than the stuck limit",
                                               (O(900, 10, 90), O(1000, 10, 90)), LagState.STOP,
                                               "committed nothing meanwhile", priority_commit_s=920),
    "3-stall": Case("stuck, while the priority committed another partition 10 s ago",
                    (O(900, 10, 90), O(1000, 10, 90)), LagState.STALL, "committed other partitions 10 s ago",
                    priority_commit_s=990),
    "3-not-stuck-yet": Case("no commit for 50 s < 60 s: still OK", (O(950, 10, 90), O(1000, 10, 90)),
                            LagState.OK, "draining, 80 records waiting"),
    "3-short-window": Case("observed for 30 s only: cannot have waited 60 s as far as anyone knows",
                           (O(970, 10, 90), O(1000, 10, 90)), LagState.OK, "draining"),
    "3-recent-lag-zero": Case("caught up at 980, records arrived since: not late (Burrow's recent lag zero, #303)",
                              (O(0, 10, 10), O(980, 10, 10), O(990, 10, 60), O(1000, 10, 60)), LagState.OK,
                              "draining, 50 records waiting"),
    "3-backlog-began-long-ago": Case("caught up once, long ago: stuck since the backlog began",
                                     (O(0, 10, 10), O(900, 10, 60), O(1000, 10, 60)), LagState.STOP,
                                     "no commit for 100 s"),
    "3-stop-beats-rewind": Case("moved back and then nothing: STOP (Burrow checks STOP first)",
                                (O(800, 500, 600), O(900, 100, 600), O(1000, 100, 600)), LagState.STOP,
                                "500 records waiting"),
    "4-rewind": Case("moved back from 500 to 100, draining again, not back at 500",
                     (O(950, 500, 600), O(960, 100, 600), O(990, 300, 600)), LagState.REWIND,
                     "moved back from 500 to 100 40 s ago; 300 records waiting"),
    "4-rewind-recovered": Case("moved back, then committed past 500: recovered (Burrow case 7)",
                               (O(950, 500, 700), O(960, 100, 700), O(990, 550, 700)), LagState.OK, "draining"),
    "4-rewind-beats-warn": Case("moved back and the lag grew: REWIND explains it",
                                (O(950, 500, 600), O(960, 100, 700), O(990, 200, 900)), LagState.REWIND,
                                "moved back from 500 to 100"),
    "5-warn": Case("commits every 10 s but the backlog grew from 100 to 300",
                   (O(950, 0, 100), O(960, 80, 200), O(970, 160, 300), O(990, 240, 540)), LagState.WARN,
                   "backlog grew from 100 to 300 records in 40 s"),
    "5-warn-needs-two-lags": Case("one snapshot and ledger commits: no trend to judge",
                                  (O(950, 0, None), O(960, 80, None), O(990, 160, 300)), LagState.OK, "draining"),
    "5-shrinking": Case("commits and the backlog fell from 300 to 100", (O(950, 0, 300), O(990, 250, 350)),
                        LagState.OK, "draining, 100 records waiting"),
    "5-caught-up-in-window": Case("the backlog reached zero in the window, then grew: not WARN (Burrow rule 1)",
                                  (O(950, 0, 100), O(960, 100, 100), O(990, 100, 300)), LagState.OK, "draining"),
    "6-draining": Case("commits, backlog steady", (O(950, 0, 100), O(990, 100, 200)), LagState.OK,
                       "draining, 100 records waiting"),
    "6-ledger-commit-counts": Case("a commit the ledger recorded (end unknown) is a commit: not stuck",
                                   (O(900, 10, 90), O(970, 60, None), O(1000, 60, 95)), LagState.OK, "draining"),
    "6-log-start-moves": Case("never committed, retention moved the log start: lag from the log start",
                              (O(990, None, 100, log_start=40),), LagState.OK, "60 records waiting"),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_partition_verdict(case: Case) -> None:
    v = judge_partition(window(*case.seen), now_s=NOW, policy=case.policy, priority_commit_s=case.priority_commit_s)
    assert v.state is case.state, f"{case.why}: {v.reason}"
    assert case.says in v.reason, case.why
    assert v.reason.startswith("orders-2[0]: ")


def test_numbers_of_a_verdict() -> None:
    v = judge_partition(window(O(900, 10, 90), O(910, 50, 90), O(1000, 50, 120)), now_s=NOW, policy=POLICY,
                        priority_commit_s=None)
    assert (v.lag, v.committed, v.end, v.since_commit_s, v.stuck_s, v.window_s) == (70, 50, 120, 90, 90, 100)


def test_worst_partition_decides_the_priority() -> None:
    ok = window(O(950, 10, 10), O(1000, 10, 10), partition=0)
    warn = window(O(950, 0, 100), O(960, 80, 200), O(990, 160, 300), partition=1)
    held = window(O(950, 0, 40), O(1000, 0, 40, held="by b-000009"), partition=2)
    rewind = window(O(950, 500, 600), O(960, 100, 600), O(990, 300, 600), partition=3)
    v = judge_priority(2, [ok, warn, held, rewind], now_s=NOW, policy=POLICY)
    assert v.state is LagState.ERR
    assert v.reason == "orders-2[2]: 40 records waiting, held: by b-000009"
    assert [p.state for p in v.partitions] == [LagState.OK, LagState.WARN, LagState.ERR, LagState.REWIND]
    assert v.lag == 0 + 140 + 40 + 300


def test_a_stopped_drain_is_stop_even_beside_a_hold() -> None:
    held = window(O(800, 0, 40), O(1000, 0, 40, held="by b-000009"), partition=0)
    stopped = window(O(800, 5, 40), O(1000, 5, 60), partition=1)
    also = window(O(800, 5, 40), O(1000, 5, 70), partition=2)
    v = judge_priority(2, [held, stopped, also], now_s=NOW, policy=POLICY)
    assert v.state is LagState.STOP
    assert v.reason.endswith("(and 1 more partition STOP)")
    assert v.worst() is not None and v.worst().partition == 2  # the larger backlog among the worst


def test_one_partition_left_behind_is_stall() -> None:
    moving = window(O(900, 0, 500), O(950, 200, 500), O(995, 400, 500), partition=0)
    behind = window(O(900, 7, 90), O(1000, 7, 90), partition=1)
    v = judge_priority(2, [moving, behind], now_s=NOW, policy=POLICY)
    assert v.state is LagState.STALL
    assert "committed other partitions 5 s ago" in v.reason


def test_judge_orders_priorities_most_urgent_first_with_their_own_policies() -> None:
    urgent = window(O(900, 0, 10), O(1000, 0, 10), priority=2)  # 100 s without a commit
    bulk = window(O(900, 0, 10), O(1000, 0, 10), priority=0)
    verdicts = judge([bulk, urgent], now_s=NOW, policy={2: POLICY, 0: VerdictPolicy(expected_commit_s=600)})
    assert [(v.priority, v.state) for v in verdicts] == [(2, LagState.STOP), (0, LagState.OK)]


def test_a_priority_without_partitions_is_ok() -> None:
    v = judge_priority(1, [], now_s=NOW, policy=POLICY)
    assert (v.state, v.reason, v.lag, v.worst()) == (LagState.OK, "no partitions", 0, None)


@pytest.mark.parametrize("bad", [{"expected_commit_s": 0}, {"expected_commit_s": 10, "stop_factor": 0.5},
                                 {"expected_commit_s": 10, "allowed_lag": -1}])
def test_policy_refuses_nonsense(bad) -> None:
    with pytest.raises(ValueError):
        VerdictPolicy(**bad)


# ----------------------------------------------------------------------------------------- properties

offsets = st.integers(min_value=0, max_value=1_000)


@st.composite
def windows(draw, *, monotone: bool = False, partition: int = 0) -> PartitionWindow:
    n = draw(st.integers(min_value=0, max_value=8))
    times = sorted(draw(st.lists(st.floats(min_value=0, max_value=NOW), min_size=n, max_size=n)))
    committed: list[int | None] = draw(st.lists(st.one_of(st.none(), offsets), min_size=n, max_size=n))
    if monotone:
        committed = sorted(c for c in committed if c is not None)
        committed = [None] * (n - len(committed)) + committed
    seen = []
    for at, c in zip(times, committed, strict=True):
        end = draw(st.one_of(st.none(), st.integers(min_value=c or 0, max_value=2_000)))
        held = draw(st.one_of(st.none(), st.just("by b-000001")))
        seen.append(O(at, c, end, held=held))
    return window(*seen, partition=partition)


@settings(max_examples=300, deadline=None)
@given(w=windows(), commit=st.one_of(st.none(), st.floats(min_value=0, max_value=NOW)))
def test_zero_lag_is_always_ok(w: PartitionWindow, commit: float | None) -> None:
    """Rule 1: whatever the history, a partition with nothing waiting (and not ahead of the log) is OK."""
    seen = w.in_order()
    if not seen:
        return
    caught_up = O(NOW, seen[-1].committed or 0, seen[-1].committed or 0)
    v = judge_partition(window(*seen, caught_up), now_s=NOW, policy=POLICY, priority_commit_s=commit)
    assert v.state is LagState.OK and v.lag == 0


@settings(max_examples=300, deadline=None)
@given(w=windows(monotone=True))
def test_monotone_commits_never_rewind(w: PartitionWindow) -> None:
    assert rewound(w.in_order()) is None
    v = judge_partition(w, now_s=NOW, policy=POLICY, priority_commit_s=None)
    assert v.state is not LagState.REWIND


@settings(max_examples=200, deadline=None)
@given(ws=st.lists(windows(), min_size=1, max_size=5))
def test_the_worst_partition_decides(ws: list[PartitionWindow]) -> None:
    ws = [PartitionWindow(w.topic, i, w.priority, w.observations) for i, w in enumerate(ws)]
    v = judge_priority(2, ws, now_s=NOW, policy=POLICY)
    assert len(v.partitions) == len(ws)
    assert v.state.severity == max(p.state.severity for p in v.partitions)
    assert v.lag == sum(p.lag or 0 for p in v.partitions)
    if v.state is not LagState.OK:
        assert v.reason.startswith(v.worst().reason)


@settings(max_examples=200, deadline=None)
@given(w=windows(), later=st.floats(min_value=0, max_value=10_000))
def test_waiting_longer_never_makes_it_less_stuck(w: PartitionWindow, later: float) -> None:
    seen = w.in_order()
    if not seen:
        return
    assert stuck_for(seen, NOW + later, 0) >= stuck_for(seen, NOW, 0)
    assert all(t in {o.at_s for o in seen} for t in commit_times(seen))
