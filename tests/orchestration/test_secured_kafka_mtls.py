"""kprio on a cluster that authenticates clients by their TLS certificate (mutual TLS), both keystore forms.

One embedded broker for the module (``--security ssl --mtls``: every listener TLS, a client
certificate signed by the broker's CA required). The two forms a client's certificate comes in:

- the PKCS#12 keystore the broker made (``ssl.keystore.location``, ``KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD``),
  which librdkafka and Kafka's Java client both read under the same settings: the python reader's
  drain;
- PEM files, the certificate and its key apart, the key encrypted as OpenSSL and Python encrypt keys
  today (PBES2, AES), which Kafka's Java client cannot read itself (``ssl.certificate.location``,
  ``ssl.key.location``, ``KPRIO_KAFKA_SSL_KEY_PASSWORD``): the native reader's drain, which proves the
  translation hands Spark's Java client a key it can use;

and each drain goes to zero lag with conservation. No client certificate, and an expired one, each
fail in one line, and so does a plaintext client. No secret, and not the private key either, is in any
file the module wrote.
"""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import pkcs12
from typer.testing import CliRunner

from orchestration.cli.main import app
from orchestration.services.broker import BrokerSecurity, Security
from orchestration.services.broker_security import KEYSTORE_VARIABLE
from orchestration.services.process import wait_for
from orchestration.services.tls import issue, keystore, load_ca
from tests.fixtures.secured_broker import files_holding, secured_kafka
from tests.orchestration.secured_drains import drain_to_zero_lag, secured_config

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]

RECORDS = {2: 10, 1: 10, 0: 20}
KEY_PASSWORD_VARIABLE = "KPRIO_KAFKA_SSL_KEY_PASSWORD"


@pytest.fixture(scope="module")
def module_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mtls")


@pytest.fixture(scope="module")
def secured(module_dir: Path):
    with secured_kafka(module_dir / "broker", BrokerSecurity(Security.SSL, mtls=True)) as kafka:
        yield kafka


@pytest.fixture(scope="module")
def pem_client(secured, module_dir: Path):
    """The broker's client certificate as PEM files: the chain, and the key encrypted with a password of its own
    (PBES2, AES-256); the password and the unencrypted key's text, which no file may hold."""
    password = f"key-{secrets.token_urlsafe(18)}"
    key, cert, cas = pkcs12.load_key_and_certificates(secured.broker.tls.client.read_bytes(),
                                                      secured.env[KEYSTORE_VARIABLE].encode())
    folder = module_dir / "pem"
    folder.mkdir()
    (folder / "client.crt").write_bytes(b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [cert, *cas]))
    (folder / "client.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                          serialization.BestAvailableEncryption(password.encode())))
    assert b"ENCRYPTED PRIVATE KEY" in (folder / "client.key").read_bytes()
    clear = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()).decode().splitlines()[1]
    return folder, password, clear


def test_the_python_reader_drains_with_the_pkcs12_keystore_the_broker_made(secured, module_dir, warm_workers):
    # The settings `kprio broker start --security ssl --mtls` prints, as they are.
    assert set(secured.broker.client_settings()) == {"security.protocol", "ssl.ca.location", "ssl.keystore.location"}
    topic = secured.make_topic("orders-pkcs12", RECORDS)
    folder = module_dir / "drain-python"
    drain_to_zero_lag(secured_config(secured, folder, topic), topic, RECORDS, folder)


def test_the_native_reader_drains_with_pem_files_and_an_encrypted_key(secured, module_dir, warm_workers, pem_client,
                                                                       monkeypatch):
    folder, password, _ = pem_client
    client = {"ssl.keystore.location": None, "ssl.certificate.location": str(folder / "client.crt"),
              "ssl.key.location": str(folder / "client.key")}
    env = {KEY_PASSWORD_VARIABLE: password}
    monkeypatch.setenv(KEY_PASSWORD_VARIABLE, password)  # the Dagster resource reads it at run time
    topic = secured.make_topic("orders-pem", RECORDS)
    folder = module_dir / "drain-native"
    drain_to_zero_lag(secured_config(secured, folder, topic, reader="native", client=client, env=env), topic, RECORDS,
                      folder)


MISTAKES = {
    "no-client-certificate": ("ssl_client_certificate_rejected",
                              "the broker requires a client certificate (mutual TLS) and kprio sent none"),
    "expired-client-certificate": ("ssl_certificate_expired", "the broker refused kprio's client certificate "
                                   "(kafka.client.ssl.keystore.location EXPIRED): it expired"),
    # A plaintext client: the listener ends the probe's handshake asking for a certificate, which says TLS only.
    "plaintext-client": ("security_protocol_mismatch", "kafka.client.security.protocol is PLAINTEXT, but the "
                         "broker's listener speaks TLS (SSL or SASL_SSL)"),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_client_certificate_mistake_fails_in_one_line(secured, module_dir, mistake):
    code, named = MISTAKES[mistake]
    client: dict = {"ssl.keystore.location": None}
    if mistake == "expired-client-certificate":
        password = secured.env[KEYSTORE_VARIABLE]
        ca_key, ca_cert = load_ca(secured.broker.tls, password)
        now = datetime.now(UTC)
        key, cert = issue(ca_key, ca_cert, "kprio", [], now, days=1, not_before=now - timedelta(days=3))
        expired = module_dir / "expired.p12"
        expired.write_bytes(keystore(key, cert, ca_cert, password, "kprio"))
        client["ssl.keystore.location"] = str(expired)
        named = named.replace("EXPIRED", str(expired))
    if mistake == "plaintext-client":
        client.update({"security.protocol": None, "ssl.ca.location": None})
    path = module_dir / f"{mistake}.yaml"
    path.write_text(yaml.safe_dump({"kafka": secured.raw(**client), "topics": [{"name": "orders"}]}))

    started = time.monotonic()
    result = CliRunner().invoke(app, ["lag", "--config", str(path)])
    took = time.monotonic() - started

    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("kprio: error: ") and lines[0].endswith(f"[{code}]") and named in lines[0], lines[0]
    assert took < 10, f"took {took:.1f} s"
    assert not [s for s in secured.secrets if s in result.output]


def test_no_secret_nor_the_private_key_is_in_any_file_this_module_wrote(secured, module_dir, spark_files, pem_client):
    """Runs last in the module: the native reader got the key decrypted (Kafka's Java client reads no PBES2 key),
    as an option Spark redacts, so its text must be nowhere: not in the event log, nor in a plan."""
    _, password, clear_key = pem_client
    assert list(module_dir.glob("drain-*/dagster/*")), "run the whole module: the sweep reads what its drains wrote"
    # Spark's event log holds the native reader's plan, options and all (its Kafka client's settings redacted).
    assert wait_for(lambda: any(b"orders-pem" in f.read_bytes() for f in (spark_files / "events").rglob("*")
                                if f.is_file()), 30), "the native drain is not in Spark's event log"
    assert files_holding([module_dir, spark_files], [*secured.secrets, password, clear_key]) == {}
