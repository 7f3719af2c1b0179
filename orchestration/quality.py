"""The quality suite of a drained batch: Great Expectations (GX Core 1.x) on its Spark DataFrame.

Six checks, named as predicates, each one or more GX expectations tagged with its name:

- ``row_count_matches_plan``: rows == planned records (minus offsets recorded as lost);
- ``offsets_are_unique``: (topic, partition, offset) unique;
- ``offsets_within_plan``: every row lies inside a planned range;
- ``offsets_are_contiguous``: inside each range, no hole before a row, none at the end;
- ``required_fields_present``: the configured required fields are non-null;
- ``values_match_schema``: the decode error column is null (invalid records are counted).

GX runs on the DataFrame directly (dagster-ge pins GX below 1.0, so it is not used). Two
DataFrames are validated: the rows, enriched with the planned range of each row and the step
from the previous offset, and one summary row per planned range (records missing from it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import count

from kprio_core.offsets import OffsetRange

ROW_COUNT = "row_count_matches_plan"
UNIQUE = "offsets_are_unique"
WITHIN_PLAN = "offsets_within_plan"
CONTIGUOUS = "offsets_are_contiguous"
REQUIRED = "required_fields_present"
SCHEMA = "values_match_schema"

CHECK_NAMES: tuple[str, ...] = (ROW_COUNT, UNIQUE, WITHIN_PLAN, CONTIGUOUS, REQUIRED, SCHEMA)
CHECK_DESCRIPTIONS: dict[str, str] = {
    ROW_COUNT: "The batch output has exactly the planned number of records (minus offsets recorded as lost).",
    UNIQUE: "(topic, partition, offset) is unique in the batch output.",
    WITHIN_PLAN: "Every record of the output lies inside one of the batch's planned offset ranges.",
    CONTIGUOUS: "Inside each planned range the offsets have no hole (none before a record, none at the end).",
    REQUIRED: "The topic's required fields are non-null in every record.",
    SCHEMA: "Every value decoded under the topic's schema (the error column is null).",
}

# Column names the enrichment adds; prefixed so they never clash with decoded fields.
_RANGE_COL = "_kprio_range"
_STEP_COL = "_kprio_step"
_MISSING_COL = "_kprio_missing"

_names = count(1)


@dataclass(frozen=True)
class CheckOutcome:
    """The verdict of one check, with the numbers that support it (plain ints/strings)."""

    name: str
    passed: bool
    metadata: dict[str, int | float | str] = field(default_factory=dict)

    @property
    def description(self) -> str:
        return CHECK_DESCRIPTIONS[self.name]

    def failure(self) -> str:
        """One line saying what failed, for the ledger's reason."""
        numbers = ", ".join(f"{k}={v}" for k, v in self.metadata.items())
        return f"{self.name} failed ({numbers})"


def validate_batch(
    df,
    ranges: Sequence[OffsetRange],
    *,
    lost: Sequence[OffsetRange] = (),
    required_fields: Sequence[str] = (),
    error_column: str | None = "error",
) -> list[CheckOutcome]:
    """Run the six checks on ``df`` (columns topic, partition, offset, ...) against the planned ranges.

    ``lost``: gaps the drain recorded as lost to retention (allowed data loss); they are cut out
    of the planned ranges, so the checks expect exactly the rest. Returns one outcome per name
    of :data:`CHECK_NAMES`, in that order.
    """
    import great_expectations as gx

    planned = [piece for r in ranges for piece in without(r, lost) if piece.count]
    expected_rows = sum(r.count for r in planned)

    rows = _enrich(df, planned).cache()
    summary, missing = _range_summary(rows, planned)
    try:
        context = _context()
        asset = context.data_sources.add_spark(name=f"kprio-{next(_names)}").add_dataframe_asset(name="batch")
        whole = asset.add_batch_definition_whole_dataframe("whole")

        row_suite = [
            gx.expectations.ExpectTableRowCountToEqual(value=expected_rows, meta={"check": ROW_COUNT}),
            gx.expectations.ExpectCompoundColumnsToBeUnique(
                column_list=["topic", "partition", "offset"], meta={"check": UNIQUE}
            ),
            gx.expectations.ExpectColumnValuesToNotBeNull(column=_RANGE_COL, meta={"check": WITHIN_PLAN}),
            # Nulls (first row of a range, rows outside the plan) are skipped by GX map expectations.
            gx.expectations.ExpectColumnValuesToBeInSet(column=_STEP_COL, value_set=[1], meta={"check": CONTIGUOUS}),
        ]
        columns = set(df.columns)
        for name in required_fields:
            row_suite.append(_not_null_or_absent(gx, name, columns))
        if error_column is not None:
            if error_column in columns:
                row_suite.append(
                    gx.expectations.ExpectColumnValuesToBeNull(column=error_column, meta={"check": SCHEMA})
                )
            else:
                row_suite.append(gx.expectations.ExpectColumnToExist(column=error_column, meta={"check": SCHEMA}))
        results = list(_validate(gx, whole, rows, row_suite))
        if planned:
            summary_suite = [
                gx.expectations.ExpectColumnValuesToBeInSet(
                    column=_MISSING_COL, value_set=[0], meta={"check": CONTIGUOUS, "part": "per_range"}
                )
            ]
            results += _validate(gx, whole, summary, summary_suite)
    finally:
        rows.unpersist()

    outcomes = [
        _outcome(name, [r for r in results if r.expectation_config.meta["check"] == name], expected_rows)
        for name in CHECK_NAMES
    ]
    holes = {name: n for name, n in missing if n}
    if holes:
        contiguous = outcomes[CHECK_NAMES.index(CONTIGUOUS)]
        contiguous.metadata["missing_records"] = sum(holes.values())
        contiguous.metadata["first_range_with_hole"] = next(iter(holes))
    return outcomes


def without(planned: OffsetRange, gaps: Sequence[OffsetRange]) -> list[OffsetRange]:
    """The pieces of ``planned`` outside every gap of the same partition.

    >>> gaps = [OffsetRange("t-2", 0, 2, 4), OffsetRange("t-2", 1, 0, 9)]
    >>> [str(r) for r in without(OffsetRange("t-2", 0, 0, 10), gaps)]
    ['t-2[0]@[0,2)', 't-2[0]@[4,10)']
    """
    pieces, cursor = [], planned.start
    for gap in sorted(g for g in gaps if g.topic_partition == planned.topic_partition):
        if gap.start > cursor:
            pieces.append(OffsetRange(planned.topic, planned.partition, cursor, min(gap.start, planned.end)))
        cursor = max(cursor, gap.end)
        if cursor >= planned.end:
            break
    if cursor < planned.end:
        pieces.append(OffsetRange(planned.topic, planned.partition, cursor, planned.end))
    return [p for p in pieces if p.count]


def _context():
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    # Ephemeral and quiet: no analytics calls from the drain host, no progress bars in run logs.
    config = DataContextConfig(
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
    )
    return gx.get_context(project_config=config, mode="ephemeral")


def _validate(gx, batch_definition, df, expectations):
    batch = batch_definition.get_batch(batch_parameters={"dataframe": df})
    suite = gx.ExpectationSuite(name=f"kprio-{next(_names)}", expectations=expectations)
    return batch.validate(suite, result_format="SUMMARY").results


def _not_null_or_absent(gx, name: str, columns: set[str]):
    # A required field with no column at all is as bad as all-null: say so instead of crashing.
    if name in columns:
        return gx.expectations.ExpectColumnValuesToNotBeNull(column=name, meta={"check": REQUIRED, "field": name})
    return gx.expectations.ExpectColumnToExist(column=name, meta={"check": REQUIRED, "field": name})


def _enrich(df, planned: Sequence[OffsetRange]):
    """Rows plus the index of their planned range (null outside the plan) and the step from the previous offset."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    spark = df.sparkSession
    plan_df = spark.createDataFrame(
        [(r.topic, r.partition, r.start, r.end, i) for i, r in enumerate(planned)],
        "r_topic string, r_partition int, r_start long, r_end long, " + _RANGE_COL + " int",
    )
    inside = (
        (F.col("topic") == F.col("r_topic"))
        & (F.col("partition") == F.col("r_partition"))
        & (F.col("offset") >= F.col("r_start"))
        & (F.col("offset") < F.col("r_end"))
    )
    joined = df.join(F.broadcast(plan_df), inside, "left")
    # The first row of a range steps from start - 1, so a missing head shows as a step > 1.
    by_range = Window.partitionBy(_RANGE_COL).orderBy("offset")
    previous = F.coalesce(F.lag("offset").over(by_range), F.col("r_start") - 1)
    step = F.when(F.col(_RANGE_COL).isNotNull(), F.col("offset") - previous)
    return joined.withColumn(_STEP_COL, step).drop("r_topic", "r_partition", "r_start", "r_end")


def _range_summary(rows, planned: Sequence[OffsetRange]):
    """One row per planned range: how many of its offsets are missing.

    Returns the DataFrame GX validates and the same (range, missing) pairs as Python values.
    """
    from pyspark.sql import functions as F

    spark = rows.sparkSession
    present = dict(
        rows.where(F.col(_RANGE_COL).isNotNull())
        .groupBy(_RANGE_COL)
        .agg(F.countDistinct("offset").alias("n"))
        .collect()
    )
    data = [(str(r), r.count - present.get(i, 0)) for i, r in enumerate(planned)]
    return spark.createDataFrame(data, "range string, " + _MISSING_COL + " long"), data


def _outcome(name: str, results, expected_rows: int) -> CheckOutcome:
    """Fold the GX results tagged ``name`` into one outcome with numeric metadata."""
    passed = all(r.success for r in results)
    meta: dict[str, int | float | str] = {}
    for r in results:
        kind = r.expectation_config.type
        res = r.result or {}
        if kind == "expect_table_row_count_to_equal":
            meta["expected_rows"] = expected_rows
            meta["observed_rows"] = int(res.get("observed_value") or 0)
        elif kind == "expect_column_to_exist":
            missing = r.expectation_config.kwargs["column"]
            meta[f"missing_column_{missing}"] = 0 if r.success else 1
        elif r.expectation_config.meta.get("part") == "per_range":
            meta["ranges_with_holes"] = int(res.get("unexpected_count") or 0)
        elif "field" in r.expectation_config.meta:
            meta[f"null_{r.expectation_config.meta['field']}"] = int(res.get("unexpected_count") or 0)
        else:
            meta["unexpected"] = meta.get("unexpected", 0) + int(res.get("unexpected_count") or 0)
            meta["rows_checked"] = int(res.get("element_count") or 0)
            if not r.success and res.get("partial_unexpected_list"):
                meta["examples"] = str(res["partial_unexpected_list"][:5])
    if "unexpected" in meta:
        meta[_UNEXPECTED_NAMES[name]] = meta.pop("unexpected")
    if name == WITHIN_PLAN:
        meta.pop("examples", None)  # the examples would be the null range index: no help
    return CheckOutcome(name, passed, meta)


# What an "unexpected" row means for each row-level check, as its metadata key.
_UNEXPECTED_NAMES = {
    UNIQUE: "duplicate_rows",
    WITHIN_PLAN: "rows_outside_plan",
    CONTIGUOUS: "rows_with_bad_step",
    SCHEMA: "invalid_records",
}

