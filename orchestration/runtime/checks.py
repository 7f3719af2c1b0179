"""The six blocking checks of a drained batch: Great Expectations on a per-range summary.

The drain counts, per planned range, what it wrote (:class:`~kprio_core.model.results.RangeStats`);
:func:`summary_frame` makes one pandas row per range and :func:`check_batch` validates that small frame with ONE
GX suite, each expectation tagged with its check (``meta={"check": name}``):

- ``row_count_matches_plan``: per range, output + dead letters == the records the read found (planned offsets less
  recorded losses and offsets that held no record: transaction markers, aborted and compacted records);
- ``offsets_are_unique``: per range, no offset written twice (rows inside == distinct offsets);
- ``offsets_within_plan``: no row outside the ranges (and first >= start, last < end);
- ``offsets_are_contiguous``: per range, no offset that held a record missing and none repeated;
- ``required_fields_present``: per range and required field, no null in the output;
- ``values_match_schema``: no row with an error in the output, dead letters within the ratio.

Each summary row that broke an expectation is a planned range, so a failed check names its ranges
(``CheckOutcome.failed_ranges``) and the batch can split them off; rows outside every range get a row of their
own (:mod:`spark_jobs.range_counts`), which names none. Two planned ranges of 200 records, one with 4 dead letters
(2 %, quarantined), one with 20 (10 %, over the 5 % limit):

>>> from kprio_core.config import QualitySettings
>>> ok = RangeStats(2, OffsetRange("orders-2", 0, 0, 200), output=196, dead=4, distinct=200, first=0, last=199)
>>> bad = RangeStats(0, OffsetRange("orders-0", 1, 0, 200), output=180, dead=20, distinct=200, first=0, last=199)
>>> summary = summary_frame([ok, bad], quality=QualitySettings(), required_fields=())
>>> summary[["range", "expected", "written", "dead", "invalid_ratio", "max_invalid_ratio"]].values.tolist()
[['orders-2[0]@[0,200)', 200, 200, 4, 0.02, 0.05], ['orders-0[1]@[0,200)', 200, 200, 20, 0.1, 0.05]]
>>> report = check_batch([ok, bad], quality=QualitySettings(), required_fields=())
>>> [o.name for o in report.failed], report.failed_ranges()
(['values_match_schema'], (OffsetRange(topic='orders-0', partition=1, start=0, end=200),))
>>> print(report.reason())
values_match_schema failed on orders-0[1]@[0,200) (invalid_records=24, quarantined=24, invalid_in_output=0,
rows_checked=400, max_invalid_ratio=0.05, highest_invalid_ratio=0.1)

GX's import takes about five seconds, so it happens on first use; :func:`warm_up` imports it in a background
thread, overlapping the Spark drain, after importing :data:`SHARED_MODULES` on the calling thread.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

SHARED_MODULES = (
    "pyarrow", "pyarrow.compute", "pyarrow.dataset", "pyarrow.fs", "pyarrow.parquet", "pandas",
    # What great_expectations/compatibility/pyspark.py imports (pyspark.sql has import cycles).
    "pyspark.errors", "pyspark.sql", "pyspark.sql.functions", "pyspark.sql.types", "pyspark.sql.readwriter",
    "pyspark.sql.connect.dataframe", "pyspark.sql.connect.session", "pyspark.ml.feature",
)
"""Modules GX and the run both import, imported before the warm-up thread starts: packages with import cycles
(pyspark.sql, pyarrow) fail when two threads import them at once (``KeyError: 'pyarrow'``, "cannot import name
'SQLContext' from partially initialized module 'pyspark.sql'" failed daemon runs)."""

from kprio_core.config import QualitySettings
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import CheckOutcome, CheckReport, RangeStats

if TYPE_CHECKING:
    import pandas as pd

ROW_COUNT = "row_count_matches_plan"
UNIQUE = "offsets_are_unique"
WITHIN_PLAN = "offsets_within_plan"
CONTIGUOUS = "offsets_are_contiguous"
REQUIRED = "required_fields_present"
SCHEMA = "values_match_schema"

CHECK_NAMES: tuple[str, ...] = (ROW_COUNT, UNIQUE, WITHIN_PLAN, CONTIGUOUS, REQUIRED, SCHEMA)
CHECK_DESCRIPTIONS: dict[str, str] = {
    ROW_COUNT: "Each planned range wrote exactly the records its read found (its offsets less those recorded as "
    "lost and those that held no record: transaction markers, aborted and compacted records) to the output and "
    "the dead letters together.",
    UNIQUE: "No offset is written twice: not twice in the output, not twice in the dead letters, not in both.",
    WITHIN_PLAN: "Every record of the output and the dead letters lies inside one of the batch's planned ranges "
    "(and outside the offsets recorded as lost).",
    CONTIGUOUS: "Output and dead letters together hold every offset of each planned range that held a record, from "
    "start to end - 1 (no hole, no short tail, no repeat); offsets that held no record (markers, aborted and "
    "compacted records) and offsets recorded as lost are counted, not expected.",
    REQUIRED: "The topic's required fields are non-null in every output record (invalid records belong in the dead "
    "letters).",
    SCHEMA: "No output record carries an error, and each range's dead letters stay within quality.max_invalid_ratio "
    "of max(records, quality.ratio_floor_records) (none at all when quality.invalid is block).",
}

OUTSIDE_PLAN = OffsetRange("", 0, 0, 0)
"""The range of the stats that hold rows outside every planned range (a topic name is never empty)."""
OUTSIDE_LABEL = "outside the plan"
"""The ``range`` of the summary row of :data:`OUTSIDE_PLAN`."""

_NULL_PREFIX = "null_"


# -- the summary ---------------------------------------------------------------------------------------


def summary_frame(
    stats: Sequence[RangeStats], *, quality: QualitySettings, required_fields: Sequence[str]
) -> pd.DataFrame:
    """One row per range of ``stats`` (row ``i`` is ``stats[i]``) with every number the checks judge.

    ``range`` is :data:`OUTSIDE_LABEL` for :data:`OUTSIDE_PLAN` (``start``, ``end`` empty); ``expected``: records the
    read found; ``no_record``: offsets that held no record; ``written``: output + dead; ``first``, ``last``: empty if
    nothing was written; ``null_<field>`` per required field (0 if unlisted); ``invalid_ratio``: dead /
    max(written, ``quality.ratio_floor_records``); ``max_invalid_ratio``: 0 when ``quality.invalid`` is block.
    """
    import pandas as pd

    limit = 0.0 if quality.invalid == "block" else quality.max_invalid_ratio
    planned = [s.range != OUTSIDE_PLAN for s in stats]
    nulls = [dict(s.nulls) for s in stats]
    columns: dict[str, Any] = {
        "range": pd.Series([str(s.range) if p else OUTSIDE_LABEL for s, p in zip(stats, planned)], dtype=object),
        "priority": pd.Series([s.priority for s in stats], dtype="int64"),
        "start": pd.array([s.range.start if p else None for s, p in zip(stats, planned)], dtype="Int64"),
        "end": pd.array([s.range.end if p else None for s, p in zip(stats, planned)], dtype="Int64"),
        "expected": pd.Series([s.expected for s in stats], dtype="int64"),
        "no_record": pd.Series([s.no_record for s in stats], dtype="int64"),
        "written": pd.Series([s.written for s in stats], dtype="int64"),
        "output": pd.Series([s.output for s in stats], dtype="int64"),
        "dead": pd.Series([s.dead for s in stats], dtype="int64"),
        "distinct": pd.Series([s.distinct for s in stats], dtype="int64"),
        "duplicates": pd.Series([s.duplicates for s in stats], dtype="int64"),
        "missing": pd.Series([s.missing for s in stats], dtype="int64"),
        "outside": pd.Series([s.outside for s in stats], dtype="int64"),
        "first": pd.array([s.first for s in stats], dtype="Int64"),
        "last": pd.array([s.last for s in stats], dtype="Int64"),
        "invalid_in_output": pd.Series([s.invalid_in_output for s in stats], dtype="int64"),
    }
    for name in required_fields:
        columns[_NULL_PREFIX + name] = pd.Series([n.get(name, 0) for n in nulls], dtype="int64")
    floor = quality.ratio_floor_records
    columns["invalid_ratio"] = pd.Series([s.dead / max(s.written, floor) for s in stats], dtype="float64")
    columns["max_invalid_ratio"] = pd.Series([limit] * len(stats), dtype="float64")
    return pd.DataFrame(columns)


# -- the suite -----------------------------------------------------------------------------------------


def _expectations(gx, required_fields: Sequence[str]) -> list:
    """The suite on :func:`summary_frame`, each expectation tagged with its check (why: :func:`check_batch`)."""
    e = gx.expectations

    def zero(column: str, check: str, **meta):
        return e.ExpectColumnValuesToBeInSet(column=column, value_set=[0], meta={"check": check, **meta})

    suite = [
        e.ExpectColumnPairValuesToBeEqual(column_A="written", column_B="expected", meta={"check": ROW_COUNT}),
        zero("duplicates", UNIQUE),
        zero("outside", WITHIN_PLAN),
        # first/last are empty for a range with no rows and for the outside row: nothing to compare.
        e.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="first", column_B="start", or_equal=True, ignore_row_if="either_value_is_missing",
            meta={"check": WITHIN_PLAN},
        ),
        e.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="end", column_B="last", or_equal=False, ignore_row_if="either_value_is_missing",
            meta={"check": WITHIN_PLAN},
        ),
        # Both are >= 0, so a zero sum is neither a missing offset nor a repeat (a step of 0).
        e.ExpectMulticolumnSumToEqual(column_list=["missing", "duplicates"], sum_total=0, meta={"check": CONTIGUOUS}),
    ]
    suite += [zero(_NULL_PREFIX + name, REQUIRED, field=name) for name in required_fields]
    suite += [
        zero("invalid_in_output", SCHEMA),
        e.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A="max_invalid_ratio", column_B="invalid_ratio", or_equal=True, meta={"check": SCHEMA}
        ),
    ]
    return suite


class _Validator:
    """One ephemeral GX context with a pandas data source, made once per process (and thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batch_definition = None

    def batch_definition(self):
        with self._lock:
            if self._batch_definition is None:
                self._batch_definition = _pandas_batch_definition()
            return self._batch_definition

    def validate(self, frame: pd.DataFrame, required_fields: Sequence[str]) -> list:
        import great_expectations as gx

        batch_definition = self.batch_definition()
        suite = gx.ExpectationSuite(name="kprio-range-summary", expectations=_expectations(gx, required_fields))
        # COMPLETE: the index of every unexpected row (a summary has one row per range, so few).
        result_format = {"result_format": "COMPLETE", "return_unexpected_index_query": False}
        with self._lock:  # GX contexts are not documented as thread-safe
            batch = batch_definition.get_batch(batch_parameters={"dataframe": frame})
            return list(batch.validate(suite, result_format=result_format).results)


def _pandas_batch_definition():
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
    context = gx.get_context(project_config=config, mode="ephemeral")
    asset = context.data_sources.add_pandas(name="kprio").add_dataframe_asset(name="range_summary")
    return asset.add_batch_definition_whole_dataframe("whole")


_VALIDATOR = _Validator()


_WARM_UPS: list[threading.Thread] = []
_WARM_UP_LOCK = threading.Lock()


def warm_up() -> threading.Thread:
    """Import GX, make its context and run one empty validation in a daemon thread (started; join it or not), once
    per process (one per run cost each urgent batch ~0.08 s); :func:`check_batch` waits for it, raising its errors."""

    def run() -> None:
        try:
            # One validation of an empty summary also loads what GX loads on its first validation.
            check_batch((), quality=QualitySettings(), required_fields=())
        except Exception:  # noqa: BLE001 (check_batch raises it again, in the run that needs it)
            pass

    with _WARM_UP_LOCK:
        if _WARM_UPS:
            return _WARM_UPS[0]
        for module in SHARED_MODULES:  # on this thread, before GX's import starts on the other one
            importlib.import_module(module)
        thread = threading.Thread(target=run, name="kprio-gx-warm-up", daemon=True)
        thread.start()
        _WARM_UPS.append(thread)
        return thread


# -- the verdicts --------------------------------------------------------------------------------------


def check_batch(
    stats: Sequence[RangeStats], *, quality: QualitySettings, required_fields: Sequence[str]
) -> CheckReport:
    """Validate the :func:`summary_frame` of ``stats`` with one GX suite; one outcome per :data:`CHECK_NAMES`.

    ``failed_ranges`` lists the planned ranges that failed, in plan order; a check that failed only on rows outside
    every range (:data:`OUTSIDE_PLAN`) names none, so the whole batch fails.

    Why this proves what the row-level suite proved, given counts on the rows written (rows at offsets recorded
    as lost counted ``outside``): a plan's ranges are disjoint, so a repeated (topic, partition, offset) repeats
    inside one range, as rows inside > distinct offsets (output and dead letters together, so an offset in both
    repeats too). A range whose distinct offsets equal its expected count holds every expected offset, which is
    contiguity from start to end - 1; with no repeat and no row outside, its row count is exact.
    """
    stats = tuple(stats)
    frame = summary_frame(stats, quality=quality, required_fields=required_fields)
    results = _VALIDATOR.validate(frame, required_fields)
    by_check: dict[str, list] = {name: [] for name in CHECK_NAMES}
    for result in results:
        by_check[result.expectation_config.meta["check"]].append(result)
    return CheckReport(tuple(
        _outcome(name, by_check[name], frame, stats, required_fields) for name in CHECK_NAMES
    ))


def _outcome(name: str, results: list, frame: pd.DataFrame, stats: Sequence[RangeStats],
             required_fields: Sequence[str]) -> CheckOutcome:
    """Fold the GX results of one check: passed, its numbers, and the planned ranges that broke it."""
    passed = all(r.success for r in results)
    rows: set[int] = set()
    errors = []
    for r in results:
        if r.success:
            continue
        info = r.exception_info or {}
        if info.get("raised_exception"):
            errors.append(str(info.get("exception_message")))
        rows.update(int(i) for i in (r.result or {}).get("unexpected_index_list") or ())
    failed = tuple(stats[i].range for i in sorted(rows) if stats[i].range != OUTSIDE_PLAN)
    metadata = _metadata(name, frame, required_fields)
    if errors:
        metadata["gx_error"] = "; ".join(errors)
    return CheckOutcome(name, passed, metadata, failed, CHECK_DESCRIPTIONS[name])


def _metadata(name: str, frame: pd.DataFrame, required_fields: Sequence[str]) -> dict[str, int | float | str]:
    """The numbers that support a check's verdict, summed over the summary (plain ints and floats)."""

    def total(column: str) -> int:
        return int(frame[column].sum())

    if name == ROW_COUNT:
        return {"expected_rows": total("expected"), "observed_rows": total("written"),
                "offsets_without_record": total("no_record")}
    if name == UNIQUE:
        return {"duplicate_rows": total("duplicates")}
    if name == WITHIN_PLAN:
        return {"rows_outside_plan": total("outside")}
    if name == CONTIGUOUS:
        holes = frame.loc[frame["missing"] > 0, "range"]
        meta: dict[str, int | float | str] = {
            "missing_records": total("missing"),
            "repeated_offsets": total("duplicates"),
            "ranges_with_holes": len(holes),
        }
        if len(holes):
            meta["first_range_with_hole"] = str(holes.iloc[0])
        return meta
    if name == REQUIRED:
        return {_NULL_PREFIX + field: total(_NULL_PREFIX + field) for field in required_fields}
    dead, in_output = total("dead"), total("invalid_in_output")
    return {
        "invalid_records": dead + in_output,
        "quarantined": dead,
        "invalid_in_output": in_output,
        "rows_checked": total("written"),
        "max_invalid_ratio": float(frame["max_invalid_ratio"].max()) if len(frame) else 0.0,
        "highest_invalid_ratio": round(float(frame["invalid_ratio"].max()), 6) if len(frame) else 0.0,
    }
