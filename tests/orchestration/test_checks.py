"""The audit path on small Spark DataFrames: each check passes on a clean batch and catches its own fault.

Rows read back go through :func:`frame_stats` (one range join, one aggregation) and the GX suite
on the per-range summary; the cases and assertions are those of the row-level suite it replaced.
"""

from __future__ import annotations

import pytest

from kprio_core.config import QualitySettings
from kprio_core.drain_plan import PlannedRange
from kprio_core.offsets import OffsetRange
from orchestration.checks import CHECK_NAMES, OUTSIDE_PLAN, frame_stats, validate_batch

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
    assert contiguous.failed_ranges == (OffsetRange("t-2", 0, 0, 5),)


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
    assert by_name["required_fields_present"].metadata["missing_column_name"] == 1
    assert by_name["values_match_schema"].metadata["missing_column_error"] == 1


def test_missing_columns_fail_even_without_rows(spark):
    empty = spark.createDataFrame([], "topic string, partition int, offset long")
    outcomes = validate_batch(empty, (OffsetRange("t-1", 0, 7, 7),), required_fields=["name"])
    assert {o.name for o in outcomes if not o.passed} == {"required_fields_present", "values_match_schema"}


# -- frame_stats: what the one aggregation measures ------------------------------------------------------


def test_frame_stats_counts_output_and_dead_letters_per_range(spark):
    # Offset 2 of t-2[0] went to the dead letters; offset 11 of t-2[1] is in both (a repeat).
    rows = spark.createDataFrame([r for r in CLEAN if r[2] != 2], SCHEMA)
    dead = spark.createDataFrame([("t-2", 0, 2, "bad"), ("t-2", 1, 11, "bad")],
                                 "topic string, partition int, offset long, error string")
    plan = (PlannedRange(2, PLAN[0]), PlannedRange(2, PLAN[1]), PlannedRange(1, PLAN[2]))
    s0, s1, s2 = frame_stats(rows, plan, required_fields=["name"], dead_letters=dead)
    assert (s0.output, s0.dead, s0.distinct, s0.first, s0.last, s0.duplicates, s0.missing) == (4, 1, 5, 0, 4, 0, 0)
    assert (s1.output, s1.dead, s1.distinct, s1.duplicates) == (3, 1, 3, 1)
    assert (s2.priority, s2.written, s2.first, s2.nulls) == (1, 0, None, (("name", 0),))
    by_name = {o.name: o for o in validate_batch(rows, plan, required_fields=["name"], dead_letters=dead)}
    assert by_name["offsets_are_unique"].failed_ranges == (PLAN[1],)
    assert by_name["values_match_schema"].metadata["quarantined"] == 2


def test_rows_outside_every_range_get_a_bucket_that_names_no_range(spark):
    rows = spark.createDataFrame(CLEAN + [("t-2", 3, 0, "z", None), ("t-2", 0, 5, "z", None)], SCHEMA)
    stats = frame_stats(rows, PLAN, required_fields=["name"])
    assert [s.range for s in stats] == [*PLAN, OUTSIDE_PLAN]
    assert (stats[-1].written, stats[-1].outside, stats[-1].distinct) == (2, 2, 0)
    within = {o.name: o for o in validate_batch(rows, PLAN, required_fields=["name"])}["offsets_within_plan"]
    assert not within.passed and within.failed_ranges == ()
    assert within.metadata["rows_outside_plan"] == 2


def test_a_row_in_a_recorded_gap_is_outside_its_range(spark):
    # Offset 3 was recorded as lost, yet a row holds it: that range is not what was recorded.
    rows = spark.createDataFrame(CLEAN, SCHEMA)
    lost = [OffsetRange("t-2", 0, 3, 4)]
    stats = frame_stats(rows, PLAN, lost=lost)
    assert (stats[0].outside, stats[0].distinct, stats[0].expected, stats[0].lost) == (1, 4, 4, tuple(lost))
    out = {o.name: o for o in validate_batch(rows, PLAN, lost=lost)}
    assert {n for n, o in out.items() if not o.passed} == {"row_count_matches_plan", "offsets_within_plan"}
    assert out["offsets_within_plan"].failed_ranges == (PLAN[0],)


def test_tombstones_are_records_unless_configured(spark):
    schema = "topic string, partition int, offset long, value binary, name string, error string"
    rows = spark.createDataFrame([("t-2", 0, o, None if o == 4 else b"{}", None if o == 4 else "x", None)
                                  for o in range(5)], schema)
    plan = PLAN[:1]
    [record] = frame_stats(rows, plan, required_fields=["name"])
    [invalid] = frame_stats(rows, plan, required_fields=["name"], quality=QualitySettings(tombstones="invalid"))
    assert (record.nulls, invalid.nulls, record.bytes) == ((("name", 0),), (("name", 1),), 8)
