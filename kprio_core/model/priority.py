"""Priority levels: integers 0..N-1, a higher number is more urgent (as in flipkart's client).

This is the one place that says so; everything else iterates with :func:`most_urgent_first`.

>>> list(most_urgent_first(3))
[2, 1, 0]
>>> top_priority(3)
2
"""

from __future__ import annotations

from collections.abc import Iterator

Priority = int
"""A priority level. 0 is the least urgent; ``n_priorities - 1`` the most."""


def most_urgent_first(n_priorities: int) -> Iterator[Priority]:
    """Priorities from the most urgent (``n - 1``) down to 0."""
    if n_priorities < 1:
        raise ValueError(f"need at least one priority, got {n_priorities}")
    return iter(range(n_priorities - 1, -1, -1))


def top_priority(n_priorities: int) -> Priority:
    """The most urgent priority of ``n_priorities`` levels."""
    return next(most_urgent_first(n_priorities))
