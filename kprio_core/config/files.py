"""The files a configuration names for its clients (TLS certificates and keys, a keytab) and the keystore's password,
checked when it is loaded: librdkafka would say ``ssl.ca.location failed: error:05880020:x509
certificate routines::BIO lib`` for a missing file, and only when a client is built."""

from __future__ import annotations

import os
import stat

from kprio_core.config.environment import setting_variable
from kprio_core.config.kprio_config import KprioConfig
from kprio_core.errors import os_reason

PEM_FILES = {
    "ssl.ca.location": b"-----BEGIN ",
    "ssl.certificate.location": b"-----BEGIN ",
    "ssl.key.location": b"-----BEGIN ",
    "ssl.crl.location": b"-----BEGIN ",
}
"""librdkafka's file settings that hold PEM text, and what each must hold."""

OTHER_FILES = ("ssl.keystore.location", "sasl.kerberos.keytab", "sasl.oauthbearer.assertion.private.key.file",
               "sasl.oauthbearer.assertion.file", "sasl.oauthbearer.assertion.jwt.template.file")
"""librdkafka's other file settings (PKCS#12, a keytab, JWT parts): they must be readable files."""

DIRECTORY_ALLOWED = frozenset({"ssl.ca.location"})
"""Settings that may name a directory (of CA certificates, hashed as OpenSSL's c_rehash names them)."""

REGISTRY_FILES = ("ssl_ca_location", "ssl_certificate_location", "ssl_key_location")


def path_problem(path: str, *, pem: bool, directory: bool = False) -> str | None:
    """What is wrong with a file a setting names, or None.

    >>> path_problem("/nonexistent/ca.pem", pem=True)
    "'/nonexistent/ca.pem': no such file or directory"
    >>> path_problem("/", pem=True)
    "'/': is a directory, not a file"
    >>> path_problem("/etc/hostname", pem=True) if os.path.exists("/etc/hostname") else "holds no PEM"
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
            head = file.read(1 << 16)
    except OSError as err:
        return f"{path!r}: cannot be read: {os_reason(err)}"
    if pem and b"-----BEGIN " not in head:
        return f"{path!r}: holds no PEM text (-----BEGIN ...): name the PEM file"
    return None


def file_problem(config: KprioConfig) -> tuple[tuple, str] | None:
    """The first file setting of ``config`` that names no usable file, and why; or None."""
    for name, value in config.kafka.client.items():
        key = name.lower()
        if key == "ssl.ca.location" and str(value).lower() == "probe":
            continue  # librdkafka's "find the system's CA store"
        if key in PEM_FILES or key in OTHER_FILES:
            why = path_problem(str(value), pem=key in PEM_FILES, directory=key in DIRECTORY_ALLOWED)
            if why:
                return ("kafka", "client", name), why
    registry = config.schema_registry
    for name in REGISTRY_FILES:
        value = getattr(registry, name, None) if registry is not None else None
        if value:
            why = path_problem(value, pem=True)
            if why:
                return ("schema_registry", name), why
    return None


def credential_problem(config: KprioConfig) -> tuple[tuple, str] | None:
    """A credential the client settings need and do not have (a keystore's password: librdkafka's "is mandatory"
    would not say where it goes), and where it belongs; or None."""
    client = {name.lower(): value for name, value in config.kafka.client.items()}
    secrets = {name.lower() for name in config.kafka.secrets}
    if client.get("ssl.keystore.location") and "ssl.keystore.password" not in secrets:
        return ("kafka", "client", "ssl.keystore.location"), (
            f"a keystore needs its password: set {setting_variable('ssl.keystore.password')} in the environment")
    return None
