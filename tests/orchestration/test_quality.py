"""The GX suite on small Spark DataFrames: each check passes on a clean batch and catches its own fault."""

from __future__ import annotations

import pytest

from kprio_core.offsets import OffsetRange
from orchestration.quality import CHECK_NAMES, validate_batch

pytestmark = pytest.mark.spark

SCHEMA = "topic string, partition int, offset long, name string, error string"
PLAN = (OffsetRange("t-2", 0, 0, 5), OffsetRange("t-2", 1, 10, 13), OffsetRange("t-1", 0, 7, 7))
CLEAN = [("t-2", 0, o, "x", None) for o in range(5)] + [("t-2", 1, o, "y", None) for o in range(10, 13)]


def verdicts(spark, rows, **kwargs):
    outcomes = validate_batch(spark.createDataFrame(rows, SCHEMA), PLAN, required_fields=["name"], **kwargs)
    assert [o.name for o in outcomes] == list(CHECK_NAMES)
    return {o.name: o for o in outcomes}


def failed(outcomes) -> set[str]:
    return {name for name, o in outcomes.items() if not o.passed}


def test_clean_batch_passes_every_check(spark):
    out = verdicts(spark, CLEAN)
    assert failed(out) == set()
    assert out["row_count_matches_plan"].metadata == {"expected_rows": 8, "observed_rows": 8}
    assert out["values_match_schema"].metadata["invalid_records"] == 0


@pytest.mark.parametrize(
    ("case", "rows", "expected_failures"),
    [
        # why: one record missing in the middle is a hole and a short count
        ("hole", CLEAN[:2] + CLEAN[3:], {"row_count_matches_plan", "offsets_are_contiguous"}),
        # why: a missing tail has no row after it, only the per-range summary sees it
        ("short tail", CLEAN[:4] + CLEAN[5:], {"row_count_matches_plan", "offsets_are_contiguous"}),
        # why: a duplicate is one row too many and a step of 0
        ("duplicate", CLEAN + [CLEAN[0]], {"row_count_matches_plan", "offsets_are_unique", "offsets_are_contiguous"}),
        # why: a record of another partition is outside every planned range
        ("outside", CLEAN + [("t-2", 3, 0, "z", None)], {"row_count_matches_plan", "offsets_within_plan"}),
        # why: a null required field, and a decode error, are counted but keep the row
        ("null field", CLEAN[:-1] + [("t-2", 1, 12, None, None)], {"required_fields_present"}),
        ("bad value", CLEAN[:-1] + [("t-2", 1, 12, "y", "value is not JSON")], {"values_match_schema"}),
    ],
)
def test_each_fault_fails_its_checks(spark, case, rows, expected_failures):
    assert failed(verdicts(spark, rows)) == expected_failures, case


def test_failure_metadata_says_where(spark):
    out = verdicts(spark, CLEAN[:4] + CLEAN[5:])
    contiguous = out["offsets_are_contiguous"]
    assert contiguous.metadata["missing_records"] == 1
    assert contiguous.metadata["first_range_with_hole"] == "t-2[0]@[0,5)"
    assert "offsets_are_contiguous failed" in contiguous.failure()


def test_recorded_losses_are_expected(spark):
    # Offsets 0-1 and 3 of t-2[0] were lost to retention and recorded: the rest is complete.
    rows = [CLEAN[2]] + CLEAN[4:]
    lost = [OffsetRange("t-2", 0, 0, 2), OffsetRange("t-2", 0, 3, 4)]
    out = verdicts(spark, rows, lost=lost)
    assert failed(out) == set()
    assert out["row_count_matches_plan"].metadata == {"expected_rows": 5, "observed_rows": 5}
    # Without the record, the same rows are a short, holed batch.
    assert failed(verdicts(spark, rows)) == {"row_count_matches_plan", "offsets_are_contiguous"}


def test_missing_columns_fail_instead_of_crashing(spark):
    rows = [(t, p, o) for t, p, o, _, _ in CLEAN]
    outcomes = validate_batch(spark.createDataFrame(rows, "topic string, partition int, offset long"), PLAN,
                              required_fields=["name"], error_column="error")
    by_name = {o.name: o for o in outcomes}
    assert not by_name["required_fields_present"].passed
    assert not by_name["values_match_schema"].passed
    assert by_name["row_count_matches_plan"].passed
