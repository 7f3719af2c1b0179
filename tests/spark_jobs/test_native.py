"""Spark's own kafka source driven by the same plan: generated options, the connector on the classpath, drains.

The drain tests every reader must pass alike run over both readers in test_drain.py (``READERS``:
conservation, partition order, key lanes, dead letters, keys/headers/timestamps); these are the
native reader's own: its options, its classpath, its secrets, and where its reads end or fail.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from pydantic import SecretStr

from kprio_core.config import KafkaSettings, KprioConfig
from kprio_core.errors import RangeConflict
from kprio_core.model.drain_plan import PlannedRange
from kprio_core.model.offsets import OffsetRange
from orchestration.services.process import wait_for
from spark_jobs.connector import artifact_of
from spark_jobs.drain import drain_batch
from spark_jobs.native import (
    NativeReaderUnavailable,
    class_available,
    connector_available,
    jvm_lost_range,
    lost_read_in,
    native_options,
    read_native,
)
from tests.spark_jobs.on_disk import assert_conserved, staged_rows
from tests.spark_jobs.plans import plan_of, watermarks, whole_plan
from tests.spark_jobs.test_drain import _config, _delete_below, _drain, _roots

SETUP = "Spark's Kafka connector is not on the test session's classpath: run `bash scripts/setup.sh`"


def test_options_merge_splits_and_carry_limits_and_client_settings(tmp_path):
    from cryptography.hazmat.primitives.serialization import Encoding

    from orchestration.services.tls import make_ca

    ca = tmp_path / "ca.pem"  # the files the settings name are read on the driver first (kprio_core/config/files.py)
    ca.write_bytes(make_ca(datetime.now(UTC))[1].public_bytes(Encoding.PEM))
    config = KprioConfig(
        kafka={"bootstrap_servers": "b1:9092,b2:9092",
               "client": {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u",
                          "ssl.ca.location": str(ca), "enable.idempotence": True},
               "secrets": {"sasl.password": "pw-secret"}, "timeout_s": 7.5},
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
    assert opts["kafkaConsumer.pollTimeoutMs"] == "7500"
    assert opts["kafka.bootstrap.servers"] == "b1:9092,b2:9092"
    assert opts["kafka.security.protocol"] == "SASL_SSL" and opts["kafka.enable.idempotence"] == "true"
    # The Java client's settings, translated from librdkafka's (kprio_core/kafka/java_client.py).
    assert opts["kafka.sasl.jaas.config"] == ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                              'username="u" password="pw-secret";')
    assert (opts["kafka.ssl.truststore.type"], opts["kafka.ssl.truststore.location"]) == ("PEM", str(ca))
    # The Java client's admin waits kafka.timeout_s a try for a broker that does not answer (60 s by default).
    assert opts["kafka.default.api.timeout.ms"] == opts["kafka.request.timeout.ms"] == "7500"
    assert not {"kafka.sasl.password", "kafka.sasl.username", "kafka.ssl.ca.location"} & set(opts)
    assert opts["kafka.isolation.level"] == "read_committed"


@pytest.mark.parametrize("level", ["read_committed", "read_uncommitted"])
def test_the_isolation_level_is_kprios(level):
    opts = native_options(KprioConfig(kafka={"isolation_level": level}), [PlannedRange(0, OffsetRange("t", 0, 0, 1))])
    assert opts["kafka.isolation.level"] == level


def test_settings_spark_manages_itself_are_left_out():
    # Spark's KafkaSourceProvider refuses a read that sets any of these as kafka.*.
    config = KprioConfig(kafka={"client": {"enable.auto.commit": False, "auto.offset.reset": "earliest",
                                           "interceptor.classes": "x.Y", "client.id": "mine"}})
    opts = native_options(config, [PlannedRange(0, OffsetRange("t", 0, 0, 1))])
    assert not {"kafka.enable.auto.commit", "kafka.auto.offset.reset", "kafka.interceptor.classes"} & set(opts)
    assert opts["kafka.client.id"] == "mine"


def test_ranges_with_a_gap_in_one_partition_cannot_drive_the_native_source():
    ranges = [PlannedRange(0, OffsetRange("o-0", 0, 0, 5)), PlannedRange(0, OffsetRange("o-0", 0, 6, 9))]
    with pytest.raises(RangeConflict, match="leave a gap"):
        native_options(KprioConfig(), ranges)


def test_a_session_without_the_connector_fails_saying_what_is_missing_and_how_to_get_it():
    def load():
        raise RuntimeError("[DATA_SOURCE_NOT_FOUND] Failed to find the data source: kafka. Make sure the provider "
                           "name is correct and the package is properly registered. SQLSTATE: 42K02")

    reader = SimpleNamespace(format=lambda name: SimpleNamespace(options=lambda **_: SimpleNamespace(load=load)))
    with pytest.raises(NativeReaderUnavailable) as caught:
        read_native(SimpleNamespace(read=reader), KprioConfig(), [PlannedRange(0, OffsetRange("t", 0, 0, 1))])
    message = str(caught.value)
    assert caught.value.code == "native_reader_unavailable"
    assert "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0" in message and "kafka-clients" in message
    assert "bash scripts/setup.sh" in message and "spark.reader: python" in message


def test_a_could_not_read_error_takes_its_range_from_the_errors_fields_never_from_its_text():
    """Over Spark Connect PySpark raises the failed task's cause with its condition and message parameters (as
    tests/spark_jobs/test_connect.py sees from a real server): the range comes from those; a text naming a range
    is never read back."""
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException, UnknownException

    text = ("Some data may have been lost ...\nReason: Could not read records in offset [0, 3) for topic partition "
            "t-gap-7-1-9\nwith consumer group kprio-native-bf11-executor.")
    cause = UnknownException(f"(org.apache.spark.sql.kafka010.KafkaIllegalStateException) {text}",
                             errorClass="KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE",
                             messageParameters={"topicPartition": "t-gap-7-1-3", "startOffset": "4",
                                                "endOffset": "30", "groupId": "kprio-native-bf11-executor"})
    try:
        try:
            raise cause
        except UnknownException as err:
            raise RuntimeError("the drain's read failed") from err
    except RuntimeError as wrapped:
        record = lost_read_in(wrapped)
    assert (record.kind, record.where, record.transient) == ("RangeIncomplete", OffsetRange("t-gap-7-1", 3, 4, 30), False)
    assert record.message.startswith("range t-gap-7-1[3]@[4,30) is incomplete: Spark's Kafka source could not read it")
    assert lost_read_in(RuntimeError(text)) is None
    assert lost_read_in(SparkConnectGrpcException(text, errorClass="INTERNAL_ERROR", messageParameters={})) is None


@pytest.mark.spark
def test_the_test_session_has_the_connector_and_redacts_kafka_secrets(spark):
    assert connector_available(spark), SETUP
    jars = spark.conf.get("spark.jars").split(",")
    assert sorted(artifact_of(j.rsplit("/", 1)[-1]) for j in jars) == [
        "commons-pool2", "kafka-clients", "spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13"]
    # Spark's SET output is redacted by spark.redaction.regex, as its UI, event log and plans are.
    probes = {"spark.kprio.probe.kafka.sasl.jaas.config": "jaas-secret", "spark.kprio.probe.kafka.ssl.keystore.key":
              "pem-secret", "spark.kprio.probe.kafka.sasl.password": "pw-secret", "spark.kprio.probe.kafka.client.id": "me"}
    try:
        for key, value in probes.items():
            spark.conf.set(key, value)
        shown = {r[0]: r[1] for r in spark.sql("SET").collect() if r[0] in probes}
    finally:
        for key in probes:
            spark.conf.unset(key)
    assert shown == {**dict.fromkeys(list(probes)[:3], "*********(redacted)"), "spark.kprio.probe.kafka.client.id": "me"}


@pytest.mark.spark
def test_the_classpath_probe_tells_present_from_absent_classes(spark):
    assert class_available(spark, "org.apache.spark.sql.SparkSession")
    assert not class_available(spark, "org.apache.spark.sql.kafka010.NoSuchProvider")


@pytest.mark.broker
@pytest.mark.spark
def test_native_read_matches_the_plan_and_shows_no_secret(spark, spark_files, kafka_settings, make_topic):
    assert connector_available(spark), SETUP
    topic = make_topic(priorities=1, partitions=2, records={0: 20})
    ranges = [PlannedRange(0, OffsetRange(topic.priority_topic(0), p, 2, 10)) for p in range(2)]
    # PLAINTEXT: the Java client takes the JAAS line kprio writes from the user and password, and never uses it.
    kafka = kafka_settings.model_copy(update={"client": {"sasl.mechanism": "PLAIN", "sasl.username": "u"},
                                              "secrets": {"sasl.password": SecretStr("jaas-hunter2")}})
    assert "jaas-hunter2" in native_options(KprioConfig(kafka=kafka), ranges)["kafka.sasl.jaas.config"]
    frame = read_native(spark, KprioConfig(kafka=kafka), ranges)
    rows = frame.collect()
    assert sorted((r.partition, r.offset) for r in rows) == [(p, o) for p in range(2) for o in range(2, 10)]
    plans = frame._jdf.queryExecution().toString()  # parsed, analyzed, optimized and physical plans
    assert "Kafka" in plans
    assert "jaas-hunter2" not in plans
    # Spark's own record of the run: its event log (what the history server and the UI show) and
    # its scratch files. The event log holds the read's plan, so the secret's absence means something.
    assert wait_for(lambda: topic.priority_topic(0).encode() in b"".join(
        f.read_bytes() for f in (spark_files / "events").rglob("*") if f.is_file()), 30), "the read is not logged"
    holding = [f for f in spark_files.rglob("*") if f.is_file() and b"jaas-hunter2" in f.read_bytes()]
    assert holding == [], f"Spark wrote the secret to {holding}"


@pytest.mark.broker
@pytest.mark.spark
def test_the_native_reader_drives_the_drain(spark, kafka_settings, make_topic, tmp_path):
    assert connector_available(spark), SETUP
    topic = make_topic(priorities=1, partitions=2, records={0: 20})
    config = _config(kafka_settings, tmp_path, reader="native")
    result, _ = _drain(spark, config, topic, "native", whole_plan(kafka_settings, topic))
    assert result.reader == "native" and result.records == 20 and all(s.complete for s in result.ranges)


@pytest.mark.broker
@pytest.mark.spark
def test_a_range_ending_exactly_at_the_high_watermark_is_read_to_its_last_record(spark, kafka_settings, make_topic,
                                                                                 tmp_path):
    topic = make_topic(priorities=2, partitions=2, records={1: 41, 0: 6})
    name = topic.priority_topic(1)
    high = {p: hw for p, (_, hw) in watermarks(kafka_settings, name, 2).items()}
    # From the middle of partition 0 and the start of partition 1, each up to its high watermark.
    ranges = {1: [OffsetRange(name, 0, 5, high[0]), OffsetRange(name, 1, 0, high[1])]}
    config = _config(kafka_settings, tmp_path, reader="native", splits={"max_records": 7})
    result, staged = _drain(spark, config, topic, "at-hw", plan_of(topic, ranges))
    assert [(s.range.end, s.output, s.first, s.last, s.lost, s.failure) for s in result.ranges] == [
        (high[0], high[0] - 5, 5, high[0] - 1, (), None), (high[1], high[1], 0, high[1] - 1, (), None)]
    assert max(r["offset"] for r in staged["output"] if r["partition"] == 0) == high[0] - 1


def _failure(spark, config, topic, batch_id, plan) -> str:
    """What a drain that must fail said: the failure of its one range, or what drain_batch raised."""
    try:
        result = drain_batch(spark, config, topic, batch_id, 1, plan)
    except Exception as exc:  # noqa: BLE001 - Spark's read failed the whole drain (no range named by kprio)
        return str(exc)
    [stats] = result.ranges
    assert not stats.complete and not staged_rows(result, _roots(config))["output"]
    return stats.failure


@pytest.mark.broker
@pytest.mark.spark
def test_records_deleted_by_retention_fail_the_range_unless_data_loss_is_allowed(spark, kafka_settings, make_topic,
                                                                                 tmp_path):
    topic = make_topic(priorities=1, partitions=1, records={0: 30})
    name = topic.priority_topic(0)
    _delete_below(kafka_settings, name, 0, 12)
    plan = plan_of(topic, {0: [OffsetRange(name, 0, 4, 30)]})
    failure = _failure(spark, _config(kafka_settings, tmp_path, reader="native"), topic, "gap", plan)
    assert re.search(rf"range {re.escape(name)}\[0\]@\[4,30\) is incomplete", failure), failure[:2000]
    config = _config(kafka_settings, tmp_path, reader="native", allow_data_loss=True)
    result, _ = _drain(spark, config, topic, "gap", plan, attempt=2)
    [stats] = result.ranges
    assert (stats.output, stats.first, [(g.start, g.end) for g in stats.lost]) == (18, 12, [(4, 12)])
    assert stats.complete and result.lost_offsets == 8


@pytest.mark.broker
@pytest.mark.spark
def test_the_range_spark_could_not_read_comes_from_the_errors_own_fields(spark, kafka_settings, make_topic):
    """The range a failed native read names is taken from the JVM error's condition and message parameters
    (a classic session), not from its text."""
    assert connector_available(spark), SETUP
    topic = make_topic(priorities=1, partitions=1, records={0: 30})
    name = topic.priority_topic(0)
    _delete_below(kafka_settings, name, 0, 12)
    config = KprioConfig(kafka=kafka_settings)
    with pytest.raises(Exception) as caught:
        read_native(spark, config, [PlannedRange(0, OffsetRange(name, 0, 4, 30))]).count()
    assert jvm_lost_range(caught.value) == OffsetRange(name, 0, 4, 30)
    record = lost_read_in(caught.value)
    assert (record.kind, record.where, record.transient) == ("RangeIncomplete", OffsetRange(name, 0, 4, 30), False)
    assert record.message.startswith(f"range {name}[0]@[4,30) is incomplete: Spark's Kafka source could not read it")


def beyond_the_end(kafka_settings: KafkaSettings) -> KafkaSettings:
    """Settings for a read past the log's end: Spark's source polls for the missing offsets until
    ``kafka.timeout_s`` (its ``kafkaConsumer.pollTimeoutMs``) before it gives up; 4 s, not the suite's 20."""
    return kafka_settings.model_copy(update={"timeout_s": 4.0})


@pytest.mark.broker
@pytest.mark.spark
def test_a_range_beyond_the_end_of_the_log_fails(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1, records={0: 10})
    name = topic.priority_topic(0)
    plan = plan_of(topic, {0: [OffsetRange(name, 0, 0, 12)]})
    config = _config(beyond_the_end(kafka_settings), tmp_path, reader="native")
    failure = _failure(spark, config, topic, "short", plan)
    assert re.search(rf"range {re.escape(name)}\[0\]@\[\d+,12\) is incomplete: Spark's Kafka source could not read it",
                     failure), failure[:2000]


@pytest.mark.broker
@pytest.mark.spark
def test_with_data_loss_allowed_offsets_beyond_the_end_of_the_log_are_recorded_lost(spark, kafka_settings, make_topic,
                                                                                    tmp_path):
    topic = make_topic(priorities=1, partitions=1, records={0: 10})
    plan = plan_of(topic, {0: [OffsetRange(topic.priority_topic(0), 0, 0, 12)]})
    config = _config(beyond_the_end(kafka_settings), tmp_path, reader="native", allow_data_loss=True)
    result = drain_batch(spark, config, topic, "beyond", 1, plan)
    assert_conserved(result, staged_rows(result, _roots(config)))
    [stats] = result.ranges
    assert [(g.start, g.end) for g in stats.lost] == [(10, 12)] and stats.no_record == 0
