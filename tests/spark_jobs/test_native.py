"""Spark's own kafka source driven by the same plan: generated options, and a read where the jar exists."""

from __future__ import annotations

import json

import pytest

from kprio_core.config import KprioConfig
from kprio_core.errors import RangeConflict
from kprio_core.offsets import OffsetRange
from kprio_core.drain_plan import PlannedRange
from spark_jobs.native import class_available, connector_available, native_options, read_native


def test_options_merge_splits_and_carry_limits_and_client_settings():
    config = KprioConfig(
        kafka={"bootstrap_servers": "b1:9092,b2:9092", "client": {"security.protocol": "SSL", "enable.idempotence": True}},
        splits={"max_records": 500},
        drain={"allow_data_loss": True},
    )
    ranges = [
        PlannedRange(2, OffsetRange("o-2", 1, 10, 20)),
        PlannedRange(2, OffsetRange("o-2", 1, 20, 35)),  # a second split of the same partition
        PlannedRange(0, OffsetRange("o-0", 0, 3, 4)),
        PlannedRange(0, OffsetRange("o-0", 1, 7, 7)),  # empty: not read at all
    ]
    opts = native_options(config, ranges)
    assert json.loads(opts["assign"]) == {"o-0": [0], "o-2": [1]}
    assert json.loads(opts["startingOffsets"]) == {"o-0": {"0": 3}, "o-2": {"1": 10}}
    assert json.loads(opts["endingOffsets"]) == {"o-0": {"0": 4}, "o-2": {"1": 35}}
    assert opts["maxRecordsPerPartition"] == "500"
    assert opts["failOnDataLoss"] == "false"
    assert opts["includeHeaders"] == "true"
    assert opts["kafka.bootstrap.servers"] == "b1:9092,b2:9092"
    assert opts["kafka.security.protocol"] == "SSL" and opts["kafka.enable.idempotence"] == "true"


def test_ranges_with_a_gap_in_one_partition_cannot_drive_the_native_source():
    ranges = [PlannedRange(0, OffsetRange("o-0", 0, 0, 5)), PlannedRange(0, OffsetRange("o-0", 0, 6, 9))]
    with pytest.raises(RangeConflict, match="leave a gap"):
        native_options(KprioConfig(), ranges)


@pytest.mark.broker
@pytest.mark.spark
def test_native_read_matches_the_plan(spark, kafka_settings, make_topic):
    if not connector_available(spark):
        pytest.skip("Spark's Kafka connector (org.apache.spark.sql.kafka010.KafkaSourceProvider) is not on the "
                    "classpath: its jar cannot be downloaded here")
    topic = make_topic(priorities=1, partitions=2, records={0: 20})
    ranges = [PlannedRange(0, OffsetRange(topic.priority_topic(0), p, 2, 10)) for p in range(2)]
    rows = read_native(spark, KprioConfig(kafka=kafka_settings), ranges).collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(p, o) for p in range(2) for o in range(2, 10)]


@pytest.mark.spark
def test_the_classpath_probe_tells_present_from_absent_classes(spark):
    assert class_available(spark, "org.apache.spark.sql.SparkSession")
    assert not class_available(spark, "org.apache.spark.sql.kafka010.NoSuchProvider")


@pytest.mark.broker
@pytest.mark.spark
def test_the_native_reader_drives_the_drain(spark, kafka_settings, make_topic, tmp_path):
    from spark_jobs.drain import drain_batch
    from tests.spark_jobs.plans import whole_plan

    topic = make_topic(priorities=1, partitions=2, records={0: 20})
    config = KprioConfig(kafka=kafka_settings, spark={"reader": "native"},
                         drain={"output_path": str(tmp_path / "out"), "dead_letter_path": str(tmp_path / "dead")})
    plan = whole_plan(kafka_settings, topic)
    if not connector_available(spark):
        # The drain took Spark's kafka source (the shuffle path), which this classpath lacks.
        with pytest.raises(Exception, match="kafka"):
            drain_batch(spark, config, topic, "native", 1, plan)
        return
    result = drain_batch(spark, config, topic, "native", 1, plan)
    assert result.reader == "native" and result.records == 20 and all(s.complete for s in result.ranges)
