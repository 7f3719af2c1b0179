"""Kafka's Java client settings derived from the one set of librdkafka settings (kprio_core/kafka/java_client.py).

A case table of the translation, then the private key of a PEM pair: the Java client gets it decrypted
and as PKCS#8 (it cannot decrypt the PBES2 keys OpenSSL and Python write), and a wrong password is a
ConfigError naming the variable, never showing a secret. The drains of tests/orchestration/
test_secured_kafka*.py prove the translated settings on the secured broker.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from kprio_core.config import KafkaSettings
from kprio_core.errors import ConfigError
from kprio_core.kafka.java_client import java_client_config, java_settings

SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"

# (case, librdkafka settings, the Java settings they become, Java settings that must be absent)
CASES = [
    ("1 SCRAM over TLS: a JAAS line from the user and password, a PEM truststore from the CA file",
     {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "kprio",
      "sasl.password": "s3cret", "ssl.ca.location": "/tls/ca.pem"},
     {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
      "sasl.jaas.config": f'{SCRAM} required username="kprio" password="s3cret";',
      "ssl.truststore.type": "PEM", "ssl.truststore.location": "/tls/ca.pem"},
     {"sasl.username", "sasl.password", "ssl.ca.location"}),
    ("2 librdkafka's plural and lower-case spellings", {"security.protocol": "sasl_plaintext", "sasl.mechanisms": "plain",
                                                        "sasl.username": "u", "sasl.password": "p"},
     {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
      "sasl.jaas.config": f'{PLAIN} required username="u" password="p";'}, {"sasl.mechanisms"}),
    ("3 quotes and backslashes in a password are escaped as JAAS reads them",
     {"sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "u", "sasl.password": 'a"b\\c'},
     {"sasl.jaas.config": f'{SCRAM} required username="u" password="a\\"b\\\\c";'}, set()),
    ("4 a PKCS#12 keystore: the same settings, its type named",
     {"security.protocol": "SSL", "ssl.keystore.location": "/tls/client.p12", "ssl.keystore.password": "k"},
     {"ssl.keystore.type": "PKCS12", "ssl.keystore.location": "/tls/client.p12", "ssl.keystore.password": "k"}, set()),
    ("5 a keystore password without a keystore (the embedded broker's variable set for sasl_ssl) is left out",
     {"security.protocol": "SASL_SSL", "ssl.keystore.password": "k"}, {"security.protocol": "SASL_SSL"},
     {"ssl.keystore.password", "ssl.keystore.type"}),
    ("6 the CA inline", {"ssl.ca.pem": "-----BEGIN CERTIFICATE-----"},
     {"ssl.truststore.type": "PEM", "ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----"}, {"ssl.ca.pem"}),
    ("7 the system's CAs (probe): the JVM's own", {"ssl.ca.location": "probe"}, {},
     {"ssl.truststore.location", "ssl.truststore.type"}),
    ("8 no host name check: Java's empty value", {"ssl.endpoint.identification.algorithm": "none"},
     {"ssl.endpoint.identification.algorithm": ""}, set()),
    ("9 other settings pass as they are, booleans in lower case", {"client.id": "kprio", "enable.idempotence": True},
     {"client.id": "kprio", "enable.idempotence": "true"}, set()),
]


@pytest.mark.parametrize(("case", "librdkafka", "java", "absent"), CASES, ids=[c[0] for c in CASES])
def test_the_java_settings_of_librdkafkas(case, librdkafka, java, absent):
    got = java_settings(librdkafka)
    assert {k: got.get(k) for k in java} == java
    assert not absent & set(got)


@pytest.mark.parametrize("setting", [{"sasl.mechanism": "GSSAPI"}, {"enable.ssl.certificate.verification": "false"},
                                     {"ssl.engine.location": "/x.so"}])
def test_a_setting_with_no_java_equivalent_is_refused_naming_it(setting):
    with pytest.raises(ConfigError, match=f"spark.reader native: kafka.client.{next(iter(setting))}"):
        java_settings(setting)


def _pem_pair(folder: Path, key, password: str | None, fmt=serialization.PrivateFormat.PKCS8) -> tuple[Path, Path]:
    from datetime import UTC, datetime

    from orchestration.services.tls import issue, make_ca

    ca_key, ca = make_ca(datetime.now(UTC))
    _, cert = issue(ca_key, ca, "kprio", [], datetime.now(UTC))
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    (folder / "client.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, fmt, encryption))
    (folder / "client.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return folder / "client.crt", folder / "client.key"


@pytest.mark.parametrize(
    ("key", "password", "fmt"),
    [
        (ec.generate_private_key(ec.SECP256R1()), "key-s3cret", serialization.PrivateFormat.PKCS8),
        (rsa.generate_private_key(65537, 2048), None, serialization.PrivateFormat.TraditionalOpenSSL),
    ],
    ids=["pbes2-encrypted-pkcs8", "traditional-rsa"],
)
def test_a_pem_pair_reaches_the_java_client_as_a_pkcs8_key_it_can_read(tmp_path, key, password, fmt):
    crt, pem = _pem_pair(tmp_path, key, password, fmt)
    kafka = KafkaSettings(client={"security.protocol": "SSL", "ssl.certificate.location": str(crt),
                                  "ssl.key.location": str(pem)},
                          secrets={"ssl.key.password": password} if password else {})
    got = java_client_config(kafka)
    assert got["ssl.keystore.type"] == "PEM"
    assert got["ssl.keystore.certificate.chain"] == crt.read_text()
    assert got["ssl.keystore.key"].startswith("-----BEGIN PRIVATE KEY-----")  # PKCS#8, not encrypted
    loaded = serialization.load_pem_private_key(got["ssl.keystore.key"].encode(), None)
    assert loaded.private_numbers() == key.private_numbers()
    assert not {"ssl.key.location", "ssl.certificate.location", "ssl.key.password"} & set(got)


def test_a_wrong_key_password_names_its_variable_and_shows_no_secret(tmp_path):
    crt, pem = _pem_pair(tmp_path, ec.generate_private_key(ec.SECP256R1()), "right-s3cret")
    kafka = KafkaSettings(client={"ssl.certificate.location": str(crt), "ssl.key.location": str(pem)},
                          secrets={"ssl.key.password": "wrong-s3cret"})
    with pytest.raises(ConfigError) as err:
        java_client_config(kafka)
    # The admin client's line (kprio_core/config/files.py), said before any translation.
    assert str(err.value) == (f"kafka.client.ssl.key.location: {str(pem)!r}: does not decrypt with the password in "
                              f"KPRIO_KAFKA_SSL_KEY_PASSWORD (or holds no PEM private key)")
    assert "s3cret" not in str(err.value)


def test_a_key_without_its_certificate_is_refused(tmp_path):
    _, pem = _pem_pair(tmp_path, ec.generate_private_key(ec.SECP256R1()), None)
    with pytest.raises(ConfigError, match="ssl.key.location \\(or .pem\\) is set without its certificate"):
        java_settings({"ssl.key.location": str(pem)})
