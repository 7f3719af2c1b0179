"""Kafka's Java client settings (Spark's native reader), derived from the one set of librdkafka settings.

kprio is configured once, in librdkafka's words (:meth:`~kprio_core.config.KafkaSettings.client_config`);
:func:`java_settings` translates for Spark's Kafka source, so the native reader authenticates as kprio does:

==========================================  ======================================================
librdkafka                                   Kafka's Java client
==========================================  ======================================================
``sasl.mechanism(s)``                        ``sasl.mechanism``
``sasl.username``, ``sasl.password``         ``sasl.jaas.config``: the mechanism's login module
                                             with ``username="..." password="..."``
``ssl.ca.location`` (PEM file)               ``ssl.truststore.type=PEM``, ``ssl.truststore.location``
                                             (``probe``: the JVM's own CA certificates)
``ssl.ca.pem``                               ``ssl.truststore.type=PEM``, ``ssl.truststore.certificates``
``ssl.keystore.location``, ``.password``     the same, ``ssl.keystore.type=PKCS12`` (librdkafka's
                                             keystore is always PKCS#12)
``ssl.certificate.*`` + ``ssl.key.*``        ``ssl.keystore.type=PEM``, ``ssl.keystore.certificate.chain``
(file or PEM, ``ssl.key.password``)          and ``ssl.keystore.key``: the key as unencrypted PKCS#8
``ssl.endpoint.identification.algorithm``    the same; ``none`` is Java's empty value
==========================================  ======================================================

The private key is handed over decrypted: the Java client reads only PKCS#8 PEM keys encrypted, if at all, with
the JDK's old PBE algorithms, not today's PBES2 ("PBES2 SecretKeyFactory not available"). It travels only in
memory, as an option Spark redacts (:data:`~kprio_core.config.JAVA_SECRETS`). Unknown security settings are
refused at load (:func:`~kprio_core.config.java_untranslatable`); others pass unchanged (the Java client ignores
librdkafka-only ones, with a warning).

>>> conf = java_settings({"bootstrap.servers": "b:9093", "security.protocol": "sasl_ssl",
...                       "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "kprio", "sasl.password": 'p"w',
...                       "ssl.ca.location": "/tls/ca.pem"})
>>> conf["security.protocol"], conf["sasl.mechanism"], conf["ssl.truststore.type"], conf["ssl.truststore.location"]
('SASL_SSL', 'SCRAM-SHA-512', 'PEM', '/tls/ca.pem')
>>> conf["sasl.jaas.config"]
'org.apache.kafka.common.security.scram.ScramLoginModule required username="kprio" password="p\\\\"w";'
>>> sorted(java_settings({"ssl.keystore.location": "/tls/client.p12", "ssl.keystore.password": "x",
...                       "ssl.endpoint.identification.algorithm": "none"}).items())
[('ssl.endpoint.identification.algorithm', ''), ('ssl.keystore.location', '/tls/client.p12'), ('ssl.keystore.password', 'x'), ('ssl.keystore.type', 'PKCS12')]
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kprio_core.config import JAVA_SASL_MECHANISMS, KafkaSettings, java_untranslatable
from kprio_core.errors import ConfigError

_CONSUMED = ("sasl.mechanisms", "sasl.username", "sasl.password", "ssl.ca.location", "ssl.ca.pem",
             "ssl.certificate.location", "ssl.certificate.pem", "ssl.key.location", "ssl.key.pem", "ssl.key.password")
"""librdkafka settings that become other Java settings (the rest pass under their own names)."""


def jaas_line(mechanism: str, username: str, password: str) -> str:
    """The Java client's ``sasl.jaas.config`` for a PLAIN or SCRAM login, quotes and backslashes escaped for JAAS.

    >>> jaas_line("PLAIN", "kprio", "s3cret")
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="kprio" password="s3cret";'
    """
    def quoted(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    module = JAVA_SASL_MECHANISMS[mechanism.upper()]
    return f"{module} required username={quoted(username)} password={quoted(password)};"


def java_settings(conf: Mapping[str, Any]) -> dict[str, str]:
    """The Java client's settings (as strings) for librdkafka's ``conf``; ConfigError naming an untranslatable one."""
    problems = java_untranslatable(conf)
    if problems:
        raise ConfigError(f"spark.reader native: {problems[0]}")
    lowered = {key.lower(): value for key, value in conf.items()}
    out = {key: _text(value) for key, value in conf.items() if key.lower() not in _CONSUMED}
    if "security.protocol" in lowered:
        out["security.protocol"] = str(lowered["security.protocol"]).upper()
    mechanism = lowered.get("sasl.mechanism", lowered.get("sasl.mechanisms"))
    if mechanism is not None:
        out["sasl.mechanism"] = str(mechanism).upper()
    if "sasl.username" in lowered or "sasl.password" in lowered:
        out["sasl.jaas.config"] = jaas_line(str(mechanism or "PLAIN"), str(lowered.get("sasl.username", "")),
                                            str(lowered.get("sasl.password", "")))
    ca = lowered.get("ssl.ca.location")
    if ca is not None and str(ca) != "probe":
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca)})
    if "ssl.ca.pem" in lowered:
        out.update({"ssl.truststore.type": "PEM", "ssl.truststore.certificates": str(lowered["ssl.ca.pem"])})
    if "ssl.keystore.location" in lowered:
        out["ssl.keystore.type"] = "PKCS12"
    elif "ssl.keystore.password" in out:
        del out["ssl.keystore.password"]  # no keystore: the Java client refuses a password without one
    key = _pem(lowered, "key")
    chain = _pem(lowered, "certificate")
    if key is not None or chain is not None:
        if key is None or chain is None:
            given = "ssl.key" if key is not None else "ssl.certificate"
            raise ConfigError(f"kafka.client: {given}.location (or .pem) is set without its "
                              f"{'certificate' if key is not None else 'private key'}: mutual TLS needs both")
        password = lowered.get("ssl.key.password")
        out.update({"ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": chain.decode(),
                    "ssl.keystore.key": pkcs8_pem(key, None if password is None else str(password))})
    if str(lowered.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        out["ssl.endpoint.identification.algorithm"] = ""
    return out


def _pem(conf: Mapping[str, Any], what: str) -> bytes | None:
    """The PEM text of ``ssl.<what>.pem``, or of the file ``ssl.<what>.location`` names."""
    if f"ssl.{what}.pem" in conf:
        return str(conf[f"ssl.{what}.pem"]).encode()
    location = conf.get(f"ssl.{what}.location")
    if location is None:
        return None
    try:
        return Path(str(location)).read_bytes()
    except OSError as err:
        raise ConfigError(f"kafka.client.ssl.{what}.location: cannot read {location}: {err.strerror}") from None


def pkcs8_pem(key: bytes, password: str | None) -> str:
    """A PEM private key (PKCS#8 or traditional, encrypted or not) as unencrypted PKCS#8 PEM; a wrong or
    missing password is a ConfigError naming ``KPRIO_KAFKA_SSL_KEY_PASSWORD``, never showing it."""
    from cryptography.hazmat.primitives import serialization

    try:
        loaded = serialization.load_pem_private_key(key, None if password is None else password.encode())
    except (ValueError, TypeError) as err:
        why = "a wrong or missing password (KPRIO_KAFKA_SSL_KEY_PASSWORD)" if "password" in str(err).lower() \
            or isinstance(err, TypeError) else "not a PEM private key"
        raise ConfigError(f"kafka.client.ssl.key.location: the private key cannot be read: {why}") from None
    return loaded.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()


def java_client_config(kafka: KafkaSettings) -> dict[str, str]:
    """Kafka's Java client settings of ``kafka``, secrets included (never log this); a missing file or secret is
    a ConfigError naming it, not the Java client's failure in the Spark job."""
    from kprio_core.config.files import settings_problem

    conf = kafka.client_config()
    problem = settings_problem(conf)
    if problem is not None:
        raise ConfigError(problem)
    return java_settings(conf)


def _text(value: Any) -> str:
    # Both clients spell booleans in lower case.
    return str(value).lower() if isinstance(value, bool) else str(value)
