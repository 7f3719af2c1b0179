"""The ``kafka`` section: how to reach the cluster, its client settings and secrets, the isolation level."""

from __future__ import annotations

from enum import StrEnum
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, SerializationInfo, field_serializer, field_validator

from kprio_core.config.base import Section
from kprio_core.config.environment import JAVA_ONLY_SETTINGS, WITH_SECRETS, is_secret_setting, setting_variable


def bootstrap_problem(servers: str) -> str | None:
    """What is wrong with a ``bootstrap.servers`` list, or None.

    >>> bootstrap_problem("b-1:9092,b-2:9093"), bootstrap_problem("SASL_SSL://b-1:9093,[::1]:9092")
    (None, None)
    >>> for servers in ("localhost:abc", "b:99999", "a b:1", ""):
    ...     print(bootstrap_problem(servers))
    'localhost:abc': the port is not a number from 1 to 65535
    'b:99999': the port is not a number from 1 to 65535
    'a b:1': not host:port
    no broker named: write host:port[,host:port...]
    """
    entries = [entry.strip() for entry in servers.split(",")]
    if not any(entries):
        return "no broker named: write host:port[,host:port...]"
    for entry in entries:
        address = entry.split("://", 1)[-1]
        parts = urlsplit(f"//{address}")
        try:
            port = parts.port
        except ValueError:
            port = -1
        if not parts.hostname or any(c.isspace() for c in address) or "/" in address:
            return f"{entry!r}: not host:port"
        if port is not None and not 0 < port < 65536:
            return f"{entry!r}: the port is not a number from 1 to 65535"
    return None


class IsolationLevel(StrEnum):
    """Which records of transactional producers kprio reads (Kafka's ``isolation.level``).

    ``read_committed`` (the default): records of committed transactions and plain records only;
    a reader stops at the partition's last stable offset (LSO) while a transaction is open there,
    so lag and plans end at the LSO. ``read_uncommitted``: aborted records too, read up to the
    high watermark (the offsets of transaction markers are still skipped).
    """

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
    timeout_s: float = Field(10.0, gt=0, description="Timeout of every admin and client call.")
    isolation_level: IsolationLevel = Field(
        IsolationLevel.READ_COMMITTED,
        description="read_committed: drain committed transactions and plain records, plans end at the last stable "
        "offset; read_uncommitted: aborted transactions are drained too, plans end at the high watermark.",
    )

    @field_validator("client")
    @classmethod
    def _no_secrets_in_file(cls, value: dict[str, object]) -> dict[str, object]:
        for name in value:
            if name.lower() == "isolation.level":
                raise ValueError("set the isolation level as kafka.isolation_level, not kafka.client: it decides "
                                 "where lag and plans end as well as what readers see")
            if is_secret_setting(name):
                raise ValueError(
                    f"'{name}' is a secret: remove it from the file and set it in the environment as "
                    f"{setting_variable(name)}"
                )
            if name.lower() in JAVA_ONLY_SETTINGS:
                raise ValueError(
                    f"'{name}' is a setting of Kafka's Java client only, which kprio's librdkafka clients would not "
                    f"see: set {JAVA_ONLY_SETTINGS[name.lower()]}; kprio derives the Java client's settings from them"
                )
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
        """``host:port`` entries, comma separated, each with a port Kafka can listen on (checked at load: librdkafka
        would only time out on them)."""
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
        """The librdkafka settings of every kprio client, security and secrets included (never log this).

        The one source of every client's connection and security settings: the admin, consumer and
        producer clients (:func:`kprio_core.kafka.client.client_config`), the python reader's consumers,
        and Kafka's Java client, whose settings are translated from these
        (:func:`kprio_core.kafka.java_client.java_client_config`).
        """
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
