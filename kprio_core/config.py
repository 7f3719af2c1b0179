"""kprio's configuration: one YAML file (``kprio.yaml``), validated with pydantic.

Where it comes from, first match wins: ``--config PATH``, ``$KPRIO_CONFIG``, ``./kprio.yaml``,
else the built-in defaults (one demo topic on the embedded broker). Environment overrides:

- ``KPRIO_BOOTSTRAP_SERVERS`` replaces ``kafka.bootstrap_servers``; ``KPRIO_KAFKA_TIMEOUT_S``
  replaces ``kafka.timeout_s``;
- ``KPRIO_KAFKA_<SETTING>`` sets any Kafka client setting, ``_`` read as ``.``
  (``KPRIO_KAFKA_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL`` -> ``sasl.oauthbearer.token.endpoint.url``).
  The settings of :data:`SECRET_SETTINGS` go to ``kafka.secrets`` and are accepted **only** from
  the environment: a secret in the file is an error naming the variable to use. They are held as
  ``SecretStr`` so no repr, log line, error or Dagster metadata ever shows them. Every other
  setting goes to ``kafka.client`` and may be written in the file as well.
- ``KPRIO_LEDGER_PASSWORD`` is the password of a PostgreSQL ledger: ``ledger.url`` names the
  user, never the password (one in the URL is an error naming the variable), so neither
  ``kprio.yaml`` nor the ledger resource's config shown by Dagster holds it; the ledger's engine
  adds it when it connects (:func:`kprio_core.ledger.engine.make_engine`).

>>> cfg = KprioConfig.model_validate({"topics": [{"name": "orders", "priorities": 3}]})
>>> t = cfg.topic("orders")
>>> t.priority_topic(2), t.priority_group(2)
('orders-2', 'kprio-orders-2')
>>> cfg.planner.record_budget, cfg.planner.mode, cfg.planner.mode == "lag-aware"
(1000000, <PlanMode.LAG_AWARE: 'lag-aware'>, True)
"""

from __future__ import annotations

import os
import posixpath
import re
import stat
import string
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    SerializationInfo,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
    model_validator,
)

from kprio_core.errors import ConfigError, HandlerError, os_reason
from kprio_core.lanes import Ordering
from kprio_core.model.drain_plan import PlanMode
from kprio_core.model.priority import Priority
from kprio_core.quota import Distribution

if TYPE_CHECKING:
    from kprio_core.model.registry import RegistryEndpoint

ENV_CONFIG_PATH = "KPRIO_CONFIG"
ENV_BOOTSTRAP = "KPRIO_BOOTSTRAP_SERVERS"
ENV_KAFKA_PREFIX = "KPRIO_KAFKA_"
ENV_KAFKA_TIMEOUT = "KPRIO_KAFKA_TIMEOUT_S"
ENV_LEDGER_PASSWORD = "KPRIO_LEDGER_PASSWORD"
ENV_REGISTRY_PASSWORD = "KPRIO_SCHEMA_REGISTRY_PASSWORD"
ENV_REGISTRY_KEY_PASSWORD = "KPRIO_SCHEMA_REGISTRY_SSL_KEY_PASSWORD"
"""Sets ``kafka.timeout_s`` (kprio's own setting, not a librdkafka one)."""
DEFAULT_CONFIG_FILE = "kprio.yaml"
WITH_SECRETS = "kprio.with_secrets"
"""A serialization context key: ``model_dump_json(context={WITH_SECRETS: True})`` writes the Kafka secrets in clear
(else masked, as pydantic masks a ``SecretStr``). Only the python reader's settings option is written so
(:meth:`spark_jobs.range_reader.ReadSettings.to_option`): its executors need them, and Spark shows no option of a
Python data source in its plans or event log."""

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
"""librdkafka settings that carry a credential: those its CONFIGURATION (``rdkafka_conf.c``) marks
``_RK_SENSITIVE``, less the ones that are no credential (``sasl.username`` is an identity;
``ssl.key.location`` and ``sasl.oauthbearer.assertion.private.key.file`` are paths, the file is
the secret; ``ssl.ca.pem`` is a public certificate; ``ssl_key`` is set only through the C API),
plus ``sasl.oauthbearer.client.credentials.client.secret``, librdkafka's alias of the client
secret (and the Java client's name for it)."""

SECRET_SETTINGS = LIBRDKAFKA_SECRETS
"""Every secret Kafka client setting kprio takes: only from ``KPRIO_KAFKA_<SETTING>``, never in the file;
the Dagster Kafka resource carries each as a ``dg.EnvVar`` of that variable."""

JAVA_SECRETS = ("sasl.jaas.config", "ssl.keystore.key", "ssl.truststore.password", "ssl.keystore.certificate.chain")
"""Settings of Kafka's Java client that carry a credential, which kprio derives for Spark's native reader
(:func:`kprio_core.kafka.java_client.java_client_config`) and never takes: Spark redacts them with the
secrets above (:data:`spark_jobs.session.DEFAULT_CONF`)."""

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
"""Settings only Kafka's Java client understands, refused wherever they come from: kprio's librdkafka clients
(the admin client, the python reader, commits, the Airflow trigger, the demo) would not see them. Each names
the librdkafka setting to use instead; the Java client's own is derived from it."""

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
    """Why the security settings in ``settings`` (librdkafka's) cannot reach Kafka's Java client, one line
    per setting, naming it; empty when kprio translates them all.

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


MAX_PRIORITIES = 16
"""Most priority levels of a logical topic."""


class _Model(BaseModel):
    # No infinite or NaN number: a timeout or a rate of `.inf` is a slip of the pen, never a setting.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


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


class KafkaSettings(_Model):
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


_TEMPLATE_FIELDS = {"topic_template": ("topic", "priority"), "group_template": ("group", "topic", "priority")}
"""Fields each template may use (what priority_topic / priority_group pass to str.format)."""


class ValueFormat(StrEnum):
    """How a topic's record values are decoded into columns.

    ``json``: JSON objects, the fields of ``schema``; ``avro``, ``protobuf`` and ``json_schema``: Avro,
    Protobuf, or JSON checked against a JSON Schema, in the schema registry's wire format (magic byte 0, 4-byte
    schema id), columns from the subject's latest schema; ``raw``: not decoded (the ``value`` column only).
    """

    JSON = "json"
    AVRO = "avro"
    PROTOBUF = "protobuf"
    JSON_SCHEMA = "json_schema"
    RAW = "raw"

    @property
    def registry_type(self) -> str | None:
        """The schema registry's name of the format (``schemaType``), None for formats without a registry.

        >>> ValueFormat.AVRO.registry_type, ValueFormat.JSON_SCHEMA.registry_type, ValueFormat.JSON.registry_type
        ('AVRO', 'JSON', None)
        """
        return {ValueFormat.AVRO: "AVRO", ValueFormat.PROTOBUF: "PROTOBUF", ValueFormat.JSON_SCHEMA: "JSON"}.get(self)


class TopicSettings(_Model):
    """One logical topic: its priority topics, groups and record schema."""

    name: str = Field(min_length=1, description="Logical topic name, e.g. 'orders'.")
    priorities: int = Field(3, ge=1, le=MAX_PRIORITIES, description="Number of priority levels (0 = least urgent).")
    partitions: int | None = Field(
        None, ge=1, description="Expected partitions per priority topic; checked when set, used to create topics."
    )
    group: str | None = Field(None, description="Consumer group base name; default 'kprio-<topic>'.")
    topic_template: str = Field("{topic}-{priority}", description="Name of a priority topic.")
    group_template: str = Field("{group}-{priority}", description="Consumer group of a priority topic.")
    schema_: dict[str, Literal["string", "long", "double", "boolean", "timestamp"]] = Field(
        default_factory=dict,
        alias="schema",
        description="Fields the default handler decodes from the JSON value, with their types.",
    )
    required_fields: tuple[str, ...] = Field((), description="Decoded fields that must be non-null.")
    value_format: ValueFormat = Field(
        ValueFormat.JSON, description="How values are decoded: json (the fields of schema), avro, protobuf or "
        "json_schema (the schema registry's wire format, columns from the registry: needs the schema_registry "
        "section) or raw (not decoded).")
    value_subject: str = Field(
        "{topic}-value", min_length=1, description="avro, protobuf, json_schema: the registry subject of a priority topic's values "
        "({topic} is the priority topic's name: Confluent's TopicNameStrategy); its latest version is the "
        "reader's schema of a batch.")
    replication_factor: int | None = Field(
        None, ge=1, description="Replicas of each priority topic `kprio topics create` makes; default: the broker's."
    )
    topic_config: dict[str, str] = Field(
        default_factory=dict,
        description="Topic settings `kprio topics create` sets (retention.ms, cleanup.policy, ...).",
    )

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False)

    @field_validator("topic_template", "group_template")
    @classmethod
    def _template_has_fields(cls, value: str, info: ValidationInfo) -> str:
        if "{priority}" not in value:
            raise ValueError(f"template {value!r} must contain '{{priority}}'")
        # Format once now so a typo ({prio}) fails at load, not at the first priority_topic() call.
        names = _TEMPLATE_FIELDS[info.field_name]
        try:
            used = [field for _, field, _, _ in string.Formatter().parse(value) if field is not None]
            unknown = [f for f in used if re.split(r"[.\[]", f)[0] not in names]
            if not unknown:
                value.format(**{name: 0 if name == "priority" else name for name in names})
        except (ValueError, LookupError, AttributeError, TypeError) as err:
            raise ValueError(f"template {value!r} is not a valid format string: {err}") from None
        if unknown:
            raise ValueError(f"template {value!r} uses unknown field {{{unknown[0]}}} (allowed: {', '.join(names)})")
        return value

    @model_validator(mode="after")
    def _legal_topic_names(self) -> TopicSettings:
        """Every priority topic's name is one Kafka can hold, so a typo fails at load, not on the broker."""
        for priority in range(self.priorities):
            name = self.priority_topic(priority)
            why = illegal_topic_name(name)
            if why:
                raise ValueError(f"priority topic {name!r} (topic_template {self.topic_template!r}) is not a legal "
                                 f"Kafka topic name: {why}")
        return self

    @model_validator(mode="after")
    def _schema_for_json_only(self) -> TopicSettings:
        if self.schema_ and self.value_format is not ValueFormat.JSON:
            why = "the registry gives the columns" if self.value_format.registry_type else "raw is not decoded"
            raise ValueError(f"schema lists JSON fields, but value_format is {self.value_format.value}: {why}; "
                             "remove schema")
        try:
            self.value_subject.format(topic="t")
        except (ValueError, LookupError, AttributeError, TypeError) as err:
            raise ValueError(f"value_subject {self.value_subject!r} is not a valid format string with "
                             f"{{topic}}: {err}") from None
        return self

    @model_validator(mode="after")
    def _required_fields_in_schema(self) -> TopicSettings:
        if self.value_format is not ValueFormat.JSON:
            return self  # avro, json_schema: the registry's schema names the columns, checked when a batch reads it
        missing = [f for f in self.required_fields if f not in self.schema_]
        if missing:
            raise ValueError(f"required_fields {missing} are not in the schema {sorted(self.schema_)}")
        return self

    @property
    def group_base(self) -> str:
        return self.group or f"kprio-{self.name}"

    def priority_topic(self, priority: Priority) -> str:
        self._check(priority)
        return self.topic_template.format(topic=self.name, priority=priority)

    def priority_group(self, priority: Priority) -> str:
        self._check(priority)
        return self.group_template.format(group=self.group_base, topic=self.name, priority=priority)

    def priority_topics(self) -> dict[Priority, str]:
        return {p: self.priority_topic(p) for p in range(self.priorities)}

    def priority_of_topic(self, topic: str) -> Priority:
        for p, name in self.priority_topics().items():
            if name == topic:
                return p
        raise KeyError(f"{topic!r} is not a priority topic of {self.name!r}")

    def _check(self, priority: Priority) -> None:
        if not 0 <= priority < self.priorities:
            raise ValueError(f"topic {self.name!r} has priorities 0..{self.priorities - 1}, got {priority}")


KAFKA_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
"""The characters Kafka allows in a topic name (``org.apache.kafka.common.internals.Topic``)."""
MAX_TOPIC_NAME = 249


def illegal_topic_name(name: str) -> str | None:
    """Why Kafka would refuse ``name`` as a topic name, or None.

    >>> illegal_topic_name("orders-2") is None, illegal_topic_name("or ders/x-2"), illegal_topic_name("..")
    (True, "only letters, digits, '.', '_' and '-' are allowed", "'.' and '..' are not allowed")
    """
    if name in (".", ".."):
        return "'.' and '..' are not allowed"
    if len(name) > MAX_TOPIC_NAME:
        return f"longer than {MAX_TOPIC_NAME} characters"
    if not KAFKA_TOPIC_NAME.fullmatch(name):
        return "only letters, digits, '.', '_' and '-' are allowed"
    return None


class RateQuota(_Model):
    """A rate limit for one priority; either or both bounds."""

    records_per_s: float | None = Field(None, gt=0, description="Most records per second drained for this priority.")
    bytes_per_s: float | None = Field(None, gt=0, description="Most bytes per second drained for this priority.")


class PlannerSettings(_Model):
    """Budgets and the burst rule."""

    record_budget: int = Field(1_000_000, ge=1, description="Most records one batch may plan.")
    byte_budget: int | None = Field(256 * 1024 * 1024, ge=1, description="Most estimated bytes one batch may plan.")
    mode: PlanMode = Field(PlanMode.LAG_AWARE, description="Burst mode.")
    distribution: Distribution = Field(Distribution.EXP, description="Split of the budget into base quotas.")
    min_share: float = Field(
        0.05, ge=0, le=1, description="Guaranteed fraction of the budget for every priority with backlog."
    )
    window_size: int = Field(6, ge=1, description="Poll-history window (batches) of the flipkart burst rule.")
    maxed_out_threshold: int = Field(4, ge=1, description="Maxed-out batches in the window that allow a burst.")
    max_in_flight: int = Field(
        1, ge=1, description="Batches in flight at once per priority of a logical topic (a batch takes a slot of "
        "every priority it drains), so an urgent batch never waits for a bulk one."
    )
    target_batch_s: float | None = Field(
        2.0, gt=0, description="Size batches to drain in about this many seconds, from the throughput the ledger "
        "measured (never above record_budget; a backlog's tail shorter than a batch's fixed cost joins, up to twice "
        "this); null: record_budget alone."
    )

    @model_validator(mode="after")
    def _threshold_fits_window(self) -> PlannerSettings:
        if self.maxed_out_threshold > self.window_size:
            raise ValueError(
                f"maxed_out_threshold ({self.maxed_out_threshold}) cannot exceed window_size ({self.window_size})"
            )
        return self


class QualitySettings(_Model):
    """Which records are invalid, where they go, and how many a batch may have."""

    invalid: Literal["quarantine", "block"] = Field(
        "quarantine", description="quarantine: invalid records go to the dead-letter output and the batch commits "
        "(up to max_invalid_ratio); block: any invalid record fails its partition's range."
    )
    max_invalid_ratio: float = Field(
        0.05, ge=0, le=1, description="Most invalid records per range, as a fraction, before the range fails and "
        "holds its partition (a schema change, a broken producer)."
    )
    ratio_floor_records: int = Field(
        100, ge=1, description="Ranges shorter than this are measured as if they had this many records, so one bad "
        "record in a short range is quarantined, not blocking."
    )
    tombstones: Literal["record", "invalid"] = Field(
        "record", description="A null value: a record (fields null, required fields not enforced) or invalid."
    )
    null_keys: Literal["record", "invalid"] = Field("record", description="A null key: a record, or invalid.")


class RecoverySettings(_Model):
    """How crashed and failed batches are detected and retried without an operator."""

    lease_s: float = Field(
        30.0, gt=0, description="A batch's run renews its lease this often x3; a lease not renewed for this long "
        "means the run died and its batch is retried."
    )
    max_attempts: int = Field(
        3, ge=1, description="Attempts of a batch (the first included) before its partitions wait for an operator."
    )
    backoff_s: float = Field(5.0, ge=0, description="Wait before the first retry; doubles per attempt.")
    backoff_max_s: float = Field(60.0, ge=0, description="Longest wait between two attempts.")


class SplitSettings(_Model):
    """Bounds of one Spark input split."""

    max_records: int = Field(100_000, ge=1, description="Most records in one Spark input split (like maxRecordsPerPartition).")
    max_bytes: int = Field(64 * 1024 * 1024, ge=1, description="Most estimated bytes in one Spark input split.")


class RateSettings(_Model):
    """Rate quotas per priority, measured over sampled windows (Kafka's SampledStat)."""

    samples: int = Field(11, ge=2, description="Number of samples (Kafka's quota.window.num).")
    window_s: float = Field(1.0, gt=0, description="Length of one sample (quota.window.size.seconds).")
    quotas: dict[Priority, RateQuota] = Field(default_factory=dict, description="Per priority; absent = unlimited.")


class OrderingSettings(_Model):
    """How records of a partition are handed to the handler."""

    mode: Ordering = Field(Ordering.PARTITION, description="partition: one lane; key: lanes by key hash.")
    lanes: int = Field(1, ge=1, le=1024, description="Lanes per partition in key mode.")

    @model_validator(mode="after")
    def _lanes_match_mode(self) -> OrderingSettings:
        if self.mode is Ordering.PARTITION and self.lanes != 1:
            raise ValueError("ordering.lanes > 1 needs ordering.mode 'key'")
        return self


class OnOffsetOutOfRange(StrEnum):
    """What kprio does when a committed offset no longer points into the partition's log (see ``kprio_core.log_changes``).

    ``hold`` (the default) holds the partition until a person runs ``kprio reset``; ``earliest`` /
    ``latest`` reset the group to the log start / end by themselves (the decision is recorded).
    """

    HOLD = "hold"
    EARLIEST = "earliest"
    LATEST = "latest"


class OutputFormat(StrEnum):
    """How a batch's checked rows land under the output and dead-letter roots (see ``spark_jobs.tables``).

    ``parquet`` (the default): Parquet files moved into place one by one, named by their ranges;
    ``delta``: one Delta Lake table per logical topic and root, one commit per batch and table;
    ``iceberg``: one Apache Iceberg table per logical topic and root in a catalog (``drain.iceberg``),
    one snapshot per batch and table.
    """

    PARQUET = "parquet"
    DELTA = "delta"
    ICEBERG = "iceberg"


class TimePartition(StrEnum):
    """How an Iceberg table's files are split by the record timestamp, beside ``priority``: readers prune by it."""

    HOUR = "hour"
    DAY = "day"
    NONE = "none"


ICEBERG_SECRET_WORDS = ("password", "secret", "token", "credential", "session", "private", "key-id", "access-key")
"""Catalog properties whose name holds one of these carry a credential: only from the environment, as
pyiceberg's own ``PYICEBERG_CATALOG__<NAME>__<PROPERTY>`` variables (``.`` and ``-`` written ``_``)."""


def iceberg_secret_property(name: str) -> bool:
    """Whether a pyiceberg catalog property carries a credential (kprio never takes it from the file).

    >>> [iceberg_secret_property(k) for k in ("s3.secret-access-key", "credential", "token", "uri", "s3.endpoint")]
    [True, True, True, False, False]
    """
    return any(word in name.lower() for word in ICEBERG_SECRET_WORDS)


class IcebergSettings(_Model):
    """The Iceberg catalog and tables of ``drain.format: iceberg`` (spark_jobs/iceberg_table.py)."""

    catalog_name: str = Field("kprio", min_length=1, description="Name of the pyiceberg catalog; its secrets come from "
                              "PYICEBERG_CATALOG__<NAME>__<PROPERTY> in the environment (pyiceberg's own variables).")
    catalog: dict[str, str] = Field(
        default_factory=lambda: {"type": "sql", "uri": "sqlite:///./kprio-data/iceberg-catalog.db"},
        description="pyiceberg catalog properties (type: sql, rest, glue, ...; uri, warehouse, s3.*); the default is a "
        "SQL catalog on SQLite in the kprio data directory. No secret here: a password in the uri or a property "
        "naming a password, secret, token or credential is refused, naming the variable to use.")
    namespace: str = Field("kprio", min_length=1, description="Namespace of the tables: <namespace>.<logical topic> "
                           "(the output) and <namespace>.<logical topic>_dead_letters.")
    time_partition: TimePartition = Field(
        TimePartition.HOUR, description="Partition the tables by priority and by the hour (or day) of the record "
        "timestamp, so a reader prunes; 'none': by priority only.")

    @field_validator("catalog")
    @classmethod
    def _no_secret_in_the_file(cls, value: dict[str, str]) -> dict[str, str]:
        """A credential in the file would sit in kprio.yaml and in the resource config Dagster shows.

        >>> IcebergSettings(catalog={"type": "sql", "uri": "postgresql+psycopg://kprio:hunter2@db/cat"})
        Traceback (most recent call last):
        ...
        pydantic_core._pydantic_core.ValidationError: 1 validation error for IcebergSettings
        catalog
          Value error, holds a password in uri: remove it and set PYICEBERG_CATALOG__<NAME>__URI in the environment ...
        """
        for name, text in value.items():
            if iceberg_secret_property(name):
                raise ValueError(f"{name} is a secret: set it in the environment as PYICEBERG_CATALOG__<NAME>__"
                                 f"{name.upper().replace('.', '_').replace('-', '_')}, never in the file")
            if "://" in text and urlsplit(text).password:
                raise ValueError(f"holds a password in {name}: remove it and set PYICEBERG_CATALOG__<NAME>__"
                                 f"{name.upper().replace('.', '_').replace('-', '_')} in the environment (the whole "
                                 "value, password included)")
        return value


class MaintenanceSettings(_Model):
    """Scheduled upkeep of Delta and Iceberg tables (``kprio tables maintain``, the Dagster schedule, the Airflow DAG)."""

    schedule: str = Field("17 * * * *", description="Cron schedule of the maintenance job (Dagster) and DAG (Airflow).")
    target_file_mb: int = Field(128, ge=1, description="Compaction merges a partition's small files into files of "
                                "about this size (MiB of Parquet).")
    min_files: int = Field(4, ge=2, description="Compact a run of adjacent files only when it has at least this many.")
    retention_s: float = Field(
        7 * 24 * 3600.0, ge=0, description="Files and snapshots a reader of an older version may still need are kept "
        "this long: Delta's vacuum and log cleanup, Iceberg's snapshot expiry (the newest snapshots always stay).")
    keep_snapshots: int = Field(10, ge=1, description="Iceberg: snapshots always kept, however old.")


class DrainSettings(_Model):
    """What the drain does with records."""

    handler: str = Field("spark_jobs.handlers:decode_json", description="module:function applied per lane.")
    allow_data_loss: bool = Field(False, description="Record gaps lost to retention instead of failing.")
    on_offset_out_of_range: OnOffsetOutOfRange = Field(
        OnOffsetOutOfRange.HOLD, description="A committed offset beyond the log's end, or a recreated topic: 'hold' "
        "the partition for kprio reset, or reset it to the log's 'earliest' / 'latest' offset by itself (recorded)."
    )
    format: OutputFormat = Field(
        OutputFormat.PARQUET, description="How batches land: 'parquet' files moved into place one by one, or one "
        "'delta' Lake table per logical topic and root with one atomic commit per batch, or one 'iceberg' table per "
        "logical topic and root with one snapshot per batch (docs/operations.md, Output formats)."
    )
    iceberg: IcebergSettings = Field(default_factory=IcebergSettings, description="drain.format iceberg: the catalog "
                                     "and the tables' partitioning.")
    maintenance: MaintenanceSettings = Field(default_factory=MaintenanceSettings, description="Compaction and "
                                             "retention of Delta and Iceberg tables (docs/operations.md, Maintenance).")
    output_path: str = Field("./kprio-data/output", description="Root of the output (local, s3://, gs://, hdfs://); the output, dead-letter and "
                             "replay roots may not be one directory or lie inside each other.")
    dead_letter_path: str = Field(
        "./kprio-data/dead-letters", description="Root of the dead-letter output: invalid records with their raw "
        "bytes and error, same layout as the output."
    )
    replay_path: str = Field("./kprio-data/replay", description="Root of time-window replay output.")
    replay_start: str = Field(
        "2026-01-01",
        description="First hour of the hourly replay partitions (UTC, 'YYYY-MM-DD' or 'YYYY-MM-DD-HH:00'); fixed, so "
        "the definitions do not change from day to day.",
    )

    @field_validator("output_path", "dead_letter_path", "replay_path")
    @classmethod
    def _a_path(cls, value: str) -> str:
        return a_path(value)

    @field_validator("handler")
    @classmethod
    def _handler_loads(cls, value: str) -> str:
        """The handler imports and takes ``(frames, context)``: a wrong name fails at load, not in a Spark task."""
        from kprio_core.handler_spec import resolve_handler

        try:
            resolve_handler(value)
        except HandlerError as err:
            raise ValueError(err.what) from None
        return value

    @field_validator("replay_start")
    @classmethod
    def _replay_start_parses(cls, value: str) -> str:
        parse_replay_start(value)
        return value

    @model_validator(mode="after")
    def _roots_apart(self) -> DrainSettings:
        """Output, dead letters and replays each have a root of their own (their staging names would collide)."""
        roots = {"drain.output_path": self.output_path, "drain.dead_letter_path": self.dead_letter_path,
                 "drain.replay_path": self.replay_path}
        names = list(roots)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                why = roots_overlap(roots[a], roots[b])
                if why:
                    raise ValueError(f"{a} ({roots[a]!r}) and {b} ({roots[b]!r}) {why}: give each its own directory")
        return self


def a_path(value: str) -> str:
    """``value`` if it can name a file or directory (not empty, no NUL byte), else ValueError.

    >>> a_path("./kprio-data/output"), a_path("s3://bucket/out")
    ('./kprio-data/output', 's3://bucket/out')
    """
    if not value.strip():
        raise ValueError("is empty: name a directory")
    if "\x00" in value:
        raise ValueError("holds a NUL byte, which no path can")
    return value


REPLAY_HOUR_FORMAT = "%Y-%m-%d-%H:%M"


def parse_replay_start(text: str) -> datetime:
    """``drain.replay_start`` as a UTC hour: 'YYYY-MM-DD' (its first hour) or 'YYYY-MM-DD-HH:00'.

    >>> parse_replay_start("2026-11-14-05:00"), parse_replay_start("2026-11-01").hour
    (datetime.datetime(2026, 11, 14, 5, 0, tzinfo=datetime.timezone.utc), 0)
    >>> parse_replay_start("yesterday")
    Traceback (most recent call last):
    ...
    ValueError: 'yesterday' is not a UTC hour: write 'YYYY-MM-DD' or 'YYYY-MM-DD-HH:00'
    """
    for fmt in (REPLAY_HOUR_FORMAT, "%Y-%m-%d"):
        try:
            hour = datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
        if hour.minute == 0:
            return hour
    raise ValueError(f"{text!r} is not a UTC hour: write 'YYYY-MM-DD' or 'YYYY-MM-DD-HH:00'")


def roots_overlap(a: str, b: str) -> str | None:
    """How two output roots overlap (the same directory, or one inside the other), or None.

    Local paths are compared absolute (relative to the working directory), URLs by scheme and path.

    >>> roots_overlap("./kprio-data/output", "kprio-data/output/")
    'are the same directory'
    >>> roots_overlap("s3://bucket/out", "s3://bucket/out/dead")
    'overlap: the second is inside the first'
    >>> roots_overlap("./kprio-data/output", "./kprio-data/output-dead") is None
    True
    >>> roots_overlap("s3://one/out", "s3://two/out") is None
    True
    """
    x, y = _root_parts(a), _root_parts(b)
    if x == y:
        return "are the same directory"
    if y[: len(x)] == x:
        return "overlap: the second is inside the first"
    if x[: len(y)] == y:
        return "overlap: the first is inside the second"
    return None


def _root_parts(root: str) -> tuple[str, ...]:
    scheme, sep, rest = root.partition("://")
    if not sep:
        return ("file", *Path(os.path.abspath(os.path.expanduser(root))).parts)
    return (scheme.lower(), *[part for part in posixpath.normpath("/" + rest).split("/") if part])


class SparkReader(StrEnum):
    """How the drain reads the plan's offset ranges (``spark.reader``)."""

    PYTHON = "python"
    """kprio's PySpark data source (confluent-kafka on the executors, :mod:`spark_jobs.source`)."""
    NATIVE = "native"
    """Spark's own ``kafka`` source (its connector jar, :mod:`spark_jobs.native`)."""


SPARK_MASTERS = tuple(re.compile(form) for form in (
    r"local", r"local\[(\d+|\*)\]", r"local\[(\d+|\*)\s*,\s*\d+\]", r"local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\]",
    r"spark://[^/\s]+", r"yarn", r"k8s://\S+",
))
"""The master URLs SparkContext accepts (its ``createTaskScheduler`` and the cluster managers it ships)."""


class SparkSettings(_Model):
    """Where Spark runs and how it reads Kafka."""

    master: str = Field("local[*]", description="spark.master URL.")
    remote: str | None = Field(None, description="Spark Connect URL (sc://host:port); wins over master.")
    reader: SparkReader = Field(SparkReader.PYTHON, description="python data source or Spark's kafka source.")
    conf: dict[str, str] = Field(default_factory=dict, description="Extra Spark settings.")
    fetch_max_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="fetch.max.bytes of the executors' consumers.")
    max_partition_fetch_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="max.partition.fetch.bytes of the executors' consumers.")
    queued_max_messages_kbytes: int = Field(16 * 1024, ge=1, description="queued.max.messages.kbytes: the consumer's prefetch bound.")
    arrow_batch_records: int = Field(10_000, ge=1, description="Records per Arrow batch a read task yields.")
    connect_port: int = Field(
        15002, ge=1, le=65535, description="Port of the Spark Connect server `kprio spark start` runs (use "
        "remote: sc://localhost:<port> to drain through it)."
    )
    connect_dir: str = Field(
        "./kprio-data/spark-connect", description="State and log directory of the Spark Connect server kprio starts."
    )

    @field_validator("connect_dir")
    @classmethod
    def _a_path(cls, value: str) -> str:
        return a_path(value)

    @field_validator("master")
    @classmethod
    def _a_master_spark_accepts(cls, value: str) -> str:
        if not any(form.fullmatch(value) for form in SPARK_MASTERS):
            raise ValueError(f"{value!r} is not a master URL Spark accepts: local, local[N], local[*], local[N,F], "
                             "local-cluster[N,C,M], spark://host:port, yarn or k8s://https://host:port "
                             "(a Spark Connect server is spark.remote: sc://host:port)")
        return value

    @field_validator("remote")
    @classmethod
    def _a_spark_connect_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parts = urlsplit(value)
        if parts.scheme != "sc" or not parts.hostname or "@" in parts.netloc:
            raise ValueError("is not a Spark Connect URL: write sc://host:port (port 15002 when left out)")
        try:
            parts.port  # noqa: B018 - a port that is no number raises here
        except ValueError:
            raise ValueError("is not a Spark Connect URL: its port is not a number (sc://host:port)") from None
        named = [p.split("=", 1)[0].strip().lower() for p in parts.path.split(";")[1:]]
        if "token" in named:
            raise ValueError("holds a token: remove ;token=... from the URL and set it in the environment as "
                             "SPARK_CONNECT_AUTHENTICATE_TOKEN")
        return value


class LedgerSettings(_Model):
    """Where the batch ledger lives."""

    url: str = Field("sqlite:///./kprio-data/ledger.db",
                     description="SQLAlchemy URL of the batch ledger, without a password: a PostgreSQL ledger's "
                                 f"password is read from {ENV_LEDGER_PASSWORD} in the environment.")

    @field_validator("url")
    @classmethod
    def _a_ledger_url(cls, value: str) -> str:
        """A SQLite or PostgreSQL URL with no password in it, in any form (``user:pass@``, ``?password=``):
        it would sit in kprio.yaml and in the resource config Dagster shows.

        >>> LedgerSettings(url="postgresql+psycopg://kprio@db/kprio").url
        'postgresql+psycopg://kprio@db/kprio'
        >>> for url in ("postgresql+psycopg://kprio:hunter2@db/kprio", "postgresql://kprio@db/kprio?password=hunter2",
        ...             "mysql://u@db/kprio", "no url"):
        ...     try:
        ...         LedgerSettings(url=url)
        ...     except ValidationError as err:
        ...         print(format_validation_error(err, "kprio.yaml"))
        url: holds a password: remove it from the URL (postgresql+psycopg://kprio@db/kprio) and set it in the
        environment as KPRIO_LEDGER_PASSWORD (kprio.yaml)
        url: holds a password: remove it from the URL (postgresql://kprio@db/kprio) and set it in the environment
        as KPRIO_LEDGER_PASSWORD (kprio.yaml)
        url: the batch ledger runs on SQLite or PostgreSQL, not mysql (mysql://u@db/kprio) (kprio.yaml)
        url: is not a SQLAlchemy URL: write sqlite:///path/to/ledger.db or postgresql+psycopg://user@host:5432/db
        (kprio.yaml)
        """
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        from kprio_core.urls import bare_url, parsed_url, url_secrets

        try:
            parsed = parsed_url(value)
        except (ArgumentError, ValueError):  # their text never echoes the URL, nor do we: it may hold a password
            raise ValueError("is not a SQLAlchemy URL: write sqlite:///path/to/ledger.db or "
                             "postgresql+psycopg://user@host:5432/db") from None
        if url_secrets(parsed):
            raise ValueError(f"holds a password: remove it from the URL ({bare_url(parsed)}) and set it in the "
                             f"environment as {ENV_LEDGER_PASSWORD}")
        backend = parsed.get_backend_name()
        if backend not in ("sqlite", "postgresql"):
            raise ValueError(f"the batch ledger runs on SQLite or PostgreSQL, not {backend} ({bare_url(parsed)})")
        try:
            parsed.get_dialect()
        except NoSuchModuleError:
            raise ValueError(f"SQLAlchemy has no driver {parsed.drivername!r}: write sqlite:///path or "
                             "postgresql+psycopg://user@host:5432/db") from None
        return value


class SchemaRegistrySettings(_Model):
    """The schema registry of the topics whose values are Avro (a Confluent-compatible API: Confluent Schema
    Registry, Karapace, Apicurio's /apis/ccompat/v7). Secrets only from the environment."""

    url: str = Field(min_length=1, description="Base URL of the Confluent-compatible API, without credentials, e.g. "
                     "http://127.0.0.1:8081/apis/ccompat/v7 (kprio registry start prints it).")
    username: str | None = Field(None, description="Basic auth user; the password is read from "
                                 f"{ENV_REGISTRY_PASSWORD} in the environment.")
    ssl_ca_location: str | None = Field(None, description="PEM file of the CA certificates that sign the "
                                        "registry's certificate (https; default: the system's).")
    ssl_certificate_location: str | None = Field(None, description="PEM file of kprio's client certificate (mTLS).")
    ssl_key_location: str | None = Field(None, description="PEM file of the client certificate's key; its password, "
                                         f"if any, from {ENV_REGISTRY_KEY_PASSWORD}.")
    timeout_s: float = Field(10.0, gt=0, le=300, description="Bound of one request to the registry.")

    @model_validator(mode="before")
    @classmethod
    def _no_secrets_in_file(cls, value: object) -> object:
        if isinstance(value, Mapping):
            for key, variable in (("password", ENV_REGISTRY_PASSWORD), ("ssl_key_password", ENV_REGISTRY_KEY_PASSWORD)):
                if key in value:
                    raise ValueError(f"'{key}' is a secret: remove it from the file and set it in the environment "
                                     f"as {variable}")
        return value

    @field_validator("url")
    @classmethod
    def _plain_url(cls, value: str) -> str:
        """An http(s) URL with no credentials in it.

        >>> SchemaRegistrySettings(url="https://sr.example:8081").url
        'https://sr.example:8081'
        >>> for url in ("https://u:pw@sr.example", "sr.example:8081"):
        ...     try:
        ...         SchemaRegistrySettings(url=url)
        ...     except ValidationError as err:
        ...         print(format_validation_error(err, "kprio.yaml"))
        url: holds credentials: remove them from the URL (https://sr.example) and set schema_registry.username and
        KPRIO_SCHEMA_REGISTRY_PASSWORD (kprio.yaml)
        url: is not an http(s) URL: write http://host:port[/path] (kprio.yaml)
        """
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("is not an http(s) URL: write http://host:port[/path]")
        if parts.username or parts.password:
            bare = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]).geturl()
            raise ValueError(f"holds credentials: remove them from the URL ({bare}) and set schema_registry.username "
                             f"and {ENV_REGISTRY_PASSWORD}")
        return value

    def endpoint(self, env: Mapping[str, str] | None = None) -> RegistryEndpoint:
        """Where and how to reach the registry, its secrets from the environment (never log its password).

        Read when a batch starts, on its driver, as Dagster reads a Kafka secret's ``dg.EnvVar`` in the run; an
        empty variable is unset, as an empty ``KPRIO_KAFKA_*`` one is.

        >>> settings = SchemaRegistrySettings(url="https://sr.example:8081", username="kprio")
        >>> settings.endpoint({ENV_REGISTRY_PASSWORD: "s3cret"}).password, settings.endpoint({ENV_REGISTRY_PASSWORD: ""})
        ('s3cret', RegistryEndpoint(https://sr.example:8081, user kprio))
        >>> settings.endpoint({ENV_REGISTRY_PASSWORD: ""}).password is None
        True
        """
        from kprio_core.model.registry import RegistryEndpoint

        env = os.environ if env is None else env
        return RegistryEndpoint(self.url, username=self.username,
                                password=(env.get(ENV_REGISTRY_PASSWORD) or None) if self.username else None,
                                ca_location=self.ssl_ca_location, certificate_location=self.ssl_certificate_location,
                                key_location=self.ssl_key_location,
                                key_password=env.get(ENV_REGISTRY_KEY_PASSWORD) or None, timeout_s=self.timeout_s)


class SensorSettings(_Model):
    """How often the sensor looks at the lag."""

    interval_s: int = Field(2, ge=1, description="Minimum seconds between sensor ticks.")
    watch_s: float | None = Field(
        0.1, gt=0, description="kprio drain: between ticks, how often to read the priority partitions' ends (one "
        "ListOffsets request) and tick at once when records arrived on a priority with a free slot; null: tick "
        "every interval_s only."
    )


class SloSettings(_Model):
    """Freshness objectives: how old a priority's oldest pending record may get (``kprio_core.freshness``)."""

    max_age_s: dict[Priority, float] = Field(
        default_factory=dict, description="Per priority, the largest age in seconds of its oldest pending record "
        "(e.g. {2: 10, 0: 3600}); a priority absent has no objective."
    )
    warn_fraction: float = Field(
        0.8, gt=0, le=1, description="Warn once the age passes this share of max_age_s (fail above max_age_s)."
    )

    @field_validator("max_age_s")
    @classmethod
    def _positive_ages(cls, value: dict[Priority, float]) -> dict[Priority, float]:
        bad = sorted(p for p, age in value.items() if not age > 0)
        if bad:
            raise ValueError(f"max_age_s must be > 0 seconds, not for priority {', '.join(map(str, bad))}")
        return value


class VerdictSettings(_Model):
    """The lag verdict (``kprio_core.verdict``): what keeping up means for a priority."""

    expected_commit_s: float = Field(
        30.0, gt=0, description="How often a priority with backlog commits when it keeps up (a tick plus a batch)."
    )
    stop_factor: float = Field(
        3.0, ge=1, description="Backlog without a commit for this many expected_commit_s is STALL or STOP."
    )
    allowed_lag: int = Field(0, ge=0, description="A backlog of up to this many records counts as caught up.")
    window_s: float = Field(
        900.0, gt=0, description="How far back the verdict looks at commits and lag snapshots."
    )


LINEAGE_SECRET_KEYS = ("auth", "api_key", "apikey", "token", "password", "secret")
"""Keys of ``lineage.transport`` that hold a secret: openlineage-python reads those from its environment."""


class LineageSettings(_Model):
    """OpenLineage events of committed batches, through openlineage-python's transports (off by default)."""

    enabled: bool = Field(False, description="Emit one OpenLineage run event per committed batch.")
    namespace: str = Field("kprio", min_length=1, description="The OpenLineage namespace of kprio's jobs.")
    transport: dict[str, Any] = Field(
        default_factory=dict, description="openlineage-python's transport settings (e.g. {type: file, "
        "log_file_path: lineage.jsonl} or {type: http, url: ...}); empty: openlineage-python's own configuration "
        "(OPENLINEAGE_CONFIG, openlineage.yml, OPENLINEAGE__TRANSPORT__* variables). No secrets here: an HTTP "
        "transport's api key comes from OPENLINEAGE__TRANSPORT__AUTH__API_KEY."
    )

    @field_validator("transport")
    @classmethod
    def _no_secrets(cls, value: dict[str, Any]) -> dict[str, Any]:
        def keys(node: Any, path: str) -> list[str]:
            if not isinstance(node, dict):
                return []
            found = []
            for k, v in node.items():
                here = f"{path}.{k}" if path else str(k)
                if str(k).lower().replace("-", "_") in LINEAGE_SECRET_KEYS:
                    found.append(here)
                found += keys(v, here)
            return found

        def passwords(node: Any, path: str) -> list[str]:
            if isinstance(node, dict):
                return [p for k, v in node.items() for p in passwords(v, f"{path}.{k}" if path else str(k))]
            return [path] if isinstance(node, str) and re.match(r"^[a-z][a-z0-9+.-]*://[^/@\s]*:[^/@\s]*@", node,
                                                                re.IGNORECASE) else []

        with_password = passwords(value, "")
        if with_password:
            raise ValueError(f"transport.{with_password[0]} holds a password in its URL: give it in the environment "
                             "(OPENLINEAGE__TRANSPORT__AUTH__API_KEY) instead")
        secret = keys(value, "")
        if secret:
            raise ValueError(f"transport.{secret[0]} holds a secret: set it in the environment as "
                             f"OPENLINEAGE__TRANSPORT__{secret[0].upper().replace('.', '__')} instead")
        return value


class KprioConfig(_Model):
    """The whole configuration."""

    kafka: KafkaSettings = KafkaSettings()
    topics: Annotated[tuple[TopicSettings, ...], Field(min_length=1)] = (TopicSettings(name="demo"),)
    planner: PlannerSettings = PlannerSettings()
    quality: QualitySettings = QualitySettings()
    recovery: RecoverySettings = RecoverySettings()
    splits: SplitSettings = SplitSettings()
    rate: RateSettings = RateSettings()
    ordering: OrderingSettings = OrderingSettings()
    drain: DrainSettings = DrainSettings()
    spark: SparkSettings = SparkSettings()
    ledger: LedgerSettings = LedgerSettings()
    sensor: SensorSettings = SensorSettings()
    slo: SloSettings = SloSettings()
    verdict: VerdictSettings = VerdictSettings()
    lineage: LineageSettings = LineageSettings()
    schema_registry: SchemaRegistrySettings | None = None

    @field_validator("topics")
    @classmethod
    def _unique_topics(cls, value: tuple[TopicSettings, ...]) -> tuple[TopicSettings, ...]:
        names = [t.name for t in value]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"logical topic names must be unique, repeated: {dupes}")
        return value

    @model_validator(mode="after")
    def _avro_topics_have_a_registry(self) -> KprioConfig:
        needs = [t for t in self.topics if t.value_format.registry_type]
        if needs and self.schema_registry is None:
            raise ValueError(f"topic {needs[0].name!r} has value_format {needs[0].value_format.value}: add a "
                             "schema_registry section with its url")
        return self

    @model_validator(mode="after")
    def _native_reader_gets_the_security_settings(self) -> KprioConfig:
        """spark.reader native reads with Kafka's Java client: every security setting must translate to it."""
        if self.spark.reader is SparkReader.NATIVE:
            problems = java_untranslatable({**self.kafka.client, **self.kafka.secrets})
            if problems:
                raise ValueError(f"spark.reader native: {problems[0]}; use spark.reader python"
                                 + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
        return self

    @model_validator(mode="after")
    def _quotas_of_existing_priorities(self) -> KprioConfig:
        top = max(t.priorities for t in self.topics)
        unknown = sorted(p for p in self.rate.quotas if not 0 <= p < top)
        if unknown:
            raise ValueError(f"rate.quotas names priorit{'ies' if len(unknown) > 1 else 'y'} "
                             f"{', '.join(map(str, unknown))}, but the topics have priorities 0..{top - 1}")
        unknown = sorted(p for p in self.slo.max_age_s if not 0 <= p < top)
        if unknown:
            raise ValueError(f"slo.max_age_s names priorit{'ies' if len(unknown) > 1 else 'y'} "
                             f"{', '.join(map(str, unknown))}, but the topics have priorities 0..{top - 1}")
        return self

    def topic(self, name: str) -> TopicSettings:
        for t in self.topics:
            if t.name == name:
                return t
        raise ConfigError(f"no logical topic named {name!r} (known: {[t.name for t in self.topics]})", where="topics")


def _key(loc: tuple) -> str:
    return ".".join(str(part) for part in loc)


def _problems(err: ValidationError) -> list[dict]:
    """pydantic's errors, one per problem: the branches of a union a value matched none of are one."""
    errors = err.errors()
    # A bad item of `topics` also makes pydantic report the tuple as too short: not a second problem.
    errors = [
        e for e in errors
        if not (e["type"] == "too_short" and any(o["loc"][: len(e["loc"])] == e["loc"] and o is not e for o in errors))
    ] or errors
    problems: list[dict] = []
    branches: dict[tuple, dict] = {}
    for e in errors:
        loc = tuple(e["loc"])
        # A union's branches come as one error each, their loc the value's plus the branch's type name, their input
        # the one value (a mapping or a list: the only values a union of kprio's refuses whole).
        twins = [o for o in errors if o is not e and len(o["loc"]) == len(loc) and tuple(o["loc"][:-1]) == loc[:-1]
                 and o["input"] is e["input"] and isinstance(e["input"], dict | list)]
        if not twins:
            problems.append(e)
            continue
        if loc[:-1] not in branches:
            kinds = [str(o["loc"][-1]) for o in errors if tuple(o["loc"][:-1]) == loc[:-1]]
            branches[loc[:-1]] = {"loc": loc[:-1], "type": "union", "input": e["input"],
                                  "msg": f"Input should be one of {', '.join(kinds)}, not {type(e['input']).__name__}"}
            problems.append(branches[loc[:-1]])
    return problems


def _message(problem: Mapping) -> str:
    """pydantic's message, or the validator's own for a ValueError one of ours raised (no 'Value error, ')."""
    error = (problem.get("ctx") or {}).get("error")
    if problem["type"] in ("value_error", "assertion_error") and error is not None:
        return str(error)
    return problem["msg"]


def config_error(err: ValidationError, source: str, origins: Mapping[tuple, str] | None = None) -> ConfigError:
    """One ConfigError for a failed validation: the key and what is wrong with its value (never the value: it may be
    a secret), how many more problems there are, and where (``source``, or the environment variable that set it)."""
    problems = _problems(err)
    first = problems[0]
    loc = tuple(first["loc"])
    key = _key(loc)
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    origins = origins or {}
    exact = [variable for prefix, variable in origins.items() if loc[: len(prefix)] == prefix]
    # A check of a whole mapping (kafka.client) may be failed by a key from the file or from the environment.
    inside = sorted(variable for prefix, variable in origins.items() if loc and prefix[: len(loc)] == loc)
    where = source
    if exact:
        where = f"{exact[-1]} in the environment"
    elif inside:
        where = f"{source}, or {', '.join(inside)} in the environment"
    # A check of the whole configuration has no key of its own: its message names the keys.
    return ConfigError(f"{key}: {_message(first)}{more}" if key else f"{_message(first)}{more}", where=where)


def format_validation_error(err: ValidationError, source: str) -> str:
    """One line naming the key, what is wrong, how many more problems there are, and the source."""
    return str(config_error(err, source))


def _environment_overrides(raw: dict, env: Mapping[str, str]) -> tuple[dict, dict[tuple, str]]:
    """``raw`` with the ``KPRIO_*`` variables of ``env`` merged into its kafka section (empty ones ignored), and
    which keys they set (their errors name the variable, not the file).

    Not pydantic-settings: its environment source maps a variable to a field by name, while here
    any ``KPRIO_KAFKA_<SETTING>`` becomes a dotted key of ``client`` or ``secrets``, chosen by
    :data:`SECRET_SETTINGS`; a custom source for that would be longer than this loop.
    """
    kafka = dict(raw.get("kafka") or {})
    client, secrets = dict(kafka.get("client") or {}), {}
    origins: dict[tuple, str] = {}
    for name, value in env.items():
        if not value:
            continue
        if name == ENV_BOOTSTRAP:
            kafka["bootstrap_servers"] = value
            origins[("kafka", "bootstrap_servers")] = name
        elif name == ENV_KAFKA_TIMEOUT:
            kafka["timeout_s"] = value
            origins[("kafka", "timeout_s")] = name
        elif name.startswith(ENV_KAFKA_PREFIX):
            setting = variable_setting(name)
            section = "secrets" if is_secret_setting(setting) else "client"
            (secrets if section == "secrets" else client)[setting] = value
            origins[("kafka", section, setting)] = name
    return {**raw, "kafka": {**kafka, "client": client, "secrets": secrets}}, origins


def kind_of(value: object) -> str:
    """What a YAML value is, in words.

    >>> kind_of([1]), kind_of(5), kind_of("x"), kind_of({"a": 1})
    ('a list', 'a number', 'a string', 'a mapping')
    """
    kinds = ((bool, "a boolean"), (int | float, "a number"), (str, "a string"), (Mapping, "a mapping"),
             (list | tuple, "a list"))
    return next((name for kind, name in kinds if isinstance(value, kind)), f"a {type(value).__name__}")


def parse_config(raw: Mapping | None, source: str = "configuration", env: Mapping[str, str] | None = None) -> KprioConfig:
    """Validate a mapping (as read from YAML) plus environment overrides into a config."""
    if raw is not None and not isinstance(raw, Mapping):
        raise ConfigError(f"the top level must be a mapping of sections, not {kind_of(raw)}", where=source)
    data = dict(raw or {})
    # The environment overrides below merge into these sections, so they must be mappings first.
    kafka = data.get("kafka")
    if kafka is not None and not isinstance(kafka, Mapping):
        raise ConfigError(f"kafka: must be a mapping, not {kind_of(kafka)}", where=source)
    client = (kafka or {}).get("client")
    if client is not None and not isinstance(client, Mapping):
        raise ConfigError(f"kafka.client: must be a mapping, not {kind_of(client)}", where=source)
    if "secrets" in (data.get("kafka") or {}):
        raise ConfigError("kafka.secrets: secrets come only from KPRIO_KAFKA_* environment variables", where=source)
    data, origins = _environment_overrides(data, os.environ if env is None else env)
    try:
        return KprioConfig.model_validate(data)
    except ValidationError as err:
        raise config_error(err, source, origins) from None


def config_path(explicit: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> Path | None:
    """The file to load: explicit path, then $KPRIO_CONFIG, then ./kprio.yaml if present."""
    env = os.environ if env is None else env
    if explicit:
        return Path(explicit)
    if env.get(ENV_CONFIG_PATH):
        return Path(env[ENV_CONFIG_PATH])
    default = Path(DEFAULT_CONFIG_FILE)
    return default if default.exists() else None


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key given twice in one mapping (PyYAML keeps the last one silently)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line)
            except TypeError:
                continue  # an unhashable key: SafeLoader's own error says so below
            if first != key_node.start_mark.line:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice (first on line {first + 1})", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path, where: str) -> object:
    """The YAML document in the regular file ``path``; ConfigError saying what is wrong with the file, and where."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ConfigError("configuration file not found", where=where) from None
    except OSError as err:
        raise ConfigError(f"cannot read the configuration file: {os_reason(err)}", where=where) from None
    if stat.S_ISDIR(mode):
        raise ConfigError("is a directory, not a configuration file", where=where)
    if not stat.S_ISREG(mode):
        raise ConfigError("is not a regular file (a device, a pipe or a socket): name a YAML file", where=where)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read the configuration file: {os_reason(err)}", where=where) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ConfigError(f"is not UTF-8 text (byte 0x{data[err.start]:02x} on line {line})", where=where) from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise ConfigError(f"not valid YAML: {getattr(err, 'problem', None) or err}", where=f"{where}{at}") from None


def load_config(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> KprioConfig:
    """Load and validate the configuration (see the module docstring for the search order)."""
    chosen = config_path(path, env)
    if chosen is None:
        return parse_config({}, "built-in defaults", env)
    where = str(chosen) if path or chosen == Path(DEFAULT_CONFIG_FILE) else f"{chosen}, named by {ENV_CONFIG_PATH}"
    return parse_config(read_yaml(chosen, where), where, env)
