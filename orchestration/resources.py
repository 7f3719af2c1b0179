"""Dagster resources of kprio: the Kafka edge, Spark, the batch ledger and the drain settings.

Each is a ``dg.ConfigurableResource`` with typed, described fields built from kprio.yaml by
:func:`resources_from_config`. Clients are lazy private attributes created in
``setup_for_execution`` and closed in ``teardown_after_execution``. Secrets are ``dg.EnvVar``
fields resolved by Dagster at run time: they never appear in the resource's config, a log line
or metadata (the Kafka settings hold them as ``SecretStr``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import dagster as dg
import yaml
from pydantic import Field, PrivateAttr, SecretStr

from kprio_core.config import KafkaSettings, KprioConfig, SparkSettings, parse_config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kprio_core.kafka import KafkaEdge
    from kprio_core.ledger import Ledger

# Secret Kafka client settings the resource can take, with the environment variable Dagster
# reads them from (the same names kprio_core.config accepts).
SECRET_FIELDS: dict[str, tuple[str, str]] = {
    "sasl_password": ("sasl.password", "KPRIO_KAFKA_SASL_PASSWORD"),
    "ssl_key_password": ("ssl.key.password", "KPRIO_KAFKA_SSL_KEY_PASSWORD"),
    "sasl_oauthbearer_client_secret": (
        "sasl.oauthbearer.client.secret",
        "KPRIO_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET",
    ),
    "sasl_oauthbearer_config": ("sasl.oauthbearer.config", "KPRIO_KAFKA_SASL_OAUTHBEARER_CONFIG"),
    "ssl_keystore_password": ("ssl.keystore.password", "KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD"),
}


class KafkaResource(dg.ConfigurableResource):
    """The Kafka cluster: lag snapshots, offsets-for-times and monotonic commits (a KafkaEdge)."""

    bootstrap_servers: str = Field(description="Kafka bootstrap.servers, e.g. 'broker-1:9092'.")
    client: dict[str, str] = Field(
        default={}, description="Extra non-secret librdkafka settings (security.protocol, sasl.mechanism, ...)."
    )
    timeout_s: float = Field(default=10.0, description="Timeout of every admin and client call, seconds.")
    sasl_password: str | None = Field(
        default=None, description="sasl.password; set it as dg.EnvVar('KPRIO_KAFKA_SASL_PASSWORD')."
    )
    ssl_key_password: str | None = Field(
        default=None, description="ssl.key.password; set it as dg.EnvVar('KPRIO_KAFKA_SSL_KEY_PASSWORD')."
    )
    sasl_oauthbearer_client_secret: str | None = Field(
        default=None,
        description="sasl.oauthbearer.client.secret; "
        "set it as dg.EnvVar('KPRIO_KAFKA_SASL_OAUTHBEARER_CLIENT_SECRET').",
    )
    sasl_oauthbearer_config: str | None = Field(
        default=None,
        description="sasl.oauthbearer.config; set it as dg.EnvVar('KPRIO_KAFKA_SASL_OAUTHBEARER_CONFIG').",
    )
    ssl_keystore_password: str | None = Field(
        default=None,
        description="ssl.keystore.password; set it as dg.EnvVar('KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD').",
    )

    _edge: KafkaEdge | None = PrivateAttr(default=None)

    def settings(self) -> KafkaSettings:
        """The Kafka settings, secrets held as SecretStr."""
        secrets = {
            setting: SecretStr(value)
            for field_name, (setting, _) in SECRET_FIELDS.items()
            if (value := getattr(self, field_name))
        }
        # librdkafka takes every setting as a string, so the strings of the config go through as is.
        return KafkaSettings(
            bootstrap_servers=self.bootstrap_servers,
            client=dict(self.client),
            secrets=secrets,
            timeout_s=self.timeout_s,
        )

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        from kprio_core.kafka import KafkaEdge

        self._edge = KafkaEdge(self.settings())

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._edge is not None:
            self._edge.close()
            self._edge = None

    @property
    def edge(self) -> KafkaEdge:
        """The cluster's KafkaEdge (its admin client is created on first use)."""
        if self._edge is None:  # used outside a run (direct calls in a script)
            self.setup_for_execution(dg.build_init_resource_context())
        assert self._edge is not None
        return self._edge


class SparkResource(dg.ConfigurableResource):
    """The SparkSession of a run: local[*], a master URL or a Spark Connect remote."""

    master: str = Field(default="local[*]", description="spark.master URL.")
    remote: str | None = Field(default=None, description="Spark Connect URL (sc://host:port); wins over master.")
    conf: dict[str, str] = Field(default={}, description="Extra Spark settings.")
    app_name: str = Field(default="kprio", description="Spark application name.")

    _session: SparkSession | None = PrivateAttr(default=None)
    _created: bool = PrivateAttr(default=False)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        # Lazy: a run that never touches Spark (the commit step) does not pay for a JVM.
        self._session, self._created = None, False

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        # Stop only a session this resource started: a session that was already active (the
        # test session, the in-process drain loop's) belongs to whoever started it.
        if self._session is not None and self._created:
            self._session.stop()
        self._session, self._created = None, False

    @property
    def session(self) -> SparkSession:
        """The run's SparkSession (getOrCreate: an active session is reused)."""
        if self._session is None:
            from spark_jobs.session import build_session

            existed = session_running()
            settings = SparkSettings(master=self.master, remote=self.remote, conf=self.conf)
            self._session = build_session(settings, app_name=self.app_name)
            self._created = not existed
        return self._session


class LedgerResource(dg.ConfigurableResource):
    """The batch ledger: every plan, its reserved ranges and its state (SQLAlchemy URL)."""

    url: str = Field(description="SQLAlchemy URL, e.g. 'sqlite:///./kprio-data/ledger.db' or a Postgres URL.")

    _ledger: Ledger | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        from kprio_core.ledger import Ledger

        self._ledger = Ledger(self.url)

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None

    @property
    def ledger(self) -> Ledger:
        if self._ledger is None:
            self.setup_for_execution(dg.build_init_resource_context())
        assert self._ledger is not None
        return self._ledger


class KprioSettings(dg.ConfigurableResource):
    """The drain settings: topics, planner, splits, rate quotas, ordering, drain and sensor sections of kprio.yaml."""

    config_yaml: str = Field(
        description="The validated kprio configuration as YAML (kafka secrets are never part of it)."
    )

    _config: KprioConfig | None = PrivateAttr(default=None)

    @property
    def base(self) -> KprioConfig:
        """The configuration as stored (its kafka section without secrets)."""
        if self._config is None:
            # env={}: environment overrides were applied when the definitions were built.
            self._config = parse_config(yaml.safe_load(self.config_yaml), "resource 'kprio' (config_yaml)", env={})
        return self._config

    def config(self, kafka: KafkaResource | None = None) -> KprioConfig:
        """The configuration, with the Kafka section of ``kafka`` (its secrets included) when given."""
        if kafka is None:
            return self.base
        return self.base.model_copy(update={"kafka": kafka.settings()})


def session_running() -> bool:
    """True when this process already has an active or default SparkSession (getOrCreate reuses it)."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    try:
        SparkSession.active()
    except PySparkRuntimeError:
        return False
    return True


def config_yaml(config: KprioConfig) -> str:
    """``config`` as YAML that parses back to the same configuration, kafka secrets left out."""
    data = config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})
    return yaml.safe_dump(data, sort_keys=False)


def resources_from_config(config: KprioConfig, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The four resources, keyed as the assets, checks, sensor and jobs expect them.

    A secret Kafka setting present in the configuration (it came from KPRIO_KAFKA_* in the
    environment) becomes a ``dg.EnvVar`` of that variable, so Dagster reads it at run time.
    """
    env = os.environ if env is None else env
    secret_fields: dict[str, Any] = {}
    for field_name, (setting, variable) in SECRET_FIELDS.items():
        if setting in config.kafka.secrets or variable in env:
            secret_fields[field_name] = dg.EnvVar(variable)
    unsupported = sorted(set(config.kafka.secrets) - {s for s, _ in SECRET_FIELDS.values()})
    if unsupported:
        from kprio_core.errors import ConfigError

        raise ConfigError(
            f"kafka secrets {unsupported} are not supported by the Dagster Kafka resource "
            f"(supported: {sorted(s for s, _ in SECRET_FIELDS.values())})"
        )
    return {
        "kafka": KafkaResource(
            bootstrap_servers=config.kafka.bootstrap_servers,
            client={k: _text(v) for k, v in config.kafka.client.items()},
            timeout_s=config.kafka.timeout_s,
            **secret_fields,
        ),
        "spark": SparkResource(master=config.spark.master, remote=config.spark.remote, conf=dict(config.spark.conf)),
        "ledger": LedgerResource(url=config.ledger.url),
        "kprio": KprioSettings(config_yaml=config_yaml(config)),
    }


def _text(value: object) -> str:
    # Dagster config wants one value type; booleans keep librdkafka's spelling.
    return str(value).lower() if isinstance(value, bool) else str(value)

