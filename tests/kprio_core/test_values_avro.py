"""Avro values in the wire format decoded into typed Arrow columns, against the real registry (the session's
embedded Apicurio Registry), with payloads written by confluent-kafka's AvroSerializer."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal

import pyarrow as pa
import pytest

from kprio_core.errors import SchemaIncompatible, SchemaRegistryRefused, SchemaRegistryUnavailable, is_transient
from kprio_core.values.avro import AvroDecoder, merged_columns, reader_schemas, value_subject
from kprio_core.values.registry import RegistryEndpoint, SchemaRegistry, shared_registry
from kprio_core.values.wire import framed
from orchestration.services.process import free_port

pytestmark = pytest.mark.registry

UTC = dt.timezone.utc

ORDER = {
    "type": "record", "name": "Order", "namespace": "kprio.test",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "state", "type": {"type": "enum", "name": "State", "symbols": ["NEW", "PAID"]}},
        {"name": "ship", "type": {"type": "record", "name": "Ship", "fields": [
            {"name": "city", "type": "string"},
            {"name": "weight", "type": ["null", "double"], "default": None}]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": "int"}},
    ],
}


def serializer(url: str, schema: dict):  # noqa: ANN201
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer

    return AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(schema))


def write(url: str, topic: str, schema: dict, records: list[dict]) -> list[bytes]:
    from confluent_kafka.serialization import MessageField, SerializationContext

    serialize = serializer(url, schema)
    context = SerializationContext(topic, MessageField.VALUE)
    return [serialize(r, context) for r in records]


def decoder(url: str, topics: list[str]) -> AvroDecoder:
    registry = SchemaRegistry(RegistryEndpoint(url))
    readers = reader_schemas(registry, {t: value_subject(t) for t in topics})
    return AvroDecoder(registry, readers, merged_columns(readers))


def binary(values: list[bytes | None]) -> pa.Array:
    return pa.array(values, type=pa.binary())


def test_logical_types_nested_records_and_unions_become_typed_columns(schema_registry_url, subject_stem):
    ref = uuid.uuid4()
    order = {"id": 7, "price": Decimal("12.34"), "placed": dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC),
             "seen": dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC), "day": dt.date(2024, 5, 1), "ref": ref,
             "note": None, "state": "PAID", "ship": {"city": "Oslo", "weight": 1.5}, "tags": ["a", "b"],
             "counts": {"x": 1}}
    values = write(schema_registry_url, subject_stem, ORDER, [order, {**order, "id": 8, "note": "gift"}])
    avro = decoder(schema_registry_url, [subject_stem])
    columns, errors = avro.decode(binary([*values, None]), subject_stem)
    assert errors.to_pylist() == [None, None, None]
    assert {name: str(array.type) for name, array in columns.items()} == {
        "id": "int64", "price": "decimal128(10, 2)", "placed": "timestamp[us, tz=UTC]",
        "seen": "timestamp[us, tz=UTC]", "day": "date32[day]", "ref": "string", "note": "string",
        "state": "string", "ship": "struct<city: string, weight: double>", "tags": "list<item: string>",
        "counts": "map<string, int32>"}
    table = pa.table(columns)
    first = table.slice(0, 1).to_pylist()[0]
    assert first["price"] == Decimal("12.34") and first["ref"] == str(ref) and first["day"] == dt.date(2024, 5, 1)
    assert first["placed"] == order["placed"] and first["seen"] == order["seen"]
    assert first["ship"] == {"city": "Oslo", "weight": 1.5} and first["counts"] == [("x", 1)]
    assert table.column("note").to_pylist() == [None, "gift", None]
    assert table.column("id").to_pylist() == [7, 8, None]  # the tombstone: every column null, no error


EVERY = {  # every kind the vector path reads (kprio_core/values/avro_vector.py): all but wide unions
    "type": "record", "name": "Every", "namespace": "kprio.test",
    "fields": [*ORDER["fields"],
        {"name": "lines", "type": {"type": "array", "items": {"type": "record", "name": "Line", "fields": [
            {"name": "sku", "type": "string"}, {"name": "qty", "type": ["null", "int"]}]}}},
        {"name": "cents", "type": {"type": "fixed", "name": "Cents", "size": 5, "logicalType": "decimal",
                                   "precision": 9, "scale": 2}},
        {"name": "at", "type": {"type": "int", "logicalType": "time-millis"}},
        {"name": "flag", "type": "boolean"}, {"name": "ratio", "type": ["float", "null"]},
        {"name": "raw", "type": "bytes"}, {"name": "code", "type": {"type": "fixed", "name": "Code", "size": 3}},
        {"name": "small", "type": "int"}],
}


def test_the_vector_path_reads_what_fastavro_reads_and_doubts_what_it_must(schema_registry_url, subject_stem):
    base = {"id": -(1 << 62), "price": Decimal("-12.34"),
            "placed": dt.datetime(1969, 5, 1, 12, 0, 0, 123000, tzinfo=UTC),
            "seen": dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC), "day": dt.date(2024, 5, 1),
            "ref": uuid.UUID(int=7), "note": None, "state": "PAID", "ship": {"city": "Zürich", "weight": None},
            "cents": Decimal("-1234567.89"), "at": dt.time(23, 59, 59, 999000), "flag": True, "ratio": None,
            "raw": b"", "code": b"abc", "small": -(1 << 31), "tags": [], "counts": {"a": 1, "bb": -2},
            "lines": [{"sku": "s-1", "qty": None}, {"sku": "s-2", "qty": 3}]}
    other = {**base, "id": 300, "price": Decimal("99999999.99"), "note": "gift", "state": "NEW", "flag": False,
             "ship": {"city": "", "weight": -0.5}, "ratio": 1.5, "raw": b"\x00\xff", "small": (1 << 31) - 1,
             "tags": ["x", "", "z"], "counts": {}, "lines": []}
    good = write(schema_registry_url, subject_stem, EVERY, [base, other])
    values = [*good, None, good[1][:-4], good[0] + b"\x00", b"\x01" + good[0][1:], good[0][:5] + b"\x80" * 11]
    avro = decoder(schema_registry_url, [subject_stem])
    columns, errors = avro.decode(binary(values * 3), subject_stem)
    assert avro.readers[subject_stem].vector is not None  # the schema id of these records was read by the vector path
    empty = "value of 0 bytes is shorter than the 5-byte wire format header"  # a batch without a byte to read
    assert avro.decode(binary([b"", None]), subject_stem)[1].to_pylist() == [empty, None]
    avro.readers[subject_stem].vector = None  # fastavro alone, as before the vector path
    expected, reasons = avro.decode(binary(values * 3), subject_stem)
    assert errors.to_pylist() == reasons.to_pylist() and errors.null_count == 9
    assert {n: (c.type, c.to_pylist()) for n, c in columns.items()} == \
        {n: (c.type, c.to_pylist()) for n, c in expected.items()}
    assert pa.table(columns).slice(0, 1).to_pylist()[0]["cents"] == Decimal("-1234567.89")
    # A value its column refuses (a decimal wider than its precision) makes its record a bad one, as fastavro did.
    import io

    import fastavro

    from kprio_core.values.avro_columns import without_logical_types

    raw = io.BytesIO()  # 12345678900 cents: 11 digits, the serializer refuses to write it
    fastavro.schemaless_writer(raw, fastavro.parse_schema(without_logical_types(EVERY)), {
        **fastavro.schemaless_reader(io.BytesIO(good[0][5:]), fastavro.parse_schema(without_logical_types(EVERY))),
        "price": (12345678900).to_bytes(5, "big", signed=True)})
    wide = [framed(int.from_bytes(good[0][1:5], "big"), raw.getvalue())]
    avro = decoder(schema_registry_url, [subject_stem])
    columns, errors = avro.decode(binary([*good, *wide]), subject_stem)
    assert errors.to_pylist()[:2] == [None, None] and errors.to_pylist()[2].startswith("field 'price': ")
    assert columns["price"].to_pylist() == [Decimal("-12.34"), Decimal("99999999.99"), None]


def test_records_of_three_versions_decode_with_the_latest_as_reader(schema_registry_url, subject_stem):
    from confluent_kafka.schema_registry import SchemaRegistryClient

    topic, subject = subject_stem, value_subject(subject_stem)
    v1 = {"type": "record", "name": "Event", "fields": [{"name": "n", "type": "long"}]}
    v2 = {**v1, "fields": [*v1["fields"], {"name": "source", "type": ["null", "string"], "default": None}]}
    v3 = {**v2, "fields": [*v2["fields"], {"name": "weight", "type": "double", "default": 1.0}]}
    old = write(schema_registry_url, topic, v1, [{"n": 1}])
    # Apicurio's global default is NONE; the subject exists once its first version is registered.
    SchemaRegistryClient({"url": schema_registry_url}).set_compatibility(subject, "BACKWARD")
    middle = write(schema_registry_url, topic, v2, [{"n": 2, "source": "web"}])
    new = write(schema_registry_url, topic, v3, [{"n": 3, "source": "app", "weight": 2.5}])
    ids = {int.from_bytes(v[0][1:5], "big") for v in (old, middle, new)}
    assert len(ids) == 3
    avro = decoder(schema_registry_url, [topic])
    assert avro.columns == (("n", "long"), ("source", "string"), ("weight", "double"))
    columns, errors = avro.decode(binary([*old, *middle, *new]), topic)
    assert errors.null_count == 3
    assert pa.table(columns).to_pylist() == [{"n": 1, "source": None, "weight": 1.0},
                                             {"n": 2, "source": "web", "weight": 1.0},
                                             {"n": 3, "source": "app", "weight": 2.5}]
    assert all(avro._groups[(topic, i)] for i in ids)  # the older versions too were read by the vector path
    avro.readers[topic].vector = None  # fastavro alone, as before it
    assert avro.decode(binary([*old, *middle, *new]), topic)[0] == columns


def test_bad_records_get_a_reason_and_the_good_ones_decode(schema_registry_url, subject_stem):
    topic = subject_stem
    schema = {"type": "record", "name": "N", "fields": [{"name": "n", "type": "long"}, {"name": "s", "type": "string"}]}
    good = write(schema_registry_url, topic, schema, [{"n": 5, "s": "five"}])[0]
    schema_id = int.from_bytes(good[1:5], "big")
    values = [
        good,
        b"\x01" + good[1:],  # wrong magic byte
        b"\x00\x00",  # shorter than the header
        framed(2_000_000_000, good[5:]),  # an id the registry does not know
        framed(schema_id, b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"),  # does not decode
        good + b"\x00\x01",  # bytes after the record
        None,
    ]
    columns, errors = decoder(schema_registry_url, [topic]).decode(binary(values), topic)
    reasons = errors.to_pylist()
    assert reasons[0] is None and reasons[6] is None
    assert reasons[1] == "wrong magic byte 1 (the wire format starts with 0)"
    assert reasons[2] == "value of 2 bytes is shorter than the 5-byte wire format header"
    assert reasons[3] == "schema id 2000000000 is not in the schema registry (404)"
    assert reasons[4].startswith(f"payload does not decode with schema id {schema_id}: ")
    assert reasons[5] == f"payload has 2 bytes after the record of schema id {schema_id}"
    assert columns["n"].to_pylist() == [5, None, None, None, None, None, None]


def test_each_schema_id_is_fetched_once_per_process(schema_registry_url, subject_stem):
    topic = subject_stem
    schema = {"type": "record", "name": "C", "fields": [{"name": "n", "type": "long"}]}
    values = write(schema_registry_url, topic, schema, [{"n": i} for i in range(50)])
    endpoint = RegistryEndpoint(schema_registry_url)
    registry = shared_registry(endpoint)
    assert shared_registry(RegistryEndpoint(schema_registry_url)) is registry
    readers = reader_schemas(registry, {topic: value_subject(topic)})
    AvroDecoder(registry, readers, merged_columns(readers)).decode(binary(values), topic)
    # A later task's decoder on the same process needs no request at all: its client could not make one.
    registry._client.close()
    try:
        columns, errors = AvroDecoder(registry, readers, merged_columns(readers)).decode(binary(values), topic)
        assert columns["n"].to_pylist() == list(range(50)) and errors.null_count == 50
    finally:
        shared_registry.cache_clear()


def test_an_unreachable_registry_is_a_transient_error_not_a_dead_letter(schema_registry_url, subject_stem):
    topic = subject_stem
    schema = {"type": "record", "name": "D", "fields": [{"name": "n", "type": "long"}]}
    values = write(schema_registry_url, topic, schema, [{"n": 1}])
    readers = reader_schemas(SchemaRegistry(RegistryEndpoint(schema_registry_url)), {topic: value_subject(topic)})
    down = SchemaRegistry(RegistryEndpoint(f"http://127.0.0.1:{free_port()}/apis/ccompat/v7", timeout_s=2))
    with pytest.raises(SchemaRegistryUnavailable) as caught:
        AvroDecoder(down, readers, merged_columns(readers)).decode(binary(values), topic)
    assert is_transient(caught.value) and "cannot be reached" in str(caught.value)
    with pytest.raises(SchemaRegistryRefused, match="has no subject 'nope-value'"):
        reader_schemas(SchemaRegistry(RegistryEndpoint(schema_registry_url)), {"nope": "nope-value"})


def test_an_incompatible_change_fails_naming_subject_versions_and_field(schema_registry_url, subject_stem):
    topic, subject = subject_stem, value_subject(subject_stem)
    # Apicurio's global compatibility is NONE: the registry takes the change, the reader cannot follow it.
    old = write(schema_registry_url, topic, {"type": "record", "name": "E", "fields": [
        {"name": "amount", "type": "string"}]}, [{"amount": "12"}])
    write(schema_registry_url, topic, {"type": "record", "name": "E", "fields": [
        {"name": "amount", "type": "long"}]}, [{"amount": 12}])
    with pytest.raises(SchemaIncompatible) as caught:
        decoder(schema_registry_url, [topic]).decode(binary(old), topic)
    message = str(caught.value)
    old_id = int.from_bytes(old[0][1:5], "big")
    assert message.startswith(f"subject {subject!r} changed incompatibly, column 'amount' (string -> long): a record "
                              f"of topic {topic!r} written with version 1 (schema id {old_id}) cannot be read with "
                              "version 2 (schema id "), message


def test_a_schema_with_references_decodes_with_the_referenced_types(schema_registry_url, subject_stem):
    import io

    import fastavro
    from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient

    client = SchemaRegistryClient({"url": schema_registry_url})
    money = {"type": "record", "name": "Money", "namespace": "kprio.test", "fields": [
        {"name": "units", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}},
        {"name": "currency", "type": "string"}]}
    order = {"type": "record", "name": "Paid", "namespace": "kprio.test", "fields": [
        {"name": "id", "type": "long"}, {"name": "price", "type": "kprio.test.Money"}]}
    client.register_schema(f"{subject_stem}-money", Schema(json.dumps(money), "AVRO"))
    schema_id = client.register_schema(value_subject(subject_stem), Schema(
        json.dumps(order), "AVRO", [SchemaReference("kprio.test.Money", f"{subject_stem}-money", 1)]))
    named: dict = {}
    fastavro.parse_schema(money, named_schemas=named)
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(order, named_schemas=named),
                               {"id": 4, "price": {"units": Decimal("9.99"), "currency": "EUR"}})
    avro = decoder(schema_registry_url, [subject_stem])
    assert avro.columns == (("id", "long"), ("price", "struct<units:decimal(6,2),currency:string>"))
    columns, errors = avro.decode(binary([framed(schema_id, out.getvalue())]), subject_stem)
    assert errors.to_pylist() == [None]
    assert pa.table(columns).to_pylist() == [{"id": 4, "price": {"units": Decimal("9.99"), "currency": "EUR"}}]
