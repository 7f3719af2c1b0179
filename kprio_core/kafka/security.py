"""Security failures of a Kafka client as kprio's typed errors, in one line naming the setting to fix.

librdkafka does not fail a call on a refused login or TLS handshake: it reports an error event and retries
until the call times out ("transport failure"). :class:`SecurityWatch`, every kprio client's error callback,
raises the typed error at once out of the ``poll``/``consume``/``flush`` that served the event, and keeps it
so a timed-out wait names it instead of an unreachable broker (:class:`kprio_core.kafka.client.Deadline`).

librdkafka gives one code to a refused password and a refused mechanism (``_AUTHENTICATION``), told apart by the
message's words, and one message to every unverified certificate ("certificate verify failed"). So
:func:`diagnose_certificate` asks the broker again with Python's ``ssl`` (same CA and host check), whose error
names the reason, and reads the certificate's dates and names. A workaround kept to this one place:
confluent-kafka has no verification callback (confluent-kafka-python issue 1610).

Nothing here shows a secret: messages name the setting (``KPRIO_KAFKA_SASL_PASSWORD``) and file paths, not content.

>>> who = ClientIdentity.of({"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL",
...                          "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "kprio", "sasl.password": "x"})
>>> text = ("sasl_ssl://127.0.0.1:29092/bootstrap: SASL authentication error: Authentication failed: Invalid "
...         "username or password (after 301ms in state AUTH_REQ)")
>>> err = security_failure("_AUTHENTICATION", text, who)
>>> print(err.code, err)  # doctest: +NORMALIZE_WHITESPACE
sasl_authentication_failed SASL authentication failed: the broker refused user 'kprio'
(kafka.client.sasl.username) with the password of KPRIO_KAFKA_SASL_PASSWORD over SCRAM-SHA-512; or the user has
no SCRAM-SHA-512 credentials on the broker (127.0.0.1:29092)
>>> text = ("sasl_ssl://127.0.0.1:29092/bootstrap: SASL SCRAM-SHA-256 mechanism handshake failed: Broker: "
...         "Unsupported SASL mechanism: broker's supported mechanisms: SCRAM-SHA-512,PLAIN (after 1ms in state X)")
>>> print(security_failure("_AUTHENTICATION", text, who))  # doctest: +NORMALIZE_WHITESPACE
SASL mechanism SCRAM-SHA-256 (kafka.client.sasl.mechanism) is not enabled on the broker, which takes
SCRAM-SHA-512, PLAIN (127.0.0.1:29092)
>>> security_failure("_TRANSPORT", "127.0.0.1:9092/bootstrap: Connection refused", who) is None
True
"""

from __future__ import annotations

import logging
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kprio_core.config import setting_variable
from kprio_core.errors import (
    CertificateExpired,
    CertificateUntrusted,
    ClientCertificateRejected,
    HostnameMismatch,
    KafkaSecurityFailed,
    SaslAuthenticationFailed,
    SaslMechanismNotEnabled,
    SecurityProtocolMismatch,
    TlsHandshakeFailed,
)
from kprio_core.kafka.listener import PROBE_TIMEOUT_S, first_listener, split_servers

LOGGER = logging.getLogger("kprio.kafka")

DIAGNOSIS_TIMEOUT_S = 5.0
"""Longest the diagnosing handshake of :func:`diagnose_certificate` may take."""

PASSWORD_VARIABLE = setting_variable("sasl.password")


@dataclass(frozen=True)
class ClientIdentity:
    """What a security failure names of a client's settings: never a secret."""

    bootstrap: str
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    ca_location: str | None = None
    ca_pem: str | None = None
    """A CA certificate given inline (``ssl.ca.pem``): public, used by the diagnosing handshake."""
    client_certificate: str | None = None
    """The setting (and file) of the client's certificate, for mutual TLS; None: none is sent."""
    check_hostname: bool = True

    @classmethod
    def of(cls, conf: Mapping[str, Any]) -> ClientIdentity:
        lowered = {str(k).lower(): v for k, v in conf.items()}
        cert = None
        if lowered.get("ssl.keystore.location"):
            cert = f"kafka.client.ssl.keystore.location {lowered['ssl.keystore.location']}"
        elif lowered.get("ssl.certificate.location"):
            cert = f"kafka.client.ssl.certificate.location {lowered['ssl.certificate.location']}"
        elif lowered.get("ssl.certificate.pem"):
            cert = "kafka.client.ssl.certificate.pem"
        mechanism = lowered.get("sasl.mechanism", lowered.get("sasl.mechanisms"))
        return cls(
            bootstrap=str(lowered.get("bootstrap.servers", "?")),
            protocol=str(lowered.get("security.protocol", "PLAINTEXT")).upper(),
            mechanism=str(mechanism).upper() if mechanism else None,
            username=str(lowered["sasl.username"]) if lowered.get("sasl.username") else None,
            ca_location=str(lowered["ssl.ca.location"]) if lowered.get("ssl.ca.location") else None,
            ca_pem=str(lowered["ssl.ca.pem"]) if lowered.get("ssl.ca.pem") else None,
            client_certificate=cert,
            check_hostname=str(lowered.get("ssl.endpoint.identification.algorithm", "https")).lower() == "https",
        )

    @property
    def trust(self) -> str:
        """The setting that says which CAs the client trusts."""
        if self.ca_pem:
            return "kafka.client.ssl.ca.pem"
        if self.ca_location and self.ca_location != "probe":
            return f"kafka.client.ssl.ca.location ({self.ca_location})"
        return "the system's CA certificates (kafka.client.ssl.ca.location not set)"


_BROKER = re.compile(r"^\w+://([^/\s]+)/")
_PREFIX = re.compile(r"^(?:\w+://)?[^/\s]+/\S*: ")
_MECHANISMS = re.compile(r"supported mechanisms: ([\w,-]+)")
_ASKED = re.compile(r"SASL (\S+) mechanism handshake failed")
_ALERT = re.compile(r"(?:ssl/tls|sslv3|tlsv1\d?) alert ([a-z ]+?)(?::|$| \(|,)")


def broker_of(text: str, who: ClientIdentity) -> str:
    """The broker a librdkafka message is about (``sasl_ssl://h:9093/bootstrap: ...`` -> ``h:9093``)."""
    found = _BROKER.search(text)
    return found.group(1) if found else who.bootstrap


def security_failure(name: str, text: str, who: ClientIdentity,
                     diagnose: Callable[[str, ClientIdentity], KafkaSecurityFailed | None] | None = None,
                     own_certificate: Callable[[], Any] | None = None) -> KafkaSecurityFailed | None:
    """The typed error of a librdkafka error (``name``, ``text``), else None; ``diagnose`` (default
    :func:`diagnose_certificate`) explains an unverified certificate, ``own_certificate``'s dates a refused one
    (Kafka's JVM calls an expired one "certificate unknown")."""
    broker = broker_of(text, who)
    if name in ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED"):
        if "nsupported SASL mechanism" in text:
            found = _MECHANISMS.search(text)
            takes = ", ".join(found.group(1).split(",")) if found else "other mechanisms"
            asked = _ASKED.search(text)
            mechanism = asked.group(1) if asked else who.mechanism or "?"
            return SaslMechanismNotEnabled(
                f"SASL mechanism {mechanism} (kafka.client.sasl.mechanism) is not enabled on the broker, "
                f"which takes {takes} ({broker})")
        if who.username is None:  # a request's error: the client's settings are not at hand
            return SaslAuthenticationFailed(f"SASL authentication failed: the broker refused the user of "
                                            f"kafka.client.sasl.username or the password of {PASSWORD_VARIABLE} "
                                            f"({broker})")
        scram = (f"; or the user has no {who.mechanism} credentials on the broker"
                 if (who.mechanism or "").startswith("SCRAM-") else "")
        return SaslAuthenticationFailed(
            f"SASL authentication failed: the broker refused user '{who.username}' (kafka.client.sasl.username) "
            f"with the password of {PASSWORD_VARIABLE} over {who.mechanism or 'its mechanism'}{scram} ({broker})")
    alert = _ALERT.search(text)
    if alert is not None and name in ("_SSL", "_TRANSPORT") and ("certificate" in alert.group(1)
                                                                  or "unknown ca" in alert.group(1)):
        return _refused_client_certificate(alert.group(1).strip(), who, broker, own_certificate)
    if name != "_SSL":
        return None
    if "certificate verify failed" in text:
        diagnosed = (diagnose or diagnose_certificate)(broker, who)
        if diagnosed is not None:
            return diagnosed
        return CertificateUntrusted(f"the broker's TLS certificate could not be verified with {who.trust} ({broker})")
    detail = _PREFIX.sub("", text).removeprefix("SSL handshake failed: ").split(" (after ", 1)[0]
    return TlsHandshakeFailed(f"the TLS handshake failed: {detail}: does the broker's listener take "
                              f"kafka.client.security.protocol {who.protocol}? ({broker})")


def _refused_client_certificate(alert: str, who: ClientIdentity, broker: str,
                                own_certificate: Callable[[], Any] | None) -> KafkaSecurityFailed:
    """The broker ended the handshake with a TLS alert about kprio's client certificate."""
    if who.client_certificate is None:
        return ClientCertificateRejected(
            f"the broker requires a client certificate (mutual TLS) and kprio sent none ({alert}): set "
            f"kafka.client.ssl.keystore.location (PKCS#12), or ssl.certificate.location and ssl.key.location "
            f"({broker})")
    cert = own_certificate() if own_certificate is not None else None
    now = datetime.now(UTC)
    if cert is not None and not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        when = (f"it expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC" if now > cert.not_valid_after_utc
                else f"it is valid only from {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC")
        return CertificateExpired(f"the broker refused kprio's client certificate ({who.client_certificate}): "
                                  f"{when} ({broker})")
    if "expired" in alert:
        return CertificateExpired(f"the broker refused kprio's client certificate ({who.client_certificate}): it "
                                  f"expired ({broker})")
    return ClientCertificateRejected(f"the broker refused kprio's client certificate ({who.client_certificate}): "
                                     f"{alert}: is it signed by a CA the broker's truststore holds? ({broker})")


def diagnose_certificate(broker: str, who: ClientIdentity,
                         timeout_s: float = DIAGNOSIS_TIMEOUT_S) -> KafkaSecurityFailed | None:
    """Why ``broker``'s (``host:port``) certificate fails ``who``'s CA and host check (untrusted, expired or not
    yet valid, another host); None when it verifies now or the broker does not answer."""
    host, _, port = broker.rpartition(":")
    host = host.strip("[]")
    try:
        context = ssl.create_default_context(
            cafile=who.ca_location if who.ca_location not in (None, "probe") else None, cadata=who.ca_pem)
    except (OSError, ssl.SSLError) as err:
        return CertificateUntrusted(f"{who.trust} cannot be read as CA certificates: {err} ({broker})")
    context.check_hostname = who.check_hostname
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s) as sock, \
                context.wrap_socket(sock, server_hostname=host):
            return None
    except ssl.SSLCertVerificationError as err:
        return _verification_failure(err.verify_code, err.verify_message, host, broker, who, timeout_s)
    except (OSError, ValueError):
        return None


_EXPIRED = (9, 10)  # X509_V_ERR_CERT_NOT_YET_VALID, X509_V_ERR_CERT_HAS_EXPIRED
_OTHER_HOST = (62, 64)  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH


def _verification_failure(code: int, message: str, host: str, broker: str, who: ClientIdentity,
                          timeout_s: float) -> KafkaSecurityFailed:
    cert = _peer_certificate(host, broker, timeout_s)
    if code in _EXPIRED:
        if cert is None:
            when = message
        elif cert.not_valid_after_utc < datetime.now(UTC):
            when = f"expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
        else:
            when = f"is valid only from {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
        return CertificateExpired(f"the broker's TLS certificate {when} (verified with {who.trust}): the broker's "
                                  f"certificate must be renewed ({broker})")
    if code in _OTHER_HOST:
        names = ", ".join(_names_of(cert)) if cert is not None else "other hosts"
        return HostnameMismatch(
            f"the broker's TLS certificate names {names}, not '{host}' that kafka.bootstrap_servers (or the "
            f"broker's advertised listener) gives: connect by a name it holds "
            f"(kafka.client.ssl.endpoint.identification.algorithm is https) ({broker})")
    return CertificateUntrusted(f"the broker's TLS certificate is not trusted by {who.trust}: {message} ({broker})")


def _peer_certificate(host: str, broker: str, timeout_s: float) -> Any:
    """The certificate ``broker`` presents, read without verifying it (for its dates and names), or None."""
    from cryptography import x509

    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((host, int(broker.rpartition(":")[2])), timeout=timeout_s) as sock, \
                context.wrap_socket(sock, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
    except (OSError, ValueError):
        return None
    return x509.load_der_x509_certificate(der) if der else None


def _names_of(cert: Any) -> list[str]:
    """The DNS names and IP addresses a certificate's subjectAltName holds (else its common name)."""
    from cryptography import x509

    try:
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = [*sans.get_values_for_type(x509.DNSName), *map(str, sans.get_values_for_type(x509.IPAddress))]
    except x509.ExtensionNotFound:
        names = [a.value for a in cert.subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)]
    return names or ["no host"]


def own_certificate(conf: Mapping[str, Any]) -> Any:
    """The client certificate ``conf`` names (PEM file or text, or PKCS#12 keystore), None if none or unreadable."""
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import pkcs12

    lowered = {str(k).lower(): v for k, v in conf.items()}
    try:
        if lowered.get("ssl.keystore.location"):
            password = lowered.get("ssl.keystore.password")
            with open(str(lowered["ssl.keystore.location"]), "rb") as store:
                return pkcs12.load_key_and_certificates(
                    store.read(), None if password is None else str(password).encode())[1]
        if lowered.get("ssl.certificate.pem"):
            return x509.load_pem_x509_certificate(str(lowered["ssl.certificate.pem"]).encode())
        if lowered.get("ssl.certificate.location"):
            with open(str(lowered["ssl.certificate.location"]), "rb") as pem:
                return x509.load_pem_x509_certificate(pem.read())
    except (OSError, ValueError):
        return None
    return None


def protocol_mismatch(who: ClientIdentity, broker: str | None = None,
                      timeout_s: float = PROBE_TIMEOUT_S) -> KafkaSecurityFailed | None:
    """Whether the listener at ``broker`` (else the first bootstrap server answering) speaks another protocol than
    ``who``'s or lacks its SASL mechanism, asked of it; None if it matches or nothing answers (a client of an
    unenabled mechanism may never connect: OAUTHBEARER without a token waits).

    >>> protocol_mismatch(ClientIdentity("127.0.0.1:1", "SASL_SSL"), timeout_s=0.5) is None  # nothing listens
    True
    """
    found = first_listener(split_servers(broker or who.bootstrap), timeout_s)
    if found is None:
        return None
    where, listener = found
    if listener.takes(who.protocol):
        mechanism = who.mechanism or "GSSAPI"  # librdkafka's default
        if listener.sasl and listener.mechanisms and mechanism not in listener.mechanisms:
            return SaslMechanismNotEnabled(
                f"SASL mechanism {mechanism} (kafka.client.sasl.mechanism) is not enabled on the broker, which takes "
                f"{', '.join(listener.mechanisms)} ({where})")
        return None
    if listener.protocol is not None:
        fix = f"set it to {listener.protocol}"
        if listener.sasl and not who.protocol.startswith("SASL_"):
            fix += f" with sasl.mechanism, sasl.username and {PASSWORD_VARIABLE}"
    else:
        fix = "set it to SSL or SASL_SSL, as the cluster's users log in"
    return SecurityProtocolMismatch(
        f"kafka.client.security.protocol is {who.protocol}, but the broker's listener speaks {listener.describe()}, "
        f"and closes the connections of {who.protocol} clients: {fix} ({where})")


class SecurityWatch:
    """A kprio client's ``error_cb``: security failures raise out of the serving call, kept in :attr:`failure`;
    other errors are left to librdkafka's own retries."""

    def __init__(self, conf: Mapping[str, Any],
                 probe: Callable[..., KafkaSecurityFailed | None] = protocol_mismatch,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.who = ClientIdentity.of(conf)
        self.failure: KafkaSecurityFailed | None = None
        self._lock = threading.Lock()
        self._probe, self._clock = probe, clock
        self._probed: float | None = None
        # Read only when the broker refuses the certificate (the keystore password stays in this closure).
        certificate = {k: v for k, v in conf.items() if str(k).lower() in _CERTIFICATE_SETTINGS}
        self._own_certificate = lambda: own_certificate(certificate)

    def __repr__(self) -> str:
        return f"SecurityWatch({self.who!r})"

    def __call__(self, error: Any) -> None:
        name, text = error.name(), error.str()
        failure = security_failure(name, text, self.who, own_certificate=self._own_certificate)
        if name in _DISCONNECTED or failure is not None:
            # Refused, or closed on: a listener of another security protocol does either (a SASL client on a
            # plaintext listener reads as a refused login), so the listener is asked what it speaks first.
            failure = self.mismatch(broker_of(text, self.who) if _BROKER.search(text) else None) or failure
        if failure is None:
            LOGGER.debug("kafka client event: %s", text)
            return
        self.failed(failure)

    def failed(self, failure: KafkaSecurityFailed) -> None:
        """Keep ``failure`` and raise it."""
        with self._lock:
            self.failure = failure
        raise failure

    def mismatch(self, broker: str | None = None, timeout_s: float = PROBE_TIMEOUT_S) -> KafkaSecurityFailed | None:
        """The listener speaks another security protocol (:func:`protocol_mismatch`), asked at most once every
        :data:`PROBE_EVERY_S` (a broker down is a closed connection too, again and again), within ``timeout_s``."""
        now = self._clock()
        if self._probed is not None and now - self._probed < PROBE_EVERY_S:
            return None
        self._probed = now
        return self._probe(self.who, broker, max(0.2, min(timeout_s, PROBE_TIMEOUT_S)))

    def clear(self) -> None:
        """A call succeeded: what failed before has passed (a user created, a certificate renewed)."""
        with self._lock:
            self.failure = None


_DISCONNECTED = ("_TRANSPORT", "_SSL", "_ALL_BROKERS_DOWN")
"""librdkafka's events of a connection that failed or was closed."""
PROBE_EVERY_S = 5.0
"""Shortest time between two probes of one client's listener (:meth:`SecurityWatch.mismatch`)."""

_CERTIFICATE_SETTINGS = ("ssl.keystore.location", "ssl.keystore.password", "ssl.certificate.location",
                         "ssl.certificate.pem")


def watched_failure(client: Any) -> KafkaSecurityFailed | None:
    """The last security failure of a client built by kprio, if any."""
    watch = getattr(client, "kprio_security", None)
    return watch.failure if isinstance(watch, SecurityWatch) else None


_JAVA = (
    (re.compile(r"UnsupportedSaslMechanismException: ([^\n]+)"), SaslMechanismNotEnabled,
     "the broker does not enable the SASL mechanism of kafka.client.sasl.mechanism"),
    (re.compile(r"SaslAuthenticationException: ([^\n]+)"), SaslAuthenticationFailed,
     f"SASL authentication failed (kafka.client.sasl.username, {PASSWORD_VARIABLE})"),
    (re.compile(r"(?:CertificateExpiredException|CertificateNotYetValidException): ([^\n]+)"), CertificateExpired,
     "the broker's TLS certificate is expired or not yet valid"),
    (re.compile(r"No (?:subject alternative (?:names|DNS name) matching|name matching) ([^\n]+)"), HostnameMismatch,
     "the broker's TLS certificate does not name the host connected to"),
    (re.compile(r"(PKIX path (?:building|validation) failed[^\n]*)"), CertificateUntrusted,
     "the broker's TLS certificate is not trusted by kafka.client.ssl.ca.location"),
    (re.compile(r"Received fatal alert: (bad_certificate|certificate_required|certificate_unknown|unknown_ca)"),
     ClientCertificateRejected, "the broker refused kprio's client certificate, or requires one and got none "
                                "(kafka.client.ssl.keystore.location, or ssl.certificate.location and ssl.key.location)"),
    (re.compile(r"SslAuthenticationException: ([^\n]+)"), TlsHandshakeFailed,
     "the TLS handshake of Kafka's Java client failed"),
)
"""Kafka's Java client's security exceptions (Spark's native reader), most specific first."""


def java_security_failure(text: str) -> KafkaSecurityFailed | None:
    """The typed error of a Kafka Java client security exception in ``text`` (a Spark or py4j error), or None.

    >>> text = ("py4j.protocol.Py4JJavaError: ...\\n: org.apache.kafka.common.errors.SaslAuthenticationException: "
    ...         "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512")
    >>> err = java_security_failure(text)
    >>> print(err.code, err)  # doctest: +NORMALIZE_WHITESPACE
    sasl_authentication_failed spark.reader native: SASL authentication failed (kafka.client.sasl.username,
    KPRIO_KAFKA_SASL_PASSWORD): Authentication failed during authentication due to invalid credentials with SASL
    mechanism SCRAM-SHA-512
    >>> java_security_failure("java.lang.OutOfMemoryError: Java heap space") is None
    True
    """
    for pattern, kind, what in _JAVA:
        found = pattern.search(text)
        if found is not None:
            return kind(f"spark.reader native: {what}: {found.group(1).strip()}")
    return None
