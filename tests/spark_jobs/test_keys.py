"""Keys decoded by ``topics[].key_format`` without Spark: an Avro key schema that is not a record (a ``string`` key,
as confluent-kafka's AvroSerializer writes it for ``"string"``) decodes into a plain ``decoded_key``, against the
real registry. Drains with Avro record keys and string keys: tests/spark_jobs/test_registry_drain.py."""

from __future__ import annotations

import pyarrow as pa
import pytest

from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.values.wire import framed
from spark_jobs.keys import KeyDecoder, key_decoding

pytestmark = pytest.mark.registry


def test_an_avro_key_that_is_not_a_record_decodes_into_its_value(schema_registry_url, subject_stem):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    topic = TopicSettings(name=subject_stem, priorities=1, key_format="avro")
    name = topic.priority_topic(0)
    serialize = AvroSerializer(SchemaRegistryClient({"url": schema_registry_url}), '"string"')
    keys = [serialize(f"order-{i}", SerializationContext(name, MessageField.KEY)) for i in range(3)]
    config = KprioConfig(topics=[topic], schema_registry={"url": schema_registry_url, "timeout_s": 2})

    decoding = key_decoding(config, topic, ())
    assert decoding.columns == (("decoded_key", "string"),)
    batch = pa.record_batch({"key": [*keys, None, framed(1_999_999_998, b"\x02")], "topic": [name] * 5,
                             "error": pa.nulls(5, pa.string()), "decoded_key": pa.nulls(5, pa.string())})
    out = KeyDecoder(decoding).apply(batch)
    assert out.column("decoded_key").to_pylist() == ["order-0", "order-1", "order-2", None, None]
    assert out.column("error").to_pylist() == [None] * 4 + [
        "key: schema id 1999999998 is not in the schema registry (404)"]
    assert out.column("key").to_pylist() == batch.column("key").to_pylist()  # the raw key, byte for byte
