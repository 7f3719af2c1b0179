"""The lag verdict: whether each priority partition keeps up, from a window of its commits (LinkedIn's Burrow).

Burrow judges each partition of a consumer group (linkedin/Burrow, ``core/internal/evaluator/caching.go``,
``calculatePartitionStatus``) from the ring of its last ``intervals`` commits, each stored with its lag at
commit time (the broker's end offset Burrow last saw minus the committed offset), the broker's recent end
offsets (a ring of ``intervals`` samples, one every ``offset-refresh``), the current lag and the clock, in
this order:

- ``currentLag > allowedLag`` gates every rule: a partition with no more than that waiting is OK;
- STOP: ``checkIfOffsetsStopped`` (the time since the last commit exceeds the ring's span, last minus
  first commit) and not ``checkIfRecentLagZero`` (no recent broker end offset at or below the last
  committed offset: records that arrived at a caught-up partition are not late yet);
- REWIND: ``checkIfOffsetsRewind`` (the first commit below the one before it) and not
  ``checkIfRewindRecovered`` (no later commit back at the offset before it; Burrow v1.3.7 on, d69a8ec);
- when ``isLagAlwaysNotZero`` (no commit of the ring caught up): STALL when ``checkIfOffsetsStalled``
  (every commit the same offset), WARN when ``checkIfLagNotDecreasing`` (the lag at commits never fell);
- otherwise OK. The group is ERR when a partition is STOP, STALL or REWIND, WARN when one is WARN.

kprio applies these rules, with Burrow's names, to the same inputs: the ring is the partition's last
``intervals`` commits (the ledger's commit samples, each with the log end seen right after it, and the
moves of the group a look saw: a person's reset); the recent end offsets are those seen within ``recent_s``
and, when the oldest pending record arrived within it, the group's offset (the log ended there just before
it). Where a batch drainer must differ, it does so in :func:`judge_partition` only, each difference a row
of the case table (``tests/kprio_core/test_verdict.py``; ``test_verdict_burrow.py`` holds every other
window to a transcription of Burrow's evaluator):

1. **Commits come in steps.** Burrow's consumers commit on a clock, records or not, so the ring's span is
   their cadence. kprio commits a partition only when a batch drained it; after a batch that caught up,
   the next commit waits for records. The span counts the intervals that began with records waiting
   (:func:`draining_span`); without any, ``recent_s`` (the cadence expected of a priority with records,
   ``verdict.stop_factor`` x ``verdict.expected_commit_s``) stands in.
2. **Commits always move.** kprio never commits an offset twice; a ring of one commit is no evidence of a
   stall nor a trend (Burrow's rules say STALL or WARN on it): STALL and WARN need two.
3. **A partition never committed** is its group's all the same (kprio drains every partition of a priority
   topic; Burrow shows only partitions its group committed): STOP once its backlog was seen waiting longer
   than ``recent_s``.
4. **A partition left behind** (no commit for longer than its span while its priority committed others) is
   STALL, where Burrow says STOP: a consumer's commit would have repeated its offset, Burrow's STALL.
5. **Holds.** kprio knows why it does not drain a partition. A hold that waits for a person (retries spent,
   offsets lost to retention, a change of the log kprio did not make) is ERR with the hold's words at once,
   where Burrow would say OK, then STOP. A hold kprio lifts by itself (a failed batch it retries) is judged
   by the rules like any partition, its words added to the reason.
6. **Held for a move back**: a group moved back that waits for ``kprio reset`` is REWIND (the hold's words
   in the reason), where Burrow, seeing no commit follow the move, says STOP.
7. **A committed offset ahead of the log end** is a log truncated or recreated: ERR, where Burrow reads OK.
8. **A priority** is one group; its verdict is its worst partition's state (:attr:`LagState.severity`),
   where Burrow's group says ERR for any of STOP, STALL, REWIND.

The worked example: commits every 20 s with records waiting, then none for 70 s (the span is 60 s):

>>> ring = tuple(Observation(t, 100 * t, 100 * t + 400, commit=True) for t in (0, 20, 40, 60))
>>> now = Observation(130, 6000, 7000)
>>> v = judge_partition(PartitionWindow("orders-2", 0, 2, (*ring, now)), now_s=130,
...                     policy=VerdictPolicy(expected_commit_s=10), others_commit_s=None)
>>> v.state.value, v.reason
('STOP', 'orders-2[0]: 1000 records waiting, no commit for 70 s (committed every 20 s over 60 s before); priority 2 committed nothing meanwhile')
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from kprio_core.model.priority import Priority
from kprio_core.model.records import HoldReason


class LagState(enum.Enum):
    """Burrow's states of a partition (and of a priority: its worst partition's). Compare by :attr:`severity`."""

    OK = "OK"
    WARN = "WARN"
    REWIND = "REWIND"
    STALL = "STALL"
    ERR = "ERR"
    STOP = "STOP"

    @property
    def severity(self) -> int:
        """0 (OK) .. 5 (STOP): which partition a priority's verdict names (difference 8). WARN drains; REWIND re-drains;
        STALL leaves a partition behind; ERR holds one for a person; STOP: no commits.

        >>> [s.value for s in sorted(LagState, key=lambda s: s.severity)]
        ['OK', 'WARN', 'REWIND', 'STALL', 'ERR', 'STOP']
        """
        return _SEVERITY.index(self)


_SEVERITY = (LagState.OK, LagState.WARN, LagState.REWIND, LagState.STALL, LagState.ERR, LagState.STOP)


@dataclass(frozen=True, slots=True)
class Observation:
    """One partition at ``at_s`` (epoch seconds): a look (a lag snapshot), or a commit sample of the ledger."""

    at_s: float
    committed: int | None
    """The group's committed offset (None: never committed; draining starts at the log start)."""
    end: int | None
    """Where a read ends (the last stable offset, else the high watermark); None: not seen."""
    log_start: int = 0
    held: str | None = None
    """Why kprio holds the partition, in a person's words; None: not held."""
    hold: HoldReason | None = None
    """The kind of that hold (None with ``held``: taken as one that waits for a person)."""
    commit: bool = False
    """A commit kprio made (a sample of Burrow's ring), not a look at the group."""
    oldest_pending_s: float | None = None
    """The timestamp of the oldest record waiting (a look that read it; None: not read, or none waits)."""

    @property
    def next_offset(self) -> int:
        """The first offset a drain reads, as :attr:`kprio_core.model.snapshot.PartitionLag.next_offset`."""
        return self.log_start if self.committed is None else max(self.committed, self.log_start)

    @property
    def lag(self) -> int | None:
        """Records waiting (never negative); None when the end was not seen.

        >>> Observation(0, None, 50, log_start=10).lag, Observation(0, 70, 50).lag, Observation(0, 7, None).lag
        (40, 0, None)
        """
        return None if self.end is None else max(0, self.end - self.next_offset)

    @property
    def ahead_of_log(self) -> bool:
        """The committed offset is beyond the log end: the log was truncated or recreated."""
        return self.committed is not None and self.end is not None and self.committed > self.end

    @property
    def waits_for_person(self) -> bool:
        return self.held is not None and (self.hold is None or self.hold.waits_for_person)


@dataclass(frozen=True, slots=True)
class PartitionWindow:
    """The observations of one priority partition (the evaluator sorts them by time)."""

    topic: str
    partition: int
    priority: Priority
    observations: tuple[Observation, ...]

    @property
    def name(self) -> str:
        return f"{self.topic}[{self.partition}]"

    def in_order(self) -> tuple[Observation, ...]:
        return tuple(sorted(self.observations, key=lambda o: o.at_s))


@dataclass(frozen=True, slots=True)
class VerdictPolicy:
    """The lag allowed, the ring's size, and the cadence expected of a priority with records waiting.

    >>> VerdictPolicy(expected_commit_s=20, stop_factor=3).recent_s
    60.0
    """

    expected_commit_s: float
    """How often a priority with records waiting commits when it keeps up (a tick plus a batch)."""
    stop_factor: float = 3.0
    """``recent_s`` is this many ``expected_commit_s``."""
    allowed_lag: int = 0
    """A backlog up to this many records counts as caught up (Burrow's ``allowed-lag``)."""
    intervals: int = 10
    """The commits of a partition the verdict looks at, the newest (Burrow's storage ``intervals``)."""

    def __post_init__(self) -> None:
        if not self.expected_commit_s > 0:
            raise ValueError(f"expected_commit_s must be > 0, got {self.expected_commit_s}")
        if not self.stop_factor >= 1:
            raise ValueError(f"stop_factor must be >= 1, got {self.stop_factor}")
        if self.allowed_lag < 0:
            raise ValueError(f"allowed_lag must be >= 0, got {self.allowed_lag}")
        if self.intervals < 2:
            raise ValueError(f"intervals must be >= 2, got {self.intervals}")

    @property
    def recent_s(self) -> float:
        """Burrow's "recent": younger records at a caught-up partition are not late; a never-draining ring's span."""
        return float(self.stop_factor * self.expected_commit_s)


@dataclass(frozen=True, slots=True)
class PartitionVerdict:
    """A partition's state, the one line that says why, and the numbers it was judged by."""

    topic: str
    partition: int
    priority: Priority
    state: LagState
    reason: str
    lag: int | None
    """The current backlog (None: no look saw the log end)."""
    committed: int | None
    end: int | None
    since_commit_s: float | None
    """Seconds since the ring's last commit (None: no commit in the window)."""
    span_s: float | None
    """How long commits may stop while records wait (the draining span, or ``recent_s``): set when stopped."""


@dataclass(frozen=True, slots=True)
class PriorityVerdict:
    """A priority's verdict: its worst partition's state and reason, and every partition's verdict."""

    priority: Priority
    state: LagState
    reason: str
    lag: int
    partitions: tuple[PartitionVerdict, ...]

    def worst(self) -> PartitionVerdict | None:
        """The partition that decided the priority's state (the largest backlog among the worst)."""
        return max(self.partitions, key=lambda v: (v.state.severity, v.lag or 0), default=None)


# ------------------------------------------------------------------------- Burrow's rules, on kprio's ring


def is_lag_always_not_zero(offsets: Sequence[Observation], allowed_lag: int) -> bool:
    """No commit of the ring caught up (a commit whose lag is unknown says nothing)."""
    return not any(o.lag is not None and o.lag <= allowed_lag for o in offsets)


def check_if_offsets_rewind(offsets: Sequence[Observation]) -> int:
    """The index of the first commit below the one before it; -1: none."""
    return next((i for i in range(1, len(offsets)) if _at(offsets[i]) < _at(offsets[i - 1])), -1)


def check_if_rewind_recovered(offsets: Sequence[Observation], rewind_index: int) -> bool:
    """A commit from the rewind on reached the offset committed before it."""
    before = _at(offsets[rewind_index - 1])
    return any(_at(o) >= before for o in offsets[rewind_index:])


def check_if_offsets_stalled(offsets: Sequence[Observation]) -> bool:
    """Every commit of the ring at the same offset (kprio: of two commits at least, difference 2)."""
    return len(offsets) >= 2 and all(_at(a) == _at(b) for a, b in pairwise(offsets))


def check_if_lag_not_decreasing(offsets: Sequence[Observation]) -> bool:
    """The lag at commits never fell (kprio: two known lags at least, difference 2).

    >>> check_if_lag_not_decreasing([Observation(0, 0, 100), Observation(9, 80, 250), Observation(19, 90, None)])
    True
    """
    lags = [o.lag for o in offsets if o.lag is not None]
    return len(lags) >= 2 and all(b >= a for a, b in pairwise(lags))


def check_if_recent_lag_zero(last_offset: int, broker_offsets: Iterable[int]) -> bool:
    """A recent end of the log at or below the last committed offset: caught up lately."""
    return any(b <= last_offset for b in broker_offsets)


def _at(o: Observation) -> int:
    return o.committed or 0  # the ring holds commits only: never None


# ------------------------------------------------------------------------- kprio's inputs and differences


def current(seen: Sequence[Observation]) -> Observation | None:
    """The newest look that saw the log end: the partition's present."""
    return next((o for o in reversed(seen) if o.end is not None and not o.commit), None)


def commits_of(seen: Sequence[Observation], intervals: int) -> tuple[Observation, ...]:
    """Burrow's ring: kprio's commits and each move of the group a look saw, the newest ``intervals``.

    >>> ring = commits_of((Observation(0, 5, 9), Observation(5, 7, 9, commit=True), Observation(9, 7, 9),
    ...                    Observation(12, 2, 9)), 10)
    >>> [(o.at_s, o.committed) for o in ring]
    [(5, 7), (12, 2)]
    """
    out: list[Observation] = []
    before: int | None = None
    for o in seen:
        if o.committed is None:
            continue
        if o.commit or (before is not None and o.committed != before):
            out.append(o)
        before = o.committed
    return tuple(out[-intervals:])


def draining_span(offsets: Sequence[Observation], allowed_lag: int) -> float:
    """Difference 1: the ring's span over the intervals that began with records waiting (an unknown lag counts).

    >>> draining_span([Observation(0, 0, 50), Observation(20, 50, 50), Observation(300, 60, 90),
    ...                Observation(320, 90, 95)], 0)
    40
    """
    return sum(b.at_s - a.at_s for a, b in pairwise(offsets) if a.lag is None or a.lag > allowed_lag)


def recent_log_ends(seen: Sequence[Observation], now: Observation, now_s: float, recent_s: float) -> tuple[int, ...]:
    """Burrow's recent broker offsets: log ends seen within ``recent_s``, and the group's offset (module docstring)."""
    ends = [o.end for o in seen if o.end is not None and o.at_s >= now_s - recent_s]
    if now.oldest_pending_s is not None and now.oldest_pending_s >= now_s - recent_s:
        ends.append(now.next_offset)
    return tuple(ends)


def backlog_seen_since(seen: Sequence[Observation], allowed_lag: int) -> float:
    """Difference 3: since when looks have seen records wait without a break (the present's time at least).

    >>> backlog_seen_since((Observation(0, 0, 5), Observation(10, 0, 0), Observation(20, 0, 9), Observation(30, 0, 9)), 0)
    20
    """
    since = seen[-1].at_s
    for o in reversed(seen):
        if o.lag is None:
            continue
        if o.lag <= allowed_lag:
            break
        since = o.at_s
    return since


@dataclass(frozen=True, slots=True)
class Stopped:
    """Commits stopped while records wait: since when, and how long the window allows."""

    since_s: float
    """The ring's last commit; without one, since when looks saw the records wait."""
    span_s: float
    cadence_s: float | None = None
    """The ring's mean interval while records waited (None: no such interval)."""
    committed: bool = True
    """False: no commit in the window (difference 3)."""


def stopped(seen: Sequence[Observation], offsets: Sequence[Observation], now: Observation, now_s: float,
            policy: VerdictPolicy) -> Stopped | None:
    """Burrow's STOP (``checkIfOffsetsStopped`` and not ``checkIfRecentLagZero``), with differences 1 and 3."""
    if check_if_recent_lag_zero(now.next_offset, recent_log_ends(seen, now, now_s, policy.recent_s)):
        return None
    if not offsets:
        since = backlog_seen_since(seen, policy.allowed_lag)
        return Stopped(since, policy.recent_s, committed=False) if now_s - since > policy.recent_s else None
    span = draining_span(offsets, policy.allowed_lag)
    steps = sum(1 for a, _ in pairwise(offsets) if a.lag is None or a.lag > policy.allowed_lag)
    found = Stopped(offsets[-1].at_s, span or policy.recent_s, span / steps if steps else None)
    return found if now_s - found.since_s > found.span_s else None


def rewound(offsets: Sequence[Observation]) -> tuple[Observation, Observation] | None:
    """Burrow's REWIND: (before, after) of the first move back that no later commit recovered from.

    >>> rewound((Observation(0, 500, 900), Observation(5, 100, 900), Observation(9, 300, 900)))[1].committed
    100
    >>> rewound((Observation(0, 500, 900), Observation(5, 100, 900), Observation(9, 600, 900))) is None
    True
    """
    index = check_if_offsets_rewind(offsets)
    if index > 0 and not check_if_rewind_recovered(offsets, index):
        return offsets[index - 1], offsets[index]
    return None


# ------------------------------------------------------------------------------------------- the verdicts


def judge_partition(window: PartitionWindow, *, now_s: float, policy: VerdictPolicy,
                    others_commit_s: float | None) -> PartitionVerdict:
    """The verdict of one partition: Burrow's rules in Burrow's order, with the differences numbered above;
    ``others_commit_s`` (its priority's last commit elsewhere, None: none in the window) tells STALL from STOP."""
    seen = window.in_order()
    offsets = commits_of(seen, policy.intervals)
    now = current(seen)
    verdict = functools.partial(_verdict, window, now, now_s - offsets[-1].at_s if offsets else None)
    if now is None:  # Burrow returns OK for a partition it cannot judge; so do we, saying so
        return verdict(LagState.OK, "not observed yet" if not seen else "log end not observed yet")
    if now.ahead_of_log:  # difference 7, before the gate: zero lag here is no partition caught up
        held = f"; {now.held}" if now.held else ""
        return verdict(LagState.ERR, f"committed offset {now.committed} is ahead of the log end {now.end} "
                                     f"(the log was truncated or recreated){held}")
    lag = now.lag or 0
    if lag <= policy.allowed_lag:  # Burrow's gate: currentLag > allowedLag, or OK whatever happened before
        return verdict(LagState.OK, "caught up" if not lag else f"{lag} records waiting (allowed)")
    back = rewound(offsets)
    if now.waits_for_person:  # differences 5 and 6: kprio knows no commit comes before a person acts
        if back is not None and now.hold is HoldReason.LOG_CHANGE:
            return verdict(LagState.REWIND, f"{_moved_back(back, now_s)}; {lag} records waiting, held: {now.held}")
        return verdict(LagState.ERR, f"{lag} records waiting, held: {now.held}")
    stop = stopped(seen, offsets, now, now_s, policy)  # Burrow's first rule: a stop outweighs a rewind
    if stop is not None:
        waited = f"{lag} records waiting, {_evidence(stop, now_s)}"
        if others_commit_s is not None and now_s - others_commit_s <= max(stop.span_s, policy.recent_s):
            return verdict(LagState.STALL, f"{waited} while priority {window.priority} committed other "
                                           f"partitions {now_s - others_commit_s:.0f} s ago", stop.span_s)
        return verdict(LagState.STOP, f"{waited}; priority {window.priority} committed nothing meanwhile",
                       stop.span_s)
    if back is not None:  # before STALL and WARN: the rewind explains a lag that grew
        return verdict(LagState.REWIND, f"{_moved_back(back, now_s)}; {lag} records waiting (drained again)")
    if is_lag_always_not_zero(offsets, policy.allowed_lag):
        if check_if_offsets_stalled(offsets):
            return verdict(LagState.STALL, f"{lag} records waiting, {len(offsets)} commits at offset "
                                           f"{offsets[-1].committed}")
        if check_if_lag_not_decreasing(offsets):
            lags = [o.lag for o in offsets if o.lag is not None]
            return verdict(LagState.WARN, f"the lag at commits did not fall in {offsets[-1].at_s - offsets[0].at_s:.0f} s "
                                          f"({lags[0]} then {lags[-1]} records: the drain does not gain on arrivals)")
    return verdict(LagState.OK, f"draining, {lag} records waiting")


def _verdict(window: PartitionWindow, now: Observation | None, since_commit_s: float | None, state: LagState,
             reason: str, span: float | None = None) -> PartitionVerdict:
    """A partition's verdict as it reads: its name, then the rule's reason (and a hold the rules judged)."""
    if now is not None and now.held and not now.waits_for_person and state is not LagState.ERR:
        reason = f"{reason}; held: {now.held}"  # a hold kprio lifts by itself: the rules judged it
    return PartitionVerdict(
        window.topic, window.partition, window.priority, state, f"{window.name}: {reason}",
        lag=None if now is None else now.lag, committed=None if now is None else now.committed,
        end=None if now is None else now.end, since_commit_s=since_commit_s, span_s=span)


def _moved_back(back: tuple[Observation, Observation], now_s: float) -> str:
    before, after = back
    return f"committed offset moved back from {before.committed} to {after.committed} {now_s - after.at_s:.0f} s ago"


def _evidence(stop: Stopped, now_s: float) -> str:
    """Why the records wait too long: since when, and what the window allows.

    >>> _evidence(Stopped(10, 60, 20), 100), _evidence(Stopped(10, 90), 100), _evidence(Stopped(5, 90, committed=False), 100)
    ('no commit for 90 s (committed every 20 s over 60 s before)', 'no commit for 90 s (expected within 90 s)', 'no commit in the window, waiting for 95 s (expected within 90 s)')
    """
    waited = now_s - stop.since_s
    if not stop.committed:
        return f"no commit in the window, waiting for {waited:.0f} s (expected within {stop.span_s:g} s)"
    if stop.cadence_s is None:
        return f"no commit for {waited:.0f} s (expected within {stop.span_s:g} s)"
    return f"no commit for {waited:.0f} s (committed every {stop.cadence_s:.0f} s over {stop.span_s:.0f} s before)"


def judge_priority(priority: Priority, windows: Iterable[PartitionWindow], *, now_s: float,
                   policy: VerdictPolicy) -> PriorityVerdict:
    """The verdict of one priority: each partition judged, the worst state (see severity) decides.

    >>> p = VerdictPolicy(expected_commit_s=60)
    >>> ok = PartitionWindow("o-1", 0, 1, (Observation(0, 10, 10), Observation(50, 10, 10)))
    >>> held = PartitionWindow("o-1", 1, 1, (Observation(0, 4, 9), Observation(50, 4, 9, held="by b-000007")))
    >>> v = judge_priority(1, [ok, held], now_s=50, policy=p)
    >>> v.state.value, v.lag, v.reason
    ('ERR', 5, 'o-1[1]: 5 records waiting, held: by b-000007')
    """
    windows = [w for w in windows if w.priority == priority]
    last = {w.name: max((o.at_s for o in w.observations if o.commit), default=None) for w in windows}

    def others(w: PartitionWindow) -> float | None:
        return max((t for name, t in last.items() if name != w.name and t is not None), default=None)

    verdicts = tuple(sorted((judge_partition(w, now_s=now_s, policy=policy, others_commit_s=others(w))
                             for w in windows), key=lambda v: (v.topic, v.partition)))
    lag = sum(v.lag or 0 for v in verdicts)
    result = PriorityVerdict(priority, LagState.OK, "no partitions", lag, verdicts)
    worst = result.worst()
    if worst is None:
        return result
    same = sum(1 for v in verdicts if v.state is worst.state) - 1
    more = f" (and {same} more partition{'s' if same > 1 else ''} {worst.state.value})" if same else ""
    if worst.state is LagState.OK:
        reason = f"{len(verdicts)} partition{'s' if len(verdicts) > 1 else ''} OK, {lag} records waiting"
    else:
        reason = worst.reason + more
    return PriorityVerdict(priority, worst.state, reason, lag, verdicts)


def judge(windows: Iterable[PartitionWindow], *, now_s: float,
          policy: VerdictPolicy | Mapping[Priority, VerdictPolicy]) -> tuple[PriorityVerdict, ...]:
    """Every priority's verdict, most urgent first; ``policy`` one for all, or one per priority."""
    windows = list(windows)
    priorities = sorted({w.priority for w in windows}, reverse=True)
    return tuple(judge_priority(p, windows, now_s=now_s,
                                policy=policy[p] if isinstance(policy, Mapping) else policy)
                 for p in priorities)
