"""Security failures of kprio's Kafka clients as one typed line naming the setting (kprio_core/kafka/security.py).

The case tables hold librdkafka's and Kafka's Java client's messages as the real clients wrote them
against the secured embedded broker (tests/orchestration/test_secured_kafka*.py drive them end to
end); the certificate diagnosis handshakes with a TLS server serving each kind of bad certificate.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from kprio_core.errors import KafkaSecurityFailed
from kprio_core.kafka.security import (
    ClientIdentity,
    SecurityWatch,
    diagnose_certificate,
    java_security_failure,
    security_failure,
)
from orchestration.services.tls import issue, make_ca

WHO = ClientIdentity.of({"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                         "sasl.username": "kprio", "sasl.password": "pw-never-shown", "ssl.ca.location": "/tls/ca.pem"})
MTLS = ClientIdentity.of({"bootstrap.servers": "b:9093", "security.protocol": "SSL", "ssl.ca.location": "/tls/ca.pem",
                          "ssl.keystore.location": "/tls/client.p12", "ssl.keystore.password": "pw-never-shown"})
NO_CERT = ClientIdentity.of({"bootstrap.servers": "b:9093", "security.protocol": "SSL"})

# (case, error name, librdkafka's message, the client, code (None: no security failure), the line starts with)
CASES = [
    ("1 a refused password", "_AUTHENTICATION",
     "sasl_ssl://h:1/bootstrap: SASL authentication error: Authentication failed during authentication due to invalid "
     "credentials with SASL mechanism SCRAM-SHA-512 (after 327ms in state AUTH_REQ)", WHO,
     "sasl_authentication_failed", "SASL authentication failed: the broker refused user 'kprio' "
     "(kafka.client.sasl.username) with the password of KPRIO_KAFKA_SASL_PASSWORD over SCRAM-SHA-512; or the user has "
     "no SCRAM-SHA-512 credentials on the broker (h:1)"),
    ("2 PLAIN's refusal words", "_AUTHENTICATION",
     "sasl_ssl://h:1/bootstrap: SASL authentication error: Authentication failed: Invalid username or password "
     "(after 301ms in state AUTH_REQ)", WHO, "sasl_authentication_failed", "SASL authentication failed"),
    ("3 a mechanism the broker does not enable: the same code, its own words", "_AUTHENTICATION",
     "sasl_ssl://h:1/bootstrap: SASL SCRAM-SHA-256 mechanism handshake failed: Broker: Unsupported SASL mechanism: "
     "broker's supported mechanisms: SCRAM-SHA-512,PLAIN (after 301ms in state AUTH_HANDSHAKE)", WHO,
     "sasl_mechanism_not_enabled", "SASL mechanism SCRAM-SHA-256 (kafka.client.sasl.mechanism) is not enabled on "
     "the broker, which takes SCRAM-SHA-512, PLAIN (h:1)"),
    ("4 no client certificate for a broker that requires one", "_TRANSPORT",
     "ssl://h:1/bootstrap: Receive failed: error:0A000412:SSL routines::ssl/tls alert bad certificate: SSL alert "
     "number 42 (after 0ms in state APIVERSION_QUERY)", NO_CERT, "ssl_client_certificate_rejected",
     "the broker requires a client certificate (mutual TLS) and kprio sent none (bad certificate)"),
    ("5 a client certificate of another CA", "_TRANSPORT",
     "ssl://h:1/bootstrap: Receive failed: error:0A000416:SSL routines::ssl/tls alert certificate unknown: SSL alert "
     "number 46 (after 6ms in state APIVERSION_QUERY)", MTLS, "ssl_client_certificate_rejected",
     "the broker refused kprio's client certificate (kafka.client.ssl.keystore.location /tls/client.p12): "
     "certificate unknown: is it signed by a CA the broker's truststore holds? (h:1)"),
    ("6 an alert that is not about certificates is a failed handshake", "_SSL",
     "ssl://h:1/bootstrap: SSL handshake failed: error:0A000410:SSL routines::ssl/tls alert handshake failure: SSL "
     "alert number 40 (after 1ms in state SSL_HANDSHAKE)", MTLS, "ssl_handshake_failed",
     "the TLS handshake failed: "),
    ("7 a plaintext listener answering a TLS client", "_SSL",
     "ssl://h:1/bootstrap: SSL handshake failed: error:0A00010B:SSL routines::wrong version number (after 1ms in "
     "state SSL_HANDSHAKE)", NO_CERT, "ssl_handshake_failed", "the TLS handshake failed: error:0A00010B:SSL "
     "routines::wrong version number: does the broker's listener take kafka.client.security.protocol SSL? (h:1)"),
    ("8 a refused connection is the broker away, not security", "_TRANSPORT",
     "h:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after 0ms in state CONNECT)", WHO,
     None, ""),
    ("9 all brokers down is not security either", "_ALL_BROKERS_DOWN", "1/1 brokers are down", WHO, None, ""),
]


@pytest.mark.parametrize(("case", "name", "text", "who", "code", "starts"), CASES, ids=[c[0] for c in CASES])
def test_the_security_failure_of_a_librdkafka_error(case, name, text, who, code, starts):
    failure = security_failure(name, text, who, diagnose=lambda broker, who: None)
    if code is None:
        assert failure is None
        return
    assert isinstance(failure, KafkaSecurityFailed) and failure.code == code and not failure.transient
    assert str(failure).startswith(starts), str(failure)
    assert "pw-never-shown" not in str(failure) + repr(who)


JAVA = [
    ("1 a refused password", "org.apache.kafka.common.errors.SaslAuthenticationException: Authentication failed "
     "during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512", "sasl_authentication_failed"),
    ("2 a mechanism not enabled", "org.apache.kafka.common.errors.UnsupportedSaslMechanismException: Client SASL "
     "mechanism 'SCRAM-SHA-256' not enabled in the server, enabled mechanisms are [SCRAM-SHA-512, PLAIN]",
     "sasl_mechanism_not_enabled"),
    ("3 an untrusted certificate", "org.apache.kafka.common.errors.SslAuthenticationException: SSL handshake failed\n"
     "Caused by: javax.net.ssl.SSLHandshakeException: PKIX path building failed: unable to find valid certification "
     "path to requested target", "ssl_certificate_untrusted"),
    ("4 another host", "Caused by: java.security.cert.CertificateException: No subject alternative names matching IP "
     "address 127.0.0.2 found", "ssl_hostname_mismatch"),
    ("5 an expired certificate", "Caused by: java.security.cert.CertificateExpiredException: NotAfter: Tue Jan 02 "
     "00:00:00 UTC 2024", "ssl_certificate_expired"),
    ("6 no client certificate", "org.apache.kafka.common.errors.SslAuthenticationException: SSL handshake failed\n"
     "Caused by: javax.net.ssl.SSLHandshakeException: Received fatal alert: bad_certificate",
     "ssl_client_certificate_rejected"),
    ("7 any other TLS failure", "org.apache.kafka.common.errors.SslAuthenticationException: SSL handshake failed",
     "ssl_handshake_failed"),
]


@pytest.mark.parametrize(("case", "text", "code"), JAVA, ids=[c[0] for c in JAVA])
def test_the_security_failure_of_the_java_client(case, text, code):
    failure = java_security_failure(f"py4j.protocol.Py4JJavaError: An error occurred\n: {text}\n\tat org.apache...")
    assert failure is not None and failure.code == code
    assert str(failure).startswith("spark.reader native: ") and "\n" not in str(failure)


def test_a_watch_raises_a_security_failure_and_remembers_it_until_a_call_succeeds():
    class Event:  # the fields of confluent-kafka's KafkaError the callback reads
        def __init__(self, name: str, text: str) -> None:
            self._name, self._text = name, text

        def name(self) -> str:
            return self._name

        def str(self) -> str:
            return self._text

    watch = SecurityWatch({"bootstrap.servers": "b:9093", "sasl.username": "kprio", "sasl.password": "pw-never-shown"})
    watch(Event("_ALL_BROKERS_DOWN", "1/1 brokers are down"))
    assert watch.failure is None
    with pytest.raises(KafkaSecurityFailed) as raised:
        watch(Event("_AUTHENTICATION", CASES[0][2]))
    assert watch.failure is raised.value and raised.value.code == "sasl_authentication_failed"
    watch.clear()
    assert watch.failure is None
    assert "pw-never-shown" not in repr(watch)


# -- the certificate diagnosis, against TLS servers serving bad certificates -----------------------


def _server_files(folder: Path, *, hosts: list[str], expired: bool) -> tuple[Path, Path, Path]:
    now = datetime.now(UTC)
    ca_key, ca = make_ca(now)
    start = now - timedelta(days=10) if expired else None
    key, cert = issue(ca_key, ca, hosts[0], hosts, now, days=2 if expired else 30, not_before=start)
    (folder / "ca.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    return folder / "ca.pem", folder / "cert.pem", folder / "key.pem"


def _serve(cert: Path, key: Path) -> Iterator[int]:
    """A TLS server on a free loopback port that completes handshakes until the test ends."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    done = threading.Event()

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            try:
                with context.wrap_socket(conn, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        done.set()
        thread.join(5)
        listener.close()


@pytest.mark.parametrize(
    ("case", "hosts", "expired", "trusted", "connect_to", "code", "says"),
    [
        ("1 a certificate of another CA", ["127.0.0.1"], False, False, "127.0.0.1", "ssl_certificate_untrusted",
         "is not trusted by kafka.client.ssl.ca.location"),
        ("2 an expired certificate", ["127.0.0.1"], True, True, "127.0.0.1", "ssl_certificate_expired",
         "the broker's TLS certificate expired on "),
        ("3 a certificate of another host", ["kafka-1.example"], False, True, "127.0.0.1", "ssl_hostname_mismatch",
         "the broker's TLS certificate names kafka-1.example, not '127.0.0.1'"),
        ("4 a good one verifies: nothing to say", ["127.0.0.1"], False, True, "127.0.0.1", None, ""),
    ],
)
def test_the_diagnosis_names_why_a_certificate_does_not_verify(tmp_path, case, hosts, expired, trusted, connect_to,
                                                               code, says):
    ca, cert, key = _server_files(tmp_path, hosts=hosts, expired=expired)
    other_ca = _server_files(tmp_path / "other", hosts=hosts, expired=False)[0] if not trusted else None
    server = _serve(cert, key)
    port = next(server)
    try:
        who = ClientIdentity.of({"bootstrap.servers": f"{connect_to}:{port}", "security.protocol": "SSL",
                                 "ssl.ca.location": str(other_ca or ca)})
        found = diagnose_certificate(f"{connect_to}:{port}", who)
    finally:
        server.close()
    if code is None:
        assert found is None
    else:
        assert found is not None and found.code == code and says in str(found), str(found)


@pytest.fixture(autouse=True)
def _other_folder(tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
