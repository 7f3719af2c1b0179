"""JSON Schema values in the wire format (confluent-kafka's JSONSerializer through the real registry, the session's
embedded Apicurio Registry) decoded into typed Arrow columns; records that break their schema are bad records."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest

from kprio_core.values.avro import ValueDecoding, merged_columns, reader_schemas, value_subject
from kprio_core.values.registry import RegistryEndpoint, SchemaRegistry
from kprio_core.values.wire import framed

pytestmark = pytest.mark.registry

ORDER = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Order", "type": "object",
         "properties": {"id": {"type": "integer"}, "amount": {"type": "number"},
                        "at": {"type": "string", "format": "date-time"}, "day": {"type": "string", "format": "date"},
                        "ship": {"type": "object", "properties": {"city": {"type": "string"}}},
                        "tags": {"type": "array", "items": {"type": "string"}}},
         "required": ["id", "amount"]}


def write(url: str, topic: str, schema: dict, records: list[dict]) -> list[bytes]:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serialize = JSONSerializer(json.dumps(schema), SchemaRegistryClient({"url": url}))
    return [serialize(r, SerializationContext(topic, MessageField.VALUE)) for r in records]


def decode(url: str, topic: str, values: list[bytes | None]):  # noqa: ANN201
    endpoint = RegistryEndpoint(url)
    readers = reader_schemas(SchemaRegistry(endpoint), {topic: value_subject(topic)}, "JSON")
    columns = merged_columns(readers)
    return columns, ValueDecoding(endpoint, readers, "JSON").decoder(columns).decode(pa.array(values, pa.binary()),
                                                                                     topic)


def test_json_schema_values_become_typed_columns_and_bad_records_get_a_reason(schema_registry_url, subject_stem):
    topic = subject_stem
    good = write(schema_registry_url, topic, ORDER, [
        {"id": 1, "amount": 2.5, "at": "2024-05-01T12:00:00Z", "day": "2024-05-01", "ship": {"city": "Oslo"},
         "tags": ["a"]},
        {"id": 2, "amount": 3}])
    schema_id = int.from_bytes(good[0][1:5], "big")
    breaks = framed(schema_id, json.dumps({"id": "three", "amount": 1}).encode())  # written around the serializer
    values = [*good, breaks, framed(schema_id, b"{not json"), framed(2_000_000_001, b"{}"), b"{\"id\": 1}", None]
    columns, (decoded, errors) = decode(schema_registry_url, topic, values)
    assert columns == (("id", "long"), ("amount", "double"), ("at", "timestamp"), ("day", "date"),
                       ("ship", "struct<city:string>"), ("tags", "array<string>"))
    reasons = errors.to_pylist()
    assert reasons[:2] == [None, None] and reasons[6] is None
    assert reasons[2] == f"id does not satisfy schema id {schema_id}: 'three' is not of type 'integer'"
    assert reasons[3].startswith(f"payload of schema id {schema_id} is not JSON: ")
    assert reasons[4] == "schema id 2000000001 is not in the schema registry (404)"
    assert reasons[5] == "wrong magic byte 123 (the wire format starts with 0)"
    rows = pa.table(decoded).to_pylist()
    assert rows[0] == {"id": 1, "amount": 2.5, "at": dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc),
                       "day": dt.date(2024, 5, 1), "ship": {"city": "Oslo"}, "tags": ["a"]}
    assert rows[1]["amount"] == 3.0 and rows[1]["at"] is None and rows[2]["id"] is None


def test_a_new_optional_property_is_a_new_column_and_old_records_read_it_as_null(schema_registry_url, subject_stem):
    topic = subject_stem
    v1 = {"type": "object", "properties": {"n": {"type": "integer"}}}
    v2 = {"type": "object", "properties": {"n": {"type": "integer"}, "source": {"type": ["null", "string"]}}}
    old = write(schema_registry_url, topic, v1, [{"n": 1}])
    new = write(schema_registry_url, topic, v2, [{"n": 2, "source": "app"}])
    columns, (decoded, errors) = decode(schema_registry_url, topic, [*old, *new])
    assert columns == (("n", "long"), ("source", "string")) and errors.null_count == 2
    assert pa.table(decoded).to_pylist() == [{"n": 1, "source": None}, {"n": 2, "source": "app"}]
