"""Certificates of the embedded broker: a CA, the nodes' keystore and a client's, made locally with ``cryptography``.

Made once per data dir, in ``<data dir>/tls/``, and kept across restarts (nothing is downloaded)::

    ca.pem       the CA's certificate (public): the clients' ssl.ca.location, the nodes' truststore
    ca.key       the CA's private key, encrypted (PKCS#8) with KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD: to issue more
    broker.p12   the nodes' key and certificate (PKCS#12, that password); it names the host they listen on
    client.p12   a client's key and certificate (PKCS#12, that password), for mutual TLS: ssl.keystore.location

PKCS#12 is the one keystore both client families read under the same settings (librdkafka's ``ssl.keystore.*``,
Kafka's Java client), and the one the broker's JVM reads with an AES-encrypted key (Java cannot decrypt a PBES2 PEM
key). Every key file is owner-only (0600) and encrypted; no password is ever written.

>>> from datetime import UTC, datetime
>>> key, ca = make_ca(datetime(2026, 1, 1, tzinfo=UTC))
>>> _, cert = issue(key, ca, "127.0.0.1", ["127.0.0.1", "localhost"], datetime(2026, 1, 1, tzinfo=UTC))
>>> host_names(cert), cert.issuer == ca.subject
(['localhost', '127.0.0.1'], True)
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

CA_DAYS = 3650
LEAF_DAYS = 825
"""Validity of the certificates kprio makes (the CA's and the nodes' and clients')."""
SKEW = timedelta(hours=1)
"""A certificate is valid from this long before it is made, so a clock a little behind still accepts it."""


@dataclass(frozen=True)
class TlsFiles:
    """The TLS files of one data dir (see the module docstring)."""

    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.folder / "ca.key"

    @property
    def broker(self) -> Path:
        return self.folder / "broker.p12"

    @property
    def client(self) -> Path:
        return self.folder / "client.p12"

    def complete(self) -> bool:
        return all(p.is_file() for p in (self.ca, self.ca_key, self.broker, self.client))


def make_ca(now: datetime, days: int = CA_DAYS) -> tuple[Any, Any]:
    """A new CA: its private key and self-signed certificate."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kprio embedded broker CA")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - SKEW).not_valid_after(now + timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def issue(ca_key: Any, ca_cert: Any, name: str, hosts: Sequence[str], now: datetime, *,
          days: int = LEAF_DAYS, not_before: datetime | None = None) -> tuple[Any, Any]:
    """A new key and its certificate signed by the CA, for ``name``: a server's (``hosts``: the IP addresses
    and DNS names it answers at) and a client's at once (a node is a client of the others)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    start = not_before if not_before is not None else now - SKEW
    builder = (x509.CertificateBuilder()
               .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
               .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(start + SKEW + timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                              critical=False)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False))
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName([_host_name(h) for h in hosts]), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _host_name(host: str) -> Any:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def host_names(cert: Any) -> list[str]:
    """The DNS names, then the IP addresses, a certificate holds."""
    from cryptography import x509

    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [*sans.get_values_for_type(x509.DNSName), *map(str, sans.get_values_for_type(x509.IPAddress))]


def keystore(key: Any, cert: Any, ca_cert: Any, password: str, name: str) -> bytes:
    """A PKCS#12 keystore of ``key`` and ``cert`` (with the CA's certificate in its chain), AES-encrypted."""
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

    return pkcs12.serialize_key_and_certificates(name.encode(), key, cert, [ca_cert],
                                                 BestAvailableEncryption(password.encode()))


def _write_private(path: Path, data: bytes) -> None:
    """Write an owner-only file (it holds an encrypted key), replacing it whole."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    tmp.replace(path)


def make_files(files: TlsFiles, hosts: Sequence[str], password: str, now: datetime | None = None) -> TlsFiles:
    """Make the CA, the nodes' keystore (naming ``hosts``) and a client's keystore in ``files.folder``."""
    from cryptography.hazmat.primitives import serialization

    now = now or datetime.now(UTC)
    files.folder.mkdir(parents=True, exist_ok=True)
    ca_key, ca_cert = make_ca(now)
    broker_key, broker_cert = issue(ca_key, ca_cert, hosts[0], hosts, now)
    client_key, client_cert = issue(ca_key, ca_cert, "kprio", [], now)
    _write_private(files.ca_key, ca_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.BestAvailableEncryption(password.encode())))
    _write_private(files.broker, keystore(broker_key, broker_cert, ca_cert, password, "broker"))
    _write_private(files.client, keystore(client_key, client_cert, ca_cert, password, "kprio"))
    files.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    return files


def load_ca(files: TlsFiles, password: str) -> tuple[Any, Any]:
    """The CA's key and certificate (to issue more certificates); ValueError on a wrong password."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(files.ca_key.read_bytes(), password.encode())
    return key, x509.load_pem_x509_certificate(files.ca.read_bytes())


def opens(path: Path, password: str) -> bool:
    """True when the PKCS#12 keystore at ``path`` opens with ``password``."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        pkcs12.load_key_and_certificates(path.read_bytes(), password.encode())
    except ValueError:
        return False
    return True


def keystore_names(path: Path, password: str) -> list[str]:
    """The host names the certificate of a PKCS#12 keystore holds."""
    from cryptography.hazmat.primitives.serialization import pkcs12

    _, cert, _ = pkcs12.load_key_and_certificates(path.read_bytes(), password.encode())
    return host_names(cert)
