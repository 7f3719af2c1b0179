"""Poll-history windows and the capacity-burst rule of flipkart's CapacityBurstPriorityKafkaConsumer.

Every batch appends, per priority, how many records were drained and the quota they were drained
under. Over the last ``window_size`` batches (default 6):

- a priority is *eligible to burst* when it maxed out (drained >= quota) in at least
  ``maxed_out_threshold`` batches (default 4);
- a priority's *unused capacity* is its quota minus the largest count in its window (never < 0);
- only the most urgent eligible priority may burst; it takes, on top of its quota, the unused
  capacity of every other priority. If that sum is 0 nobody bursts: lower eligible levels do not
  get a turn (flipkart stops at the first eligible level, "give way to higher priorities").

Flipkart's case 3 (budget 50 -> quotas 29/14/7): priority 1's window peaks at 10, so priority 2
bursts by 14 - 10 = 4.

>>> quotas = {2: 29, 1: 14, 0: 7}
>>> h = PollHistory.from_counts({2: [29] * 6, 1: [10, 10, 7, 10, 9, 0], 0: [7] * 6}, quotas)
>>> caps, decision = burst_capacities(quotas, h)
>>> caps
{2: 33, 1: 14, 0: 7}
>>> decision.priority, decision.extra
(2, 4)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from kprio_core.model.drain_plan import BurstDecision
from kprio_core.model.priority import Priority, most_urgent_first

DEFAULT_WINDOW_SIZE = 6
DEFAULT_MAXED_OUT_THRESHOLD = 4

Window = Sequence[tuple[int, int]]
"""One priority's window: ``(drained, quota)`` per batch, oldest first."""


# --- the rules, one small pure function each -------------------------------------------------


def maxed_out_count(window: Window) -> int:
    """Batches of the window in which the priority drained its whole quota (or more).

    >>> maxed_out_count([(14, 14), (14, 14), (11, 14), (20, 14)])
    3
    """
    return sum(1 for drained, quota in window if drained >= quota)


def eligible_to_burst(window: Window, threshold: int) -> bool:
    """True when the priority maxed out in at least ``threshold`` batches of its window.

    >>> eligible_to_burst([(29, 29)] * 4 + [(20, 29)] * 2, threshold=4)
    True
    >>> eligible_to_burst([(29, 29)] * 3 + [(20, 29)] * 3, threshold=4)
    False
    """
    return maxed_out_count(window) >= threshold


def unused_capacity(window: Window, quota: int) -> int:
    """Quota minus the largest count of the window, never negative (an empty window used nothing).

    >>> unused_capacity([(10, 14), (7, 14), (0, 14)], quota=14)
    4
    >>> unused_capacity([], quota=7), unused_capacity([(33, 29)], quota=29)
    (7, 0)
    """
    return max(0, quota - max((drained for drained, _ in window), default=0))


def first_eligible(windows: Mapping[Priority, Window], n_priorities: int, threshold: int) -> Priority | None:
    """The most urgent priority eligible to burst, or None.

    >>> first_eligible({2: [(1, 29)], 1: [(14, 14)], 0: [(7, 7)]}, 3, threshold=1)
    1
    """
    for p in most_urgent_first(n_priorities):
        if eligible_to_burst(windows.get(p, ()), threshold):
            return p
    return None


# --- the history ----------------------------------------------------------------------------


@dataclass
class PollHistory:
    """Per-priority windows of ``(drained, quota)`` for the last ``window_size`` batches."""

    n_priorities: int
    window_size: int = DEFAULT_WINDOW_SIZE
    maxed_out_threshold: int = DEFAULT_MAXED_OUT_THRESHOLD
    windows: dict[Priority, deque[tuple[int, int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.n_priorities < 1:
            raise ValueError(f"poll history needs at least one priority, got {self.n_priorities}")
        if self.window_size < 1:
            raise ValueError(f"poll history window size must be >= 1, got {self.window_size}")
        if not 1 <= self.maxed_out_threshold <= self.window_size:
            raise ValueError(
                f"maxed-out threshold must be within 1..window size {self.window_size}, "
                f"got {self.maxed_out_threshold}"
            )
        given = self.windows
        self.windows = {
            p: deque((tuple(e) for e in given.get(p, ())), maxlen=self.window_size)  # type: ignore[misc]
            for p in range(self.n_priorities)
        }

    def record(self, drained: Mapping[Priority, int], quotas: Mapping[Priority, int]) -> None:
        """Append one batch: records drained per priority (missing = 0) and the base quota it had.

        >>> h = PollHistory(2, window_size=2, maxed_out_threshold=1)
        >>> for n in (5, 1, 2):
        ...     h.record({1: n}, {1: 2, 0: 1})
        >>> list(h.windows[1]), list(h.windows[0])
        ([(1, 2), (2, 2)], [(0, 1), (0, 1)])
        """
        for p in range(self.n_priorities):
            if p not in quotas:
                raise ValueError(f"poll history: no quota given for priority {p}")
            self.windows[p].append((int(drained.get(p, 0)), int(quotas[p])))

    def counts(self, priority: Priority) -> list[int]:
        """Drained counts of one priority, oldest first."""
        return [drained for drained, _ in self.windows[priority]]

    @classmethod
    def from_counts(
        cls,
        counts: Mapping[Priority, Iterable[int]],
        quotas: Mapping[Priority, int],
        window_size: int = DEFAULT_WINDOW_SIZE,
        maxed_out_threshold: int = DEFAULT_MAXED_OUT_THRESHOLD,
    ) -> PollHistory:
        """A history from plain drained counts (oldest first), each batch under ``quotas``.

        >>> PollHistory.from_counts({1: [3, 4]}, {1: 4, 0: 1}).counts(1)
        [3, 4]
        """
        n = len(quotas)
        unknown = set(counts) - set(range(n))
        if unknown:
            raise ValueError(f"poll history names priorities {sorted(unknown)} outside 0..{n - 1}")
        windows = {p: [(int(c), int(quotas[p])) for c in counts.get(p, ())] for p in range(n)}
        return cls(n, window_size, maxed_out_threshold, windows)  # type: ignore[arg-type]


# --- the decision -----------------------------------------------------------------------------


def burst_capacities(
    quotas: Mapping[Priority, int], history: PollHistory
) -> tuple[dict[Priority, int], BurstDecision]:
    """Capacity per priority for the next batch under the window rule, and who burst and why.

    Flipkart's case 4: priority 2 never maxed out ([20, 25, 25, 20, 15, 10] under 29), neither did
    priority 1, so priority 0 (always full) bursts by (29 - 25) + (14 - 10) = 8, to 15.

    >>> quotas = {2: 29, 1: 14, 0: 7}
    >>> h = PollHistory.from_counts(
    ...     {2: [20, 25, 25, 20, 15, 10], 1: [10, 10, 7, 10, 9, 0], 0: [7] * 6}, quotas)
    >>> burst_capacities(quotas, h)[0]
    {2: 29, 1: 14, 0: 15}
    """
    n = history.n_priorities
    caps = {p: int(quotas[p]) for p in most_urgent_first(n)}
    windows = history.windows
    size, threshold = history.window_size, history.maxed_out_threshold

    # Order (as flipkart's poll()): find the most urgent eligible level first, then price its
    # burst. Looking no further once one is eligible is what makes lower levels give way.
    burster = first_eligible(windows, n, threshold)
    if burster is None:
        return caps, BurstDecision(
            None, 0, f"no priority maxed out its quota in >= {threshold} of the last {size} batches"
        )
    donors = {p: unused_capacity(windows[p], caps[p]) for p in most_urgent_first(n) if p != burster}
    extra = sum(donors.values())
    maxed = maxed_out_count(windows[burster])
    donor_text = ", ".join(f"{p}: {u}" for p, u in donors.items()) or "none"
    if extra == 0:
        return caps, BurstDecision(
            None,
            0,
            f"priority {burster} maxed out in {maxed} of the last {size} batches but no other "
            f"priority left capacity unused ({donor_text})",
        )
    caps[burster] += extra
    return caps, BurstDecision(
        burster,
        extra,
        f"priority {burster} maxed out in {maxed} of the last {size} batches (threshold "
        f"{threshold}) and takes the unused capacity of the others ({donor_text}): "
        f"{quotas[burster]} + {extra} = {caps[burster]}",
    )
