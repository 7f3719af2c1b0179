"""Base quotas: how a batch's record budget is split over priority levels before any burst.

The exponential split is flipkart's ``ExpMaxPollRecordsDistributor`` to the record: level ``p`` of ``n`` gets
``floor(records * 2^p / (2^n - 1))``, the remainder to the most urgent level; the linear split weighs level ``p`` by
``p + 1``, same rounding. Python integers do not overflow: large budgets are exact where the Java original wraps.

>>> exponential_quotas(3, 50)
{2: 29, 1: 14, 0: 7}
>>> exponential_quotas(3, 10), exponential_quotas(3, 7)
({2: 7, 1: 2, 0: 1}, {2: 4, 1: 2, 0: 1})
>>> linear_quotas(3, 50)
{2: 26, 1: 16, 0: 8}
>>> exponential_quotas(3, 2)
Traceback (most recent call last):
...
kprio_core.errors.QuotaError: 2 records cannot be split exponentially over 3 priorities: need at least 2^3 - 1 = 7
"""

from __future__ import annotations

from enum import StrEnum

from kprio_core.errors import QuotaError
from kprio_core.model.priority import Priority, most_urgent_first, top_priority


class Distribution(StrEnum):
    """How a batch's record budget is split over priorities into base quotas (``planner.distribution``)."""

    EXP = "exp"
    """Each level twice the level below (flipkart's ``ExpMaxPollRecordsDistributor``, the default)."""
    LINEAR = "linear"
    """Level ``p`` weighs ``p + 1``."""


def _check_priorities(n_priorities: int) -> None:
    if n_priorities < 1:
        raise QuotaError(f"need at least one priority level, got {n_priorities}")


def _split(n_priorities: int, records: int, weight: dict[Priority, int]) -> dict[Priority, int]:
    """Each level gets ``floor(records * weight / total)``; the remainder goes to the top level."""
    total = sum(weight.values())
    quotas = {p: records * weight[p] // total for p in most_urgent_first(n_priorities)}
    quotas[top_priority(n_priorities)] += records - sum(quotas.values())
    return quotas


def exponential_quotas(n_priorities: int, records: int) -> dict[Priority, int]:
    """Split ``records`` so each level gets twice the one below (flipkart's; ``n_priorities`` is its ``maxPriority``).

    >>> exponential_quotas(4, 100)
    {3: 55, 2: 26, 1: 13, 0: 6}
    >>> exponential_quotas(1, 5)
    {0: 5}
    """
    _check_priorities(n_priorities)
    total = (1 << n_priorities) - 1
    if records < total:
        raise QuotaError(
            f"{records} records cannot be split exponentially over {n_priorities} priorities: "
            f"need at least 2^{n_priorities} - 1 = {total}"
        )
    return _split(n_priorities, records, {p: 1 << p for p in range(n_priorities)})


def linear_quotas(n_priorities: int, records: int) -> dict[Priority, int]:
    """Split ``records`` with weights 1, 2, ..., n (level p weighs p + 1); remainder to the top.

    >>> linear_quotas(3, 6), linear_quotas(4, 100)
    ({2: 3, 1: 2, 0: 1}, {3: 40, 2: 30, 1: 20, 0: 10})
    """
    _check_priorities(n_priorities)
    total = n_priorities * (n_priorities + 1) // 2
    if records < total:
        raise QuotaError(
            f"{records} records cannot be split linearly over {n_priorities} priorities: "
            f"need at least 1 + 2 + ... + {n_priorities} = {total}"
        )
    return _split(n_priorities, records, {p: p + 1 for p in range(n_priorities)})


def base_quotas(n_priorities: int, records: int, distribution: Distribution | str) -> dict[Priority, int]:
    """The base quota per priority under ``distribution`` (a member, or its value as written in kprio.yaml).

    >>> base_quotas(3, 50, Distribution.EXP), base_quotas(3, 50, "linear")
    ({2: 29, 1: 14, 0: 7}, {2: 26, 1: 16, 0: 8})
    """
    try:
        distribution = Distribution(distribution)
    except ValueError:
        raise QuotaError(
            f"unknown quota distribution {distribution!r}: use one of {', '.join(Distribution)}"
        ) from None
    split = exponential_quotas if distribution is Distribution.EXP else linear_quotas
    return split(n_priorities, records)
