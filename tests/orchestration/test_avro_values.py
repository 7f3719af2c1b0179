"""``value_format: avro`` end to end: confluent-kafka's AvroSerializer writes through the real registry (the
session's embedded Apicurio Registry) into the embedded broker, and ``kprio drain`` drains into a Delta table with
typed columns; the schema gains an optional field while records of the old version are still pending, and the
table gains its column; records with a bad schema id or no wire format go to the dead letters with the reason."""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable
from typer.testing import CliRunner

from kprio_core.values.wire import framed
from orchestration.cli.main import app
from spark_jobs.delta_table import BATCH_KEY, COLUMNS_KEY, read_table, table_uri
from tests.fixtures.kafka import produce_acked
from tests.fixtures.registry import embedded_registry
from tests.orchestration.dagster_env import read_all_dead_letters

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.registry, pytest.mark.slow]

UTC = dt.timezone.utc
V1 = {"type": "record", "name": "Order", "namespace": "kprio.e2e", "fields": [
    {"name": "id", "type": "long"},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
    {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "ship", "type": {"type": "record", "name": "Ship", "fields": [{"name": "city", "type": "string"}]}},
]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}]}


def orders(first: int, n: int, **extra) -> list[dict]:
    return [{"id": i, "price": Decimal(f"{i}.25"), "placed": dt.datetime(2024, 1, 1, 0, 0, i % 60, tzinfo=UTC),
             "day": dt.date(2024, 1, 1 + i % 28), "ship": {"city": f"c{i}"}, **extra} for i in range(first, first + n)]


def produce_avro(kafka, url: str, topic: str, schema: dict, records: list[dict]) -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serialize = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    values = [(f"k{r['id']}".encode(), serialize(r, context)) for r in records]
    delivered = produce_acked(kafka, topic, values)
    assert not delivered.failed, delivered.failed


def drain(path) -> dict:
    result = CliRunner().invoke(app, ["drain", "--until-empty", "--json", "--config", str(path)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_avro_topic_drains_into_delta_with_typed_columns_and_the_new_column(
        make_topic, kprio_env, kafka_settings, schema_registry_url, tmp_path, monkeypatch, spark):
    from confluent_kafka.schema_registry import SchemaRegistryClient

    topic = make_topic(priorities=2, partitions=1, value_format="avro")
    env = kprio_env(topic, schema_registry={"url": schema_registry_url}, drain={"format": "delta"})
    path = tmp_path / "kprio.yaml"
    path.write_text(yaml.safe_dump(env.config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir()
    high, low = topic.priority_topic(1), topic.priority_topic(0)

    produce_avro(kafka_settings, schema_registry_url, high, V1, orders(0, 5))
    produce_avro(kafka_settings, schema_registry_url, low, V1, orders(100, 5))
    # Not in the wire format, and a schema id the registry does not know: dead letters, not a stall.
    produce_acked(kafka_settings, low, [(b"bad-1", b"{\"id\": 1}"), (b"bad-2", framed(2_000_000_000, b"\x02"))])
    first = drain(path)
    assert first["ok"] and first["records"] == {"1": 5, "0": 7}
    table = read_table(env.config.drain.output_path, topic.name)
    assert table.num_rows == 10 and "coupon" not in table.column_names
    assert {f.name: str(f.type) for f in table.schema if f.name in ("id", "price", "placed", "day", "ship")} == {
        "id": "int64", "price": "decimal128(9, 2)", "placed": "timestamp[us, tz=UTC]", "day": "date32[day]",
        "ship": "struct<city: string>"}
    dead = read_all_dead_letters(spark, env.config.drain.dead_letter_path, topic)
    assert [(t, e) for t, _, _, e in dead] == [
        (low, "wrong magic byte 123 (the wire format starts with 0)"),
        (low, "schema id 2000000000 is not in the schema registry (404)")]

    # The producers move to v2 (a new optional field) while an old producer still writes v1: both pending.
    produce_avro(kafka_settings, schema_registry_url, low, V1, orders(200, 3))
    for subject in (f"{high}-value", f"{low}-value"):
        SchemaRegistryClient({"url": schema_registry_url}).set_compatibility(subject, "BACKWARD")
    produce_avro(kafka_settings, schema_registry_url, high, V2, orders(10, 2, coupon="SAVE"))
    produce_avro(kafka_settings, schema_registry_url, low, V2, orders(300, 2, coupon="LOW"))
    # The registry goes down: the batch fails as transient (no record blamed) and drains once it is back.
    registry = embedded_registry()
    if registry is not None:  # the session's embedded registry (an external one cannot be stopped here)
        registry.stop()
        try:
            down = CliRunner().invoke(app, ["drain", "--once", "--json", "--config", str(path)],
                                      catch_exceptions=False)
        finally:
            registry.start()
        [failed] = json.loads(down.stdout)["batches"]
        assert failed["state"] == "failed" and failed["reason"].endswith("[schema_registry_unavailable]")
        assert env.ledger.get(failed["batch_id"]).transient
    second = drain(path)
    assert second["ok"] and second["records"] == {"1": 2, "0": 5}
    assert len(read_all_dead_letters(spark, env.config.drain.dead_letter_path, topic)) == 2  # only the first two
    table = read_table(env.config.drain.output_path, topic.name)
    assert table.num_rows == 17 and table.schema.field("coupon").type == pa.string()
    coupons = {row["id"]: row["coupon"] for row in table.select(["id", "coupon"]).to_pylist()}
    assert {i: coupons[i] for i in (0, 100, 200, 201, 202)} == dict.fromkeys((0, 100, 200, 201, 202))
    assert {i: coupons[i] for i in (10, 11, 300, 301)} == {10: "SAVE", 11: "SAVE", 300: "LOW", 301: "LOW"}
    row = next(r for r in table.to_pylist() if r["id"] == 301)
    assert row["price"] == Decimal("301.25") and row["ship"] == {"city": "c301"} and row["day"] == dt.date(2024, 1, 22)
    # The new column came in a commit of its own, before the data commit of the batch that brought it.
    history = DeltaTable(table_uri(env.config.drain.output_path, topic.name)).history()
    added = [c for c in history if "coupon" in (c.get(COLUMNS_KEY) or "")]
    assert len(added) == 1 and added[0]["operation"] != "WRITE"
    later = [c for c in history if c.get(BATCH_KEY) and c["version"] > added[0]["version"]]
    assert later and all(c.get(BATCH_KEY) in {b["batch_id"] for b in second["batches"]} for c in later)

