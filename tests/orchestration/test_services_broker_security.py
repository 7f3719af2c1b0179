"""The embedded broker's security settings, without starting it (orchestration/services/broker_security.py, tls.py).

What every mode writes into server.properties (names of variables, never a secret), the client settings it
prints, the certificates it makes, and the one-line refusals of ``kprio broker start --security`` before
anything starts. tests/orchestration/test_secured_kafka*.py start secured brokers and drain them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography import x509
from typer.testing import CliRunner

from orchestration.cli.main import app
from orchestration.services.broker.props import NodePorts, server_properties
from orchestration.services.broker_security import BrokerSecurity, Security
from orchestration.services.tls import TlsFiles, keystore_names, load_ca, make_files, opens

NODE = NodePorts(1, 19092, 19192)
FILES = TlsFiles(Path("/data/tls"))

# (mode, mTLS, the listeners' protocol, settings that must be there, settings that must not)
MODES = [
    (Security.PLAINTEXT, False, "PLAINTEXT", {}, {"config.providers", "sasl.enabled.mechanisms", "ssl.keystore.location"}),
    (Security.SASL_PLAINTEXT, False, "SASL_PLAINTEXT",
     {"sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN", "sasl.mechanism.controller.protocol": "PLAIN",
      "config.providers.env.param.allowlist.pattern": "^(KPRIO_KAFKA_SASL_PASSWORD)$"}, {"ssl.keystore.location"}),
    (Security.SASL_SSL, False, "SASL_SSL",
     {"ssl.keystore.location": "/data/tls/broker.p12", "ssl.keystore.password": "${env:KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD}",
      "ssl.truststore.location": "/data/tls/ca.pem",
      "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                                               "required;"},
     {"ssl.client.auth", "listener.name.controller.ssl.client.auth"}),
    (Security.SSL, True, "SSL", {"ssl.client.auth": "required", "listener.name.controller.ssl.client.auth": "required"},
     {"sasl.enabled.mechanisms"}),
]


@pytest.mark.parametrize(("mode", "mtls", "protocol", "present", "absent"), MODES, ids=[m[0].value for m in MODES])
def test_every_listener_takes_the_mode_and_the_properties_name_variables_never_values(mode, mtls, protocol, present,
                                                                                       absent):
    props = server_properties(NODE, [NODE], "127.0.0.1", Path("/data/kafka-logs"), BrokerSecurity(mode, mtls), FILES)
    assert props["listeners"] == f"{protocol}://127.0.0.1:19092,CONTROLLER://127.0.0.1:19192"
    assert props["listener.security.protocol.map"] == f"{protocol}:{protocol},CONTROLLER:{protocol}"
    assert props["inter.broker.listener.name"] == protocol
    assert {k: props.get(k) for k in present} == present
    assert not absent & set(props)
    jaas = [v for k, v in props.items() if k.endswith("plain.sasl.jaas.config")]
    assert all('password="${env:KPRIO_KAFKA_SASL_PASSWORD}"' in line and 'user_kprio="${env:' in line for line in jaas)
    assert len(jaas) == (2 if "SASL" in protocol else 0)  # the clients' listener and the quorum's


def test_the_tls_files_hold_the_host_and_open_with_their_password_only(tmp_path):
    files = make_files(TlsFiles(tmp_path / "tls"), ["127.0.0.1"], "keystore-pw", datetime.now(UTC))
    assert files.complete()
    assert keystore_names(files.broker, "keystore-pw") == ["127.0.0.1"]  # no other host: see the hostname test
    assert opens(files.client, "keystore-pw") and not opens(files.client, "another")
    ca_key, ca = load_ca(files, "keystore-pw")
    assert x509.load_pem_x509_certificate(files.ca.read_bytes()) == ca
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in (files.ca_key, files.broker, files.client)} == {
        "ca.key": "0o600", "broker.p12": "0o600", "client.p12": "0o600"}
    assert not [p for p in files.folder.iterdir() if b"keystore-pw" in p.read_bytes()]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca


@pytest.mark.parametrize(
    ("args", "env", "says", "code"),
    [
        (["--security", "sasl_ssl"], {}, "kprio broker --security sasl_ssl needs KPRIO_KAFKA_SASL_PASSWORD and "
                                         "KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD in the environment", 1),
        (["--security", "sasl_plaintext"], {}, "needs KPRIO_KAFKA_SASL_PASSWORD in the environment", 1),
        (["--security", "ssl"], {"KPRIO_KAFKA_SASL_PASSWORD": "x"}, "needs KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD", 1),
        # A command line that asks for what cannot be: a usage error (exit 2, docs/operations.md's contract).
        (["--security", "sasl_plaintext", "--mtls"], {}, "--mtls needs TLS: --security ssl or sasl_ssl", 2),
        (["--mtls"], {}, "--mtls needs --security ssl or sasl_ssl", 2),
    ],
)
def test_a_secured_start_without_its_secrets_fails_in_one_line_before_anything_starts(tmp_path, monkeypatch, args,
                                                                                       env, says, code):
    for name in ("KPRIO_KAFKA_SASL_PASSWORD", "KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = CliRunner().invoke(app, ["broker", "start", "--port", "0", "--data-dir", str(tmp_path / "b"), *args])
    assert result.exit_code == code
    [line] = result.output.strip().splitlines()
    assert line.startswith("kprio: error: ") and says in line, line
    assert not (tmp_path / "b" / "server.properties").exists() and not (tmp_path / "b" / "tls").exists()
