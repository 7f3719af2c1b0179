"""kprio.yaml and the environment: overrides, secrets only from the environment and never shown, the ledger
password, and a bad variable named as such. The ``in_tmp`` fixture is in conftest.py."""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest

from kprio_core.config import (
    JAVA_ONLY_SETTINGS,
    SECRET_SETTINGS,
    KafkaSettings,
    is_secret_setting,
    load_config,
    parse_config,
    setting_variable,
)
from kprio_core.errors import ConfigError
from tests.kprio_core.config_support import write

SECRET = "hunter2-s3cr3t"


# --------------------------------------------------------------------------------- environment

def test_environment_overrides_win_over_the_file(in_tmp: Path):
    path = write(
        in_tmp / "kprio.yaml",
        "kafka: {bootstrap_servers: file:9092, client: {security.protocol: PLAINTEXT, client.id: kprio}}\n",
    )
    env = {
        "KPRIO_BOOTSTRAP_SERVERS": "env:9093",
        "KPRIO_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KPRIO_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "KPRIO_KAFKA_SASL_USERNAME": "kprio",
        "KPRIO_KAFKA_SASL_PASSWORD": SECRET,
        "UNRELATED": "ignored",
    }
    kafka = load_config(path, env=env).kafka
    assert kafka.bootstrap_servers == "env:9093"
    assert kafka.client == {"security.protocol": "SASL_SSL", "client.id": "kprio", "sasl.mechanism": "SCRAM-SHA-512",
                            "sasl.username": "kprio"}
    assert kafka.client_config()["sasl.password"] == SECRET
    assert kafka.redacted()["sasl.password"] == "***"


def test_environment_alone_configures_kafka(in_tmp: Path):
    cfg = load_config(env={"KPRIO_BOOTSTRAP_SERVERS": "10.0.0.5:9092", "KPRIO_KAFKA_SSL_KEY_PASSWORD": SECRET})
    assert cfg.kafka.bootstrap_servers == "10.0.0.5:9092"
    assert cfg.kafka.client_config()["ssl.key.password"] == SECRET


@pytest.mark.parametrize(
    ("setting", "secret"),
    [
        ("sasl.password", True),
        ("ssl.key.password", True),
        ("sasl.oauthbearer.client.secret", True),
        ("ssl.key.pem", True),
        ("sasl.jaas.config", False),  # Kafka's Java client's: refused, kprio derives it
        ("SASL.PASSWORD", True),
        ("security.protocol", False),
        ("sasl.username", False),
        ("ssl.ca.location", False),
        ("ssl.key.location", False),
        ("sasl.oauthbearer.token.endpoint.url", False),
        ("sasl.oauthbearer.client.id", False),
    ],
)
def test_which_settings_are_secrets(setting: str, secret: bool):
    assert is_secret_setting(setting) is secret


@pytest.mark.parametrize("setting", SECRET_SETTINGS)
def test_every_secret_comes_from_its_variable_into_kafka_secrets(setting: str):
    kafka = parse_config({}, "kprio.yaml", env={setting_variable(setting): SECRET}).kafka
    assert set(kafka.secrets) == {setting} and kafka.client == {}
    assert kafka.client_config()[setting] == SECRET


@pytest.mark.parametrize("setting", SECRET_SETTINGS)
def test_every_secret_in_the_file_is_refused_naming_its_variable(setting: str):
    with pytest.raises(ConfigError) as err:
        parse_config({"kafka": {"client": {setting: SECRET}}}, "kprio.yaml", env={})
    assert str(err.value) == (
        f"kafka.client.{setting}: is a secret: remove it from the file and set it "
        f"in the environment as {setting_variable(setting)} (kprio.yaml)"
    )


@pytest.mark.parametrize(
    ("variable", "setting"),
    [
        ("KPRIO_KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL", "sasl.oauthbearer.token.endpoint.url"),
        ("KPRIO_KAFKA_SASL_USERNAME", "sasl.username"),
        ("KPRIO_KAFKA_SSL_KEY_LOCATION", "ssl.key.location"),
        ("KPRIO_KAFKA_ENABLE_SSL_CERTIFICATE_VERIFICATION", "enable.ssl.certificate.verification"),
    ],
)
def test_a_setting_that_is_no_secret_works_from_the_environment_and_the_file(variable: str, setting: str):
    assert parse_config({}, env={variable: "x"}).kafka.client == {setting: "x"}
    assert parse_config({"kafka": {"client": {setting: "y"}}}, env={}).kafka.client == {setting: "y"}
    assert parse_config({"kafka": {"client": {setting: "y"}}}, env={variable: "x"}).kafka.client == {setting: "x"}


@pytest.mark.parametrize("setting", sorted(JAVA_ONLY_SETTINGS))
def test_a_setting_of_the_java_client_only_is_refused_naming_the_one_to_use(setting: str):
    """kprio's librdkafka clients would not see it: the file and the environment are refused alike."""
    for raw, env in (({"kafka": {"client": {setting: SECRET}}}, {}), ({}, {setting_variable(setting): SECRET})):
        with pytest.raises(ConfigError) as err:
            parse_config(raw, "kprio.yaml", env=env)
        what = (f"kafka.client.{setting}: is a setting of Kafka's Java client only, which kprio's librdkafka "
                f"clients would not see: set {JAVA_ONLY_SETTINGS[setting]}; kprio derives the Java client's settings "
                "from them")
        where = "kprio.yaml" if not env else f"{setting_variable(setting)} in the environment"
        assert str(err.value) == f"{what} ({where})"
        assert SECRET not in str(err.value)


@pytest.mark.parametrize(
    ("client", "named"),
    [
        ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "kafka.client.sasl.mechanism: OAUTHBEARER"),
        ({"security.protocol": "SSL", "enable.ssl.certificate.verification": "false"},
         "kafka.client.enable.ssl.certificate.verification"),
        ({"security.protocol": "SSL", "ssl.cipher.suites": "ECDHE-RSA-AES256-GCM-SHA384"},
         "kafka.client.ssl.cipher.suites"),
    ],
    ids=["oauthbearer", "no-verification", "openssl-ciphers"],
)
def test_the_native_reader_refuses_at_load_a_security_setting_the_java_client_cannot_get(client, named):
    raw = {"kafka": {"client": client}, "spark": {"reader": "native"}}
    with pytest.raises(ConfigError) as err:
        parse_config(raw, "kprio.yaml", env={})
    assert str(err.value).startswith(f"spark.reader native: {named}")
    assert str(err.value).endswith("; use spark.reader python (kprio.yaml)")
    # The python reader reads with librdkafka, which takes them all.
    assert parse_config({**raw, "spark": {"reader": "python"}}, env={}).kafka.client == client


def test_empty_variables_are_ignored():
    cfg = parse_config({"kafka": {"bootstrap_servers": "file:9092"}}, env={
        "KPRIO_BOOTSTRAP_SERVERS": "", "KPRIO_KAFKA_TIMEOUT_S": "", "KPRIO_KAFKA_SASL_PASSWORD": "",
    })
    assert cfg.kafka == KafkaSettings(bootstrap_servers="file:9092")


def test_only_listed_secrets_are_held_as_secrets():
    with pytest.raises(ValueError, match=r"\['security.protocol'\] are not secret settings: put them in kafka.client"):
        KafkaSettings(secrets={"security.protocol": "SSL"})


# --------------------------------------------------------------------------------- secrets never shown

def test_a_secret_is_never_shown(in_tmp: Path):
    cfg = load_config(env={"KPRIO_KAFKA_SASL_PASSWORD": SECRET, "KPRIO_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"})
    shown = (repr(cfg), str(cfg), repr(cfg.kafka), str(cfg.kafka), str(cfg.kafka.redacted()), cfg.model_dump_json())
    assert not [text for text in shown if SECRET in text]
    assert cfg.kafka.redacted() == {
        "bootstrap.servers": "127.0.0.1:9092",
        "security.protocol": "SASL_SSL",
        "sasl.password": "***",
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            f"kafka: {{client: {{sasl.password: {SECRET}}}}}\n",
            "kafka.client.sasl.password: is a secret: remove it from the file and set it in the environment as "
            "KPRIO_KAFKA_SASL_PASSWORD",
        ),
        (f"kafka: {{client: {{ssl.keystore.password: {SECRET}}}}}\n", "KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD"),
        (f"kafka: {{secrets: {{sasl.password: {SECRET}}}}}\n", "kafka.secrets: secrets come only from KPRIO_KAFKA_"),
    ],
)
def test_a_secret_in_the_file_is_refused_without_echoing_it(in_tmp: Path, text: str, message: str):
    with pytest.raises(ConfigError) as err:
        load_config(write(in_tmp / "kprio.yaml", text), env={})
    assert message in str(err.value)
    assert SECRET not in str(err.value) and SECRET not in repr(err.value)
    logged = "".join(traceback.format_exception(err.value))
    assert SECRET not in logged, "no chained error carries the value into a log"


def test_an_error_elsewhere_does_not_show_the_secret_from_the_environment(in_tmp: Path):
    with pytest.raises(ConfigError) as err:
        load_config(write(in_tmp / "kprio.yaml", "kafka: {timeout_s: -1}\n"), env={"KPRIO_KAFKA_SASL_PASSWORD": SECRET})
    assert "kafka.timeout_s" in str(err.value) and SECRET not in str(err.value)


# --------------------------------------------------------------------------------- the ledger password, bad variables

def test_timeout_from_the_environment_is_kprios_own_setting():
    # KPRIO_KAFKA_TIMEOUT_S sets kafka.timeout_s; it must not leak into librdkafka as "timeout.s".
    cfg = parse_config({}, "kprio.yaml", env={"KPRIO_KAFKA_TIMEOUT_S": "2.5"})
    assert cfg.kafka.timeout_s == 2.5
    assert "timeout.s" not in cfg.kafka.client_config()


def test_a_bad_timeout_from_the_environment_names_the_key():
    with pytest.raises(ConfigError, match=r"kafka\.timeout_s"):
        parse_config({}, "kprio.yaml", env={"KPRIO_KAFKA_TIMEOUT_S": "soon"})


def test_the_ledger_password_comes_from_the_environment_never_from_the_file(tmp_path, monkeypatch):
    from kprio_core.ledger.engine import make_engine

    path = tmp_path / "kprio.yaml"
    path.write_text('ledger: {url: "postgresql+psycopg://kprio:hunter2@db.internal/kprio"}\n')
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "ledger.url: holds a password" in str(err.value) and "KPRIO_LEDGER_PASSWORD" in str(err.value)
    assert "hunter2" not in str(err.value)
    path.write_text('ledger: {url: "postgresql+psycopg://kprio@db.internal/kprio"}\n')
    config = load_config(path)
    monkeypatch.setenv("KPRIO_LEDGER_PASSWORD", "hunter2")
    engine = make_engine(config.ledger.url)  # connects lazily: the URL it will use
    assert engine.url.password == "hunter2" and "hunter2" not in repr(engine)
    assert "hunter2" not in config.model_dump_json()


@pytest.mark.parametrize(("variable", "value", "key"), [
    ("KPRIO_KAFKA_TIMEOUT_S", "garbage", "kafka.timeout_s: Input should be a valid number"),
    ("KPRIO_KAFKA_TIMEOUT_S", "-3", "kafka.timeout_s: Input should be greater than 0"),
])
def test_a_bad_environment_override_names_the_variable_not_the_file(in_tmp: Path, variable: str, value: str,
                                                                     key: str):
    path = write(in_tmp / "kprio.yaml", "planner: {mode: flipkart}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, env={variable: value})
    assert err.value.what.startswith(key) and err.value.where == f"{variable} in the environment", err.value


@pytest.mark.parametrize("url", [
    "postgresql://kprio:hunter2@db/kprio", "postgresql://kprio@db/kprio?password=hunter2",
    "postgresql+psycopg://kprio@db/kprio?sslmode=require&sslpassword=hunter2",
    "sqlite:///ledger.db?password=hunter2",
])
def test_a_password_in_any_form_of_ledger_url_is_refused_naming_the_variable(url: str):
    with pytest.raises(ConfigError) as err:
        parse_config({"ledger": {"url": url}}, "kprio.yaml", env={})
    assert "ledger.url: holds a password" in str(err.value) and "KPRIO_LEDGER_PASSWORD" in str(err.value)
    assert "hunter2" not in str(err.value) and "hunter2" not in repr(err.value)
