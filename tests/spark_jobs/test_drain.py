"""The drain job end to end: real broker, real local Spark, Parquet on disk."""

from __future__ import annotations

import json
from collections import defaultdict

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient

from kprio_core.config import KprioConfig
from kprio_core.errors import HandlerError, RangeConflict, RangeIncomplete
from kprio_core.kafka.produce import Record, produce
from kprio_core.lanes import lane_of
from kprio_core.offsets import OffsetRange
from kprio_core.drain_plan import PlannedRange
from kprio_core.splits import split_ranges
from spark_jobs.drain import drain_batch, handler_in_read
from spark_jobs.output import read_output
from spark_jobs.stats import range_stats
from tests.spark_jobs.plans import plan_of, whole_plan

pytestmark = [pytest.mark.broker, pytest.mark.spark]

ORDER_HANDLER = "tests.spark_jobs.handlers_for_tests:record_order"


def _config(kafka_settings, tmp_path, *, handler="spark_jobs.handlers:decode_json", ordering=None, splits=None,
            **drain) -> KprioConfig:
    return KprioConfig(
        kafka=kafka_settings,
        drain={"handler": handler, "output_path": str(tmp_path / "out"), **drain},
        ordering=ordering or {"mode": "partition", "lanes": 1},
        splits=splits or {"max_records": 100_000},
        spark={"arrow_batch_records": 16},
    )


def test_drains_three_priorities_into_parquet_with_stats(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=3, partitions=2, records={2: 30, 1: 20, 0: 11},
                       schema={"i": "long", "amount": "double"})
    plan = whole_plan(kafka_settings, topic)
    config = _config(kafka_settings, tmp_path)
    result = drain_batch(spark, config, topic, "b-1", plan)
    assert result.records == 61 and result.errors == 0 and result.lost_offsets == 0
    assert result.records_by_priority() == {2: 30, 1: 20, 0: 11}
    for stats in result.ranges:
        assert (stats.records, stats.first_offset, stats.last_offset) == (stats.end - stats.start, stats.start,
                                                                             stats.end - 1)
    out = read_output(spark, config.drain.output_path, topic.name, "b-1", topic.schema_)
    rows = out.collect()
    assert len(rows) == 61
    assert result.bytes == sum(len(r.key) + len(r.value) for r in rows)
    assert {(r.priority, r.topic) for r in rows} == {(p, topic.priority_topic(p)) for p in range(3)}
    assert all(r.amount == r.i * 1.5 and r.error is None and r.batch_id == "b-1" and r.lane == 0 for r in rows)
    assert sorted(d.rsplit("/", 2)[1] for d in result.output_dirs) == ["priority=0", "priority=1", "priority=2"]
    assert json.loads(json.dumps(result.to_dict()))["records_by_priority"] == {"2": 30, "1": 20, "0": 11}
    # Reading the output back (the path for plans with very many ranges) measures the same.
    assert range_stats(spark, out, plan.ranges) == result.ranges


def _keyed(n: int, keys: int) -> list[Record]:
    return [Record(f"key-{i % keys}", json.dumps({"i": i}), None, 0) for i in range(n)]


@pytest.mark.parametrize("max_records", [1000, 37])  # one split per partition (no shuffle), then many splits
def test_each_lane_sees_its_records_in_offset_order(spark, kafka_settings, make_topic, tmp_path, max_records):
    topic = make_topic(priorities=1, partitions=2, schema={"seen": "long"})
    produce(kafka_settings, topic.priority_topic(0), _keyed(300, keys=23))
    produce(kafka_settings, topic.priority_topic(0), [r._replace(partition=1) for r in _keyed(120, keys=5)])
    config = _config(kafka_settings, tmp_path, handler=ORDER_HANDLER, ordering={"mode": "key", "lanes": 4},
                     splits={"max_records": max_records})
    result = drain_batch(spark, config, topic, "lanes", whole_plan(kafka_settings, topic))
    rows = read_output(spark, config.drain.output_path, topic.name, "lanes", topic.schema_).collect()
    assert result.records == len(rows) == 420
    by_lane: dict[tuple[int, int], list] = defaultdict(list)
    for r in rows:
        assert r.lane == lane_of(r.key, r.offset, 4)
        by_lane[(r.partition, r.lane)].append(r)
    assert len(by_lane) > 4  # both partitions, several lanes each
    for lane_rows in by_lane.values():
        # One handler call per lane saw its records 0, 1, 2, ... in strictly increasing offset order.
        in_seen_order = sorted(lane_rows, key=lambda r: r.seen)
        assert [r.seen for r in in_seen_order] == list(range(len(lane_rows)))
        offsets = [r.offset for r in in_seen_order]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    per_key: dict[tuple[int, bytes], list[int]] = defaultdict(list)
    for r in sorted(rows, key=lambda r: (r.partition, r.lane, r.seen)):
        per_key[(r.partition, r.key)].append(r.offset)
    assert all(offs == sorted(offs) for offs in per_key.values())


def test_one_lane_gives_whole_partition_order(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=2, partitions=2, records={1: 90, 0: 50}, schema={"seen": "long"})
    config = _config(kafka_settings, tmp_path, handler=ORDER_HANDLER, splits={"max_records": 13})
    drain_batch(spark, config, topic, "one-lane", whole_plan(kafka_settings, topic))
    rows = read_output(spark, config.drain.output_path, topic.name, "one-lane", topic.schema_).collect()
    assert len(rows) == 140
    for (t, p) in {(r.topic, r.partition) for r in rows}:
        part = sorted((r.seen, r.offset) for r in rows if (r.topic, r.partition) == (t, p))
        assert part == list(enumerate(range(len(part))))  # seen i <-> offset i: one call, whole partition


def test_replaying_a_batch_leaves_exactly_one_copy(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=2, partitions=2, records={1: 25, 0: 15})
    config = _config(kafka_settings, tmp_path)
    plan = whole_plan(kafka_settings, topic)
    first = drain_batch(spark, config, topic, "again", plan)
    second = drain_batch(spark, config, topic, "again", plan)
    other = drain_batch(spark, config, topic, "other", plan_of(topic, {1: [plan.ranges[0].range]}))
    assert first.to_dict()["ranges"] == second.to_dict()["ranges"]
    out = read_output(spark, config.drain.output_path, topic.name)
    keys = [(r.batch_id, r.topic, r.partition, r.offset) for r in out.collect()]
    assert len(keys) == len(set(keys)) == 40 + other.records
    assert not (tmp_path / "out" / "_staging").exists() or not any((tmp_path / "out" / "_staging").iterdir())
    # A rerun whose plan lost a priority removes that priority's old files of the batch too.
    drain_batch(spark, config, topic, "again", plan_of(topic, {1: [r.range for r in plan.ranges if r.priority == 1]}))
    assert {r.priority for r in read_output(spark, config.drain.output_path, topic.name, "again").collect()} == {1}


def test_malformed_values_are_kept_with_an_error(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1, schema={"i": "long"},
                       records={0: [("a", '{"i": 1}', None), ("b", "{not json", None), ("c", '{"i": "x"}', None),
                                    ("d", None, None)]})
    config = _config(kafka_settings, tmp_path)
    result = drain_batch(spark, config, topic, "bad", whole_plan(kafka_settings, topic))
    rows = read_output(spark, config.drain.output_path, topic.name, "bad", topic.schema_).orderBy("offset").collect()
    assert [(r.key, r.i, r.error is None) for r in rows] == [(b"a", 1, True), (b"b", None, False), (b"c", None, False),
                                                            (b"d", None, True)]
    assert rows[1].value == b"{not json" and rows[1].error.startswith("value is not JSON")
    assert rows[2].error == "field 'i': expected long, got str 'x'"
    assert rows[3].value is None  # the tombstone is kept, no error
    assert result.errors == 2 and result.ranges[0].errors == 2


def test_a_handler_that_raises_keeps_records_with_its_error(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1, records={0: 12})
    config = _config(kafka_settings, tmp_path, handler="tests.spark_jobs.handlers_for_tests:fail_on_offset_five")
    result = drain_batch(spark, config, topic, "raises", whole_plan(kafka_settings, topic))
    assert result.records == 12 and result.errors >= 7  # offset 5 and after, at least


def test_a_bad_handler_fails_before_spark_runs(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1)
    config = _config(kafka_settings, tmp_path, handler="tests.spark_jobs.handlers_for_tests:not_a_handler")
    with pytest.raises(HandlerError, match="does not accept"):
        drain_batch(spark, config, topic, "x", plan_of(topic, {0: [OffsetRange(topic.priority_topic(0), 0, 0, 1)]}))


def test_a_short_range_fails_the_batch_and_publishes_nothing(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1, records={0: 10})
    config = _config(kafka_settings, tmp_path)
    plan = plan_of(topic, {0: [OffsetRange(topic.priority_topic(0), 0, 0, 12)]})
    with pytest.raises(RangeIncomplete, match=r"\[0\]@\[0,12\) is incomplete: 2 of 12 offsets missing: \[10,12\)"):
        drain_batch(spark, config, topic, "short", plan)
    assert not (tmp_path / "out" / topic.name).exists()


def test_allow_data_loss_records_a_retention_gap(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=2, partitions=1, records={1: 30, 0: 5})
    name = topic.priority_topic(1)
    admin = AdminClient(kafka_settings.client_config())
    for future in admin.delete_records([ck.TopicPartition(name, 0, 12)],
                                       request_timeout=kafka_settings.timeout_s).values():
        future.result(timeout=kafka_settings.timeout_s)
    plan = plan_of(topic, {1: [OffsetRange(name, 0, 4, 30)], 0: [OffsetRange(topic.priority_topic(0), 0, 0, 5)]})
    with pytest.raises(RangeIncomplete, match=r"\[4,12\) \(deleted by retention: the log starts at 12\)"):
        drain_batch(spark, _config(kafka_settings, tmp_path), topic, "gap", plan)
    result = drain_batch(spark, _config(kafka_settings, tmp_path, allow_data_loss=True), topic, "gap", plan)
    stats = {s.priority: s for s in result.ranges}
    assert (stats[1].records, stats[1].first_offset, [(g.start, g.end) for g in stats[1].lost]) == (18, 12, [(4, 12)])
    assert stats[0].records == 5 and not stats[0].lost
    assert result.lost_offsets == 8 and result.to_dict()["ranges"][0]["lost"] == [[4, 12]]


def test_an_empty_plan_writes_nothing(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1)
    result = drain_batch(spark, _config(kafka_settings, tmp_path), topic, "empty", plan_of(topic, []))
    assert result.records == 0 and result.output_dirs == ()


def test_stats_name_ranges_of_the_plan_not_splits(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1, records={0: 40})
    config = _config(kafka_settings, tmp_path, splits={"max_records": 7})
    plan = plan_of(topic, [PlannedRange(0, OffsetRange(topic.priority_topic(0), 0, 0, 40))])
    result = drain_batch(spark, config, topic, "splits", plan)
    assert [(s.start, s.end, s.records) for s in result.ranges] == [(0, 40, 40)]


def test_overlapping_ranges_are_refused(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1, records={0: 10})
    name = topic.priority_topic(0)
    plan = plan_of(topic, {0: [OffsetRange(name, 0, 0, 6), OffsetRange(name, 0, 5, 10)]})
    with pytest.raises(RangeConflict, match=r"overlap"):
        drain_batch(spark, _config(kafka_settings, tmp_path), topic, "overlap", plan)


def test_key_order_on_fewer_partitions_than_cores_shuffles_and_keeps_lane_order(spark, kafka_settings, make_topic,
                                                                                tmp_path):
    topic = make_topic(priorities=1, partitions=1, schema={"seen": "long"})
    produce(kafka_settings, topic.priority_topic(0), _keyed(200, keys=11))
    config = _config(kafka_settings, tmp_path, handler=ORDER_HANDLER, ordering={"mode": "key", "lanes": 4},
                     splits={"max_records": 37})
    plan = whole_plan(kafka_settings, topic)
    splits = split_ranges(plan.ranges, 37, 1 << 40)
    assert not handler_in_read(4, splits, spark.sparkContext.defaultParallelism)  # one partition, 2 cores
    result = drain_batch(spark, config, topic, "shuffled", plan)
    rows = read_output(spark, config.drain.output_path, topic.name, "shuffled", topic.schema_).collect()
    assert result.records == len(rows) == 200 and result.ranges[0].first_offset == 0
    by_lane: dict[int, list] = defaultdict(list)
    for r in rows:
        assert r.lane == lane_of(r.key, r.offset, 4)
        by_lane[r.lane].append(r)
    assert len(by_lane) > 1
    for lane_rows in by_lane.values():
        in_seen_order = sorted(lane_rows, key=lambda r: r.seen)
        assert [r.seen for r in in_seen_order] == list(range(len(lane_rows)))  # one call per lane
        assert [r.offset for r in in_seen_order] == sorted(r.offset for r in lane_rows)


def test_several_ranges_of_one_partition_are_one_task_and_one_handler_call(spark, kafka_settings, make_topic,
                                                                            tmp_path):
    topic = make_topic(priorities=2, partitions=1, records={1: 40, 0: 9}, schema={"seen": "long"})
    name = topic.priority_topic(1)
    ranges = [PlannedRange(1, OffsetRange(name, 0, 0, 10)), PlannedRange(1, OffsetRange(name, 0, 20, 35)),
              PlannedRange(0, OffsetRange(topic.priority_topic(0), 0, 2, 9))]
    config = _config(kafka_settings, tmp_path, handler=ORDER_HANDLER, splits={"max_records": 4})
    result = drain_batch(spark, config, topic, "holes", plan_of(topic, ranges))
    assert [(s.start, s.end, s.records, s.first_offset, s.last_offset, s.lost) for s in result.ranges] == [
        (0, 10, 10, 0, 9, ()), (20, 35, 15, 20, 34, ()), (2, 9, 7, 2, 8, ())]
    rows = read_output(spark, config.drain.output_path, topic.name, "holes", topic.schema_).collect()
    assert result.bytes == sum(len(r.key) + len(r.value) for r in rows)
    high = sorted((r.seen, r.offset) for r in rows if r.topic == name)
    assert high == list(enumerate([*range(0, 10), *range(20, 35)]))  # seven splits, one call, offset order


def test_keys_values_headers_and_timestamps_come_through_the_drain_intact(spark, kafka_settings, make_topic,
                                                                           tmp_path):
    topic = make_topic(priorities=1, partitions=1, schema={"i": "long"})
    producer = ck.Producer(kafka_settings.client_config())
    sent = [(b"\x00\xff", b'{"i": 1}', [("h", b"\x00\x01"), ("empty", None)]), (None, None, None),
            (b"\xfe", None, [("k", b"")]), (b"", b'{"i": 2}', None)]
    for key, value, headers in sent:
        producer.produce(topic.priority_topic(0), key=key, value=value, headers=headers, partition=0,
                         timestamp=1_700_000_000_123)
    assert producer.flush(kafka_settings.timeout_s) == 0
    config = _config(kafka_settings, tmp_path)
    result = drain_batch(spark, config, topic, "intact", whole_plan(kafka_settings, topic))
    rows = read_output(spark, config.drain.output_path, topic.name, "intact", topic.schema_).orderBy("offset").collect()
    assert [(r.key, r.value, r.i, r.error) for r in rows] == [(b"\x00\xff", b'{"i": 1}', 1, None), (None, None, None, None),
                                                             (b"\xfe", None, None, None), (b"", b'{"i": 2}', 2, None)]
    assert [None if r.headers is None else [(h.key, h.value) for h in r.headers] for r in rows] == [
        [("h", b"\x00\x01"), ("empty", None)], None, [("k", b"")], None]
    assert {(r.timestamp.timestamp(), r.timestampType) for r in rows} == {(1_700_000_000.123, 0)}
    assert result.records == 4 and result.bytes == 2 + 8 + 1 + 8 and result.errors == 0
