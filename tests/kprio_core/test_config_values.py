"""The value and key format settings (``topics[].value_format``, ``value_subject``, ``key_format``, ``key_subject``)
and the ``schema_registry`` section: what loads, what is refused with one message naming the key, and where the
registry's secrets come from."""

from __future__ import annotations

import pytest

from kprio_core.config import ENV_REGISTRY_KEY_PASSWORD, ENV_REGISTRY_PASSWORD, KeyFormat, ValueFormat, parse_config
from kprio_core.errors import ConfigError

REGISTRY = {"url": "https://sr.example:8081"}


def load(topic: dict, registry: dict | None = REGISTRY, env: dict | None = None):  # noqa: ANN201
    raw = {"topics": [{"name": "orders", **topic}]}
    if registry is not None:
        raw["schema_registry"] = registry
    return parse_config(raw, "kprio.yaml", env=env or {})


@pytest.mark.parametrize(("topic", "registry", "message"), [
    ({"value_format": "avro"}, None,
     "topic 'orders' has value_format avro: add a schema_registry section with its url"),
    ({"value_format": "json_schema"}, None,
     "topic 'orders' has value_format json_schema: add a schema_registry section with its url"),
    ({"value_format": "avro", "schema": {"n": "long"}}, REGISTRY,
     "schema lists JSON fields, but value_format is avro: the registry gives the columns; remove schema"),
    ({"value_format": "raw", "schema": {"n": "long"}}, REGISTRY,
     "schema lists JSON fields, but value_format is raw: raw is not decoded; remove schema"),
    ({"value_format": "thrift"}, REGISTRY,
     "value_format: Input should be 'json', 'avro', 'protobuf', 'json_schema' or 'raw'"),
    ({"value_format": "avro", "value_subject": "{subject}-value"}, REGISTRY, "value_subject '{subject}-value'"),
    ({"value_format": "avro"}, {**REGISTRY, "password": "hunter2"},
     f"'password' is a secret: remove it from the file and set it in the environment as {ENV_REGISTRY_PASSWORD}"),
    ({"value_format": "avro"}, {"url": "https://kprio:hunter2@sr.example"}, "holds credentials"),
    ({"key_format": "protobuf"}, None,
     "topic 'orders' has key_format protobuf: add a schema_registry section with its url"),
    ({"key_format": "json"}, REGISTRY,
     "key_format: Input should be 'raw', 'string', 'avro', 'protobuf' or 'json_schema'"),
    ({"key_format": "avro", "key_subject": "{subject}-key"}, REGISTRY, "key_subject '{subject}-key'"),
])
def test_a_bad_value_setting_is_one_message_naming_it(topic, registry, message):
    with pytest.raises(ConfigError) as caught:
        load(topic, registry)
    assert message in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_avro_with_a_registry_loads_and_the_secrets_come_from_the_environment():
    config = load({"value_format": "avro", "required_fields": ["id"]},
                  {**REGISTRY, "username": "kprio", "ssl_ca_location": "/ca.pem", "timeout_s": 3})
    assert config.topics[0].value_format is ValueFormat.AVRO and config.topics[0].value_subject == "{topic}-value"
    endpoint = config.schema_registry.endpoint({ENV_REGISTRY_PASSWORD: "s3cret", ENV_REGISTRY_KEY_PASSWORD: "k3y"})
    assert (endpoint.username, endpoint.password, endpoint.key_password) == ("kprio", "s3cret", "k3y")
    assert (endpoint.ca_location, endpoint.timeout_s) == ("/ca.pem", 3.0)
    assert "s3cret" not in repr(endpoint) and "k3y" not in repr(endpoint)
    assert "s3cret" not in config.model_dump_json()


def test_json_stays_the_default():
    config = load({"schema": {"n": "long"}}, registry=None)
    assert config.topics[0].value_format is ValueFormat.JSON and config.schema_registry is None


def test_keys_stay_raw_by_default_and_decode_without_a_registry_as_strings():
    """No key setting: the key is not decoded (today's rows, byte for byte); ``string`` needs no registry, the
    registry formats read ``<topic>-key`` unless the topic names another subject."""
    topic = load({"schema": {"n": "long"}}, registry=None).topics[0]
    assert topic.key_format is KeyFormat.RAW and topic.key_subject == "{topic}-key"
    assert load({"key_format": "string"}, registry=None).topics[0].key_format is KeyFormat.STRING
    keyed = load({"key_format": "json_schema", "key_subject": "orders-key"}).topics[0]
    assert (keyed.key_format.registry_type, keyed.key_subject) == ("JSON", "orders-key")
