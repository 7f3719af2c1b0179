"""The lag verdict against Burrow's evaluator: the transcription on Burrow's own cases, kprio's rules on them,
and, on windows hypothesis draws and a simulated drain, kprio's verdict is Burrow's wherever no difference of
``kprio_core/verdict.py``'s docstring applies (and exactly that difference where one does).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kprio_core.verdict import (
    LagState,
    PartitionWindow,
    VerdictPolicy,
    check_if_lag_not_decreasing,
    check_if_offsets_rewind,
    check_if_offsets_stalled,
    check_if_recent_lag_zero,
    commits_of,
    current,
    is_lag_always_not_zero,
    judge_partition,
    judge_priority,
    recent_log_ends,
    rewound,
)
from tests.kprio_core import burrow_reference as burrow
from tests.kprio_core.verdict_support import (
    C,
    L,
    burrow_on,
    burrow_without_the_waits,
    differences,
    traces,
    window,
)

POLICY = VerdictPolicy(expected_commit_s=20)
STEADY = {"deadline": None, "derandomize": True, "suppress_health_check": [HealthCheck.filter_too_much]}
"""The same windows every run (a property that found a difference says which), and the windows a property's
difference does not apply to are filtered out: about four in five for the rarer ones."""


@pytest.mark.parametrize("case", sorted(burrow.BURROW_CASES))
def test_the_transcription_gives_burrows_answers_on_burrows_cases(case: int) -> None:
    offsets, brokers, lag, now, allowed, always, rewind, stop, stall, not_decreasing, recent, status = \
        burrow.BURROW_CASES[case]
    assert burrow.is_lag_always_not_zero(offsets, allowed) is always
    assert burrow.check_if_offsets_rewind(offsets) == rewind
    assert burrow.check_if_offsets_stopped(offsets, now) is stop
    assert burrow.check_if_offsets_stalled(offsets) is stall
    assert burrow.check_if_lag_not_decreasing(offsets) is not_decreasing
    assert burrow.check_if_recent_lag_zero(offsets, brokers) is recent
    assert burrow.calculate_partition_status(offsets, brokers, lag, now, allowed) == status


def burrow_window(case: int) -> tuple[PartitionWindow, float, VerdictPolicy]:
    """One of Burrow's cases as a kprio window: its commits as commit samples, each broker offset a look just
    before now (all recent: ``recent_s`` is 1 s, and no commit is that close to now), the current lag now."""
    offsets, brokers, lag, now, allowed, *_ = burrow.BURROW_CASES[case]
    last = offsets[-1].offset
    seen = [C(o.timestamp / 1000, o.offset, None if o.lag is None else o.offset + o.lag) for o in offsets]
    seen += [L(now - 0.5 + i / 1000, last, b) for i, b in enumerate(brokers)]
    seen.append(L(now, last, last + lag))
    return window(*seen), float(now), VerdictPolicy(expected_commit_s=1, stop_factor=1, allowed_lag=allowed)


BURROW_CASES_THAT_DIFFER = {1: "difference 1: the 100 s before the first commit's lag of 0 was waiting, not draining"}


@pytest.mark.parametrize("case", sorted(burrow.BURROW_CASES))
def test_kprios_rules_give_burrows_answers_on_burrows_cases(case: int) -> None:
    offsets, brokers, lag, now, allowed, always, rewind, _, stall, not_decreasing, recent, status = \
        burrow.BURROW_CASES[case]
    w, now_s, policy = burrow_window(case)
    seen = w.in_order()
    ring = commits_of(seen, policy.intervals)
    assert [o.committed for o in ring] == [o.offset for o in offsets][-policy.intervals:]
    assert is_lag_always_not_zero(ring, allowed) is always
    assert check_if_offsets_rewind(ring) == rewind
    assert check_if_offsets_stalled(ring) is stall
    assert check_if_lag_not_decreasing(ring) is not_decreasing
    brokers_seen = seen[:-1]  # the looks of Burrow's broker offsets (its current lag is given apart)
    assert check_if_recent_lag_zero(ring[-1].committed, recent_log_ends(brokers_seen, current(seen), now_s, 1)) is recent
    v = judge_partition(w, now_s=now_s, policy=policy, others_commit_s=None)
    if case in BURROW_CASES_THAT_DIFFER:
        assert v.state.value != status, BURROW_CASES_THAT_DIFFER[case]
    else:
        assert v.state.value == status, v.reason



@settings(max_examples=200, **STEADY)
@given(traces())
def test_kprio_is_burrow_wherever_no_difference_applies(drawn) -> None:
    w, policy = drawn
    now_s = w.in_order()[-1].at_s
    assume(not differences(w, now_s, policy))
    v = judge_partition(w, now_s=now_s, policy=policy, others_commit_s=None)
    assert v.state.value == burrow_on(w, now_s, policy), v.reason


@settings(max_examples=200, **STEADY)
@given(traces())
def test_difference_1_is_burrows_rule_on_the_draining_span(drawn) -> None:
    """Where commits came in steps, kprio is Burrow on the ring without the waits between them."""
    w, policy = drawn
    now_s = w.in_order()[-1].at_s
    assume(differences(w, now_s, policy) == {1})
    v = judge_partition(w, now_s=now_s, policy=policy, others_commit_s=None)
    assert v.state.value == burrow_without_the_waits(w, now_s, policy), v.reason


@settings(max_examples=200, **STEADY)
@given(traces())
def test_difference_2_is_burrows_rule_without_its_vacuous_stall_and_warn(drawn) -> None:
    """With fewer than two commits (or known lags), kprio is Burrow (on the draining span, difference 1 applies
    to most such rings) except where Burrow's STALL or WARN rests on one commit or one lag: OK."""
    w, policy = drawn
    now_s = w.in_order()[-1].at_s
    found = differences(w, now_s, policy)
    assume(2 in found)
    v = judge_partition(w, now_s=now_s, policy=policy, others_commit_s=None)
    theirs = burrow_without_the_waits(w, now_s, policy) if 1 in found else burrow_on(w, now_s, policy)
    assert v.state.value == theirs or theirs in ("STALL", "WARN") and v.state is LagState.OK, v.reason


@settings(max_examples=150, **STEADY)
@given(traces(holds=True))
def test_holds_ahead_of_log_and_unknown_partitions_are_their_differences(drawn) -> None:
    w, policy = drawn
    now_s = w.in_order()[-1].at_s
    v = judge_partition(w, now_s=now_s, policy=policy, others_commit_s=None)
    found = differences(w, now_s, policy)
    if found == {5}:
        assert v.state is LagState.ERR and "held: " in v.reason
    elif found == {6}:
        assert v.state is LagState.REWIND and "held: " in v.reason
    elif found == {7}:
        assert v.state is LagState.ERR and "ahead of the log end" in v.reason
    elif found == {3}:
        assert burrow_on(w, now_s, policy) == "OK" and v.state in (LagState.OK, LagState.STOP)
    elif not found:
        assert v.state.value == burrow_on(w, now_s, policy), v.reason  # a hold kprio lifts by itself: no difference


def test_a_simulated_drain_that_stops_reads_stop_when_burrow_does() -> None:
    """A drain commits every 10 s while 50 records a second arrive (500 or 600 left at each commit); it stops at
    200 s and resumes at 350 s. Each second from 20 s on (three commits: a trend to judge), kprio and Burrow judge
    the same ring (the last 10 commits): OK until the commits have stopped for longer than their span (90 s), STOP
    from then on, both at the same second (not after kprio's former fixed 3 x 30 s), OK again once it resumes."""
    policy = VerdictPolicy(expected_commit_s=30)
    commits, states = [], {}
    for now in range(0, 400):
        end = 50 * now + 500 + (now % 20) * 10
        if now % 10 == 0 and not 200 < now < 350:
            commits.append(C(now, 50 * now, end))
        w = window(*commits[-10:], L(now, commits[-1].committed, end))
        v = judge_partition(w, now_s=now, policy=policy, others_commit_s=None)
        if now >= 20:
            assert v.state.value == burrow_on(w, now, policy), (now, v.reason)
            states[now] = v.state
    first_stop = min(t for t, state in states.items() if state is LagState.STOP)
    assert first_stop == 200 + 90 + 1, "the span of the last 10 commits is 90 s"
    assert {states[t] for t in range(20, first_stop)} == {LagState.OK}
    assert {states[t] for t in range(first_stop, 350)} == {LagState.STOP}
    assert {states[t] for t in range(350, 400)} == {LagState.OK}


@settings(max_examples=150, **STEADY)
@given(traces())
def test_zero_lag_is_always_ok(drawn) -> None:
    """Burrow's gate: whatever the history, a partition with nothing waiting (and not ahead of the log) is OK."""
    w, policy = drawn
    seen = w.in_order()
    last = seen[-1]
    caught_up = replace(last, end=last.next_offset, oldest_pending_s=None)
    v = judge_partition(window(*seen[:-1], caught_up), now_s=last.at_s, policy=policy, others_commit_s=0)
    assert v.state is LagState.OK and v.lag == 0


@settings(max_examples=150, **STEADY)
@given(traces(rewinds=False))
def test_monotone_commits_never_rewind(drawn) -> None:
    w, policy = drawn
    now_s = w.in_order()[-1].at_s
    assert rewound(commits_of(w.in_order(), policy.intervals)) is None
    assert judge_partition(w, now_s=now_s, policy=policy, others_commit_s=None).state is not LagState.REWIND


@settings(max_examples=150, **STEADY)
@given(traces(), st.sampled_from([0, 10, 100, 10_000]))
def test_waiting_longer_never_ends_a_stop(drawn, later: float) -> None:
    w, policy = drawn
    now_s = w.in_order()[-1].at_s
    if judge_partition(w, now_s=now_s, policy=policy, others_commit_s=None).state is LagState.STOP:
        assert judge_partition(w, now_s=now_s + later, policy=policy, others_commit_s=None).state is LagState.STOP


@settings(max_examples=100, **STEADY)
@given(st.lists(traces(holds=True), min_size=1, max_size=5))
def test_the_worst_partition_decides(drawn) -> None:
    ws = [PartitionWindow(w.topic, i, w.priority, w.observations) for i, (w, _) in enumerate(drawn)]
    now_s = max(o.at_s for w in ws for o in w.observations)
    v = judge_priority(2, ws, now_s=now_s, policy=POLICY)
    assert len(v.partitions) == len(ws)
    assert v.state.severity == max(p.state.severity for p in v.partitions)
    assert v.lag == sum(p.lag or 0 for p in v.partitions)
    if v.state is not LagState.OK:
        assert v.reason.startswith(v.worst().reason)
