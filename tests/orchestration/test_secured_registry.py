"""A secured schema registry, as one in production is: the embedded Apicurio Registry started https only, with a
certificate of a CA made here, and one user (HTTP basic auth on every API request). The session's registry stays
plain; this module starts and stops its own.

kprio reaches it with ``schema_registry.username``, ``ssl_ca_location`` and the password from
``KPRIO_SCHEMA_REGISTRY_PASSWORD``: its client on the driver and the decoder on the executors (one ``drain_batch``
of Avro values), and the demo's producer settings (confluent-kafka's client) register and serialize through it. A wrong password is one line naming the registry's URL and the 401; a CA that did not sign the
registry's certificate is one line naming TLS verification. No password appears in a message, a log, a repr, the
registry's log or state file, or its JVM's command line.
"""

from __future__ import annotations

import json
import logging
import secrets
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import psutil
import pytest

from kprio_core.config import ENV_REGISTRY_PASSWORD, KprioConfig, SchemaRegistrySettings, parse_config
from kprio_core.errors import SchemaRegistryRefused
from kprio_core.values.registry import SchemaRegistry
from orchestration.cli.redaction import secret_variable
from orchestration.demo.avro_values import client_conf
from orchestration.services.registry import EmbeddedRegistry, RegistryTls
from orchestration.services.tls import issue, make_ca
from spark_jobs.drain import drain_batch
from tests.fixtures.kafka import produce_acked
from tests.spark_jobs.on_disk import assert_conserved, staged_rows
from tests.spark_jobs.plans import whole_plan

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.registry]

SCHEMA = {"type": "record", "name": "Fee", "fields": [
    {"name": "n", "type": "long"},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 8, "scale": 2}},
]}
USER = "kprio"


@dataclass(frozen=True)
class Secured:
    registry: EmbeddedRegistry
    url: str
    ca: Path
    other_ca: Path
    password: str


def write_pem(path: Path, data: bytes) -> Path:
    path.touch(mode=0o600)
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Secured:
    from cryptography.hazmat.primitives import serialization as ser

    folder = tmp_path_factory.mktemp("secured-registry")
    now = datetime.now(UTC)
    ca_key, ca = make_ca(now)
    key, cert = issue(ca_key, ca, "127.0.0.1", ["127.0.0.1", "localhost"], now)
    _, other = make_ca(now)  # a CA of the same name that signed nothing the registry serves
    tls = RegistryTls(write_pem(folder / "registry.pem", cert.public_bytes(ser.Encoding.PEM)),
                      write_pem(folder / "registry.key", key.private_bytes(ser.Encoding.PEM, ser.PrivateFormat.PKCS8,
                                                                           ser.NoEncryption())))
    password = secrets.token_urlsafe(18)
    registry = EmbeddedRegistry(folder / "data", tls=tls, users={USER: password}, start_timeout_s=120)
    registry.start()
    try:
        yield Secured(registry, registry.url, write_pem(folder / "ca.pem", ca.public_bytes(ser.Encoding.PEM)),
                      write_pem(folder / "other-ca.pem", other.public_bytes(ser.Encoding.PEM)), password)
    finally:
        registry.stop()


def settings(secured: Secured, ca: Path | None = None, username: str | None = USER) -> dict:
    return {"url": secured.url, "username": username, "ssl_ca_location": str(ca or secured.ca), "timeout_s": 5}


def refusal(secured: Secured, env: dict[str, str], **kwargs) -> SchemaRegistryRefused:
    """What kprio's client meets asking the secured registry for a subject with these settings and environment."""
    config = parse_config({"schema_registry": settings(secured, **kwargs)}, "kprio.yaml", env=env)
    client = SchemaRegistry(config.schema_registry.endpoint(env))
    try:
        with pytest.raises(SchemaRegistryRefused) as caught:
            client.latest("any-value")
    finally:
        client.close()
    return caught.value


def test_kprio_reads_a_secured_registry_with_its_user_password_and_ca(secured, spark, kafka_settings, make_topic,
                                                                        tmp_path, monkeypatch, caplog):
    import httpx
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    caplog.set_level(logging.DEBUG, logger="kprio")  # kprio's own lines, all of them; the libraries' warnings
    assert secured.url.startswith("https://127.0.0.1:")
    # https only, and no API request without a user: what a production registry asks of every client.
    with pytest.raises(httpx.HTTPError):
        httpx.get(secured.url.replace("https:", "http:") + "/subjects", timeout=5)
    trust = ssl.create_default_context(cafile=secured.ca)
    assert httpx.get(f"{secured.url}/subjects", verify=trust, timeout=5).status_code == 401

    topic = make_topic(priorities=1, partitions=1, value_format="avro")
    name = topic.priority_topic(0)
    # The producer reaches it as the demo's does with --config of a secured registry: kprio's endpoint's settings.
    endpoint = SchemaRegistrySettings(**settings(secured)).endpoint({ENV_REGISTRY_PASSWORD: secured.password})
    producer_registry = SchemaRegistryClient(client_conf(endpoint))
    serialize = AvroSerializer(producer_registry, json.dumps(SCHEMA))
    records = [(f"k{i}".encode(), serialize({"n": i, "amount": Decimal(i) / 4},
                                            SerializationContext(name, MessageField.VALUE))) for i in range(6)]
    assert not produce_acked(kafka_settings, name, records).failed

    # The right user, the password from the environment, the CA: the driver's reader schemas and the executors'
    # decoder (the endpoint travels to them in the drain spec) both reach it.
    monkeypatch.setenv(ENV_REGISTRY_PASSWORD, secured.password)
    conf = KprioConfig(kafka=kafka_settings, schema_registry=settings(secured),
                       drain={"output_path": str(tmp_path / "out"), "dead_letter_path": str(tmp_path / "dead")})
    result = drain_batch(spark, conf, topic, "b-1", 1, whole_plan(kafka_settings, topic))
    rows = staged_rows(result, {"output": conf.drain.output_path, "dead-letters": conf.drain.dead_letter_path})
    assert_conserved(result, rows)
    assert (result.records, result.dead) == (6, 0)
    assert {r["n"]: r["amount"] for r in rows["output"]} == {i: Decimal(i) / 4 for i in range(6)}

    # A wrong password: one line naming the registry and the 401, the user, the variable; never a password.
    wrong = refusal(secured, {ENV_REGISTRY_PASSWORD: "not-" + secured.password})
    assert str(wrong) == (f"the schema registry refused kprio (401 to user {USER}: check schema_registry.username, "
                          f"{ENV_REGISTRY_PASSWORD} and, for mTLS, schema_registry.ssl_certificate_location) "
                          f"({secured.url})")
    assert not wrong.transient
    unset = refusal(secured, {})
    assert f"(401 to user {USER}, with no password: {ENV_REGISTRY_PASSWORD} is not set in the environment)" in str(unset)
    anonymous = refusal(secured, {}, username=None)
    assert f"(401: kprio sent no credentials, set schema_registry.username and {ENV_REGISTRY_PASSWORD})" in str(anonymous)
    # The same through a drain: the batch fails before Spark runs, with the same line.
    monkeypatch.setenv(ENV_REGISTRY_PASSWORD, "not-" + secured.password)
    with pytest.raises(SchemaRegistryRefused) as drained:
        drain_batch(spark, conf, topic, "b-2", 1, whole_plan(kafka_settings, topic))
    assert str(drained.value) == str(wrong)

    # A CA that did not sign the registry's certificate: one line naming TLS verification and the setting.
    untrusted = refusal(secured, {ENV_REGISTRY_PASSWORD: secured.password}, ca=secured.other_ca)
    assert str(untrusted) == ("TLS verification of the schema registry's certificate failed (certificate verify failed: "
                              "unable to get local issuer certificate): check schema_registry.ssl_ca_location (the PEM "
                              f"file of the CA that signs it) and the host in schema_registry.url ({secured.url})")
    assert not untrusted.transient

    # No password anywhere kprio or the registry writes or shows.
    state = secured.registry.state_path.read_text()
    shown = [str(e) for e in (wrong, unset, anonymous, drained.value, untrusted)] + [
        repr(endpoint), repr(SchemaRegistry(endpoint)), repr(conf), conf.model_dump_json(), repr(secured.registry),
        caplog.text, secured.registry.log_path.read_text(errors="replace"), state,
        " ".join(psutil.Process(secured.registry.status().pid).cmdline())]
    for text in shown:
        assert secured.password not in text and "not-" + secured.password not in text
    assert "${KPRIO_REGISTRY_USER_PASSWORD_0}" in shown[-1]  # the command line names the variable only
    assert secret_variable(ENV_REGISTRY_PASSWORD)  # the CLI's last guard replaces it in any line it prints


@pytest.mark.parametrize(("setting", "content", "why"), [
    ("ssl_ca_location", None, "no file"),
    ("ssl_ca_location", b"not a certificate", "cannot use"),
    ("ssl_certificate_location", b"not a certificate", "cannot use"),
])
def test_a_tls_file_kprio_cannot_use_is_one_line_naming_its_setting(tmp_path, setting, content, why):
    path = tmp_path / "file.pem"
    if content is not None:
        path.write_bytes(content)
    config = parse_config({"schema_registry": {"url": "https://sr.example:8081", setting: str(path)}}, "kprio.yaml",
                          env={})
    with pytest.raises(SchemaRegistryRefused) as caught:
        SchemaRegistry(config.schema_registry.endpoint({}))
    assert str(caught.value).startswith(f"schema_registry.{setting}: {why} {path}")
    assert "\n" not in str(caught.value) and not caught.value.transient
