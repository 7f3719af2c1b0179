"""Protobuf values in the wire format decoded into typed Arrow columns, against the real registry (the session's
embedded Apicurio Registry): written by confluent-kafka's ProtobufSerializer (the schema registered as a serialized
descriptor), and by hand against a schema registered as ``.proto`` text (as Java serializers register it)."""

from __future__ import annotations

import datetime as dt
import importlib
import os
import sys

import pyarrow as pa
import pytest

from kprio_core.values.avro import ValueDecoding, merged_columns, reader_schemas, value_subject
from kprio_core.values.registry import RegistryEndpoint, SchemaRegistry
from kprio_core.values.wire import framed

pytestmark = pytest.mark.registry

PROTO = """syntax = "proto3";
package kprio.test;
import "google/protobuf/timestamp.proto";
message Order {
  int64 id = 1;
  string item = 2;
  google.protobuf.Timestamp at = 3;
  repeated string tags = 4;
  Ship ship = 5;
  enum State { NEW = 0; PAID = 1; }
  State state = 6;
  map<string, int32> counts = 7;
  optional double weight = 8;
}
message Ship { string city = 1; }
"""


@pytest.fixture(scope="module")
def order_pb2(tmp_path_factory):  # noqa: ANN201 - the generated module
    """The module protoc generates from PROTO (what a producer application imports)."""
    import grpc_tools
    from grpc_tools import protoc

    folder = tmp_path_factory.mktemp("proto")
    (folder / "kprio_order.proto").write_text(PROTO)
    wkt = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    assert protoc.main(["protoc", f"-I{folder}", f"-I{wkt}", f"--python_out={folder}", "kprio_order.proto"]) == 0
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module("kprio_order_pb2")
    finally:
        sys.path.remove(str(folder))


def decode(url: str, topic: str, values: list[bytes | None]):  # noqa: ANN201
    endpoint = RegistryEndpoint(url)
    readers = reader_schemas(SchemaRegistry(endpoint), {topic: value_subject(topic)}, "PROTOBUF")
    columns = merged_columns(readers)
    decoder = ValueDecoding(endpoint, readers, "PROTOBUF").decoder(columns)
    return columns, decoder.decode(pa.array(values, pa.binary()), topic)


COLUMNS = (("id", "long"), ("item", "string"), ("at", "timestamp"), ("tags", "array<string>"),
           ("ship", "struct<city:string>"), ("state", "string"), ("counts", "map<int>"), ("weight", "double"))


def test_protobuf_serializer_values_become_typed_columns(order_pb2, schema_registry_url, subject_stem):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serialize = ProtobufSerializer(order_pb2.Order, SchemaRegistryClient({"url": schema_registry_url}),
                                   {"use.deprecated.format": False})
    context = SerializationContext(subject_stem, MessageField.VALUE)
    full = order_pb2.Order(id=3, item="tea", tags=["a", "b"], ship=order_pb2.Ship(city="Oslo"), state=1, weight=1.5)
    full.at.FromJsonString("2024-05-01T12:00:00Z")
    full.counts["x"] = 2
    values = [serialize(full, context), serialize(order_pb2.Order(id=4), context)]
    schema_id = int.from_bytes(values[0][1:5], "big")
    values += [framed(schema_id, b"\x00\xff\xff"), framed(schema_id, b"\x04\x02"), framed(2_000_000_002, b"\x00"),
               None]
    columns, (decoded, errors) = decode(schema_registry_url, subject_stem, values)
    assert columns == COLUMNS
    rows = pa.table(decoded).to_pylist()
    assert rows[0] == {"id": 3, "item": "tea", "at": dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone.utc),
                       "tags": ["a", "b"], "ship": {"city": "Oslo"}, "state": "PAID", "counts": [("x", 2)],
                       "weight": 1.5}
    # Unset: a message and an optional field are null, proto3 scalars their defaults.
    assert rows[1] == {"id": 4, "item": "", "at": None, "tags": [], "ship": None, "state": "NEW", "counts": [],
                       "weight": None}
    reasons = errors.to_pylist()
    assert reasons[:2] == [None, None] and reasons[5] is None
    assert reasons[2].startswith(f"payload does not parse as kprio.test.Order of schema id {schema_id}")
    assert reasons[3] == f"value of schema id {schema_id} has no valid message indexes: " \
                         "the message indexes run past the value's end"
    assert reasons[4] == "schema id 2000000002 is not in the schema registry (404)"


def test_a_schema_registered_as_proto_text_is_compiled(order_pb2, schema_registry_url, subject_stem):
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": schema_registry_url})
    schema_id = client.register_schema(value_subject(subject_stem), Schema(PROTO, "PROTOBUF"))
    ship = b"\x02\x02"  # message indexes [1] (count 1, index 1, zigzag): the file's second message, Ship
    values = [framed(schema_id, b"\x00" + order_pb2.Order(id=9, item="cup").SerializeToString()),
              framed(schema_id, ship + order_pb2.Ship(city="Rome").SerializeToString())]
    columns, (decoded, errors) = decode(schema_registry_url, subject_stem, values)
    assert columns == COLUMNS and errors.to_pylist() == [None, None]
    rows = pa.table(decoded).to_pylist()
    assert (rows[0]["id"], rows[0]["item"]) == (9, "cup")
    # A Ship has none of the reader's Order fields but `city`... which Order lacks: every column null, no error.
    assert all(v is None for v in rows[1].values())
