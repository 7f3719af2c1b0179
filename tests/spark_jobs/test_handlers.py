"""The handler contract, the default JSON handler, the lane pump and the drain task (shuffled, and fused where a case
says), without Spark."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

from kprio_core.errors import HandlerError, LaneOrderBroken
from kprio_core.lanes import Ordering
from kprio_core.model.drain_plan import PlannedRange
from kprio_core.model.offsets import OffsetRange
from spark_jobs.columns import drain_struct, input_struct
from spark_jobs.drain_task import DrainSpec, DrainTask, drain_sorted
from spark_jobs.handler_contract import LaneContext, resolve_handler
from spark_jobs.handlers import decode_json, decode_value
from spark_jobs.kafka_schema import arrow_schema_of
from spark_jobs.validity import Validity
from tests.spark_jobs.on_disk import staged_rows

SCHEMA = {"i": "long", "amount": "double", "name": "string", "ok": "boolean", "at": "timestamp"}


@pytest.mark.parametrize(
    ("value", "fields", "error"),
    [
        (b'{"i": 1, "amount": 2, "name": "a", "ok": true, "at": 1700000000000}',
         {"i": 1, "amount": 2.0, "name": "a", "ok": True,
          "at": dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)}, None),  # all types; epoch ms
        (b'{"at": "2024-05-01T12:00:00"}', {"at": dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc)}, None),  # naive ISO = UTC
        (b'{}', {}, None),  # missing fields are null, not errors
        (None, {}, None),  # tombstone: fine, all null
        (b'{"i": true}', {}, "field 'i': expected long, got bool True"),  # bool is not a long
        (b'{"i": 1.5, "name": "x"}', {"name": "x"}, "field 'i': expected long, got float 1.5"),  # others still decoded
        (b'{"at": "yesterday"}', {}, "field 'at': expected timestamp, got str 'yesterday'"),
        (b'[1, 2]', {}, "value is a JSON list, not an object"),
        (b'\xff\xfe', {}, "value is not JSON"),  # not even UTF-8
    ],
)
def test_decode_value(value, fields, error):
    decoded, err = decode_value(value, SCHEMA)
    assert decoded == {**dict.fromkeys(SCHEMA), **fields}
    assert (err is None) if error is None else err.startswith(error)


def test_resolve_handler_errors_name_the_problem():
    with pytest.raises(HandlerError, match="cannot import 'no_such_module'"):
        resolve_handler("no_such_module:f")
    with pytest.raises(HandlerError, match="has no 'nope'"):
        resolve_handler("spark_jobs.handlers:nope")
    with pytest.raises(HandlerError, match="does not accept"):
        resolve_handler("tests.spark_jobs.handlers_for_tests:not_a_handler")
    assert resolve_handler("tests.spark_jobs.handlers_for_tests:record_order")


def _batch(rows: list[tuple[str, int, int, int, bytes | None]]) -> pa.RecordBatch:
    """Input rows ``(topic, partition, lane, offset, value)``."""
    schema = arrow_schema_of(input_struct())
    n = len(rows)
    cols = {
        "key": [b"k"] * n, "value": [r[4] for r in rows], "topic": [r[0] for r in rows],
        "partition": [r[1] for r in rows], "offset": [r[3] for r in rows],
        "timestamp": [0] * n, "timestampType": [0] * n, "headers": [None] * n,
        "priority": [1] * n, "batch_id": ["b"] * n, "lane": [r[2] for r in rows],
    }
    return pa.RecordBatch.from_arrays([pa.array(cols[f.name], type=f.type) for f in schema], schema=schema)


def fused(spec: DrainSpec, batches: list[pa.RecordBatch]) -> list[dict]:
    """The fused way in (:func:`spark_jobs.drain_task.drain_partition` after its reads): lanes interleaved, each
    range read done once its records were fed, then the task finished."""
    task = DrainTask(spec)
    try:
        for batch in batches:
            task.feed(batch)
        for r in spec.ranges:
            task.read_done(r.range)
        task.finish()
    except Exception as err:  # noqa: BLE001 - as drain_partition: the failure goes to the ranges' stats
        task.fail(err)
    return task.rows()


@pytest.fixture
def run(tmp_path):
    """Feed sorted batches to one shuffled drain task (``way=fused``: to a fused one); every row it wrote (both roots)
    and the failures."""

    def run_task(handler: str, batches: list[pa.RecordBatch], schema=None, way: str = "shuffled",
                 lanes: int = 2) -> tuple[list[dict], list[str]]:
        schema = SCHEMA if schema is None else schema
        partitions = sorted({(t, p) for b in batches for t, p in zip(b.column("topic").to_pylist(),
                                                                       b.column("partition").to_pylist())})
        ranges = tuple(PlannedRange(1, OffsetRange(t, p, 0, 100)) for t, p in partitions)
        spec = DrainSpec("b", 1, "t", handler, tuple(schema.items()), Validity(), Ordering.KEY, lanes, ranges,
                         str(tmp_path / "out" / "_staging" / "b.1"), str(tmp_path / "dead" / "_staging" / "b.1"), 100)
        if way == "fused":
            stats = fused(spec, batches)
        else:
            stats = [row for out in drain_sorted(spec)(iter(batches)) for row in out.to_pylist()]
        from spark_jobs.range_counts import merge_counts

        result_rows = merge_counts(stats, ranges, allow_data_loss=True, every_range_reported=False)
        from kprio_core.model.results import DrainResult

        result = DrainResult("b", 1, "t", result_rows, staging="")
        on_disk = staged_rows(result, {"output": str(tmp_path / "out"), "dead-letters": str(tmp_path / "dead")},
                              failed=True)
        rows = sorted(on_disk["output"] + on_disk["dead-letters"], key=lambda r: (r["topic"], r["partition"], r["lane"],
                                                                                 r["offset"]))
        return rows, [s.failure for s in result_rows if s.failure]

    return run_task


def _run_ok(run, spec, batches, schema=None, **how: object) -> list[dict]:
    rows, failures = run(spec, batches, schema, **how)
    assert failures == []
    return rows


def test_default_handler_keeps_every_record_and_types_fields(run):
    good = json.dumps({"i": 7, "amount": 1.25}).encode()
    rows = _run_ok(run, "spark_jobs.handlers:decode_json", [_batch([("t-1", 0, 0, 0, good), ("t-1", 0, 0, 1, b"{bad"),
                                                           ("t-1", 0, 0, 2, None)])])
    # The bad record went to the dead letters: raw columns and error, no decoded fields.
    assert [(r["offset"], r.get("i"), r.get("amount")) for r in rows] == [(0, 7, 1.25), (1, None, None), (2, None, None)]
    assert rows[0]["error"] is None and rows[2]["error"] is None and "i" not in rows[1]
    assert rows[1]["error"].startswith("value is not JSON") and rows[1]["value"] == b"{bad"


def test_lanes_are_cut_at_topic_partition_and_lane_changes_and_get_one_call_each(run):
    rows = [("t-1", 0, 0, o, None) for o in (0, 1)] + [("t-1", 0, 1, 2, None), ("t-1", 1, 1, 0, None)]
    out = _run_ok(run, "tests.spark_jobs.handlers_for_tests:record_order", [_batch(rows[:3]), _batch(rows[3:])],
               schema={"seen": "long"})
    assert [(r["partition"], r["lane"], r["offset"], r["seen"]) for r in out] == [
        (0, 0, 0, 0), (0, 0, 1, 1), (0, 1, 2, 0), (1, 1, 0, 0)]


def test_a_lane_continuing_across_batches_is_one_call(run):
    out = _run_ok(run, "tests.spark_jobs.handlers_for_tests:record_order",
               [_batch([("t-1", 0, 0, 0, None)]), _batch([("t-1", 0, 0, 1, None)])], schema={"seen": "long"})
    assert [r["seen"] for r in out] == [0, 1]


@pytest.mark.parametrize("frames", [[[o] for o in range(8)], [[0, 1, 2], [3, 4, 5, 6, 7]], [list(range(8))]],
                         ids=["a record per frame", "offset 5 inside a frame", "one frame"])
def test_a_handler_raising_on_one_record_sends_only_that_record_to_the_dead_letters(run, frames):
    batches = [_batch([("t-1", 0, 0, o, None) for o in frame]) for frame in frames]
    out = _run_ok(run, "tests.spark_jobs.handlers_for_tests:fail_on_offset_five", batches, schema={})
    assert [(r["offset"], r["error"]) for r in out] == [
        (o, "handler failed: ValueError: cannot handle offset 5 of t-1" if o == 5 else None) for o in range(8)]


def test_a_handler_raising_on_several_records_isolates_each_and_keeps_the_lanes_order(run):
    out = _run_ok(run, "tests.spark_jobs.handlers_for_tests:fail_on_odd_values",
                  [_batch([("t-1", 0, 0, o, str(o % 5).encode()) for o in range(10)])], schema={})
    assert [r["offset"] for r in out] == list(range(10))
    assert {r["offset"] for r in out if r["error"]} == {o for o in range(10) if o % 5 % 2}


@pytest.mark.parametrize(("handler", "said"), [
    ("fail_on_every_record", "raised on every record of t-1[0]/lane0 of batch b (4 records; at offset 0: "
                             "handler failed: ValueError: no record suits me): the handler fails, not the records"),
    ("fail_at_start", "failed before reading a record of t-1[0]/lane0 of batch b: RuntimeError: not configured"),
])
@pytest.mark.parametrize("way", ["shuffled", "fused"])
def test_a_handler_failing_whatever_the_record_fails_its_range_instead_of_quarantining_it(run, handler, said, way):
    """Fused, the range was closed with its four records quarantined before the lane's end found the handler broken."""
    _, failures = run(f"tests.spark_jobs.handlers_for_tests:{handler}",
                      [_batch([("t-1", 0, 0, o, None) for o in range(4)])], schema={}, way=way)
    assert failures == [f"t-1[0]@[0,100): handler 'tests.spark_jobs.handlers_for_tests:{handler}' {said}"]


def test_a_task_failing_inside_a_batch_fails_the_ranges_of_the_rest_of_that_batch(run):
    """Partition 0's lane ends inside the batch, where partition 1's records begin, and proves the handler broken:
    partition 1's range fails too. (Its records were neither written nor refused: its range reported no row and read
    as six offsets with no record, complete, and the batch would have committed them.)"""
    rows = [("t-1", 0, 0, o, None) for o in range(4)] + [("t-1", 1, 0, o, None) for o in range(6)]
    _, failures = run("tests.spark_jobs.handlers_for_tests:fail_on_every_record", [_batch(rows)], schema={})
    assert len(failures) == 2 and failures[0].startswith("t-1[0]@[0,100): handler"), failures
    assert failures[1].startswith("t-1[1]@[0,100): not drained, the task failed before it: t-1[0]@[0,100): handler")


@pytest.mark.parametrize("way", ["shuffled", "fused"])
def test_a_handler_raising_on_every_record_of_a_range_in_lanes_of_one_record_fails_the_range(run, way):
    """Key lanes of one record each: no lane sees a second record, the range does. (Each record went to the dead
    letters before, and the batch committed.)"""
    rows = [("t-1", 0, lane, o, None) for lane, o in enumerate(range(4))] + [("t-1", 1, 0, 0, None)]
    _, failures = run("tests.spark_jobs.handlers_for_tests:fail_on_every_record",
                      [_batch(rows[:4]), _batch(rows[4:])], schema={}, way=way, lanes=4)
    assert failures == ["the handler raised on every record of t-1[0]@[0,100) (4 records; at offset 0: handler failed: "
                        "ValueError: no record suits me): the handler fails, not the records"]
    # One record it raised on is one bad record, as far as anyone can tell: partition 1's goes to the dead letters.


@pytest.mark.parametrize("way", ["shuffled", "fused"])
def test_one_record_per_lane_raising_among_answered_ones_stays_a_dead_letter(run, way):
    rows = [("t-1", 0, lane, o, str(o % 5).encode()) for lane, o in enumerate(range(4))]
    out = _run_ok(run, "tests.spark_jobs.handlers_for_tests:fail_on_odd_values", [_batch(rows)], schema={}, way=way,
                  lanes=4)
    assert [(r["offset"], bool(r["error"])) for r in out] == [(0, False), (1, True), (2, False), (3, True)]


def test_a_handler_that_stops_early_loses_nothing(run):
    batches = [_batch([("t-1", 0, 0, o, None)]) for o in range(3)]
    out = _run_ok(run, "tests.spark_jobs.handlers_for_tests:stops_early", batches, schema={})
    assert [(r["offset"], r["error"]) for r in out] == [
        (0, None), (1, "the handler returned no row for this record"), (2, "the handler returned no row for this record")]


def test_a_handler_returning_fewer_rows_breaks_the_contract_and_fails_its_range(run):
    _, failures = run("tests.spark_jobs.handlers_for_tests:drops_a_row",
                      [_batch([("t-1", 0, 0, 0, None), ("t-1", 0, 0, 1, None)])], schema={})
    assert failures == ["t-1[0]@[0,100): handler 'tests.spark_jobs.handlers_for_tests:drops_a_row' answered a frame "
                        "of 2 records with 1 rows (t-1[0]/lane0 of batch b): it must return one row per record, in order"]


def test_rows_out_of_offset_order_fail_their_range(run):
    _, failures = run("spark_jobs.handlers:decode_json", [_batch([("t-1", 0, 0, 3, None), ("t-1", 0, 0, 2, None)])])
    assert failures == ["t-1[0]@[0,100): t-1[0]/lane0 of batch b: offsets not strictly increasing after -1"]
    _, failures = run("spark_jobs.handlers:decode_json", [_batch([("t-1", 0, 0, 0, None), ("t-1", 0, 1, 1, None),
                                                                  ("t-1", 0, 0, 2, None)]), _batch([("t-2", 0, 0, 0, None)])])
    assert failures == ["t-1[0]@[0,100): lane t-1[0]/lane0 came back after another lane",
                        "t-2[0]@[0,100): not drained, the task failed before it: "
                        "t-1[0]@[0,100): lane t-1[0]/lane0 came back after another lane"]
    with pytest.raises(LaneOrderBroken, match="not strictly increasing"):  # the pump itself refuses
        _pump_rows("spark_jobs.handlers:decode_json", [(0, [3]), (0, [2])])


def test_lane_context_names_the_lane():
    assert str(LaneContext("t", "t-1", 0, 3, 1, "b")) == "t-1[0]/lane3 of batch b"


@pytest.mark.parametrize(
    "values",
    [
        [b'{"i": 1, "amount": 2.5, "name": "a", "ok": false}', None, b'{"i": 3}'],  # one go, tombstone kept
        [None, None],
        [b'{"i": 1}', b'{"i": "x"}'],  # one bad record: record by record, the good one unaffected
        [b'{"name": "\\u00e9\\u4e2d"}', b'{"name": "caf\xc3\xa9"}'],  # unicode escapes and raw UTF-8
        [b'{"i": 1}{"i": 2}', b''],  # two objects on one line and an empty value must not shift rows
        [b'{"i": 1,\n "amount": 2}', b'{"i": 2}'],  # a newline inside a value
        [b'{"i": 1, "i": 2}'],  # duplicate key: json takes the last
    ],
)
def test_default_handler_decodes_a_frame_as_record_by_record(values):
    import pandas as pd

    schema = {k: v for k, v in SCHEMA.items() if k != "at"}  # Arrow's one-go path: no timestamp fields
    ctx = LaneContext("t", "t-1", 0, 0, 0, "b", tuple(schema.items()))
    out = next(decode_json(iter([pd.DataFrame({"value": pd.Series(values, dtype=object)})]), ctx))
    got = out.drop(columns="value").astype(object).where(out.notna(), None).to_dict("records")
    want = [{**decode_value(v, schema)[0], "error": decode_value(v, schema)[1]} for v in values]
    assert got == want


ARROW_CASES = [
    [b'{"i": 1, "amount": 2.5, "name": "a", "ok": false}', None, b'{"i": 3}'],
    [None, None],
    [b'{"i": 1}', b'{"i": "x"}', b'{bad', b'[1]'],
    [b'{"at": "2024-05-01T12:00:00+02:00", "i": 4}', None, b'{"at": 1700000000000}', b'{"at": "soon"}'],
    [b'{"i": 1}{"i": 2}', b''],
    [b'{"i": 1,\n "amount": 2}', b' {"i": 2}', b'  '],
]


@pytest.mark.parametrize("values", ARROW_CASES)
@pytest.mark.parametrize("with_timestamp", [False, True])
def test_arrow_form_of_the_default_handler_gives_the_pandas_forms_rows(run, values, with_timestamp):
    schema = SCHEMA if with_timestamp else {k: v for k, v in SCHEMA.items() if k != "at"}
    batch = _batch([("t-1", 0, 0, o, v) for o, v in enumerate(values)])
    assert resolve_handler("spark_jobs.handlers:decode_json").arrow is not None
    arrow = _run_ok(run, "spark_jobs.handlers:decode_json", [batch], schema=schema)
    pandas = _run_ok(run, "tests.spark_jobs.handlers_for_tests:decode_json_pandas_only", [batch], schema=schema)
    assert arrow == pandas
    assert [r["error"] is None for r in arrow] == [decode_value(v, schema)[1] is None for v in values]


def _pump_rows(spec: str, pushes: list[tuple[int, list[int]]], schema=None) -> list[dict]:
    """Push ``(lane, offsets)`` segments of partition 0 in the given order; every output row."""
    from spark_jobs.lane_pump import LanePump

    schema = {"seen": "long"} if schema is None else schema
    pump = LanePump(spec, arrow_schema_of(drain_struct(schema)))
    rows = []
    for lane, offsets in pushes:
        ctx = LaneContext("t", "t-1", 0, lane, 1, "b", tuple(schema.items()))
        for out in pump.push(ctx, _batch([("t-1", 0, lane, o, None) for o in offsets])):
            rows += out.to_pylist()
    for out in pump.end_all():
        rows += out.to_pylist()
    return rows


def test_interleaved_lanes_each_get_one_handler_call_in_offset_order():
    rows = _pump_rows("tests.spark_jobs.handlers_for_tests:record_order",
                      [(0, [0, 1]), (1, [2]), (0, [3]), (1, [4, 5]), (0, [6])])
    assert sorted((r["lane"], r["seen"], r["offset"]) for r in rows) == [
        (0, 0, 0), (0, 1, 1), (0, 2, 3), (0, 3, 6), (1, 0, 2), (1, 1, 4), (1, 2, 5)]


def test_a_handler_that_reads_ahead_is_fed_as_frames_arrive_and_loses_nothing():
    rows = _pump_rows("tests.spark_jobs.handlers_for_tests:answers_in_pairs",
                      [(0, [0]), (1, [1]), (0, [2]), (0, [3]), (1, [4])], schema={})
    assert sorted(r["offset"] for r in rows) == [0, 1, 2, 3, 4]
    assert all(r["error"] is None for r in rows)


def test_pushed_rows_out_of_offset_order_are_refused():
    with pytest.raises(LaneOrderBroken, match="not strictly increasing after 5"):
        _pump_rows("tests.spark_jobs.handlers_for_tests:record_order", [(0, [4, 5]), (1, [1]), (0, [5])])


def test_a_failing_handler_in_one_lane_leaves_the_other_lanes_alone():
    rows = _pump_rows("tests.spark_jobs.handlers_for_tests:fail_on_offset_five",
                      [(0, [4]), (1, [5]), (0, [6]), (1, [7])], schema={})
    errors = {r["offset"]: r["error"] for r in rows}
    assert errors == {4: None, 6: None, 5: "handler failed: ValueError: cannot handle offset 5 of t-1", 7: None}
