"""``drain_batch`` of Avro values with Spark's own kafka source (``spark.reader: native``: the key-order shuffle and
``mapInArrow``), which decodes with the same Python decoder as kprio-kafka (the python reader, which
tests/orchestration/test_registry_values.py drains with): the same typed columns and dead letters. A registry that
cannot be reached is a transient error of the batch before Spark runs. JSON Schema values (``value_format: json_schema``)
drain into typed columns with the python reader; a record that breaks its schema is a dead letter; so do Protobuf
values (``value_format: protobuf``), written by confluent-kafka's ProtobufSerializer. A subject changed in a way the
reader cannot follow fails the range, naming the subject, both versions and the column. Keys decode beside values
(``key_format``): Avro keys into the ``decoded_key`` struct, a key that does not decode is a dead letter, the raw
``key`` and its lane stay as they were; string keys as text."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pytest

from kprio_core.config import KprioConfig
from kprio_core.errors import SchemaRegistryUnavailable
from kprio_core.values.wire import framed
from orchestration.services.process import free_port
from spark_jobs.drain import drain_batch
from tests.fixtures.kafka import produce_acked
from tests.kprio_core.test_values_protobuf import order_pb2  # noqa: F401 (the fixture: protoc's module of PROTO)
from tests.spark_jobs.on_disk import assert_conserved, staged_rows
from tests.spark_jobs.plans import whole_plan

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.registry]

KEY_SCHEMA = {"type": "record", "name": "PayKey", "fields": [{"name": "id", "type": "long"},
                                                             {"name": "region", "type": "string"}]}
SCHEMA = {"type": "record", "name": "Pay", "fields": [
    {"name": "n", "type": "long"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
]}


def config(kafka_settings, url: str, tmp_path, reader: str) -> KprioConfig:
    return KprioConfig(kafka=kafka_settings, schema_registry={"url": url, "timeout_s": 2},
                       drain={"output_path": str(tmp_path / "out"), "dead_letter_path": str(tmp_path / "dead")},
                       ordering={"mode": "key", "lanes": 2}, spark={"arrow_batch_records": 16, "reader": reader})


def test_the_native_reader_decodes_avro_values_and_keys_into_typed_columns(spark, kafka_settings, make_topic,
                                                                           schema_registry_url, tmp_path):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from kprio_core.lanes import Ordering, lane_for

    topic = make_topic(priorities=1, partitions=2, value_format="avro", key_format="avro")
    name = topic.priority_topic(0)
    client = SchemaRegistryClient({"url": schema_registry_url})
    serialize = AvroSerializer(client, json.dumps(SCHEMA))
    serialize_key = AvroSerializer(client, json.dumps(KEY_SCHEMA))  # subject <topic>-key
    at = dt.datetime(2024, 3, 1, 8, 30, 0, 250001, tzinfo=dt.timezone.utc)
    keys = [serialize_key({"id": i, "region": f"r{i % 3}"}, SerializationContext(name, MessageField.KEY))
            for i in range(40)]
    records = [(keys[i], serialize({"n": i, "amount": Decimal(i) / 4, "at": at, "tags": [f"t{i}"] * (i % 3)},
                                   SerializationContext(name, MessageField.VALUE)), None, i % 2)
               for i in range(40)]
    records += [(b"bad-id", framed(1_999_999_999, b"\x02"), None, 0), (None, None, None, 1),
                (b"plain", records[0][1], None, 0)]  # a key not in the wire format, a fine value
    assert not produce_acked(kafka_settings, name, records).failed
    conf = config(kafka_settings, schema_registry_url, tmp_path, "native")

    result = drain_batch(spark, conf, topic, "b-1", 1, whole_plan(kafka_settings, topic))
    rows = staged_rows(result, {"output": conf.drain.output_path, "dead-letters": conf.drain.dead_letter_path})
    assert_conserved(result, rows)
    assert (result.records, result.dead) == (41, 2)  # 40 orders and a null-key tombstone; the unknown id, the bad key
    good = {r["n"]: r for r in rows["output"] if r["n"] is not None}
    assert sorted(good) == list(range(40))
    assert good[7]["amount"] == Decimal("1.75") and good[7]["at"] == at and good[7]["tags"] == ["t7"]
    # The decoded key beside the raw one, kept byte for byte; lanes still hash the raw key.
    assert good[7]["decoded_key"] == {"id": 7, "region": "r1"} and good[7]["key"] == keys[7]
    assert all(r["lane"] == lane_for(Ordering.KEY, r["key"], r["offset"], 2) for r in rows["output"])
    assert [r["decoded_key"] for r in rows["output"] if r["n"] is None] == [None]  # a null key: no error
    assert sorted(r["error"] for r in rows["dead-letters"]) == [
        "key: wrong magic byte 112 (the wire format starts with 0)",
        "schema id 1999999999 is not in the schema registry (404); key: wrong magic byte 98 (the wire format starts "
        "with 0)"]


@pytest.mark.parametrize("formats", [{"value_format": "avro"}, {"value_format": "raw", "key_format": "avro"}],
                         ids=["values", "keys"])
def test_a_registry_that_cannot_be_reached_fails_the_batch_before_spark_runs(spark, kafka_settings, make_topic,
                                                                              tmp_path, formats):
    topic = make_topic(priorities=1, partitions=1, records={0: 3}, **formats)
    down = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"
    with pytest.raises(SchemaRegistryUnavailable) as caught:
        drain_batch(spark, config(kafka_settings, down, tmp_path, "python"), topic, "b-1", 1,
                    whole_plan(kafka_settings, topic))
    assert caught.value.transient and down in str(caught.value)


def test_json_schema_values_drain_into_typed_columns_and_breaks_of_the_schema_are_dead_letters(
        spark, kafka_settings, make_topic, schema_registry_url, tmp_path):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = make_topic(priorities=1, partitions=1, value_format="json_schema", key_format="string")
    name = topic.priority_topic(0)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "at": {"type": "string", "format": "date-time"},
                                                "ship": {"type": "object", "properties": {"city": {"type": "string"}}}},
              "required": ["n"]}
    serialize = JSONSerializer(json.dumps(schema), SchemaRegistryClient({"url": schema_registry_url}))
    values = [serialize({"n": i, "at": "2024-03-01T08:30:00Z", "ship": {"city": f"c{i}"}},
                        SerializationContext(name, MessageField.VALUE)) for i in range(20)]
    schema_id = int.from_bytes(values[0][1:5], "big")
    values.append(framed(schema_id, json.dumps({"at": "2024-03-01T08:30:00Z"}).encode()))  # breaks `required`
    assert not produce_acked(kafka_settings, name, [(f"k{i}".encode(), v) for i, v in enumerate(values)]).failed
    conf = config(kafka_settings, schema_registry_url, tmp_path, "python")

    result = drain_batch(spark, conf, topic, "b-1", 1, whole_plan(kafka_settings, topic))
    rows = staged_rows(result, {"output": conf.drain.output_path, "dead-letters": conf.drain.dead_letter_path})
    assert_conserved(result, rows)
    assert (result.records, result.dead) == (20, 1)
    by_n = {r["n"]: r for r in rows["output"]}
    assert sorted(by_n) == list(range(20)) and by_n[3]["ship"] == {"city": "c3"} and by_n[3]["decoded_key"] == "k3"
    assert by_n[3]["at"] == dt.datetime(2024, 3, 1, 8, 30, tzinfo=dt.timezone.utc)
    assert [r["error"] for r in rows["dead-letters"]] == [
        f"the record does not satisfy schema id {schema_id}: 'n' is a required property"]


def test_protobuf_values_drain_into_typed_columns(spark, kafka_settings, make_topic, schema_registry_url, tmp_path,
                                                  order_pb2):  # noqa: F811 (the fixture imported above)
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = make_topic(priorities=1, partitions=1, value_format="protobuf")
    name = topic.priority_topic(0)
    serialize = ProtobufSerializer(order_pb2.Order, SchemaRegistryClient({"url": schema_registry_url}),
                                   {"use.deprecated.format": False})
    values = []
    for i in range(12):
        order = order_pb2.Order(id=i, item=f"i{i}", ship=order_pb2.Ship(city=f"c{i}"), state=i % 2)
        order.at.FromJsonString("2024-03-01T08:30:00Z")
        values.append(serialize(order, SerializationContext(name, MessageField.VALUE)))
    values.append(framed(int.from_bytes(values[0][1:5], "big"), b"\x00\xff\xff"))  # does not parse
    assert not produce_acked(kafka_settings, name, [(f"k{i}".encode(), v) for i, v in enumerate(values)]).failed
    conf = config(kafka_settings, schema_registry_url, tmp_path, "python")

    result = drain_batch(spark, conf, topic, "b-1", 1, whole_plan(kafka_settings, topic))
    rows = staged_rows(result, {"output": conf.drain.output_path, "dead-letters": conf.drain.dead_letter_path})
    assert_conserved(result, rows)
    assert (result.records, result.dead) == (12, 1), rows["dead-letters"][:1]
    by_id = {r["id"]: r for r in rows["output"]}
    assert sorted(by_id) == list(range(12)) and by_id[5]["ship"] == {"city": "c5"} and by_id[5]["state"] == "PAID"
    assert by_id[5]["at"] == dt.datetime(2024, 3, 1, 8, 30, tzinfo=dt.timezone.utc)
    assert rows["dead-letters"][0]["error"].startswith("payload does not parse as kprio.test.Order")


def test_an_incompatible_change_fails_the_range_naming_subject_versions_and_column(spark, kafka_settings, make_topic,
                                                                                  schema_registry_url, tmp_path):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = make_topic(priorities=1, partitions=1, value_format="avro")
    name = topic.priority_topic(0)
    client = SchemaRegistryClient({"url": schema_registry_url})
    context = SerializationContext(name, MessageField.VALUE)
    old = {"type": "record", "name": "E", "fields": [{"name": "amount", "type": "string"}]}
    new = {"type": "record", "name": "E", "fields": [{"name": "amount", "type": "long"}]}
    values = [AvroSerializer(client, json.dumps(old))({"amount": "12"}, context)]
    # Apicurio's compatibility is NONE unless set: it takes a change no reader can follow.
    values.append(AvroSerializer(client, json.dumps(new))({"amount": 12}, context))
    assert not produce_acked(kafka_settings, name, [(b"k", v) for v in values]).failed

    result = drain_batch(spark, config(kafka_settings, schema_registry_url, tmp_path, "python"), topic, "b-1", 1,
                         whole_plan(kafka_settings, topic))
    [failed] = result.failed_ranges
    assert failed.error.kind == "SchemaIncompatible" and not failed.error.transient
    assert f"subject '{name}-value' changed incompatibly, column 'amount' (string -> long)" in failed.error.message
    assert "written with version 1 " in failed.error.message and "read with version 2 " in failed.error.message


def test_a_priority_topic_whose_subject_the_registry_lacks_gives_dead_letters_not_a_stall(
        spark, kafka_settings, make_topic, schema_registry_url, tmp_path):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = make_topic(priorities=2, partitions=1, value_format="avro")
    high, low = topic.priority_topic(1), topic.priority_topic(0)
    serialize = AvroSerializer(SchemaRegistryClient({"url": schema_registry_url}), json.dumps(SCHEMA))
    good = serialize({"n": 1, "amount": Decimal("0.50"), "at": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
                      "tags": []}, SerializationContext(high, MessageField.VALUE))
    assert not produce_acked(kafka_settings, high, [(b"k", good)]).failed
    # Written without the registry (no subject <low>-value): its records are bad, the batch is not.
    assert not produce_acked(kafka_settings, low, [(b"a", b"{\"n\": 2}"), (b"b", framed(7, b"\x02")), (b"t", None)])\
        .failed

    conf = config(kafka_settings, schema_registry_url, tmp_path, "python")
    result = drain_batch(spark, conf, topic, "b-1", 1, whole_plan(kafka_settings, topic))
    rows = staged_rows(result, {"output": conf.drain.output_path, "dead-letters": conf.drain.dead_letter_path})
    assert_conserved(result, rows)
    assert not result.failed_ranges and result.by_priority() == {1: (1, 0), 0: (1, 2)}
    assert {r["error"] for r in rows["dead-letters"]} == {
        f"subject '{low}-value' is not in the schema registry: no schema to read the value with"}
