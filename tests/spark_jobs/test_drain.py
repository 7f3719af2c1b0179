"""The drain end to end: real broker, real local Spark, staged Parquet on disk, publish."""

from __future__ import annotations

import json
import os
import re
from collections import defaultdict
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient
from pydantic import ValidationError

from kprio_core.config import KprioConfig
from kprio_core.errors import HandlerError, OutputUnavailable, RangeConflict
from kprio_core.kafka.produce import Record, produce
from kprio_core.lanes import Ordering, lane_of
from kprio_core.model.drain_plan import PlannedRange
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import DrainResult
from kprio_core.splits import split_ranges
from spark_jobs.drain import drain_batch, handler_in_read
from spark_jobs.output import live_files, publish, read_table
from tests.fixtures.small_disks import read_only_dir, tiny_disk
from tests.spark_jobs.on_disk import assert_conserved, file_metadata, read_dead_letters, read_output, staged_rows
from tests.spark_jobs.plans import plan_of, whole_plan

pytestmark = [pytest.mark.broker, pytest.mark.spark]

ORDER_HANDLER = "tests.spark_jobs.handlers_for_tests:record_order"

READERS = pytest.mark.parametrize("reader", ["python", "native"])
"""Tests every reader must pass alike: kprio-kafka and Spark's own kafka source (spark.reader)."""


def _config(kafka_settings, tmp_path, *, handler="spark_jobs.handlers:decode_json", ordering=None, splits=None,
            quality=None, reader="python", **drain) -> KprioConfig:
    return KprioConfig(
        kafka=kafka_settings,
        drain={"handler": handler, "output_path": str(tmp_path / "out"), "dead_letter_path": str(tmp_path / "dead"),
               **drain},
        ordering=ordering or {"mode": "partition", "lanes": 1},
        splits=splits or {"max_records": 100_000},
        quality=quality or {},
        spark={"arrow_batch_records": 16, "reader": reader},
    )


def _roots(config: KprioConfig) -> dict[str, str]:
    return {"output": config.drain.output_path, "dead-letters": config.drain.dead_letter_path}


def _drain(spark, config, topic, batch_id, plan, attempt=1) -> tuple[DrainResult, dict[str, list[dict]]]:
    """Drain, check conservation and the stats against the staged files; the result and the staged rows."""
    result = drain_batch(spark, config, topic, batch_id, attempt, plan)
    rows = staged_rows(result, _roots(config))
    assert_conserved(result, rows)
    return result, rows


def _publish(config, result, **kw) -> tuple[str, ...]:
    return publish(result, output_root=config.drain.output_path, dead_letter_root=config.drain.dead_letter_path, **kw)


@READERS
def test_drains_three_priorities_into_staged_parquet_then_publishes(spark, kafka_settings, make_topic, tmp_path, reader):
    topic = make_topic(priorities=3, partitions=2, records={2: 30, 1: 20, 0: 11},
                       schema={"i": "long", "amount": "double"})
    config = _config(kafka_settings, tmp_path, reader=reader)
    result, rows = _drain(spark, config, topic, "b-1", whole_plan(kafka_settings, topic))
    assert (result.batch_id, result.attempt, result.records, result.dead, result.lost_offsets) == ("b-1", 1, 61, 0, 0)
    assert result.by_priority() == {2: (30, 0), 1: (20, 0), 0: (11, 0)}
    assert result.seconds > 0 and result.staging == f"{tmp_path}/out/_staging/b-1.1"
    if reader == "python":  # the fused drain measures its records' time, a part of the drain's
        assert result.record_seconds is not None and 0 < result.record_seconds < result.seconds
    else:  # Spark's reader: the key-order shuffle, whose read is another stage, measures none
        assert result.record_seconds is None
    assert DrainResult.from_json(result.to_json()) == result
    assert all(r["amount"] == r["i"] * 1.5 for r in rows["output"])
    assert not (tmp_path / "out" / topic.name).exists()  # staged, not visible to readers
    published = _publish(config, result)
    assert sorted(Path(p).parent.name for p in published) == ["priority=0"] * 2 + ["priority=1"] * 2 + ["priority=2"] * 2
    p2 = [s for s in result.ranges if s.priority == 2 and s.range.partition == 0][0]
    stem = f"{tmp_path}/out/{topic.name}/priority=2/{topic.priority_topic(2)}+0+0000000000+{p2.range.end:010d}"
    # The shuffle path (the native reader's) numbers the parts of a range: <stem>.part-<n>.parquet.
    [first] = [p for p in published if re.fullmatch(re.escape(stem) + r"(\.part-\d+)?\.parquet", p)]
    assert file_metadata(first) == {"kprio.batch_id": "b-1", "kprio.attempt": "1", "kprio.range": str(p2.range)}
    assert not (tmp_path / "out" / "_staging" / "b-1.1").exists() and not (tmp_path / "dead" / "_staging" / "b-1.1").exists()
    out = read_output(spark, config.drain.output_path, topic.name, "b-1", topic.schema_).collect()
    assert len(out) == 61 and {(r.priority, r.topic) for r in out} == {(p, topic.priority_topic(p)) for p in range(3)}
    assert all(r.amount == r.i * 1.5 and r.error is None and r.batch_id == "b-1" and r.lane == 0 for r in out)
    assert read_table(config.drain.output_path, topic.name, batch_id="b-1").num_rows == 61


POISON = [
    ("good-0", '{"i": 0, "name": "a"}'),
    ("not-json", "{not json"),
    ("not-utf8", b"\xff\xfe\x00"),
    ("json-list", "[1, 2]"),
    ("wrong-type", '{"i": "zero", "name": "b"}'),
    ("missing-required", '{"name": "c"}'),
    ("tombstone", None),
    (None, '{"i": 7, "name": "null key"}'),
    ("good-1", '{"i": 8, "name": "d"}'),
]


@READERS
@pytest.mark.parametrize(
    ("quality", "dead_keys"),
    [
        ({}, ["not-json", "not-utf8", "json-list", "wrong-type", "missing-required"]),  # tombstone, null key: records
        ({"tombstones": "invalid", "null_keys": "invalid"},
         ["not-json", "not-utf8", "json-list", "wrong-type", "missing-required", "tombstone", None]),
    ],
)
def test_poison_records_go_to_the_dead_letters_every_offset_once(spark, kafka_settings, make_topic, tmp_path,
                                                                  quality, dead_keys, reader):
    topic = make_topic(priorities=1, partitions=1, schema={"i": "long", "name": "string"}, required_fields=("i",),
                       records={0: [(k, v, None, 0) for k, v in POISON]})
    config = _config(kafka_settings, tmp_path, quality=quality, reader=reader)
    result, rows = _drain(spark, config, topic, "poison", whole_plan(kafka_settings, topic))
    dead = {(r["key"].decode() if r["key"] else None): r for r in rows["dead-letters"]}
    assert sorted(dead, key=str) == sorted(dead_keys, key=str)
    assert (result.records, result.dead) == (len(POISON) - len(dead_keys), len(dead_keys))
    assert dead["not-json"]["error"].startswith("value is not JSON")
    assert dead["not-utf8"]["value"] == b"\xff\xfe\x00" and dead["not-utf8"]["error"].startswith("value is not JSON")
    assert dead["json-list"]["error"] == "value is a JSON list, not an object"
    assert dead["wrong-type"]["error"] == "field 'i': expected long, got str 'zero'"
    assert dead["missing-required"]["error"] == "required field 'i' is null"
    assert all(set(r) == {"key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers",
                          "priority", "batch_id", "lane", "error"} for r in rows["dead-letters"])
    if "tombstone" in dead_keys:
        assert dead["tombstone"]["error"] == "tombstone (null value) and quality.tombstones is 'invalid'"
        assert dead[None]["error"] == "null key and quality.null_keys is 'invalid'"
    else:
        kept = {(r["key"].decode() if r["key"] else None): r for r in rows["output"]}
        assert kept["tombstone"]["value"] is None and kept["tombstone"]["i"] is None  # a record, not a null field
        assert kept[None]["i"] == 7
    [stats] = result.ranges
    assert stats.nulls == (("i", 0),) and stats.invalid_in_output == 0
    _publish(config, result)
    dl = read_dead_letters(spark, config.drain.dead_letter_path, topic.name, "poison").collect()
    assert sorted(r.offset for r in dl) == sorted(r["offset"] for r in rows["dead-letters"])


def _keyed(n: int, keys: int) -> list[Record]:
    return [Record(f"key-{i % keys}", json.dumps({"i": i}), None, 0) for i in range(n)]


@READERS
@pytest.mark.parametrize("max_records", [1000, 37])  # one split per partition (fused), then many splits
def test_each_lane_sees_its_records_in_offset_order(spark, kafka_settings, make_topic, tmp_path, max_records, reader):
    topic = make_topic(priorities=1, partitions=2, schema={"seen": "long"})
    produce(kafka_settings, topic.priority_topic(0), _keyed(300, keys=23))
    produce(kafka_settings, topic.priority_topic(0), [r._replace(partition=1) for r in _keyed(120, keys=5)])
    config = _config(kafka_settings, tmp_path, handler=ORDER_HANDLER, ordering={"mode": "key", "lanes": 4},
                     splits={"max_records": max_records}, reader=reader)
    result, staged = _drain(spark, config, topic, "lanes", whole_plan(kafka_settings, topic))
    rows = staged["output"]
    assert result.records == len(rows) == 420 and result.lanes == 4 and result.ordering is Ordering.KEY
    _assert_lane_order(rows, lanes=4)


def _assert_lane_order(rows: list[dict], lanes: int) -> None:
    """Each lane got one handler call that saw its records 0, 1, 2, ... in strictly increasing offset order."""
    by_lane: dict[tuple[int, int], list] = defaultdict(list)
    for r in rows:
        assert r["lane"] == lane_of(r["key"], r["offset"], lanes)
        by_lane[(r["partition"], r["lane"])].append(r)
    assert len(by_lane) > 1
    for lane_rows in by_lane.values():
        in_seen_order = sorted(lane_rows, key=lambda r: r["seen"])
        assert [r["seen"] for r in in_seen_order] == list(range(len(lane_rows)))
        offsets = [r["offset"] for r in in_seen_order]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    per_key: dict[tuple[int, bytes], list[int]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r["partition"], r["lane"], r["seen"])):
        per_key[(r["partition"], r["key"])].append(r["offset"])
    assert all(offs == sorted(offs) for offs in per_key.values())


@READERS
def test_one_lane_gives_whole_partition_order(spark, kafka_settings, make_topic, tmp_path, reader):
    topic = make_topic(priorities=2, partitions=2, records={1: 90, 0: 50}, schema={"seen": "long"})
    config = _config(kafka_settings, tmp_path, handler=ORDER_HANDLER, splits={"max_records": 13}, reader=reader)
    _, staged = _drain(spark, config, topic, "one-lane", whole_plan(kafka_settings, topic))
    rows = staged["output"]
    assert len(rows) == 140
    for (t, p) in {(r["topic"], r["partition"]) for r in rows}:
        part = sorted((r["seen"], r["offset"]) for r in rows if (r["topic"], r["partition"]) == (t, p))
        assert part == list(enumerate(range(len(part))))  # seen i <-> offset i: one call, whole partition


def test_key_order_on_fewer_partitions_than_cores_shuffles_and_keeps_lane_order(spark, kafka_settings, make_topic,
                                                                                tmp_path):
    topic = make_topic(priorities=1, partitions=1, schema={"seen": "long"})
    produce(kafka_settings, topic.priority_topic(0), _keyed(200, keys=11))
    config = _config(kafka_settings, tmp_path, handler=ORDER_HANDLER, ordering={"mode": "key", "lanes": 4},
                     splits={"max_records": 37})
    plan = whole_plan(kafka_settings, topic)
    assert not handler_in_read(4, split_ranges(plan.ranges, 37, 1 << 40), spark.sparkContext.defaultParallelism)
    result, staged = _drain(spark, config, topic, "shuffled", plan)
    rows = staged["output"]
    assert result.records == len(rows) == 200 and result.ranges[0].first == 0
    assert result.record_seconds is None, "its read is another stage: no records' time measured"
    _assert_lane_order(rows, lanes=4)
    # Several tasks held the one range: each wrote its own numbered part.
    names = sorted(Path(f).name for f in result.ranges[0].files)
    assert len(names) > 1 and all(".part-" in n for n in names), names
    published = _publish(config, result)
    assert len(read_output(spark, config.drain.output_path, topic.name, "shuffled", topic.schema_).collect()) == 200
    assert len(published) == len(names)


def test_rerunning_a_range_replaces_its_files(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=2, partitions=2, records={1: 25, 0: 15})
    config = _config(kafka_settings, tmp_path)
    plan = whole_plan(kafka_settings, topic)
    first, _ = _drain(spark, config, topic, "again", plan, attempt=1)
    names_1 = sorted(Path(p).name for p in _publish(config, first))
    second, _ = _drain(spark, config, topic, "again", plan, attempt=2)
    names_2 = sorted(Path(p).name for p in _publish(config, second))
    assert names_1 == names_2  # same ranges, same names: replaced
    assert [(s.output, s.distinct, s.bytes) for s in first.ranges] == [(s.output, s.distinct, s.bytes) for s in second.ranges]
    keys = [(r.topic, r.partition, r.offset) for r in read_output(spark, config.drain.output_path, topic.name).collect()]
    assert len(keys) == len(set(keys)) == 40
    assert {f.attempt for f in live_files(config.drain.output_path, topic.name)} == {2}


def test_publish_removes_overlapping_leftovers_of_another_name(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1, records={0: 30})
    name = topic.priority_topic(0)
    # A first life drained [0, 20) and, with a broken handler, sent every record to the dead letters.
    broken = _config(kafka_settings, tmp_path, handler="tests.spark_jobs.handlers_for_tests:fails_every_record")
    old, _ = _drain(spark, broken, topic, "b-000001", plan_of(topic, {0: [OffsetRange(name, 0, 0, 20)]}))
    assert old.dead == 20
    _publish(broken, old)
    # A second life (the ledger lost) plans [0, 30) again under the same batch id, with the handler fixed.
    config = _config(kafka_settings, tmp_path)
    new, _ = _drain(spark, config, topic, "b-000001", plan_of(topic, {0: [OffsetRange(name, 0, 0, 30)]}))
    assert (new.records, new.dead) == (30, 0)
    _publish(config, new)
    live = live_files(config.drain.output_path, topic.name)
    assert [(f.range, f.batch_id) for f in live] == [(OffsetRange(name, 0, 0, 30), "b-000001")]
    assert live_files(config.drain.dead_letter_path, topic.name) == ()  # the old dead letters are gone too
    out = read_table(config.drain.output_path, topic.name)
    assert sorted(out.column("offset").to_pylist()) == list(range(30))


def test_publish_of_some_ranges_only(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=2, partitions=2, records={1: 20, 0: 10})
    config = _config(kafka_settings, tmp_path)
    result, _ = _drain(spark, config, topic, "subset", whole_plan(kafka_settings, topic))
    chosen = [s.range for s in result.ranges if s.priority == 1]
    published = _publish(config, result, ranges=chosen)
    assert len(published) == 2
    assert {f.range for f in live_files(config.drain.output_path, topic.name)} == set(chosen)
    assert not (tmp_path / "out" / "_staging" / "subset.1").exists()


def test_a_range_that_fails_carries_its_failure_and_the_others_succeed(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=2, records={0: 40}, schema={"i": "long"})
    name = topic.priority_topic(0)
    plan = whole_plan(kafka_settings, topic)
    missing = PlannedRange(0, OffsetRange(name, 7, 0, 5))  # the topic has no partition 7
    plan = plan_of(topic, [*plan.ranges, missing])
    config = _config(kafka_settings, tmp_path, handler="tests.spark_jobs.handlers_for_tests:drops_a_row_on_partition_zero")
    result = drain_batch(spark, config, topic, "partly", 1, plan)
    by_partition = {s.range.partition: s for s in result.ranges}
    assert by_partition[1].failure is None and by_partition[1].complete and by_partition[1].output == 20
    assert by_partition[0].failure.startswith(f"{name}[0]@[0,20): handler ")
    assert "answered a frame of" in by_partition[0].failure
    assert by_partition[7].failure.startswith(f"{name}[7]@[0,5): ")
    assert [s.range.partition for s in result.failed_ranges] == [0, 7]
    assert_conserved(result, staged_rows(result, _roots(config)))
    assert by_partition[7].failure == f"{name}[7]@[0,5): topic {name} has no partition 7 (it has 0..1)"
    # Only the good range is published; the failed ranges' staged files go with the staging dir.
    _publish(config, result)
    assert [f.range.partition for f in live_files(config.drain.output_path, topic.name)] == [1]


def test_a_short_range_fails_naming_the_missing_offsets(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1, records={0: 10})
    config = _config(kafka_settings, tmp_path)
    result = drain_batch(spark, config, topic, "short", 1, plan_of(topic, {0: [OffsetRange(topic.priority_topic(0), 0, 0, 12)]}))
    [stats] = result.ranges
    assert f"{topic.priority_topic(0)}[0]@[0,12): range " in stats.failure
    assert "[0]@[0,12) is incomplete: 2 of 12 offsets missing: [10,12) (end of partition at last stable offset 10)" in \
        stats.failure
    assert not stats.complete
    _publish(config, result)  # nothing to publish
    assert not (tmp_path / "out" / topic.name).exists()


def _delete_below(kafka_settings, topic: str, partition: int, offset: int) -> None:
    admin = AdminClient(kafka_settings.client_config())
    for future in admin.delete_records([ck.TopicPartition(topic, partition, offset)],
                                       request_timeout=kafka_settings.timeout_s).values():
        future.result(timeout=kafka_settings.timeout_s)


@pytest.mark.parametrize("key_order", [False, True])  # fused; the key-order shuffle (one partition, 2 cores)
def test_allow_data_loss_records_a_retention_gap(spark, kafka_settings, make_topic, tmp_path, key_order):
    topic = make_topic(priorities=2, partitions=1, records={1: 30, 0: 5})
    name = topic.priority_topic(1)
    _delete_below(kafka_settings, name, 0, 12)
    ranges = {1: [OffsetRange(name, 0, 4, 30)], 0: [OffsetRange(topic.priority_topic(0), 0, 0, 5)]}
    plan = plan_of(topic, {1: ranges[1]} if key_order else ranges)
    kw = {"ordering": {"mode": "key", "lanes": 3}, "splits": {"max_records": 7}} if key_order else {}
    failed = drain_batch(spark, _config(kafka_settings, tmp_path, **kw), topic, "gap", 1, plan)
    stats = {s.priority: s for s in failed.ranges}
    if key_order:  # splits of 7 read in parallel: [4,11) or [11,18) is the first to fail
        assert re.fullmatch(rf"{name}\[0\]@\[4,30\): range {name}\[0\]@\[(4,11|11,18)\) is incomplete: \d+ of 7 "
                            r"offsets missing: \[(4,11|11,12)\) \(deleted by retention: the log starts at 12\)",
                            stats[1].failure), stats[1].failure
    else:
        assert stats[1].failure == (f"{name}[0]@[4,30): range {name}[0]@[4,30) is incomplete: 8 of 26 offsets missing: "
                                    "[4,12) (deleted by retention: the log starts at 12)")
    config = _config(kafka_settings, tmp_path, allow_data_loss=True, **kw)
    result, _ = _drain(spark, config, topic, "gap", plan, attempt=2)
    stats = {s.priority: s for s in result.ranges}
    assert (stats[1].output, stats[1].first, [(g.start, g.end) for g in stats[1].lost]) == (18, 12, [(4, 12)])
    assert stats[1].complete and result.lost_offsets == 8
    if not key_order:
        assert stats[0].output == 5 and not stats[0].lost


def test_an_empty_plan_writes_nothing(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1)
    config = _config(kafka_settings, tmp_path)
    result = drain_batch(spark, config, topic, "empty", 1, plan_of(topic, []))
    assert result.records == 0 and result.ranges == ()
    assert _publish(config, result) == ()


def test_stats_name_ranges_of_the_plan_not_splits(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1, records={0: 40})
    config = _config(kafka_settings, tmp_path, splits={"max_records": 7})
    plan = plan_of(topic, [PlannedRange(0, OffsetRange(topic.priority_topic(0), 0, 0, 40))])
    result, _ = _drain(spark, config, topic, "splits", plan)
    assert [(s.range.start, s.range.end, s.output, len(s.files)) for s in result.ranges] == [(0, 40, 40, 1)]


def test_overlapping_ranges_are_refused(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1, records={0: 10})
    name = topic.priority_topic(0)
    plan = plan_of(topic, {0: [OffsetRange(name, 0, 0, 6), OffsetRange(name, 0, 5, 10)]})
    with pytest.raises(RangeConflict, match=r"overlap"):
        drain_batch(spark, _config(kafka_settings, tmp_path), topic, "overlap", 1, plan)


def test_a_bad_handler_fails_at_load_and_before_spark_runs(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1)
    bad = "tests.spark_jobs.handlers_for_tests:not_a_handler"
    with pytest.raises(ValidationError, match="does not accept"):
        _config(kafka_settings, tmp_path, handler=bad)
    # A configuration that skipped validation (model_copy) is still refused by the drain, before Spark runs.
    good = _config(kafka_settings, tmp_path)
    config = good.model_copy(update={"drain": good.drain.model_copy(update={"handler": bad})})
    with pytest.raises(HandlerError, match="does not accept"):
        drain_batch(spark, config, topic, "x", 1, plan_of(topic, {0: [OffsetRange(topic.priority_topic(0), 0, 0, 1)]}))


def test_a_handler_that_raises_on_one_record_sends_only_that_record_to_the_dead_letters(spark, kafka_settings,
                                                                                       make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1, records={0: 12})
    config = _config(kafka_settings, tmp_path, handler="tests.spark_jobs.handlers_for_tests:fail_on_offset_five")
    result, rows = _drain(spark, config, topic, "raises", whole_plan(kafka_settings, topic))
    assert (result.records, result.dead) == (11, 1)  # its lane went on after it
    assert [(r["offset"], r["error"]) for r in rows["dead-letters"]] == [
        (5, f"handler failed: ValueError: cannot handle offset 5 of {topic.priority_topic(0)}")]
    assert sorted(r["offset"] for r in rows["output"]) == [o for o in range(12) if o != 5]


@READERS
@pytest.mark.parametrize("ordering", [{"mode": "partition", "lanes": 1}, {"mode": "key", "lanes": 64}],
                         ids=["one lane", "a lane per key"])
def test_a_handler_raising_on_every_record_fails_its_ranges_and_quarantines_none(spark, kafka_settings, make_topic,
                                                                                tmp_path, reader, ordering):
    """A broken handler is the handler's failure, not the records': in one lane, or in key lanes of a record or two.
    The python reader drains fused, where every record went to the dead letters before; the native reader shuffles,
    where a task that failed at partition 0's lane end left partition 1's range complete with nothing written."""
    topic = make_topic(priorities=1, partitions=2, records={0: 12})
    config = _config(kafka_settings, tmp_path, handler="tests.spark_jobs.handlers_for_tests:fail_on_every_record",
                     ordering=ordering, reader=reader)
    result = drain_batch(spark, config, topic, "broken", 1, whole_plan(kafka_settings, topic))
    assert [s.range.partition for s in result.ranges] == [0, 1]
    for s in result.ranges:
        assert s.failure is not None and "raised on every record of" in s.failure and not s.complete, s.failure
        assert "the handler fails, not the records" in s.failure and s.error.kind == "HandlerError", s.failure


def test_several_ranges_of_one_partition_are_one_task_and_one_handler_call(spark, kafka_settings, make_topic,
                                                                            tmp_path):
    topic = make_topic(priorities=2, partitions=1, records={1: 40, 0: 9}, schema={"seen": "long"})
    name = topic.priority_topic(1)
    ranges = [PlannedRange(1, OffsetRange(name, 0, 0, 10)), PlannedRange(1, OffsetRange(name, 0, 20, 35)),
              PlannedRange(0, OffsetRange(topic.priority_topic(0), 0, 2, 9))]
    config = _config(kafka_settings, tmp_path, handler=ORDER_HANDLER, splits={"max_records": 4})
    result, staged = _drain(spark, config, topic, "holes", plan_of(topic, ranges))
    assert [(s.range.start, s.range.end, s.output, s.first, s.last, s.lost) for s in result.ranges] == [
        (0, 10, 10, 0, 9, ()), (20, 35, 15, 20, 34, ()), (2, 9, 7, 2, 8, ())]
    high = sorted((r["seen"], r["offset"]) for r in staged["output"] if r["topic"] == name)
    assert high == list(enumerate([*range(0, 10), *range(20, 35)]))  # seven splits, one call, offset order


@READERS
def test_keys_values_headers_and_timestamps_come_through_intact(spark, kafka_settings, make_topic, tmp_path, reader):
    topic = make_topic(priorities=1, partitions=1, schema={"i": "long"})
    producer = ck.Producer(kafka_settings.client_config())
    sent = [(b"\x00\xff", b'{"i": 1}', [("h", b"\x00\x01"), ("empty", None)]), (None, None, None),
            (b"\xfe", None, [("k", b"")]), (b"", b'{"i": 2}', None), (b"bad", b"\x80", [("why", b"x")])]
    for key, value, headers in sent:
        producer.produce(topic.priority_topic(0), key=key, value=value, headers=headers, partition=0,
                         timestamp=1_700_000_000_123)
    assert producer.flush(kafka_settings.timeout_s) == 0
    config = _config(kafka_settings, tmp_path, reader=reader)
    result, staged = _drain(spark, config, topic, "intact", whole_plan(kafka_settings, topic))
    rows = sorted(staged["output"] + staged["dead-letters"], key=lambda r: r["offset"])
    assert [(r["key"], r["value"]) for r in rows] == [(k, v) for k, v, _ in sent]
    assert [r.get("i") for r in rows] == [1, None, None, 2, None]
    assert [r["headers"] and [(h["key"], h["value"]) for h in r["headers"]] for r in rows] == [
        [("h", b"\x00\x01"), ("empty", None)], None, [("k", b"")], None, [("why", b"x")]]
    assert {(r["timestamp"].timestamp(), r["timestampType"]) for r in rows} == {(1_700_000_000.123, 0)}
    assert (result.records, result.dead, result.bytes) == (4, 1, 2 + 8 + 1 + 8 + 3 + 1)


def test_a_read_only_output_root_fails_before_spark_naming_the_path(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1, records={0: 3})
    with read_only_dir(tmp_path / "ro") as ro:
        config = _config(kafka_settings, tmp_path).model_copy(
            update={"drain": _config(kafka_settings, tmp_path).drain.model_copy(update={"output_path": str(ro / "out")})})
        with pytest.raises(OutputUnavailable) as caught:
            drain_batch(spark, config, topic, "b-9", 1, whole_plan(kafka_settings, topic))
    message = str(caught.value)
    assert caught.value.code == "output_unavailable"
    assert re.match(rf"the output root {re.escape(str(ro))}/out (is read-only|is not writable \(permission denied\)): ",
                    message), message
    assert re.search(r"(Read-only file system|Permission denied): " + re.escape(str(ro)), message), message
    assert "o1" not in message and "Py4J" not in message


def test_a_full_disk_fails_the_ranges_that_write_there_with_the_path(spark, kafka_settings, make_topic, tmp_path):
    # Partition 0 holds 300 poison records of ~1 KiB (dead letters), partition 1 only good ones.
    bad = [(f"k{i}", os.urandom(500).hex(), None, 0) for i in range(300)]  # not JSON, not compressible
    good = [(f"k{i}", json.dumps({"i": i}), None, 1) for i in range(50)]
    topic = make_topic(priorities=1, partitions=2, schema={"i": "long"}, records={0: bad + good})
    with tiny_disk(tmp_path / "small") as small:
        base = _config(kafka_settings, tmp_path)
        config = base.model_copy(update={"drain": base.drain.model_copy(update={"dead_letter_path": str(small)})})
        result = drain_batch(spark, config, topic, "full", 1, whole_plan(kafka_settings, topic))
        by_partition = {s.range.partition: s for s in result.ranges}
        assert by_partition[1].failure is None and by_partition[1].output == 50
        failure = by_partition[0].failure
        stage = f"{small}/_staging/full.1/{topic.name}/priority=0/{topic.priority_topic(0)}+0+0000000000+0000000300"
        assert failure.startswith(f"{topic.priority_topic(0)}[0]@[0,300): No space left on device: {stage}"), failure
        assert "Error" not in failure and "Py4J" not in failure
