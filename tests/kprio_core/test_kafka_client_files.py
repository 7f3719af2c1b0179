"""A file or secret a Kafka client's security settings need, missing or wrong, in one line naming the setting
(kprio_core/config/files.py): what librdkafka says in OpenSSL's words, and the native reader's Java client
in a failed Spark job; the same line at load, from the settings of a file and the environment. Real files, made here with ``cryptography``; the secured brokers' tests prove the lines
through ``kprio lag``."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives import serialization

from kprio_core.config import KafkaSettings, setting_variable
from kprio_core.config.files import settings_problem
from kprio_core.config.load import parse_config_sources
from kprio_core.errors import ConfigError
from kprio_core.kafka.client import new_admin
from kprio_core.kafka.java_client import java_client_config
from orchestration.services.tls import TlsFiles, issue, make_files

SECRET = "files-test-Secret-1"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("client-files")
    tls = make_files(TlsFiles(folder / "tls"), ["127.0.0.1"], SECRET)
    key, cert = issue(*_ca(tls), "kprio", [], datetime.now(UTC))
    (folder / "client.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "client.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                          serialization.BestAvailableEncryption(SECRET.encode())))
    (folder / "not-pem.txt").write_text("not a certificate\n")
    return folder, tls


def _ca(tls: TlsFiles):
    from orchestration.services.tls import load_ca

    return load_ca(tls, SECRET)


SASL = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "kprio"}

# name: (client settings, the line); paths: TLS (the broker's files), DIR (this module's folder)
CASES = {
    "no password variable": (SASL, "kafka.client.sasl.username: SCRAM-SHA-512 logs in with its password: set "
                                   "KPRIO_KAFKA_SASL_PASSWORD in the environment"),
    "mechanism in lower case": ({**SASL, "sasl.mechanism": "scram-sha-512", "sasl.password": SECRET},
                                "kafka.client.sasl.mechanism: write scram-sha-512 as SCRAM-SHA-512 (librdkafka's names "
                                "are case-sensitive)"),
    "no user name": ({**SASL, "sasl.username": None, "sasl.password": SECRET},
                     "kafka.client.sasl.username: not set: SCRAM-SHA-512 logs in with a user name and a password"),
    "CA file missing": ({"ssl.ca.location": "DIR/nowhere.pem"}, "kafka.client.ssl.ca.location: 'DIR/nowhere.pem': no such file or directory"),
    "CA file not PEM": ({"ssl.ca.location": "DIR/not-pem.txt"},
                        "kafka.client.ssl.ca.location: 'DIR/not-pem.txt': holds no PEM certificate"),
    "CA file a keystore": ({"ssl.ca.location": "TLS/client.p12"},
                           "kafka.client.ssl.ca.location: 'TLS/client.p12': holds a PKCS#12 keystore (DER), not PEM"),
    "CA file a private key": ({"ssl.ca.location": "DIR/client.key"},
                              "kafka.client.ssl.ca.location: 'DIR/client.key': holds a private key"),
    "keystore wrong password": ({"ssl.keystore.location": "TLS/client.p12", "ssl.keystore.password": "wrong"},
                                "kafka.client.ssl.keystore.location: 'TLS/client.p12': does not open with the password "
                                "in KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD"),
    "keystore no password": ({"ssl.keystore.location": "TLS/client.p12"},
                             "kafka.client.ssl.keystore.location: 'TLS/client.p12': a keystore needs its password: "
                             "set KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD in the environment"),
    "key wrong password": ({"ssl.certificate.location": "DIR/client.crt", "ssl.key.location": "DIR/client.key",
                            "ssl.key.password": "wrong"},
                           "kafka.client.ssl.key.location: 'DIR/client.key': does not decrypt with the password in "
                           "KPRIO_KAFKA_SSL_KEY_PASSWORD"),
    "key no password": ({"ssl.certificate.location": "DIR/client.crt", "ssl.key.location": "DIR/client.key"},
                        "kafka.client.ssl.key.location: 'DIR/client.key': is encrypted: set KPRIO_KAFKA_SSL_KEY_PASSWORD "
                        "in the environment"),
    "CRL file missing": ({"ssl.crl.location": "DIR/nowhere.crl"},
                         "kafka.client.ssl.crl.location: 'DIR/nowhere.crl': no such file or directory"),
    "CRL file not PEM": ({"ssl.crl.location": "DIR/not-pem.txt"},
                         "kafka.client.ssl.crl.location: 'DIR/not-pem.txt': holds no PEM text (-----BEGIN ...)"),
    "certificate not PEM": ({"ssl.certificate.location": "DIR/not-pem.txt", "ssl.key.location": "DIR/client.key"},
                            "kafka.client.ssl.certificate.location: 'DIR/not-pem.txt': holds no PEM certificate"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_missing_or_wrong_file_or_secret_is_one_line_naming_the_setting(files, case):
    folder, tls = files
    client, line = CASES[case]
    where = {"DIR": str(folder), "TLS": str(tls.folder)}

    def placed(text: str) -> str:
        for name, path in where.items():
            text = text.replace(f"{name}/", f"{path}/")
        return text

    conf = {"bootstrap.servers": "127.0.0.1:9", "security.protocol": "SSL",
            **{k: placed(v) for k, v in client.items() if v is not None}}
    problem = settings_problem(conf)
    assert problem is not None and problem.startswith(placed(line)), problem
    assert SECRET not in problem and "wrong" not in problem
    # The admin client (librdkafka) and the native reader (Kafka's Java client) say the same line, as a ConfigError,
    # where librdkafka refuses them (a user name without its password is librdkafka's refusal too).
    if case != "no user name":
        with pytest.raises(ConfigError) as built:
            new_admin(KafkaSettings(bootstrap_servers="127.0.0.1:9", client={k: v for k, v in conf.items()
                                                                              if "password" not in k and k != "bootstrap.servers"},
                                    secrets={k: v for k, v in conf.items() if "password" in k}))
        assert str(built.value) == problem
    with pytest.raises(ConfigError) as translated:
        java_client_config(KafkaSettings(bootstrap_servers="127.0.0.1:9",
                                         client={k: v for k, v in conf.items()
                                                 if "password" not in k and k != "bootstrap.servers"},
                                         secrets={k: v for k, v in conf.items() if "password" in k}))
    assert str(translated.value) == problem
    # At load (a configuration that runs on this host), the same line: the settings from the file, the secrets
    # from the environment.
    with pytest.raises(ConfigError) as loaded:
        parse_config_sources({"kafka": {"bootstrap_servers": "127.0.0.1:9",
                                        "client": {k: v for k, v in conf.items()
                                                   if "password" not in k and k != "bootstrap.servers"}}},
                             "kprio.yaml", {setting_variable(k): str(v) for k, v in conf.items() if "password" in k},
                             on_this_host=True)
    assert loaded.value.what == problem


def test_settings_a_client_takes_have_no_problem(files):
    folder, tls = files
    assert settings_problem({**SASL, "sasl.password": SECRET, "ssl.ca.location": str(tls.ca)}) is None
    assert settings_problem({"ssl.keystore.location": str(tls.client), "ssl.keystore.password": SECRET}) is None
    assert settings_problem({"ssl.certificate.location": str(folder / "client.crt"),
                             "ssl.key.location": str(folder / "client.key"), "ssl.key.password": SECRET}) is None
    assert settings_problem({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}) is None
    assert settings_problem({"ssl.ca.location": str(tls.folder)}) is None  # a folder of CA certificates
