"""The GX suite on per-range summaries, straight from RangeStats (no Spark): a numbered table of faults.

Each case gives the stats of a drained batch and, per failing check, exactly the planned ranges
it must name (``failed_ranges``); every other check must pass.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import dagster as dg
import pytest

from kprio_core.config import QualitySettings
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import CheckReport, RangeStats
from orchestration.dagster.checks import check_results, check_specs
from orchestration.runtime.checks import (
    CHECK_DESCRIPTIONS,
    CHECK_NAMES,
    OUTSIDE_LABEL,
    OUTSIDE_PLAN,
    SHARED_MODULES,
    check_batch,
    summary_frame,
    warm_up,
)

R = OffsetRange("o-0", 1, 100, 300)  # 200 records of priority 0
U = OffsetRange("o-2", 0, 0, 50)  # 50 records of priority 2
SHORT = OffsetRange("o-0", 2, 40, 50)  # 10 records
EMPTY = OffsetRange("o-1", 0, 7, 7)
FIELDS = ("amount",)
QUARANTINE = QualitySettings()  # ratio 0.05, floor 100
BLOCK = QualitySettings(invalid="block")


def stats(r: OffsetRange, *, dead: int = 0, lost: tuple[OffsetRange, ...] = (), no_record: int = 0,
          **changes) -> RangeStats:
    """A correct drain of ``r`` (less ``lost``, less ``no_record`` offsets inside it), with ``changes`` applied."""
    expected = r.count - sum(g.count for g in lost) - no_record
    first = next((o for o in range(r.start, r.end) if not any(g.start <= o < g.end for g in lost)), None)
    last = next((o for o in reversed(range(r.start, r.end)) if not any(g.start <= o < g.end for g in lost)), None)
    base = dict(priority=0 if r.topic == "o-0" else 2, range=r, output=expected - dead, dead=dead, distinct=expected,
                first=first, last=last, nulls=(("amount", 0),), lost=lost, no_record=no_record)
    return RangeStats(**{**base, **changes})


ROW, UNIQUE, WITHIN, CONTIGUOUS, REQUIRED, SCHEMA = CHECK_NAMES

CASES = [
    # (number, why, stats, quality, {check: failed ranges})
    (1, "a complete drain of every range passes every check",
     [stats(R), stats(U), stats(EMPTY)], QUARANTINE, {}),
    (2, "a hole in the middle is a short count and a missing offset",
     [stats(R, output=199, distinct=199), stats(U)], QUARANTINE, {ROW: (R,), CONTIGUOUS: (R,)}),
    (3, "a short tail: the last offset is not end - 1",
     [stats(R, output=199, distinct=199, last=298), stats(U)], QUARANTINE, {ROW: (R,), CONTIGUOUS: (R,)}),
    (4, "a missing head: the first offset is not start",
     [stats(R, output=199, distinct=199, first=101), stats(U)], QUARANTINE, {ROW: (R,), CONTIGUOUS: (R,)}),
    (5, "a duplicate is a row too many and a step of 0",
     [stats(R, output=201), stats(U)], QUARANTINE, {ROW: (R,), UNIQUE: (R,), CONTIGUOUS: (R,)}),
    (6, "an offset in the output and in the dead letters is written twice",
     [stats(R, dead=1, output=200), stats(U)], QUARANTINE, {ROW: (R,), UNIQUE: (R,), CONTIGUOUS: (R,)}),
    (7, "a repeat hiding a hole keeps the count right, not the distinct offsets",
     [stats(R, distinct=199), stats(U)], QUARANTINE, {UNIQUE: (R,), CONTIGUOUS: (R,)}),
    (8, "a row the reader wrote past its range is outside the plan and one too many",
     [stats(R, output=201, outside=1), stats(U)], QUARANTINE, {ROW: (R,), WITHIN: (R,)}),
    (9, "a last offset at or beyond end is outside the plan even when outside says 0",
     [stats(R, last=300), stats(U)], QUARANTINE, {WITHIN: (R,)}),
    (10, "a first offset before start is outside the plan",
     [stats(U), stats(R, first=99)], QUARANTINE, {WITHIN: (R,)}),
    (11, "rows outside every range fail the count and the plan, naming no planned range",
     [stats(R), stats(U), RangeStats(0, OUTSIDE_PLAN, output=2, dead=0, distinct=0, first=None, last=None,
                                     outside=2)], QUARANTINE, {ROW: (), WITHIN: ()}),
    (12, "a null required field in the output",
     [stats(R), stats(U, nulls=(("amount", 3),))], QUARANTINE, {REQUIRED: (U,)}),
    (13, "an output row with an error belongs in the dead letters",
     [stats(R), stats(U, invalid_in_output=1)], QUARANTINE, {SCHEMA: (U,)}),
    (14, "quarantined at exactly the ratio (10 of 200 = 0.05) passes",
     [stats(R, dead=10), stats(U)], QUARANTINE, {}),
    (15, "over the ratio (11 of 200) fails only that range; the other keeps its 2 dead letters",
     [stats(R, dead=11), stats(U, dead=2)], QUARANTINE, {SCHEMA: (R,)}),
    (16, "block mode fails a range on one dead letter",
     [stats(R), stats(U, dead=1)], BLOCK, {SCHEMA: (U,)}),
    (17, "one bad record of a 10-record range is judged over the floor of 100 (0.01), not 0.1",
     [stats(SHORT, dead=1), stats(U)], QUARANTINE, {}),
    (18, "six bad records of 10 are over the ratio even over the floor (0.06)",
     [stats(SHORT, dead=6), stats(U)], QUARANTINE, {SCHEMA: (SHORT,)}),
    (19, "offsets recorded as lost are not expected: the rest is complete",
     [stats(R, lost=(OffsetRange("o-0", 1, 150, 160),)), stats(U)], QUARANTINE, {}),
    (20, "a loss at the head moves the first offset, inside the plan",
     [stats(R, lost=(OffsetRange("o-0", 1, 100, 110),)), stats(U)], QUARANTINE, {}),
    (21, "a recorded loss does not excuse a hole elsewhere",
     [stats(R, lost=(OffsetRange("o-0", 1, 150, 160),), output=189, distinct=189), stats(U)], QUARANTINE,
     {ROW: (R,), CONTIGUOUS: (R,)}),
    (22, "each check names exactly the ranges that broke it, in plan order",
     [stats(U, output=49, distinct=49, last=48), stats(R, nulls=(("amount", 1),), dead=20),
      stats(SHORT, output=11)], QUARANTINE,
     {ROW: (U, SHORT), UNIQUE: (SHORT,), CONTIGUOUS: (U, SHORT), REQUIRED: (R,), SCHEMA: (R,)}),
    (23, "a batch with no ranges proves nothing wrong",
     [], QUARANTINE, {}),
    (24, "an empty planned range with no rows is complete",
     [stats(EMPTY)], BLOCK, {}),
    (25, "offsets that held no record (16 transaction markers) are counted, not expected: complete",
     [stats(R, no_record=16), stats(U)], QUARANTINE, {}),
    (26, "a range whose every offset held no record (only markers) is complete with no rows",
     [stats(SHORT, no_record=10, first=None, last=None), stats(U)], QUARANTINE, {}),
    (27, "offsets without a record do not excuse a record found and not written",
     [stats(R, no_record=16, output=183, distinct=183), stats(U)], QUARANTINE, {ROW: (R,), CONTIGUOUS: (R,)}),
    (28, "markers and a recorded loss together: the rest is complete",
     [stats(R, no_record=3, lost=(OffsetRange("o-0", 1, 100, 110),)), stats(U)], QUARANTINE, {}),
]


@pytest.mark.parametrize(("number", "why", "batch", "quality", "failures"), CASES, ids=[f"{c[0]}" for c in CASES])
def test_each_case_fails_exactly_its_checks_on_exactly_its_ranges(number, why, batch, quality, failures):
    report = check_batch(batch, quality=quality, required_fields=FIELDS)
    assert [o.name for o in report.outcomes] == list(CHECK_NAMES)
    assert {o.name: o.failed_ranges for o in report.failed} == failures, f"case {number}: {why}"
    assert all(o.failed_ranges == () for o in report.outcomes if o.passed)
    assert report.passed == (not failures)


def test_metadata_numbers():
    batch = [stats(R, dead=11, output=190, distinct=199), stats(U, nulls=(("amount", 2),), invalid_in_output=1)]
    report = check_batch(batch, quality=QUARANTINE, required_fields=FIELDS)
    meta = {o.name: dict(o.metadata) for o in report.outcomes}
    assert meta[ROW] == {"expected_rows": 250, "observed_rows": 251, "offsets_without_record": 0}
    assert meta[UNIQUE] == {"duplicate_rows": 2}
    assert meta[WITHIN] == {"rows_outside_plan": 0}
    assert meta[CONTIGUOUS] == {"missing_records": 1, "repeated_offsets": 2, "ranges_with_holes": 1,
                                "first_range_with_hole": "o-0[1]@[100,300)"}
    assert meta[REQUIRED] == {"null_amount": 2}
    assert meta[SCHEMA] == {"invalid_records": 12, "quarantined": 11, "invalid_in_output": 1, "rows_checked": 251,
                            "max_invalid_ratio": 0.05, "highest_invalid_ratio": round(11 / 201, 6)}
    assert report.outcome(SCHEMA).failure().startswith("values_match_schema failed on o-0[1]@[100,300), o-2[0]@[0,50)")
    # What the lead stores in the ledger survives its JSON.
    assert CheckReport.from_json(report.to_json()) == report


def test_summary_frame_has_one_row_per_range_and_every_number_the_checks_judge():
    outside = RangeStats(2, OUTSIDE_PLAN, output=1, dead=1, distinct=0, first=None, last=None, outside=2)
    frame = summary_frame([stats(R, dead=3, output=196, distinct=199, lost=(OffsetRange("o-0", 1, 100, 101),),
                                 first=101, nulls=(("amount", 4),), invalid_in_output=2), stats(EMPTY), outside],
                          quality=BLOCK, required_fields=("amount", "sku"))
    assert list(frame.columns) == [
        "range", "priority", "start", "end", "expected", "no_record", "written", "output", "dead", "distinct",
        "duplicates", "missing", "outside", "first", "last", "invalid_in_output", "null_amount", "null_sku", "invalid_ratio",
        "max_invalid_ratio",
    ]
    first, empty, out = (frame.iloc[i].to_dict() for i in range(3))
    assert first == {"range": "o-0[1]@[100,300)", "priority": 0, "start": 100, "end": 300, "expected": 199,
                     "no_record": 0, "written": 199, "output": 196, "dead": 3, "distinct": 199, "duplicates": 0, "missing": 0,
                     "outside": 0, "first": 101, "last": 299, "invalid_in_output": 2, "null_amount": 4,
                     "null_sku": 0, "invalid_ratio": 3 / 199, "max_invalid_ratio": 0.0}
    assert (empty["expected"], empty["written"]) == (0, 0)
    assert (out["range"], out["written"], out["outside"], out["expected"]) == (OUTSIDE_LABEL, 2, 2, 0)
    # Nothing written, nothing to compare: no first/last; no planned range outside the plan: no start/end.
    assert frame["first"].isna().tolist() == frame["last"].isna().tolist() == [False, True, True]
    assert frame["start"].isna().tolist() == frame["end"].isna().tolist() == [False, False, True]


def test_check_specs_are_the_six_blocking_checks_of_the_asset():
    specs = check_specs("drained_batch")
    assert [s.name for s in specs] == list(CHECK_NAMES)
    assert all(s.blocking and s.asset_key == dg.AssetKey("drained_batch") for s in specs)
    assert [s.description for s in specs] == [CHECK_DESCRIPTIONS[n] for n in CHECK_NAMES]


def test_check_results_carry_numbers_and_the_failed_ranges():
    report = check_batch([stats(R, dead=11), stats(U)], quality=QUARANTINE, required_fields=FIELDS)
    results = {r.check_name: r for r in check_results(report, dg.AssetKey("drained_batch"))}
    assert list(results) == list(CHECK_NAMES)
    schema = results[SCHEMA]
    assert not schema.passed and schema.asset_key == dg.AssetKey("drained_batch")
    assert schema.metadata["failed_ranges"].value == "o-0[1]@[100,300)"
    assert schema.metadata["ranges_failed"].value == 1
    assert schema.metadata["quarantined"].value == 11
    assert "failed on o-0[1]@[100,300)" in schema.description
    row = results[ROW]
    assert row.passed and row.description == CHECK_DESCRIPTIONS[ROW] and "failed_ranges" not in row.metadata


def test_warm_up_imports_what_the_run_imports_too_before_its_thread_starts():
    # A fresh interpreter: which shared modules are loaded at the moment the warm-up thread starts.
    code = (
        "import json, sys, threading\n"
        "from orchestration.runtime import checks\n"
        "seen = []\n"
        "start = threading.Thread.start\n"
        "def spy(self):\n"
        "    seen.append([m for m in checks.SHARED_MODULES if m in sys.modules])\n"
        "    start(self)\n"
        "threading.Thread.start = spy\n"
        "checks.warm_up().join(120)\n"
        "print(json.dumps(seen))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=True)
    [loaded, *_] = json.loads(done.stdout.splitlines()[-1])
    assert loaded == list(SHARED_MODULES) and "great_expectations" not in loaded


def test_warm_up_imports_gx_in_a_daemon_thread():
    thread = warm_up()
    assert isinstance(thread, threading.Thread) and thread.daemon
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert check_batch([stats(R)], quality=QUARANTINE, required_fields=FIELDS).passed


def test_warm_up_runs_once_per_process():
    """``kprio drain`` starts a warm-up in every run: only the first one imports and validates (the others
    return its thread), so an urgent batch pays no empty validation of its own."""
    code = (
        "import json, threading\n"
        "from orchestration.runtime import checks\n"
        "started = []\n"
        "start = threading.Thread.start\n"
        "def spy(self):\n"
        "    started.append(self.name)\n"
        "    start(self)\n"
        "threading.Thread.start = spy\n"
        "first = checks.warm_up()\n"
        "first.join(120)\n"
        "again = [checks.warm_up() for _ in range(3)]\n"
        "print(json.dumps([started.count('kprio-gx-warm-up'), all(t is first for t in again)]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == [1, True]
