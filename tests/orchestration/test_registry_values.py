"""Registry values end to end, one test per format (``avro``, ``protobuf``, ``json_schema``): confluent-kafka's own
serializer (AvroSerializer, ProtobufSerializer, JSONSerializer) writes through the real registry (the session's
embedded Apicurio Registry) into the embedded broker. ``kprio drain`` drains the first phase into a Delta table with
typed columns (nested included); then the subject's compatibility is set to BACKWARD (Protobuf on Apicurio: see
:func:`compatibility`) and its schema gains an optional field while records of the old version are still pending, and
priority_lag_sensor drains that phase (its evaluations request the runs, executed in process as the daemon would
launch them): the table gains the column in a commit of its own before the data commit. Values not in the wire
format and schema ids the registry does not know are dead letters with the reason, in both phases. For Avro, the
registry goes down before the second phase: the batches of ``kprio drain --once`` fail as transient, and the sensor
retries them once the registry is back."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable
from typer.testing import CliRunner

from kprio_core.ledger import BatchState
from kprio_core.values.wire import framed
from orchestration.cli.main import app
from orchestration.dagster.instance import open_instance
from orchestration.dagster.sensors import SENSOR_NAME
from orchestration.runtime.healing import probe_causes
from spark_jobs.delta_table import BATCH_KEY, COLUMNS_KEY, read_table, table_uri
from tests.fixtures.kafka import produce_acked
from tests.fixtures.registry import embedded_registry
from tests.orchestration.conservation import conservation, lag
from tests.orchestration.dagster_env import read_all_dead_letters

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.registry, pytest.mark.slow]

UTC = dt.timezone.utc
Serialize = Callable[[dict, Any], bytes]
"""One record (as :func:`orders` makes it) and a SerializationContext -> the value in the wire format."""

AVRO_V1 = {"type": "record", "name": "Order", "namespace": "kprio.e2e", "fields": [
    {"name": "id", "type": "long"},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "ship", "type": {"type": "record", "name": "Ship", "fields": [{"name": "city", "type": "string"}]}},
]}
AVRO_V2 = {**AVRO_V1, "fields": [*AVRO_V1["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}]}

# Closed (no additional properties): adding an optional property is then a BACKWARD compatible change, as Confluent's
# and Apicurio's rules for JSON Schema have it (in an open content model an old record may hold any `coupon`).
JSON_V1 = {"type": "object", "title": "Order", "additionalProperties": False, "required": ["id"], "properties": {
    "id": {"type": "integer"}, "price": {"type": "number"}, "placed": {"type": "string", "format": "date-time"},
    "day": {"type": "string", "format": "date"},
    "ship": {"type": "object", "properties": {"city": {"type": "string"}}}}}
JSON_V2 = {**JSON_V1, "properties": {**JSON_V1["properties"], "coupon": {"type": ["null", "string"]}}}

COMMON = {"id": "int64", "placed": "timestamp[us, tz=UTC]", "ship": "struct<city: string>"}
TYPED = {"avro": {**COMMON, "price": "decimal128(9, 2)", "day": "date32[day]"},
         "json_schema": {**COMMON, "price": "double", "day": "date32[day]"},
         "protobuf": {**COMMON, "price": "double", "state": "string"}}
"""The typed columns each format's table has (Arrow's names), before the new one."""


def order_classes() -> dict[int, Any]:
    """The Order message of versions 1 and 2 (2 adds ``optional string coupon``), each compiled in a descriptor pool of
    its own from a descriptor built here (what protoc would generate from the .proto; nothing to download)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, timestamp_pb2
    from google.protobuf.message_factory import GetMessageClass

    field = descriptor_pb2.FieldDescriptorProto
    classes = {}
    for version in (1, 2):
        pool = descriptor_pool.DescriptorPool()
        timestamp = descriptor_pb2.FileDescriptorProto()
        timestamp_pb2.DESCRIPTOR.CopyToProto(timestamp)
        pool.Add(timestamp)
        file = descriptor_pb2.FileDescriptorProto(name="kprio_e2e_order.proto", package="kprio.e2e", syntax="proto3",
                                                  dependency=["google/protobuf/timestamp.proto"])
        order = file.message_type.add(name="Order")  # the first message: the one the reader's columns come from
        order.enum_type.add(name="State").value.extend([
            descriptor_pb2.EnumValueDescriptorProto(name="NEW", number=0),
            descriptor_pb2.EnumValueDescriptorProto(name="PAID", number=1)])
        optional = field.LABEL_OPTIONAL
        order.field.extend([
            field(name="id", number=1, type=field.TYPE_INT64, label=optional),
            field(name="price", number=2, type=field.TYPE_DOUBLE, label=optional),
            field(name="placed", number=3, type=field.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp",
                  label=optional),
            field(name="ship", number=4, type=field.TYPE_MESSAGE, type_name=".kprio.e2e.Ship", label=optional),
            field(name="state", number=5, type=field.TYPE_ENUM, type_name=".kprio.e2e.Order.State", label=optional)])
        if version == 2:  # proto3 `optional`: a synthetic oneof gives the field presence
            order.oneof_decl.add(name="_coupon")
            order.field.add(name="coupon", number=6, type=field.TYPE_STRING, label=optional, oneof_index=0,
                            proto3_optional=True)
        file.message_type.add(name="Ship").field.add(name="city", number=1, type=field.TYPE_STRING, label=optional)
        pool.Add(file)
        classes[version] = GetMessageClass(pool.FindMessageTypeByName("kprio.e2e.Order"))
    return classes


def serializer(value_format: str, url: str, version: int) -> Serialize:
    """confluent-kafka's serializer of ``value_format`` for schema ``version`` (it registers the schema)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient({"url": url})
    if value_format == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        return AvroSerializer(client, json.dumps({1: AVRO_V1, 2: AVRO_V2}[version]))
    if value_format == "json_schema":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        serialize = JSONSerializer(json.dumps({1: JSON_V1, 2: JSON_V2}[version]), client)
        return lambda r, context: serialize({**r, "price": float(r["price"]), "placed": r["placed"].isoformat(),
                                             "day": r["day"].isoformat()}, context)
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    cls = order_classes()[version]
    serialize = ProtobufSerializer(cls, client, {"use.deprecated.format": False})

    def message(r: dict) -> Any:
        out = cls(id=r["id"], price=float(r["price"]), ship={"city": r["ship"]["city"]}, state=r["id"] % 2,
                  **({"coupon": r["coupon"]} if "coupon" in r else {}))
        out.placed.seconds = int(r["placed"].timestamp())
        return out

    return lambda r, context: serialize(message(r), context)


def compatibility(value_format: str, url: str) -> str:
    """BACKWARD; but NONE for Protobuf on Apicurio Registry 2.4.2 (the embedded one): its compatibility check parses
    the stored version as ``.proto`` text, and confluent-kafka's Python serializer registers a base64 serialized
    descriptor, so a second version is refused with a 500 (``Syntax error in :1:1: unexpected label``)."""
    return "NONE" if value_format == "protobuf" and "/apis/ccompat/" in url else "BACKWARD"


def orders(first: int, n: int, **extra) -> list[dict]:
    return [{"id": i, "price": Decimal(f"{i}.25"), "placed": dt.datetime(2024, 1, 1, 0, 0, i % 60, tzinfo=UTC),
             "day": dt.date(2024, 1, 1 + i % 28), "ship": {"city": f"c{i}"}, **extra} for i in range(first, first + n)]


def produce(kafka, topic: str, serialize: Serialize, records: list[dict]) -> None:
    from confluent_kafka.serialization import MessageField, SerializationContext

    context = SerializationContext(topic, MessageField.VALUE)
    delivered = produce_acked(kafka, topic, [(f"k{r['id']}".encode(), serialize(r, context)) for r in records])
    assert not delivered.failed, delivered.failed


def drain(path, *args: str) -> dict:
    result = CliRunner().invoke(app, ["drain", *(args or ["--until-empty"]), "--json", "--config", str(path)],
                                catch_exceptions=False)
    assert result.exit_code == 0 or args, result.output
    return json.loads(result.stdout)


def sensor_drains(defs: dg.Definitions, instance: dg.DagsterInstance) -> tuple[list[dg.RunRequest], str]:
    """Evaluate priority_lag_sensor and execute the runs it requests in process (tagged as the daemon tags the runs it
    launches, the partitions it asks for added first) until it skips: its requests, and why it skipped."""
    sensor, job = defs.resolve_sensor_def(SENSOR_NAME), defs.resolve_job_def("drain_job")
    requested: list[dg.RunRequest] = []
    cursor = None
    for _ in range(6):
        with dg.build_sensor_context(instance=instance, cursor=cursor, resources=defs.resources) as context:
            result = sensor(context)
        cursor = result.cursor
        if not result.run_requests:
            return requested, result.skip_reason.skip_message
        for request in result.dynamic_partitions_requests:
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        for request in result.run_requests:
            run = job.execute_in_process(instance=instance, partition_key=request.partition_key, raise_on_error=False,
                                         tags={**request.tags, "dagster/run_key": request.run_key,
                                               "dagster/sensor_name": SENSOR_NAME})
            assert run.success, [e.message for e in run.all_events if e.is_failure]
            requested.append(request)
    raise AssertionError(f"the sensor still requests runs after 6 evaluations: {[r.run_key for r in requested]}")


@pytest.mark.parametrize("value_format", ["avro", "protobuf", "json_schema"])
def test_registry_values_drain_into_delta_with_typed_columns_and_the_new_column_under_kprio_drain_and_the_sensor(
        value_format, make_topic, kprio_env, kafka_settings, schema_registry_url, tmp_path, monkeypatch, spark):
    from confluent_kafka.schema_registry import SchemaRegistryClient

    topic = make_topic(priorities=2, partitions=1, value_format=value_format)
    env = kprio_env(topic, schema_registry={"url": schema_registry_url}, drain={"format": "delta"})
    path = tmp_path / "kprio.yaml"
    path.write_text(yaml.safe_dump(env.config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir()
    high, low = topic.priority_topic(1), topic.priority_topic(0)
    v1, v2 = (serializer(value_format, schema_registry_url, version) for version in (1, 2))

    # Phase 1, under `kprio drain`.
    produce(kafka_settings, high, v1, orders(0, 5))
    produce(kafka_settings, low, v1, orders(100, 5))
    # Not in the wire format, and a schema id the registry does not know: dead letters, not a stall.
    produce_acked(kafka_settings, low, [(b"bad-1", b"{\"id\": 1}"), (b"bad-2", framed(2_000_000_000, b"\x00"))])
    first = drain(path)
    assert first["ok"] and first["records"] == {"1": 5, "0": 7}
    table = read_table(env.config.drain.output_path, topic.name)
    assert table.num_rows == 10 and "coupon" not in table.column_names
    assert {f.name: str(f.type) for f in table.schema if f.name in TYPED[value_format]} == TYPED[value_format]
    dead = read_all_dead_letters(spark, env.config.drain.dead_letter_path, topic)
    assert [(t, e) for t, _, _, e in dead] == [
        (low, "wrong magic byte 123 (the wire format starts with 0)"),
        (low, "schema id 2000000000 is not in the schema registry (404)")]

    # Phase 2, under the sensor. The producers move to v2 (a new optional field) while an old producer still writes
    # v1: both pending.
    produce(kafka_settings, low, v1, orders(200, 3))
    for subject in (f"{high}-value", f"{low}-value"):
        SchemaRegistryClient({"url": schema_registry_url}).set_compatibility(
            subject, compatibility(value_format, schema_registry_url))
    produce(kafka_settings, high, v2, orders(10, 2, coupon="SAVE"))
    produce(kafka_settings, low, v2, orders(300, 2, coupon="LOW"))
    produce_acked(kafka_settings, high, [(b"bad-3", framed(2_000_000_001, b"\x00"))])
    registry = embedded_registry()
    failed: list[str] = []
    if value_format == "avro" and registry is not None:  # the session's embedded one (an external one cannot stop)
        # The registry goes down: the batches of one tick (one, or two when the tick plans the caught-up high priority
        # apart) fail as transient and whole, no record blamed, none split apart to find a cause (the registry fails
        # every part alike); the sensor retries them once the registry is back.
        registry.stop()
        try:
            down = drain(path, "--once")
            # The probe before a tick sees the cause, so no retry goes into it (and a later failure of the streak,
            # backed off, is retried at once once the registry answers, not at its backoff).
            seen = probe_causes(env.ledger, env.config, cause_seen=False)
        finally:
            registry.start()
        assert seen.problem is not None and "schema registry does not answer" in seen.problem, seen
        assert probe_causes(env.ledger, env.config, cause_seen=True).passed
        assert down["batches"] and all(b["state"] == "failed" for b in down["batches"]), down
        assert all(b["reason"].endswith("[schema_registry_unavailable]") for b in down["batches"]), down
        failed = [b["batch_id"] for b in down["batches"]]
        assert all(env.ledger.batches.get(b).transient for b in failed)
        held = env.ledger.batches.find(topic.name, states=[BatchState.FAILED])
        assert sorted(b.batch_id for b in held) == sorted(failed)
    with open_instance(env.config) as instance:  # the instance `kprio drain` ran on: the daemon's
        requested, skipped = sensor_drains(env.defs, instance)
    assert requested and skipped == "no backlog", (requested, skipped)
    drained = [env.ledger.batches.get(r.partition_key) for r in requested]
    assert all(b.state is BatchState.COMMITTED for b in drained)
    assert sorted(r.partition_key for r in requested if r.tags["kprio/why"] == "retry") == sorted(failed)
    assert lag(topic, env.edge) == {1: 0, 0: 0}
    dead = read_all_dead_letters(spark, env.config.drain.dead_letter_path, topic)
    assert [(t, e) for t, _, _, e in dead if t == high] == [
        (high, "schema id 2000000001 is not in the schema registry (404)")] and len(dead) == 3
    table = read_table(env.config.drain.output_path, topic.name)
    assert table.num_rows == 17 and table.schema.field("coupon").type == pa.string()
    assert {f.name: str(f.type) for f in table.schema if f.name in TYPED[value_format]} == TYPED[value_format]
    coupons = {row["id"]: row["coupon"] for row in table.select(["id", "coupon"]).to_pylist()}
    assert {i: coupons[i] for i in (0, 100, 200, 201, 202)} == dict.fromkeys((0, 100, 200, 201, 202))
    assert {i: coupons[i] for i in (10, 11, 300, 301)} == {10: "SAVE", 11: "SAVE", 300: "LOW", 301: "LOW"}
    row = next(r for r in table.to_pylist() if r["id"] == 301)
    assert row["price"] == Decimal("301.25") and row["ship"] == {"city": "c301"}  # 301.25 is exact as a double
    assert row["placed"] == dt.datetime(2024, 1, 1, 0, 0, 1, tzinfo=UTC)
    assert row.get("day", dt.date(2024, 1, 22)) == dt.date(2024, 1, 22) and row.get("state", "PAID") == "PAID"
    # The new column came in a commit of its own, by a batch the sensor launched, before that batch's data commit.
    history = DeltaTable(table_uri(env.config.drain.output_path, topic.name)).history()
    [added] = [c for c in history if "coupon" in (c.get(COLUMNS_KEY) or "")]
    assert added["operation"] != "WRITE" and added[COLUMNS_KEY].split(" ")[0] in {b.batch_id for b in drained}
    later = [c for c in history if c.get(BATCH_KEY) and c["version"] > added["version"]]
    assert later and {c[BATCH_KEY] for c in later} <= {b.batch_id for b in drained}
    assert added[COLUMNS_KEY].split(" ")[0] in {c[BATCH_KEY] for c in later}  # its batch's data commit came after
    check = conservation(env.config, topic, env.edge)
    assert check.ok, check
