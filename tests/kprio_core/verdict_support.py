"""Helpers of the verdict's tests: commit samples and looks, windows, Burrow's inputs from a window, drawn traces.

:func:`burrow_inputs` is what "the same window" means for Burrow (its ring, its broker offsets, its current lag);
:func:`difference` names the difference of ``kprio_core/verdict.py``'s docstring that applies to a window.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from hypothesis import strategies as st

from kprio_core.verdict import (
    HoldReason,
    Observation,
    PartitionWindow,
    VerdictPolicy,
    commits_of,
    current,
    draining_span,
    rewound,
)
from tests.kprio_core import burrow_reference as burrow

L = Observation  # a look: a lag snapshot


def C(at_s: float, committed: int, end: int | None) -> Observation:  # noqa: N802 (reads like the type)
    """A commit sample of the ledger: the offset a commit left, and the log end seen right after it."""
    return Observation(at_s, committed, end, commit=True)


def window(*seen: Observation, partition: int = 0, priority: int = 2) -> PartitionWindow:
    return PartitionWindow(f"orders-{priority}", partition, priority, tuple(seen))



def burrow_inputs(w: PartitionWindow, now_s: float, policy: VerdictPolicy
                  ) -> tuple[list[burrow.ConsumerOffset], list[int], int] | None:
    """Burrow's inputs from the same window: its ring is kprio's commits (the ledger's samples and the moves
    looks saw), its broker offsets the log ends seen within ``recent_s`` (and, when the oldest waiting record
    arrived within it, the group's offset: the log ended there just before), its current lag the present's."""
    seen = w.in_order()
    now = current(seen)
    if now is None:
        return None
    ring = [burrow.ConsumerOffset(o.committed, o.at_s * 1000, o.lag) for o in commits_of(seen, policy.intervals)]
    recent = [o.end for o in seen if o.end is not None and o.at_s >= now_s - policy.recent_s]
    if now.oldest_pending_s is not None and now.oldest_pending_s >= now_s - policy.recent_s:
        recent.append(now.next_offset)
    return ring, recent, now.lag or 0


def burrow_on(w: PartitionWindow, now_s: float, policy: VerdictPolicy) -> str:
    """Burrow's partition status on the same window (:func:`burrow_inputs`)."""
    found = burrow_inputs(w, now_s, policy)
    if found is None:
        return burrow.OK
    ring, recent, lag = found
    return burrow.evaluate_partition_status(ring, recent, lag, now_s, policy.allowed_lag)


def burrow_without_the_waits(w: PartitionWindow, now_s: float, policy: VerdictPolicy) -> str:
    """Difference 1 as a change of Burrow's input: each interval of the ring that began caught up takes no time
    (the commits before it move later by its length); when no time is left, ``recent_s`` stands in for the span
    (Burrow's clock is set back by it)."""
    ring, recent, lag = burrow_inputs(w, now_s, policy)
    shift, squeezed = 0.0, [ring[-1]]
    for a, b in reversed(list(pairwise(ring))):
        if a.lag is not None and a.lag <= policy.allowed_lag:
            shift += b.timestamp - a.timestamp
        squeezed.insert(0, replace(a, timestamp=a.timestamp + shift))
    clock = now_s - policy.recent_s if squeezed[-1].timestamp == squeezed[0].timestamp else now_s
    return burrow.evaluate_partition_status(squeezed, recent, lag, clock, policy.allowed_lag)


@st.composite
def traces(draw, *, holds: bool = False, rewinds: bool = True) -> tuple[PartitionWindow, VerdictPolicy]:
    """A partition's life: records arrive, commits (with or without their log end), looks, moves back, then now."""
    policy = VerdictPolicy(expected_commit_s=draw(st.sampled_from([1, 5, 20])), stop_factor=draw(st.sampled_from([1, 3])),
                           allowed_lag=draw(st.sampled_from([0, 0, 5])), intervals=draw(st.integers(2, 6)))
    t, group, end, seen = 0.0, draw(st.integers(0, 50)), 0, []
    end = group + draw(st.integers(0, 50))
    oldest: float | None = None
    for _ in range(draw(st.integers(0, 12))):
        t += draw(st.sampled_from([1, 5, 10, 20, 30, 100]))
        kind = draw(st.sampled_from(["arrive", "commit", "commit", "look", *(["rewind"] if rewinds else [])]))
        if kind == "arrive":
            n = draw(st.integers(1, 100))
            oldest = t if end <= group else oldest
            end += n
        elif kind == "commit":
            group = min(end, group + draw(st.integers(0, 200)))
            oldest = None if group >= end else oldest
            seen.append(C(t, group, end if draw(st.booleans()) or not seen else None))
        elif kind == "look":
            seen.append(L(t, group, end))
        else:
            group = max(0, group - draw(st.integers(1, 100)))
            oldest = None
    now_s = t + draw(st.sampled_from([0, 1, 5, 30, 100, 1000]))
    held = draw(st.sampled_from([None, *HoldReason])) if holds else None
    seen.append(L(now_s, group, end, held=None if held is None else f"held ({held.value})", hold=held,
                  oldest_pending_s=oldest if draw(st.booleans()) else None))
    return window(*seen), policy


def differences(w: PartitionWindow, now_s: float, policy: VerdictPolicy) -> frozenset[int]:
    """The differences of the module docstring that apply to a window; empty: Burrow's rules alone.

    7, 6, 5 and 3 decide the verdict alone; 1 (commits in steps: an interval of the ring began caught up, or none
    began with records waiting) and 2 (fewer than two commits or two known lags) may apply together.
    """
    seen = w.in_order()
    now = current(seen)
    ring = commits_of(seen, policy.intervals)
    if now is None or (now.lag or 0) <= policy.allowed_lag and not now.ahead_of_log:
        return frozenset()
    if now.ahead_of_log:
        return frozenset({7})
    if now.waits_for_person:
        return frozenset({6 if now.hold is HoldReason.LOG_CHANGE and rewound(ring) is not None else 5})
    if not ring:
        return frozenset({3})
    span = draining_span(ring, policy.allowed_lag)
    found = set()
    if span == 0 or span != ring[-1].at_s - ring[0].at_s:
        found.add(1)
    if len(ring) < 2 or sum(o.lag is not None for o in ring) < 2:
        found.add(2)
    return frozenset(found)
