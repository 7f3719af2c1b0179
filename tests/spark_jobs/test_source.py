"""The kprio-kafka data source (records mode) against the real broker and a real local Spark."""

from __future__ import annotations

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient

from kprio_core.config import KprioConfig
from kprio_core.errors import ConfigError
from kprio_core.model.drain_plan import PlannedRange
from kprio_core.model.offsets import OffsetRange
from kprio_core.splits import split_ranges
from spark_jobs.kafka_schema import KAFKA_COLUMNS
from spark_jobs.remote_errors import kprio_error_in
from spark_jobs.source import FORMAT, KafkaSource, read_records, source_options
from tests.spark_jobs.plans import whole_plan

pytestmark = [pytest.mark.broker, pytest.mark.spark]


def _config(kafka_settings, **drain) -> KprioConfig:
    return KprioConfig(kafka=kafka_settings, drain={**drain}, spark={"arrow_batch_records": 7})


def test_reads_exactly_the_planned_ranges_over_priorities_and_partitions(spark, kafka_settings, make_topic):
    topic = make_topic(priorities=3, partitions=3, records={2: 40, 1: 31, 0: 17})
    plan = whole_plan(kafka_settings, topic)
    # Cut every partition's range in two so some reads start mid-partition, and drop the first record.
    ranges = [PlannedRange(r.priority, OffsetRange(r.range.topic, r.range.partition, r.range.start + 1, r.range.end))
              for r in plan.ranges]
    splits = split_ranges(ranges, max_records=6, max_bytes=1 << 30)
    df = read_records(spark, _config(kafka_settings), splits)
    assert df.columns == list(KAFKA_COLUMNS)
    assert df.rdd.getNumPartitions() == len(splits)
    got = sorted((r.topic, r.partition, r.offset) for r in df.select("topic", "partition", "offset").collect())
    want = sorted((r.range.topic, r.range.partition, o) for r in ranges for o in range(r.range.start, r.range.end))
    assert got == want
    assert len(got) == 40 + 31 + 17 - 9


def test_schema_matches_sparks_kafka_source(spark, kafka_settings, make_topic):
    topic = make_topic(priorities=1, partitions=1, records={0: 1})
    df = read_records(spark, _config(kafka_settings), whole_plan(kafka_settings, topic).ranges)
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")


def test_tombstones_binary_keys_and_headers_survive(spark, kafka_settings, make_topic):
    topic = make_topic(priorities=1, partitions=1)
    name = topic.priority_topic(0)
    producer = ck.Producer(kafka_settings.client_config())
    sent = [
        (b"\x00\xff\x10", b"v0", [("h", b"\x00\x01"), ("empty", None)]),
        (None, None, None),  # null key, tombstone
        (b"\xfe", None, [("k", b"")]),  # tombstone with headers
        (b"", b"\x80\x81", None),  # empty key is not a null key
    ]
    for key, value, headers in sent:
        producer.produce(name, key=key, value=value, headers=headers, partition=0, timestamp=1_700_000_000_123)
    assert producer.flush(kafka_settings.timeout_s) == 0
    rows = read_records(spark, _config(kafka_settings), whole_plan(kafka_settings, topic).ranges).orderBy("offset").collect()
    assert [(r.key, r.value) for r in rows] == [(k, v) for k, v, _ in sent]
    assert [None if r.headers is None else [(h.key, h.value) for h in r.headers] for r in rows] == [
        [("h", b"\x00\x01"), ("empty", None)], None, [("k", b"")], None]
    assert {(r.timestamp.timestamp(), r.timestampType) for r in rows} == {(1_700_000_000.123, 0)}


def test_a_missing_partition_fails_at_once_by_name(spark, kafka_settings, make_topic):
    topic = make_topic(priorities=1, partitions=2, records={0: 4})
    name = topic.priority_topic(0)
    with pytest.raises(Exception) as caught:
        read_records(spark, _config(kafka_settings), [PlannedRange(0, OffsetRange(name, 3, 0, 4))]).count()
    err = kprio_error_in(caught.value)
    assert (type(err).__name__, str(err)) == ("KafkaOperationFailed", f"topic {name} has no partition 3 (it has 0..1)")
    with pytest.raises(Exception) as caught:
        read_records(spark, _config(kafka_settings), [PlannedRange(0, OffsetRange(name + "-nope", 0, 0, 4))]).count()
    assert type(kprio_error_in(caught.value)).__name__ == "TopicMissing"


def test_a_read_asks_for_metadata_only_when_its_first_slice_brings_nothing(kafka_settings, make_topic, monkeypatch):
    """A new consumer's metadata request waits about 50 ms for its first connection, while records that are
    there arrive in a few: the topic and partition are checked only when a consume() slice brought nothing,
    and a missing partition still fails by name."""
    from kprio_core.errors import KafkaOperationFailed
    from spark_jobs import range_reader
    from spark_jobs.kafka_schema import arrow_schema_of, kafka_struct

    checked: list[OffsetRange] = []
    real = range_reader._check_partition

    def check_partition(consumer, rng, *rest):
        checked.append(rng)
        return real(consumer, rng, *rest)

    monkeypatch.setattr(range_reader, "_check_partition", check_partition)
    topic = make_topic(priorities=1, partitions=2, records={0: 8})
    name = topic.priority_topic(0)
    reader = KafkaSource(source_options(_config(kafka_settings), [])).reader(None)  # what a task gets
    client, settings, schema = reader.client, reader.settings, arrow_schema_of(kafka_struct())
    monkeypatch.setattr(range_reader, "POLL_SLICE_S", 10.0)  # the records come long before a slice ends
    there = OffsetRange(name, 0, 0, 4)
    assert sum(b.num_rows for b in range_reader.read_range(there, client, settings, schema)) == 4
    assert checked == []
    monkeypatch.setattr(range_reader, "POLL_SLICE_S", 0.1)
    missing = OffsetRange(name, 5, 0, 4)
    with pytest.raises(KafkaOperationFailed, match=f"^topic {name} has no partition 5 \\(it has 0..1\\)$"):
        list(range_reader.read_range(missing, client, settings, schema))
    assert checked == [missing]


def test_a_read_by_a_tls_client_on_the_plaintext_listener_fails_at_once_naming_the_setting(kafka_settings, make_topic):
    """The broker only closes a TLS client's connections: the python reader asks the listener what it speaks after
    its first silent second, instead of waiting for the stall timeout (kafka.timeout_s) as an unreachable broker."""
    import time

    from kprio_core.errors import SecurityProtocolMismatch
    from spark_jobs import range_reader
    from spark_jobs.kafka_schema import arrow_schema_of, kafka_struct

    topic = make_topic(priorities=1, partitions=1, records={0: 3})
    tls = kafka_settings.model_copy(update={"client": {**kafka_settings.client, "security.protocol": "SSL"},
                                            "timeout_s": 30.0})
    reader = KafkaSource(source_options(_config(tls), [])).reader(None)
    started = time.monotonic()
    with pytest.raises(SecurityProtocolMismatch, match="^kafka.client.security.protocol is SSL, but the broker's "
                                                       "listener speaks PLAINTEXT"):
        list(range_reader.read_range(OffsetRange(topic.priority_topic(0), 0, 0, 3), reader.client, reader.settings,
                                     arrow_schema_of(kafka_struct())))
    assert time.monotonic() - started < 10


def test_a_range_beyond_the_high_watermark_fails_naming_the_missing_offsets(spark, kafka_settings, make_topic):
    topic = make_topic(priorities=1, partitions=1, records={0: 10})
    short = PlannedRange(0, OffsetRange(topic.priority_topic(0), 0, 4, 15))
    with pytest.raises(Exception) as caught:
        read_records(spark, _config(kafka_settings), [short]).count()
    err = kprio_error_in(caught.value)
    assert type(err).__name__ == "RangeIncomplete"
    assert str(err) == (f"range {topic.priority_topic(0)}[0]@[4,15) is incomplete: 5 of 11 offsets missing: "
                        "[10,15) (end of partition at last stable offset 10)")


def test_records_beyond_the_range_end_are_never_returned(spark, kafka_settings, make_topic):
    topic = make_topic(priorities=1, partitions=1, records={0: 30})
    rows = read_records(spark, _config(kafka_settings), [PlannedRange(0, OffsetRange(topic.priority_topic(0), 0, 3, 11))])
    assert [r.offset for r in rows.orderBy("offset").collect()] == list(range(3, 11))


def _delete_below(kafka_settings, topic: str, partition: int, offset: int) -> None:
    admin = AdminClient(kafka_settings.client_config())
    futures = admin.delete_records([ck.TopicPartition(topic, partition, offset)],
                                   request_timeout=kafka_settings.timeout_s)
    for future in futures.values():
        future.result(timeout=kafka_settings.timeout_s)


def test_records_lost_to_retention_fail_the_read_unless_allowed(spark, kafka_settings, make_topic):
    topic = make_topic(priorities=1, partitions=1, records={0: 20})
    name = topic.priority_topic(0)
    _delete_below(kafka_settings, name, 0, 8)
    rng = [PlannedRange(0, OffsetRange(name, 0, 2, 20))]
    with pytest.raises(Exception) as caught:
        read_records(spark, _config(kafka_settings), rng).count()
    assert str(kprio_error_in(caught.value)) == (
        f"range {name}[0]@[2,20) is incomplete: 6 of 18 offsets missing: [2,8) "
        "(deleted by retention: the log starts at 8)")
    rows = read_records(spark, _config(kafka_settings, allow_data_loss=True), rng).collect()
    assert sorted(r.offset for r in rows) == list(range(8, 20))


@pytest.mark.parametrize("drain", [False, True])
def test_options_carry_no_secret_into_the_readers_repr(kafka_settings, drain):
    from kprio_core.lanes import Ordering
    from spark_jobs.drain_task import DrainSpec
    from spark_jobs.validity import Validity

    config = KprioConfig(kafka={**kafka_settings.model_dump(), "secrets": {"sasl.password": "hunter2"}})
    spec = DrainSpec("b-1", 1, "t", "spark_jobs.handlers:decode_json", (), Validity(), Ordering.PARTITION, 1, (),
                     "s3://bucket/out?secret_key=hunter3", "/dead", 100) if drain else None
    opts = source_options(config, [], drain=spec)
    assert "hunter2" in opts["settings"] and "secrets" in opts["settings"]  # in the option Spark redacts...
    reader = KafkaSource(opts).reader(KafkaSource(opts).schema())
    assert reader.client["sasl.password"] == "hunter2"  # ...the executors need it...
    assert "hunter2" not in repr(reader) and "hunter3" not in repr(reader)  # ...but it is never shown
    assert "hunter2" not in repr(reader.settings) and "hunter2" not in reader.settings.model_dump_json()
    assert ("DrainSpec(b-1.1" in repr(reader)) == drain


def test_the_drain_mode_returns_stats_rows_one_task_per_topic_partition():
    from spark_jobs.range_counts import stats_struct
    from spark_jobs.source import input_partitions, parse_splits

    opts = {"splits": '[{"topic":"t-0","partition":1,"start":0,"end":5,"priority":0},'
                      '{"topic":"t-0","partition":1,"start":5,"end":9,"priority":0}]', "kafka.bootstrap.servers": "x:1"}
    assert KafkaSource(opts).schema().simpleString().startswith("struct<key:binary")
    assert KafkaSource({**opts, "drain": "{}"}).schema() == stats_struct()
    splits = parse_splits(opts["splits"])
    assert [[r.splits for r in t.reads] for t in input_partitions(splits, by_topic_partition=True)] == [
        [((0, 5), (5, 9))]]
    assert [[r.splits for r in t.reads] for t in input_partitions(splits, by_topic_partition=False)] == [
        [((0, 5),)], [((5, 9),)]]


@pytest.mark.parametrize(
    ("records", "tasks", "want"),
    [
        ([10, 10, 10, 10], 2, [[0, 2], [1, 3]]),  # equal partitions: two each
        ([100, 10, 10, 10], 2, [[0], [1, 2, 3]]),  # one big partition gets a task of its own
        ([5, 5], 8, [[0], [1]]),  # never more tasks than partitions
        ([5, 5, 5], None, [[0], [1], [2]]),  # no core count: one task per topic partition
    ],
)
def test_topic_partitions_are_packed_into_tasks_by_planned_records(records, tasks, want):
    from spark_jobs.source import input_partitions

    splits = [PlannedRange(0, OffsetRange("t-0", p, 0, n)) for p, n in enumerate(records)]
    packed = input_partitions(splits, by_topic_partition=True, tasks=tasks)
    assert [[r.partition for r in t.reads] for t in packed] == want


def test_missing_options_are_config_errors():
    with pytest.raises(ConfigError, match="'splits' is required"):
        KafkaSource({"kafka.bootstrap.servers": "x:1"}).reader(None)
    with pytest.raises(ConfigError, match="kafka.bootstrap.servers"):
        KafkaSource({"splits": "[]"}).reader(None)
    with pytest.raises(ConfigError, match="not a list of ranges"):
        KafkaSource({"splits": '[{"topic": "t"}]', "kafka.bootstrap.servers": "x:1"}).reader(None)
    with pytest.raises(ConfigError, match="not a drain spec"):
        KafkaSource({"splits": "[]", "kafka.bootstrap.servers": "x:1", "drain": '{"batch_id": 1}'}).reader(None)
    with pytest.raises(ConfigError, match=r"^spark.fetch_max_bytes: .* \(kprio-kafka option 'settings'\)$"):
        KafkaSource({"splits": "[]", "settings": '{"spark": {"fetch_max_bytes": 1}}'}).reader(None)
    with pytest.raises(ConfigError, match="not a valid JSON|Invalid JSON") as caught:
        KafkaSource({"splits": "[]", "settings": '{"kafka": {"secrets": {"sasl.password": "hunter2"'}).reader(None)
    assert "hunter2" not in str(caught.value)  # the value of a bad option is never echoed: it may be a secret


def test_format_name_is_not_kafka():
    assert FORMAT == "kprio-kafka"
