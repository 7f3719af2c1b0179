"""Which settings come from the environment, and the names of Kafka's client settings: which carry a
credential (only from ``KPRIO_KAFKA_<SETTING>``), which only Kafka's Java client understands, which kprio translates
for it."""

from __future__ import annotations

from collections.abc import Mapping

ENV_CONFIG_PATH = "KPRIO_CONFIG"
ENV_BOOTSTRAP = "KPRIO_BOOTSTRAP_SERVERS"
ENV_KAFKA_PREFIX = "KPRIO_KAFKA_"
ENV_KAFKA_TIMEOUT = "KPRIO_KAFKA_TIMEOUT_S"
"""Sets ``kafka.timeout_s`` (kprio's own setting, not a librdkafka one)."""
ENV_LEDGER_PASSWORD = "KPRIO_LEDGER_PASSWORD"
ENV_REGISTRY_PASSWORD = "KPRIO_SCHEMA_REGISTRY_PASSWORD"
ENV_REGISTRY_KEY_PASSWORD = "KPRIO_SCHEMA_REGISTRY_SSL_KEY_PASSWORD"
DEFAULT_CONFIG_FILE = "kprio.yaml"
WITH_SECRETS = "kprio.with_secrets"
"""``model_dump_json(context={WITH_SECRETS: True})`` writes the Kafka secrets in clear (else masked). Only for
:meth:`spark_jobs.range_reader.ReadSettings.to_option`: its executors need them, and Spark shows no Python data
source option in its plans or event log."""

LIBRDKAFKA_SECRETS = (
    "sasl.password",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.client.credentials.client.secret",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.assertion.private.key.pem",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl.keystore.password",
)
"""librdkafka settings carrying a credential: those ``rdkafka_conf.c`` marks ``_RK_SENSITIVE``, less identities
and paths (``sasl.username``, ``ssl.key.location``, ``...private.key.file``), the public ``ssl.ca.pem`` and the
C-API-only ``ssl_key``; plus ``sasl.oauthbearer.client.credentials.client.secret`` (an alias; the Java name)."""

SECRET_SETTINGS = LIBRDKAFKA_SECRETS
"""Every secret Kafka client setting: only from ``KPRIO_KAFKA_<SETTING>`` (Dagster: a ``dg.EnvVar``), never a file."""

JAVA_SECRETS = ("sasl.jaas.config", "ssl.keystore.key", "ssl.truststore.password", "ssl.keystore.certificate.chain")
"""Java client credentials kprio derives (:func:`kprio_core.kafka.java_client.java_client_config`), never takes;
Spark redacts them with the secrets above (:data:`spark_jobs.session.DEFAULT_CONF`)."""

JAVA_ONLY_SETTINGS = {
    "sasl.jaas.config": "sasl.username and KPRIO_KAFKA_SASL_PASSWORD (kprio writes the Java client's JAAS line)",
    "sasl.login.callback.handler.class": "sasl.mechanism PLAIN or SCRAM-SHA-256/512 with sasl.username",
    "sasl.client.callback.handler.class": "sasl.mechanism PLAIN or SCRAM-SHA-256/512 with sasl.username",
    "ssl.truststore.location": "ssl.ca.location (a PEM file of the CA certificates)",
    "ssl.truststore.password": "ssl.ca.location (a PEM file of the CA certificates, no password)",
    "ssl.truststore.type": "ssl.ca.location (a PEM file of the CA certificates)",
    "ssl.truststore.certificates": "ssl.ca.pem",
    "ssl.keystore.type": "ssl.keystore.location (PKCS#12) or ssl.certificate.location with ssl.key.location (PEM)",
    "ssl.keystore.key": "ssl.key.location or KPRIO_KAFKA_SSL_KEY_PEM",
    "ssl.keystore.certificate.chain": "ssl.certificate.location or ssl.certificate.pem",
    "ssl.protocol": "the TLS version both clients negotiate (leave it out)",
    "ssl.enabled.protocols": "the TLS versions both clients negotiate (leave it out)",
}
"""Java-only settings, refused wherever they come from (kprio's librdkafka clients would not see them); each names
the librdkafka setting to use instead, from which the Java one is derived."""

JAVA_SASL_MECHANISMS = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
"""The SASL mechanisms whose Java login (a JAAS line from ``sasl.username`` and ``sasl.password``) kprio writes."""

JAVA_TRANSLATED = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
    "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.certificate.pem", "ssl.key.location",
    "ssl.key.pem", "ssl.key.password", "ssl.keystore.location", "ssl.keystore.password",
    "ssl.endpoint.identification.algorithm",
})
"""The librdkafka security settings kprio translates for Kafka's Java client (Spark's native reader)."""


def is_security_setting(name: str) -> bool:
    """A setting of the connection's security (protocol, SASL, TLS), which both client families must agree on.

    >>> is_security_setting("sasl.username"), is_security_setting("enable.ssl.certificate.verification")
    (True, True)
    >>> is_security_setting("client.id")
    False
    """
    name = name.lower()
    return name.startswith(("sasl.", "ssl.", "ssl_")) or name in ("security.protocol",
                                                                   "enable.ssl.certificate.verification")


def java_untranslatable(settings: Mapping[str, object]) -> list[str]:
    """Why security settings in ``settings`` (librdkafka's) cannot reach Kafka's Java client, a line each; empty: none.

    >>> java_untranslatable({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512"})
    []
    >>> for line in java_untranslatable({"sasl.mechanism": "OAUTHBEARER", "enable.ssl.certificate.verification": False,
    ...                                   "ssl.crl.location": "/crl.pem"}):
    ...     print(line)
    kafka.client.enable.ssl.certificate.verification: Kafka's Java client always verifies the broker's certificate
    kafka.client.sasl.mechanism: OAUTHBEARER has no Java login kprio writes (it writes PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)
    kafka.client.ssl.crl.location: a librdkafka setting with no equivalent kprio gives Kafka's Java client
    """
    found = []
    for name, value in sorted(settings.items()):
        key = name.lower()
        if key in ("sasl.mechanism", "sasl.mechanisms") and str(value).upper() not in JAVA_SASL_MECHANISMS:
            found.append(f"kafka.client.{name}: {value} has no Java login kprio writes (it writes "
                         f"{', '.join(JAVA_SASL_MECHANISMS)})")
        elif key == "enable.ssl.certificate.verification" and str(value).lower() in ("false", "0"):
            found.append(f"kafka.client.{name}: Kafka's Java client always verifies the broker's certificate")
        elif key == "ssl.endpoint.identification.algorithm" and str(value).lower() not in ("https", "none", ""):
            found.append(f"kafka.client.{name}: {value} is neither https nor none")
        elif is_security_setting(key) and key not in JAVA_TRANSLATED and key != "enable.ssl.certificate.verification":
            found.append(f"kafka.client.{name}: a librdkafka setting with no equivalent kprio gives Kafka's Java client")
    return found


def is_secret_setting(name: str) -> bool:
    """True for the Kafka client settings of :data:`SECRET_SETTINGS`.

    >>> is_secret_setting("sasl.password"), is_secret_setting("sasl.oauthbearer.token.endpoint.url")
    (True, False)
    """
    return name.lower() in SECRET_SETTINGS


def setting_variable(setting: str) -> str:
    """The environment variable of a Kafka client setting.

    >>> setting_variable("sasl.oauthbearer.client.secret")
    'KPRIO_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET'
    """
    return ENV_KAFKA_PREFIX + setting.upper().replace(".", "_")


def variable_setting(variable: str) -> str:
    """The Kafka client setting a ``KPRIO_KAFKA_*`` variable sets (``_`` read as ``.``).

    >>> variable_setting("KPRIO_KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL")
    'sasl.oauthbearer.token.endpoint.url'
    """
    return variable.removeprefix(ENV_KAFKA_PREFIX).lower().replace("_", ".")
