"""Base quotas: flipkart's exponential split to the record, and the linear split."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kprio_core.errors import QuotaError
from kprio_core.quota import base_quotas, exponential_quotas, linear_quotas

EXP_CASES = [
    # (case, n, records, expected, why)
    (1, 3, 50, {2: 29, 1: 14, 0: 7}, "flipkart's javadoc: 28/14/7 by floor, remainder 1 to the top"),
    (2, 3, 10, {2: 7, 1: 2, 0: 1}, "flipkart's javadoc: 5/2/1 by floor, remainder 2 to the top"),
    (3, 3, 7, {2: 4, 1: 2, 0: 1}, "flipkart's javadoc: the smallest budget 2^3 - 1 splits exactly"),
    (4, 1, 9, {0: 9}, "a single priority takes everything"),
    (5, 2, 3, {1: 2, 0: 1}, "two levels weigh 2:1"),
    (6, 4, 100, {3: 55, 2: 26, 1: 13, 0: 6}, "53/26/13/6 by floor, remainder 2 to the top"),
    (7, 3, 50_000, {2: 28_573, 1: 14_285, 0: 7_142}, "a production-size budget: 28571/14285/7142, remainder 2 to the top"),
]


@pytest.mark.parametrize(("case", "n", "records", "expected", "why"), EXP_CASES, ids=[f"exp-{c[0]}" for c in EXP_CASES])
def test_exponential_quotas(case: int, n: int, records: int, expected: dict[int, int], why: str) -> None:
    assert exponential_quotas(n, records) == expected, why
    assert list(exponential_quotas(n, records)) == sorted(expected, reverse=True), "most urgent first"


LINEAR_CASES = [
    (1, 3, 50, {2: 26, 1: 16, 0: 8}, "weights 3:2:1: 25/16/8 by floor, remainder 1 to the top"),
    (2, 3, 6, {2: 3, 1: 2, 0: 1}, "the smallest budget 1 + 2 + 3 splits exactly"),
    (3, 4, 100, {3: 40, 2: 30, 1: 20, 0: 10}, "weights 4:3:2:1 divide 100 exactly"),
    (4, 1, 5, {0: 5}, "a single priority takes everything"),
]


@pytest.mark.parametrize(("case", "n", "records", "expected", "why"), LINEAR_CASES, ids=[f"lin-{c[0]}" for c in LINEAR_CASES])
def test_linear_quotas(case: int, n: int, records: int, expected: dict[int, int], why: str) -> None:
    assert linear_quotas(n, records) == expected, why


ERROR_CASES = [
    (1, "exp", 3, 2, "at least 2^3 - 1 = 7", "flipkart's javadoc: 2 records over 3 priorities is an error"),
    (2, "exp", 3, 6, "at least 2^3 - 1 = 7", "one short of the minimum"),
    (3, "linear", 3, 5, "1 + 2 + ... + 3 = 6", "linear needs one record per weight step"),
    (4, "exp", 0, 10, "at least one priority", "no priority levels"),
    (5, "poisson", 3, 50, "unknown quota distribution", "only exp and linear exist"),
]


@pytest.mark.parametrize(("case", "dist", "n", "records", "message", "why"), ERROR_CASES, ids=[f"err-{c[0]}" for c in ERROR_CASES])
def test_quota_errors(case: int, dist: str, n: int, records: int, message: str, why: str) -> None:
    with pytest.raises(QuotaError, match=message.replace("^", r"\^").replace("+", r"\+").replace(".", r"\.")) as err:
        base_quotas(n, records, dist)  # type: ignore[arg-type]
    assert err.value.code == "quota_invalid", why


@given(n=st.integers(1, 12), extra=st.integers(0, 10**7), dist=st.sampled_from(["exp", "linear"]))
def test_quotas_sum_to_budget_and_grow_with_urgency(n: int, extra: int, dist: str) -> None:
    minimum = (1 << n) - 1 if dist == "exp" else n * (n + 1) // 2
    records = minimum + extra
    quotas = base_quotas(n, records, dist)  # type: ignore[arg-type]
    assert sum(quotas.values()) == records
    assert set(quotas) == set(range(n))
    assert all(q >= 1 for q in quotas.values()), "every level gets at least one record"
    assert all(quotas[p + 1] >= quotas[p] for p in range(n - 1)), "a more urgent level never gets less"


@given(n=st.integers(1, 12), extra=st.integers(0, 10**7))
def test_exponential_is_flipkart_formula(n: int, extra: int) -> None:
    records = (1 << n) - 1 + extra
    quotas = exponential_quotas(n, records)
    total = (1 << n) - 1
    for p in range(n - 1):
        assert quotas[p] == records * (1 << p) // total
    assert quotas[n - 1] == records - sum(records * (1 << p) // total for p in range(n - 1))
