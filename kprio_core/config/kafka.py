"""The ``kafka`` section: how to reach the cluster, its client settings and secrets, the isolation level."""

from __future__ import annotations

from enum import StrEnum
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, SerializationInfo, field_serializer, field_validator

from kprio_core.config.base import Section, SettingError, a_url
from kprio_core.config.environment import JAVA_ONLY_SETTINGS, WITH_SECRETS, is_secret_setting, setting_variable


def bootstrap_problem(servers: str) -> str | None:
    """What is wrong with a ``bootstrap.servers`` list, or None.

    >>> bootstrap_problem("b-1:9092,b-2:9093"), bootstrap_problem("SASL_SSL://b-1:9093,[::1]:9092")
    (None, None)
    >>> for servers in ("localhost:abc", "b:99999", "a b:1", "", "nohost", "http://b:1"):
    ...     print(bootstrap_problem(servers))
    'localhost:abc': the port is not a number from 1 to 65535
    'b:99999': the port is not a number from 1 to 65535
    'a b:1': not host:port
    no broker named: write host:port[,host:port...]
    'nohost': no port: write host:port (Kafka's Java client, Spark's reader, takes no address without one)
    'http://b:1': http is no Kafka security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)
    """
    entries = [entry.strip() for entry in servers.split(",")]
    if not any(entries):
        return "no broker named: write host:port[,host:port...]"
    for entry in entries:
        protocol, _, address = entry.rpartition("://")
        if protocol and protocol.upper() not in SECURITY_PROTOCOLS:
            return f"{entry!r}: {protocol} is no Kafka security protocol ({', '.join(SECURITY_PROTOCOLS)})"
        parts = urlsplit(f"//{address}")
        try:
            port = parts.port
        except ValueError:
            port = -1
        if not parts.hostname or any(c.isspace() for c in address) or "/" in address:
            return f"{entry!r}: not host:port"
        if port is not None and not 0 < port < 65536:
            return f"{entry!r}: the port is not a number from 1 to 65535"
        if port is None:
            return f"{entry!r}: no port: write host:port (Kafka's Java client, Spark's reader, takes no address " \
                   "without one)"
    return None


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
"""librdkafka's ``security.protocol`` values (either case)."""

SASL_MECHANISMS = ("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
"""librdkafka's ``sasl.mechanism`` values."""

KPRIO_OWNED = {
    "bootstrap.servers": "set kafka.bootstrap_servers (or KPRIO_BOOTSTRAP_SERVERS)",
    "metadata.broker.list": "set kafka.bootstrap_servers (or KPRIO_BOOTSTRAP_SERVERS)",
}
"""Client settings kprio sets itself: one in ``kafka.client`` would replace kprio's (and the errors' address)."""


def client_problem(name: str, value: object) -> str | None:
    """What is wrong with one ``kafka.client`` setting, or None: librdkafka says it only when a client is built, or
    misleadingly (an unknown SASL mechanism reads "sasl.username and sasl.password must be set").

    >>> client_problem("sasl.mechanism", "SCRAM-SHA-999")
    "'SCRAM-SHA-999' is no SASL mechanism librdkafka has: GSSAPI, PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER"
    >>> client_problem("security.protocol", "ssl") is None, client_problem("client.id", "x") is None
    (True, True)
    """
    key = name.lower()
    if not key.strip(" ."):
        return "names no setting (KPRIO_KAFKA_ with nothing after it?)"
    if key != name and key in ("security.protocol", "sasl.mechanism", "sasl.mechanisms", "bootstrap.servers"):
        return f"librdkafka's setting names are lower case: write {key}"
    if key in KPRIO_OWNED:
        return f"kprio sets {key} itself: {KPRIO_OWNED[key]}"
    if key == "security.protocol" and str(value).upper() not in SECURITY_PROTOCOLS:
        return f"{str(value)!r} is no security protocol librdkafka has: {', '.join(SECURITY_PROTOCOLS)}"
    if key in ("sasl.mechanism", "sasl.mechanisms") and str(value).upper() not in SASL_MECHANISMS:
        return f"{str(value)!r} is no SASL mechanism librdkafka has: {', '.join(SASL_MECHANISMS)}"
    return None


class IsolationLevel(StrEnum):
    """Which records of transactional producers kprio reads (Kafka's ``isolation.level``); lag and plans end at
    the last stable offset (``read_committed``) or the high watermark (transaction markers always skipped)."""

    READ_COMMITTED = "read_committed"
    READ_UNCOMMITTED = "read_uncommitted"


class KafkaSettings(Section):
    """How to reach the cluster."""

    bootstrap_servers: str = Field("127.0.0.1:9092", description="Kafka bootstrap.servers.")
    client: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="Extra Kafka client settings passed through (security.protocol, sasl.mechanism, ...). "
        "Secrets (kprio_core.config.SECRET_SETTINGS) are not allowed here: set them as KPRIO_KAFKA_<SETTING> in "
        "the environment.",
    )
    secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="Secret client settings (kprio_core.config.SECRET_SETTINGS), filled only from "
        "KPRIO_KAFKA_<SETTING> environment variables.",
    )
    timeout_s: float = Field(10.0, gt=0, le=3600, description="Timeout of every admin and client call (at most an "
                             "hour).")
    isolation_level: IsolationLevel = Field(
        IsolationLevel.READ_COMMITTED,
        description="read_committed: drain committed transactions and plain records, plans end at the last stable "
        "offset; read_uncommitted: aborted transactions are drained too, plans end at the high watermark.",
    )

    @field_validator("client")
    @classmethod
    def _no_secrets_in_file(cls, value: dict[str, object]) -> dict[str, object]:
        for name, setting in value.items():
            why = client_problem(name, setting)
            if why:
                raise SettingError(why, key=name)
            if isinstance(setting, str) and "://" in setting:  # sasl.oauthbearer.token.endpoint.url, ...
                try:
                    a_url(setting, secrets="a secret goes in the environment, as the KPRIO_KAFKA_* variable of its "
                          "own setting (sasl.oauthbearer.client.secret: KPRIO_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET)")
                except ValueError as err:
                    raise SettingError(str(err), key=name) from None
            if name.lower() == "isolation.level":
                raise SettingError("set the isolation level as kafka.isolation_level, not kafka.client: it decides "
                                   "where lag and plans end as well as what readers see", key=name)
            if is_secret_setting(name):
                raise SettingError(
                    "is a secret: remove it from the file and set it in the environment as "
                    f"{setting_variable(name)}", key=name
                )
            if name.lower() in JAVA_ONLY_SETTINGS:
                raise SettingError(
                    "is a setting of Kafka's Java client only, which kprio's librdkafka clients would not "
                    f"see: set {JAVA_ONLY_SETTINGS[name.lower()]}; kprio derives the Java client's settings from them",
                    key=name)
        return value

    @field_validator("secrets")
    @classmethod
    def _only_listed_secrets(cls, value: dict[str, SecretStr]) -> dict[str, SecretStr]:
        unknown = sorted(name for name in value if not is_secret_setting(name))
        if unknown:
            raise ValueError(f"{unknown} are not secret settings: put them in kafka.client")
        return value

    @field_validator("bootstrap_servers")
    @classmethod
    def _host_port_list(cls, value: str) -> str:
        """Checked at load (:func:`bootstrap_problem`): librdkafka would only time out on a bad list."""
        why = bootstrap_problem(value)
        if why:
            raise ValueError(why)
        return value

    @field_serializer("secrets", when_used="json")
    def _secrets_masked_unless_asked(self, value: dict[str, SecretStr], info: SerializationInfo) -> dict[str, str]:
        """JSON holds a secret's value only under the context :data:`WITH_SECRETS`, else ``**********``."""
        if (info.context or {}).get(WITH_SECRETS):
            return {name: secret.get_secret_value() for name, secret in value.items()}
        return {name: str(secret) for name, secret in value.items()}

    def client_config(self) -> dict[str, str | int | float | bool]:
        """The librdkafka settings of every kprio client, secrets included (never log this): the one source of all
        clients' connection and security, the Java client's translated from it
        (:func:`kprio_core.kafka.java_client.java_client_config`)."""
        conf: dict[str, str | int | float | bool] = {"bootstrap.servers": self.bootstrap_servers}
        conf.update(self.client)
        conf.update({k: v.get_secret_value() for k, v in self.secrets.items()})
        return conf

    def consumer_config(self) -> dict[str, str | int | float | bool]:
        """:meth:`client_config` plus what every kprio reader needs: the isolation level."""
        return {**self.client_config(), "isolation.level": self.isolation_level.value}

    def redacted(self) -> dict[str, object]:
        """The client settings with every secret replaced by '***' (safe for logs and metadata)."""
        conf: dict[str, object] = {"bootstrap.servers": self.bootstrap_servers, **self.client}
        conf.update({k: "***" for k in self.secrets})
        return conf
