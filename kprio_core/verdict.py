"""The lag verdict: whether each priority partition keeps up, from a window of observations (Burrow, for batches).

LinkedIn's Burrow (``core/internal/evaluator/caching.go``) judges a consumer group from a window of its
commits: OK, WARN (lag growing), STALL (commits without progress), STOP (no commits lately), REWIND (the
offset moved back), and ERR for the group when a partition is in one of the last three. kprio drains in
batches on a schedule, so the rules are adapted; each is one small function below, applied in the order of
:func:`judge_partition`.

The input is a window of :class:`Observation` per partition, oldest first: when it was seen, the group's
committed offset, where the readable log ends (the last stable offset, else the high watermark), the log
start, and why kprio holds the partition if it does. A lag snapshot is an observation; a commit the ledger
recorded is one too, with ``end`` None (its lag unknown, as Burrow's commits without a broker offset). The
newest observation with an ``end`` is the partition's present: the caller takes a snapshot when it asks.

How each of Burrow's rules maps to kprio, in the order they are applied:

1. **Zero lag is OK, whatever happened before** (Burrow: ``currentLag > allowedLag`` gates every rule). A
   partition whose current backlog is at most ``allowed_lag`` is OK. Except a committed offset *ahead* of
   the log end: that is not a partition caught up but a log truncated or recreated under kprio, which
   kprio holds for a person: ERR.
2. **A held partition is ERR.** Burrow's ERR is the group's word for "some partition is broken"; kprio
   knows why it does not drain a partition (a failed batch holds it, offsets were lost to retention, a
   change of the log waits for a person), so a held partition with backlog is ERR with the hold's words.
   A reset back outside kprio that kprio holds is ERR too: the hold already names the reset, and a
   person must act.
3. **STOP and STALL: backlog without a commit for longer than the expected cadence.** Burrow's STOP is
   "the time since the last commit exceeds the window's span", and STALL "commits that do not move". kprio
   commits a partition only when a batch drains it, so no commit is not itself a fault; a partition is
   *stuck* when it has had backlog and no commit for more than ``stop_factor`` times the expected commit
   cadence (``expected_commit_s``: how often a priority with backlog commits when it keeps up, e.g. a tick
   plus a batch's target time), counted from the later of its last commit and the moment its backlog
   began (Burrow's "recent lag zero": records that just arrived at a caught-up partition are not late).
   A stuck partition is STALL when its priority committed some other partition within that time (the
   drain runs and leaves this partition behind: Burrow's commits without progress, seen at the group),
   and STOP when the priority committed nothing (the drain of this priority stopped).
4. **REWIND: the committed offset moved back and has not come back.** As Burrow: the first decrease in
   the window, and not recovered while no later commit reaches the offset before it. kprio never commits
   backwards, so a rewind is a person's reset or another committer; it lasts while the records are
   drained again.
5. **WARN: the backlog grows while it drains.** Burrow warns when the lag never decreased over the
   window. A batch drainer's lag falls at each commit and climbs between them, so kprio compares the
   window's ends instead: the backlog never came down to ``allowed_lag`` in the window, and the newest
   backlog exceeds the oldest (arrivals outpace the drain).
6. Otherwise OK.

Burrow's minimum completeness becomes the span of the window: a partition observed for less than the stuck
limit cannot be STOP (it has not waited that long as far as anyone knows).

**Severity** (a priority's verdict is its worst partition's, Burrow's group rule):
``OK < WARN < REWIND < STALL < ERR < STOP``. WARN still drains; a REWIND drains again what it drained
before; a STALL leaves one partition behind while the priority drains; an ERR partition waits for a cause
to pass or a person, by kprio's own decision, and only that partition (isolation); STOP means the
priority commits nothing at all, every partition with backlog waits. The order of the rules above differs
on purpose: a partition gets the most specific explanation (its hold), a priority the widest harm.

Worked example: a partition with 400 records of backlog, last committed at t=0, expected cadence 60 s
(stuck after 180 s); another partition of the priority committed at t=190:

>>> policy = VerdictPolicy(expected_commit_s=60)
>>> seen = (Observation(0, 100, 500), Observation(100, 100, 500), Observation(200, 100, 500))
>>> v = judge_partition(PartitionWindow("orders-2", 0, 2, seen), now_s=200, policy=policy, priority_commit_s=190)
>>> v.state.value, v.reason
('STALL', 'orders-2[0]: 400 records waiting, no commit for 200 s (expected every 60 s) while priority 2 committed other partitions 10 s ago')
>>> judge_partition(PartitionWindow("orders-2", 0, 2, seen), now_s=200, policy=policy, priority_commit_s=None).state.value
'STOP'
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from kprio_core.model.priority import Priority


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
        """0 (OK) .. 5 (STOP), see the module docstring for why this order.

        >>> [s.value for s in sorted(LagState, key=lambda s: s.severity)]
        ['OK', 'WARN', 'REWIND', 'STALL', 'ERR', 'STOP']
        """
        return _SEVERITY.index(self)


_SEVERITY = (LagState.OK, LagState.WARN, LagState.REWIND, LagState.STALL, LagState.ERR, LagState.STOP)


@dataclass(frozen=True, slots=True)
class Observation:
    """One partition as seen at ``at_s`` (epoch seconds): a lag snapshot, or a commit the ledger recorded."""

    at_s: float
    committed: int | None
    """The group's committed offset (None: never committed; draining starts at the log start)."""
    end: int | None
    """Where a read ends (the last stable offset, else the high watermark); None: not seen (a ledger commit)."""
    log_start: int = 0
    held: str | None = None
    """Why kprio holds the partition (a failed batch, lost offsets, a change of the log); None: not held."""

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


@dataclass(frozen=True, slots=True)
class PartitionWindow:
    """The observations of one priority partition, oldest first (the evaluator sorts them by time)."""

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
    """What keeping up means for a priority: its commit cadence, how many cadences make it stuck, the lag allowed.

    >>> VerdictPolicy(expected_commit_s=20, stop_factor=3).stuck_after_s
    60.0
    """

    expected_commit_s: float
    """How often a priority with backlog commits when it keeps up (a tick plus a batch's target time)."""
    stop_factor: float = 3.0
    """Backlog without a commit for this many cadences is stuck (STALL or STOP)."""
    allowed_lag: int = 0
    """A backlog up to this many records counts as caught up (Burrow's ``allowed_lag``)."""

    def __post_init__(self) -> None:
        if not self.expected_commit_s > 0:
            raise ValueError(f"expected_commit_s must be > 0, got {self.expected_commit_s}")
        if not self.stop_factor >= 1:
            raise ValueError(f"stop_factor must be >= 1, got {self.stop_factor}")
        if self.allowed_lag < 0:
            raise ValueError(f"allowed_lag must be >= 0, got {self.allowed_lag}")

    @property
    def stuck_after_s(self) -> float:
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
    """The current backlog (None: no observation saw the log end)."""
    committed: int | None
    end: int | None
    since_commit_s: float | None
    """Seconds since the committed offset last moved forward in the window (None: it did not)."""
    stuck_s: float | None
    """Seconds the partition has had backlog without a commit (None: no backlog)."""
    window_s: float
    """The span of the window of observations."""


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


# ------------------------------------------------------------------------------------------- the rules


def current(seen: Sequence[Observation]) -> Observation | None:
    """The newest observation that saw the log end: the partition's present."""
    return next((o for o in reversed(seen) if o.end is not None), None)


def caught_up(now: Observation, allowed_lag: int) -> bool:
    """Rule 1: nothing (or no more than allowed) waits, and the committed offset is not ahead of the log."""
    return not now.ahead_of_log and (now.lag or 0) <= allowed_lag


def commit_times(seen: Sequence[Observation]) -> tuple[float, ...]:
    """When the committed offset moved forward (a first commit counts), in the order seen.

    >>> commit_times((Observation(0, None, 9), Observation(5, 3, 9), Observation(9, 3, 9), Observation(12, 1, 9)))
    (5,)
    """
    out = []
    for before, after in pairwise(seen):
        if after.committed is not None and (before.committed is None or after.committed > before.committed):
            out.append(after.at_s)
    return tuple(out)


def backlog_since(seen: Sequence[Observation], allowed_lag: int) -> float:
    """Since when the partition has had backlog: the first observation after the last one caught up.

    The window's start when it never caught up in the window (it waited at least that long).

    >>> backlog_since((Observation(0, 0, 5), Observation(10, 5, 5), Observation(20, 5, 9)), 0)
    20
    """
    since = seen[0].at_s
    for before, after in pairwise(seen):
        if before.lag is not None and before.lag <= allowed_lag:
            since = after.at_s
    return since


def stuck_for(seen: Sequence[Observation], now_s: float, allowed_lag: int) -> float:
    """Rule 3's measure: seconds with backlog and no commit, since the later of the last commit and the backlog's start."""
    commits = commit_times(seen)
    last_commit = commits[-1] if commits else seen[0].at_s
    return max(0.0, now_s - max(last_commit, backlog_since(seen, allowed_lag)))


def rewound(seen: Sequence[Observation]) -> tuple[Observation, Observation] | None:
    """Rule 4: the first move back of the committed offset that no later observation came back from.

    Returns (before, after) of the move. As Burrow's ``checkIfOffsetsRewind`` and ``checkIfRewindRecovered``.

    >>> rewound((Observation(0, 500, 900), Observation(5, 100, 900), Observation(9, 300, 900)))[1].committed
    100
    >>> rewound((Observation(0, 500, 900), Observation(5, 100, 900), Observation(9, 600, 900))) is None
    True
    """
    offsets = [o for o in seen if o.committed is not None]
    for i in range(1, len(offsets)):
        before, after = offsets[i - 1], offsets[i]
        assert before.committed is not None and after.committed is not None
        if after.committed < before.committed:
            if any((o.committed or 0) >= before.committed for o in offsets[i:]):
                return None
            return before, after
    return None


def growing(seen: Sequence[Observation], allowed_lag: int) -> tuple[int, int] | None:
    """Rule 5: (oldest, newest) backlog when it never came down to ``allowed_lag`` in the window and grew.

    >>> growing((Observation(0, 0, 100), Observation(5, 80, 150), Observation(9, 120, 260)), 0)
    (100, 140)
    >>> growing((Observation(0, 0, 100), Observation(5, 100, 100), Observation(9, 100, 260)), 0) is None
    True
    """
    lags = [o.lag for o in seen if o.lag is not None]
    if len(lags) < 2 or min(lags) <= allowed_lag or lags[-1] <= lags[0]:
        return None
    return lags[0], lags[-1]


# ------------------------------------------------------------------------------------------- the verdicts


def judge_partition(window: PartitionWindow, *, now_s: float, policy: VerdictPolicy,
                    priority_commit_s: float | None) -> PartitionVerdict:
    """The verdict of one partition: the rules of the module docstring, in that order (the first that holds).

    ``priority_commit_s``: when the partition's priority last committed any partition (None: not in the
    window); it tells a STALL from a STOP.
    """
    seen = window.in_order()
    name = window.name

    def verdict(state: LagState, reason: str, now: Observation | None = None, stuck: float | None = None
                ) -> PartitionVerdict:
        commits = commit_times(seen)
        return PartitionVerdict(
            window.topic, window.partition, window.priority, state, f"{name}: {reason}",
            lag=None if now is None else now.lag, committed=None if now is None else now.committed,
            end=None if now is None else now.end,
            since_commit_s=now_s - commits[-1] if commits else None, stuck_s=stuck,
            window_s=(seen[-1].at_s - seen[0].at_s) if seen else 0.0)

    now = current(seen)
    if now is None:  # Burrow returns OK for a partition it cannot judge; so do we, saying so
        return verdict(LagState.OK, "not observed yet" if not seen else "log end not observed yet")
    if now.ahead_of_log:
        held = f"; {now.held}" if now.held else ""
        return verdict(LagState.ERR, f"committed offset {now.committed} is ahead of the log end {now.end} "
                                     f"(the log was truncated or recreated){held}", now)
    if caught_up(now, policy.allowed_lag):
        return verdict(LagState.OK, "caught up" if not now.lag else f"{now.lag} records waiting (allowed)", now)
    lag = now.lag or 0
    stuck = stuck_for(seen, now_s, policy.allowed_lag)
    if now.held:
        return verdict(LagState.ERR, f"{lag} records waiting, held: {now.held}", now, stuck)
    if stuck > policy.stuck_after_s:
        waited = (f"{lag} records waiting, no commit for {stuck:.0f} s "
                  f"(expected every {policy.expected_commit_s:g} s)")
        if priority_commit_s is not None and now_s - priority_commit_s <= policy.stuck_after_s:
            return verdict(LagState.STALL, f"{waited} while priority {window.priority} committed other "
                                           f"partitions {now_s - priority_commit_s:.0f} s ago", now, stuck)
        return verdict(LagState.STOP, f"{waited}; priority {window.priority} committed nothing meanwhile",
                       now, stuck)
    back = rewound(seen)
    if back is not None:
        before, after = back
        return verdict(LagState.REWIND, f"committed offset moved back from {before.committed} to "
                                        f"{after.committed} {now_s - after.at_s:.0f} s ago; {lag} records "
                                        "waiting (drained again)", now, stuck)
    grew = growing(seen, policy.allowed_lag)
    if grew is not None:
        span = seen[-1].at_s - seen[0].at_s
        return verdict(LagState.WARN, f"backlog grew from {grew[0]} to {grew[1]} records in {span:.0f} s "
                                      "while draining (arrivals outpace the drain)", now, stuck)
    return verdict(LagState.OK, f"draining, {lag} records waiting", now, stuck)


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
    commits = [t for w in windows for t in commit_times(w.in_order())]
    last = max(commits, default=None)
    verdicts = tuple(sorted((judge_partition(w, now_s=now_s, policy=policy, priority_commit_s=last)
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
