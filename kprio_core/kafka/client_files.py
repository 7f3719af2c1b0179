"""The files and secrets a Kafka client's security settings need, checked before a client is built.

librdkafka refuses a CA file it cannot read with OpenSSL's words (``ssl.ca.location failed:
error:05880020:x509 certificate routines::BIO lib``), and Kafka's Java client (the native reader) fails
the Spark job with its own. :func:`settings_problem` says the same in kprio's words, naming the setting
and the file, or the environment variable of a missing or wrong secret, never a secret: the admin client
asks it when librdkafka refuses its settings (:func:`kprio_core.kafka.client._build`), the native reader
before its settings are translated (:func:`kprio_core.kafka.java_client.java_client_config`).

>>> settings_problem({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "kprio"})
"kafka.client.sasl.username is set (SCRAM-SHA-512) but KPRIO_KAFKA_SASL_PASSWORD is not in the environment, where kprio reads the user's password"
>>> settings_problem({"ssl.ca.location": "/nowhere/ca.pem"})
'kafka.client.ssl.ca.location: no file /nowhere/ca.pem'
>>> settings_problem({"security.protocol": "SSL", "ssl.ca.location": "probe"}) is None
True
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kprio_core.config import setting_variable

PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"


def _lowered(conf: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k).lower(): v for k, v in conf.items() if v is not None and v != ""}


def settings_problem(conf: Mapping[str, Any]) -> str | None:
    """The first thing wrong with the security settings ``conf`` (librdkafka's names, secrets included) that a
    client would refuse or fail on, in one line naming the setting; None when none is found."""
    lowered = _lowered(conf)
    return (_sasl_problem(lowered) or _ca_problem(lowered) or _keystore_problem(lowered)
            or _pem_problem(lowered))


MECHANISMS = ("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")


def _sasl_problem(conf: dict[str, Any]) -> str | None:
    given = str(conf.get("sasl.mechanism", conf.get("sasl.mechanisms", "GSSAPI")))
    mechanism = given.upper()
    if not str(conf.get("security.protocol", "")).upper().startswith("SASL_"):
        return None
    if mechanism in MECHANISMS and given != mechanism:
        return f"kafka.client.sasl.mechanism: write {given} as {mechanism} (librdkafka's names are case-sensitive)"
    if mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        return None
    if "sasl.username" not in conf:
        return f"kafka.client.sasl.username is not set: {mechanism} logs in with a user name and a password"
    if "sasl.password" not in conf:
        return (f"kafka.client.sasl.username is set ({mechanism}) but {setting_variable('sasl.password')} is not in "
                f"the environment, where kprio reads the user's password")
    return None


def _read(setting: str, path: str) -> bytes | str:
    """The file's bytes, or the line saying why it cannot be read."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        return f"kafka.client.{setting}: no file {path}"
    except IsADirectoryError:
        return f"kafka.client.{setting}: {path} is a directory, not a file"
    except OSError as err:
        return f"kafka.client.{setting}: cannot read {path} ({err.strerror})"


def _ca_problem(conf: dict[str, Any]) -> str | None:
    path = conf.get("ssl.ca.location")
    if path is None or str(path) == "probe":
        return None
    data = _read("ssl.ca.location", str(path))
    if isinstance(data, str):
        return data
    if PEM_CERTIFICATE in data:
        return None
    what = ("a private key" if b"PRIVATE KEY-----" in data else
            "a PKCS#12 keystore (DER), not PEM" if data[:1] == b"\x30" else "no PEM certificate")
    return (f"kafka.client.ssl.ca.location: {path} holds {what}: it takes the certificates of the CAs that sign the "
            f"brokers' certificates, in PEM (-----BEGIN CERTIFICATE-----)")


def _keystore_problem(conf: dict[str, Any]) -> str | None:
    path = conf.get("ssl.keystore.location")
    if path is None:
        return None
    variable = setting_variable("ssl.keystore.password")
    data = _read("ssl.keystore.location", str(path))
    if isinstance(data, str):
        return data
    if "ssl.keystore.password" not in conf:
        return f"kafka.client.ssl.keystore.location is set ({path}) but {variable} is not in the environment"
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        pkcs12.load_key_and_certificates(data, str(conf["ssl.keystore.password"]).encode())
    except ValueError:
        return (f"kafka.client.ssl.keystore.location: {path} does not open with the password in {variable} (or is "
                f"not a PKCS#12 keystore)")
    return None


def _pem_problem(conf: dict[str, Any]) -> str | None:
    cert, key = conf.get("ssl.certificate.location"), conf.get("ssl.key.location")
    if cert is not None:
        data = _read("ssl.certificate.location", str(cert))
        if isinstance(data, str):
            return data
        if PEM_CERTIFICATE not in data:
            return f"kafka.client.ssl.certificate.location: {cert} holds no PEM certificate"
    if key is None:
        return None
    data = _read("ssl.key.location", str(key))
    if isinstance(data, str):
        return data
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    variable = setting_variable("ssl.key.password")
    password = conf.get("ssl.key.password")
    try:
        load_pem_private_key(data, None if password is None else str(password).encode())
    except TypeError:  # encrypted without a password (a password for a key not encrypted is ignored)
        return (f"kafka.client.ssl.key.location: {key} is encrypted and {variable} is not in the environment"
                if password is None else None)
    except ValueError:
        return (f"kafka.client.ssl.key.location: {key} does not decrypt with the password in {variable} (or holds "
                f"no PEM private key)")
    return None
