"""The files and secrets a Kafka client's security settings name (CA, certificate, key, keystore, CRL, keytab,
passwords), checked in kprio's words: one line naming the setting and the file or variable, never a secret.

librdkafka says ``ssl.ca.location failed: error:05880020:x509 certificate routines::BIO lib``, and only when a
client is built. :func:`config_problem` checks at load; :func:`settings_problem` is the fallback for settings
that did not come through load.

>>> settings_problem({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "kprio"})
'kafka.client.sasl.username: SCRAM-SHA-512 logs in with its password: set KPRIO_KAFKA_SASL_PASSWORD in the environment'
>>> settings_problem({"ssl.ca.location": "/nowhere/ca.pem"})
"kafka.client.ssl.ca.location: '/nowhere/ca.pem': no such file or directory"
>>> settings_problem({"security.protocol": "SASL_SSL", "sasl.mechanism": "scram-sha-256", "sasl.username": "kprio"})
"kafka.client.sasl.mechanism: write scram-sha-256 as SCRAM-SHA-256 (librdkafka's names are case-sensitive)"
>>> settings_problem({"security.protocol": "SSL", "ssl.ca.location": "probe"}) is None
True
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from typing import Any

from kprio_core.config.environment import ENV_REGISTRY_KEY_PASSWORD, setting_variable
from kprio_core.config.kafka import SASL_MECHANISMS
from kprio_core.config.kprio_config import KprioConfig
from kprio_core.config.operate import transport_model_problem
from kprio_core.errors import os_reason

PEM_FILES = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.crl.location")
"""librdkafka's file settings that hold PEM text."""

OTHER_FILES = ("ssl.keystore.location", "sasl.kerberos.keytab", "sasl.oauthbearer.assertion.private.key.file",
               "sasl.oauthbearer.assertion.file", "sasl.oauthbearer.assertion.jwt.template.file")
"""librdkafka's other file settings (PKCS#12, a keytab, JWT parts): they must be readable files."""

REGISTRY_FILES = {"ssl_ca_location": "ssl.ca.location", "ssl_certificate_location": "ssl.certificate.location",
                  "ssl_key_location": "ssl.key.location"}
"""The schema registry's file settings, and the Kafka client's of the same meaning (checked alike)."""

PEM_CERTIFICATE = b"-----BEGIN CERTIFICATE-----"

PASSWORD_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
"""The SASL mechanisms that log in with ``sasl.username`` and ``sasl.password``."""


def read_file(path: str, *, pem: bool = False, directory: bool = False) -> bytes | str | None:
    """The first 64 KiB of the file ``path`` names, or what is wrong with it (a line without the setting); None for
    a directory where ``directory`` allows one.

    >>> read_file("/nonexistent/ca.pem")
    "'/nonexistent/ca.pem': no such file or directory"
    >>> read_file("/"), read_file("/", directory=True)
    ("'/': is a directory, not a file", None)
    >>> read_file("/etc/hostname", pem=True) if os.path.exists("/etc/hostname") else "holds no PEM"
    "'/etc/hostname': holds no PEM text (-----BEGIN ...): name the PEM file"
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        return f"{path!r}: {os_reason(err)}"
    if stat.S_ISDIR(mode):
        return None if directory else f"{path!r}: is a directory, not a file"
    if not stat.S_ISREG(mode):
        return f"{path!r}: is not a regular file"
    try:
        with open(path, "rb") as file:
            data = file.read(1 << 16)
    except OSError as err:
        return f"{path!r}: cannot be read: {os_reason(err)}"
    if pem and b"-----BEGIN " not in data:
        return f"{path!r}: holds no PEM text (-----BEGIN ...): name the PEM file"
    return data


def settings_problem(conf: Mapping[str, Any]) -> str | None:
    """:func:`security_problem` as one line starting with the setting; None when none is found."""
    found = security_problem(conf)
    return None if found is None else f"kafka.client.{found[0]}: {found[1]}"


def security_problem(conf: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first setting of ``conf`` (librdkafka's names, secrets included) a client would refuse or fail on, and
    why (naming the file or the variable, never a secret); or None."""
    lowered = {str(k).lower(): v for k, v in conf.items() if v is not None and v != ""}
    return (_sasl_problem(lowered) or _ca_problem(lowered) or _keystore_problem(lowered)
            or _pem_problem(lowered) or _other_files_problem(lowered))


def config_problem(config: KprioConfig, env: Mapping[str, str] | None = None) -> tuple[tuple, str] | None:
    """The first client or schema registry setting of ``config`` whose file or secret is missing or wrong, or a
    lineage transport openlineage-python would refuse (:func:`~kprio_core.config.operate.transport_model_problem`),
    as a location (``("kafka", "client", name)``) and why; or None. ``env``: default this process's."""
    found = security_problem(config.kafka.client_config())
    if found is not None:
        name = next((n for n in config.kafka.client if n.lower() == found[0]), found[0])
        return ("kafka", "client", name), found[1]
    found = registry_problem(config.schema_registry, env) if config.schema_registry is not None else None
    if found is not None:
        return ("schema_registry", found[0]), found[1]
    lineage = config.lineage
    why = transport_model_problem(lineage.transport) if lineage.enabled and lineage.transport else None
    return None if why is None else (("lineage", "transport"), why)


def registry_problem(registry: Any, env: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """The first schema registry file setting (:data:`REGISTRY_FILES`) missing or wrong, checked as the Kafka
    client's (key password: :data:`~kprio_core.config.environment.ENV_REGISTRY_KEY_PASSWORD`), and why; or None."""
    env = os.environ if env is None else env
    conf: dict[str, Any] = {kafka: getattr(registry, name) for name, kafka in REGISTRY_FILES.items()
                            if getattr(registry, name)}
    if env.get(ENV_REGISTRY_KEY_PASSWORD):
        conf["ssl.key.password"] = env[ENV_REGISTRY_KEY_PASSWORD]
    ca = conf.get("ssl.ca.location")
    problem = _ca_text_problem(ca, read_file(ca)) if ca is not None else None  # a file: Python's cafile
    found = ("ssl.ca.location", problem) if problem else _pem_problem(conf, key_variable=ENV_REGISTRY_KEY_PASSWORD)
    return None if found is None else (next(n for n, k in REGISTRY_FILES.items() if k == found[0]), found[1])


def _sasl_problem(conf: dict[str, Any]) -> tuple[str, str] | None:
    if not str(conf.get("security.protocol", "")).upper().startswith("SASL_"):
        return None
    setting = "sasl.mechanism" if "sasl.mechanism" in conf else "sasl.mechanisms"
    given = str(conf.get(setting, "GSSAPI"))
    mechanism = given.upper()
    if mechanism in SASL_MECHANISMS and given != mechanism:
        return setting, f"write {given} as {mechanism} (librdkafka's names are case-sensitive)"
    if mechanism not in PASSWORD_MECHANISMS:
        return None
    if "sasl.username" not in conf:
        return "sasl.username", f"not set: {mechanism} logs in with a user name and a password"
    if "sasl.password" not in conf:
        return "sasl.username", (f"{mechanism} logs in with its password: set {setting_variable('sasl.password')} "
                                 "in the environment")
    return None


def _ca_problem(conf: dict[str, Any]) -> tuple[str, str] | None:
    path = conf.get("ssl.ca.location")
    if path is None or str(path).lower() == "probe":  # librdkafka's "find the system's CA store"
        return None
    problem = _ca_text_problem(str(path), read_file(str(path), directory=True))
    return None if problem is None else ("ssl.ca.location", problem)


def _ca_text_problem(path: str, data: bytes | str | None) -> str | None:
    """What is wrong with a CA file's ``data`` (:func:`read_file`'s), or None for certificates (or a directory)."""
    if data is None or (isinstance(data, bytes) and PEM_CERTIFICATE in data):
        return None
    if isinstance(data, str):
        return data
    what = ("a private key" if b"PRIVATE KEY-----" in data else
            "a PKCS#12 keystore (DER), not PEM" if data[:1] == b"\x30" else "no PEM certificate")
    return (f"{path!r}: holds {what}: it takes the certificates of the CAs that sign the servers' certificates, in "
            "PEM (-----BEGIN CERTIFICATE-----)")


def _keystore_problem(conf: dict[str, Any]) -> tuple[str, str] | None:
    path = conf.get("ssl.keystore.location")
    if path is None:
        return None
    variable = setting_variable("ssl.keystore.password")
    data = read_file(str(path))
    if isinstance(data, str):
        return "ssl.keystore.location", data
    if "ssl.keystore.password" not in conf:
        return "ssl.keystore.location", (f"{str(path)!r}: a keystore needs its password: set {variable} in the "
                                         "environment")
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        with open(str(path), "rb") as file:
            pkcs12.load_key_and_certificates(file.read(), str(conf["ssl.keystore.password"]).encode())
    except ValueError:
        return "ssl.keystore.location", (f"{str(path)!r}: does not open with the password in {variable} (or is not a "
                                         "PKCS#12 keystore)")
    return None


def _pem_problem(conf: dict[str, Any], key_variable: str | None = None) -> tuple[str, str] | None:
    cert, key = conf.get("ssl.certificate.location"), conf.get("ssl.key.location")
    if cert is not None:
        data = read_file(str(cert))
        if isinstance(data, str):
            return "ssl.certificate.location", data
        if PEM_CERTIFICATE not in data:
            return "ssl.certificate.location", f"{str(cert)!r}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
    if key is None:
        return None
    data = read_file(str(key))
    if isinstance(data, str):
        return "ssl.key.location", data
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    variable = key_variable or setting_variable("ssl.key.password")
    password = conf.get("ssl.key.password")
    try:
        with open(str(key), "rb") as file:
            load_pem_private_key(file.read(), None if password is None else str(password).encode())
    except TypeError:  # encrypted without a password (a password for a key not encrypted is ignored)
        return ("ssl.key.location", f"{str(key)!r}: is encrypted: set {variable} in the environment"
                ) if password is None else None
    except ValueError:
        return "ssl.key.location", (f"{str(key)!r}: does not decrypt with the password in {variable} (or holds no "
                                    "PEM private key)")
    return None


def _other_files_problem(conf: dict[str, Any]) -> tuple[str, str] | None:
    for setting in ("ssl.crl.location", *OTHER_FILES):
        if setting in conf:
            data = read_file(str(conf[setting]), pem=setting in PEM_FILES)
            if isinstance(data, str):
                return setting, data
    return None
