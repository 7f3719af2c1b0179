"""Dagster resources of kprio: the Kafka edge, Spark, the batch ledger and the drain settings.

Each resource carries sections of :class:`~kprio_core.config.KprioConfig`, one field per field of
the section, named as in kprio.yaml, so the UI shows every setting where it acts:

- ``kafka`` (:class:`KafkaResource`): the ``kafka`` section without its secrets, plus one field
  per :data:`~kprio_core.config.SECRET_SETTINGS` entry that only a ``dg.EnvVar`` of its
  ``KPRIO_KAFKA_*`` variable may set, read by Dagster at run time;
- ``spark`` (:class:`SparkResource`): the ``spark`` section, plus the application name;
- ``ledger`` (:class:`LedgerResource`): the ``ledger`` section;
- ``kprio`` (:class:`KprioSettings`): every other section as a whole (``planner``, ``topics``, ...),
  and the three resources above as dependencies, so :meth:`KprioSettings.config` is the whole
  configuration with each section taken from the one resource that holds it.

A field holds the value as kprio.yaml writes it (an enum by its value, a section as a mapping);
its description and default are the config field's (:func:`carries`), so a setting is described
once, in ``kprio_core/config.py``. Each resource turns its fields back into the pydantic model
(``settings()``, ``config()``), so the model's validators judge a launchpad edit as they judge
kprio.yaml. ``tests/orchestration/test_definitions.py`` proves every config field has its resource
field. Clients are lazy private attributes (created on first use, so the copies Dagster makes of
a resource that is also a dependency open nothing) and closed in ``teardown_after_execution``.
"""

# No `from __future__ import annotations`: Dagster reads the ResourceDependency annotations of
# KprioSettings as types when the class is created.
import os
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Optional, TypeVar

import dagster as dg
from pydantic import BaseModel, Field, PrivateAttr, SecretStr, ValidationError
from pydantic_core import to_jsonable_python

from kprio_core.config import (
    SECRET_SETTINGS,
    KafkaSettings,
    KprioConfig,
    LedgerSettings,
    SparkSettings,
    config_error,
    setting_variable,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kprio_core.kafka import KafkaEdge
    from kprio_core.ledger import Ledger

Model = TypeVar("Model", bound=BaseModel)

Section = dict[str, Optional[Any]]  # noqa: UP007 (Dagster refuses `Any | None`)
"""A section of kprio.yaml as Dagster config: a mapping whose values may be null (``planner.byte_budget``)."""


def carries(model: type[BaseModel], name: str) -> Any:
    """The ``Field`` of a resource field holding ``model``'s field ``name``: its description and default.

    >>> carries(SparkSettings, "reader").default, carries(SparkSettings, "reader").description
    ('python', "python data source or Spark's kafka source.")
    """
    info = model.model_fields[name]
    return Field(to_jsonable_python(info.get_default(call_default_factory=True)), description=info.description)


def secret_field(setting: str) -> str:
    """The KafkaResource field of a secret setting: ``sasl.password`` -> ``sasl_password``."""
    return setting.replace(".", "_")


def secret(setting: str) -> Any:
    """The ``Field`` of the KafkaResource field that holds the secret ``setting``, only as a ``dg.EnvVar``."""
    return Field(None, description=f"{setting} (a secret): set only as dg.EnvVar('{setting_variable(setting)}'), "
                 "which Dagster reads at run time, never in run config.")


def _validated(model: type[Model], values: Mapping[str, Any], source: str) -> Model:
    """``model`` validated from a resource's values: the one parse of a section, errors naming the resource."""
    try:
        return model.model_validate(values)
    except ValidationError as err:
        raise config_error(err, f"resource {source!r}") from None


def _values(resource: dg.ConfigurableResource, names: Iterable[str]) -> dict[str, Any]:
    """The resource's fields ``names``, as Dagster resolved them."""
    return {name: getattr(resource, name) for name in names}


# --- the resources ------------------------------------------------------------------------------


class KafkaResource(dg.ConfigurableResource):
    """The Kafka cluster: lag snapshots, offsets-for-times and monotonic commits (a KafkaEdge)."""

    bootstrap_servers: str = carries(KafkaSettings, "bootstrap_servers")
    client: dict[str, Any] = carries(KafkaSettings, "client")
    timeout_s: float = carries(KafkaSettings, "timeout_s")
    isolation_level: str = carries(KafkaSettings, "isolation_level")

    sasl_password: Optional[str] = secret("sasl.password")
    sasl_oauthbearer_client_secret: Optional[str] = secret("sasl.oauthbearer.client.secret")
    sasl_oauthbearer_client_credentials_client_secret: Optional[str] = secret(
        "sasl.oauthbearer.client.credentials.client.secret")
    sasl_oauthbearer_config: Optional[str] = secret("sasl.oauthbearer.config")
    sasl_oauthbearer_assertion_private_key_pem: Optional[str] = secret("sasl.oauthbearer.assertion.private.key.pem")
    sasl_oauthbearer_assertion_private_key_passphrase: Optional[str] = secret(
        "sasl.oauthbearer.assertion.private.key.passphrase")
    ssl_key_password: Optional[str] = secret("ssl.key.password")
    ssl_key_pem: Optional[str] = secret("ssl.key.pem")
    ssl_keystore_password: Optional[str] = secret("ssl.keystore.password")

    _settings: Optional[KafkaSettings] = PrivateAttr(default=None)
    _edge: Optional["KafkaEdge"] = PrivateAttr(default=None)

    def settings(self) -> KafkaSettings:
        """The Kafka settings, secrets held as SecretStr."""
        if self._settings is None:
            secrets = {}
            for setting in SECRET_SETTINGS:
                value = getattr(self, secret_field(setting))
                # Outside a run Dagster has not resolved the EnvVar yet: read the variable now.
                value = value.get_value() if isinstance(value, dg.EnvVar) else value
                if value:
                    secrets[setting] = SecretStr(value)
            values = _values(self, KAFKA_FIELDS)
            self._settings = _validated(KafkaSettings, {**values, "secrets": secrets}, "kafka")
        return self._settings

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._edge is not None:
            self._edge.close()
            self._edge = None

    @property
    def edge(self) -> "KafkaEdge":
        """The cluster's KafkaEdge (its admin client is created on first use)."""
        if self._edge is None:
            from kprio_core.kafka import KafkaEdge

            self._edge = KafkaEdge(self.settings())
        return self._edge


KAFKA_FIELDS = tuple(name for name in KafkaSettings.model_fields if name != "secrets")
"""The fields of the ``kafka`` section KafkaResource holds as they are (the secrets: one EnvVar field each)."""


class SparkResource(dg.ConfigurableResource):
    """The SparkSession of a run: local[*], a master URL or a Spark Connect remote."""

    master: str = carries(SparkSettings, "master")
    remote: Optional[str] = carries(SparkSettings, "remote")
    reader: str = carries(SparkSettings, "reader")
    conf: dict[str, str] = carries(SparkSettings, "conf")
    fetch_max_bytes: int = carries(SparkSettings, "fetch_max_bytes")
    max_partition_fetch_bytes: int = carries(SparkSettings, "max_partition_fetch_bytes")
    queued_max_messages_kbytes: int = carries(SparkSettings, "queued_max_messages_kbytes")
    arrow_batch_records: int = carries(SparkSettings, "arrow_batch_records")
    connect_port: int = carries(SparkSettings, "connect_port")
    connect_dir: str = carries(SparkSettings, "connect_dir")
    app_name: str = Field("kprio", description="Spark application name.")

    _session: Optional["SparkSession"] = PrivateAttr(default=None)
    _created: bool = PrivateAttr(default=False)

    def settings(self) -> SparkSettings:
        return _validated(SparkSettings, _values(self, SparkSettings.model_fields), "spark")

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        # Stop only a session this resource started: a session that was already active (the
        # test session, the in-process drain loop's) belongs to whoever started it.
        if self._session is not None and self._created:
            self._session.stop()
        self._session, self._created = None, False

    @property
    def session(self) -> "SparkSession":
        """The run's SparkSession (getOrCreate: an active session is reused); started on first use.

        A session the drain loop is still starting in the background (:func:`start_in_background`)
        is waited for, and then reused as an active one.
        """
        if self._session is None:
            from spark_jobs.session import build_session, session_running, wait_for_background_start

            wait_for_background_start()
            existed = session_running()
            self._session = build_session(self.settings(), app_name=self.app_name)
            self._created = not existed
        return self._session


class LedgerResource(dg.ConfigurableResource):
    """The batch ledger: every plan, its reserved ranges and its state (SQLAlchemy URL)."""

    url: str = carries(LedgerSettings, "url")

    _ledger: Optional["Ledger"] = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def settings(self) -> LedgerSettings:
        return _validated(LedgerSettings, _values(self, LedgerSettings.model_fields), "ledger")

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._ledger is not None:
            self._ledger.close()
            self._ledger = None

    @property
    def ledger(self) -> "Ledger":
        """The ledger, opened on first use (a lease heartbeat thread may be the first)."""
        with self._lock:
            if self._ledger is None:
                from kprio_core.ledger import Ledger

                self._ledger = Ledger.from_settings(self.settings())
            return self._ledger


class KprioSettings(dg.ConfigurableResource):
    """The drain settings (topics, planner, quality, recovery, splits, rate, ordering, drain, sensor,
    schema_registry) and, through the resources it depends on, the kafka, spark and ledger sections."""

    kafka: dg.ResourceDependency[KafkaResource]
    spark: dg.ResourceDependency[SparkResource]
    ledger: dg.ResourceDependency[LedgerResource]

    topics: list[Section] = Field(description="The logical topics: priorities, naming, groups, record schema.")
    planner: Section = Field(description="Budgets and the burst rule.")
    quality: Section = Field(description="Which records are invalid, where they go, how many a batch may have.")
    recovery: Section = Field(description="How crashed and failed batches are detected and retried.")
    splits: Section = Field(description="Bounds of one Spark input split.")
    rate: Section = Field(description="Rate quotas per priority, measured over sampled windows.")
    ordering: Section = Field(description="How records of a partition are handed to the handler.")
    drain: Section = Field(description="What the drain does with records, and where it writes them.")
    sensor: Section = Field(description="How often the sensor looks at the lag.")
    schema_registry: Optional[Section] = Field(  # noqa: UP045 (Dagster refuses `X | None`)
        None, description="The schema registry of the Avro topics (url, username, TLS files); its secrets are read "
        "from the environment (KPRIO_SCHEMA_REGISTRY_PASSWORD, KPRIO_SCHEMA_REGISTRY_SSL_KEY_PASSWORD) when a batch "
        "drains, never set in run config.")

    _config: Optional[KprioConfig] = PrivateAttr(default=None)

    def config(self, kafka: Optional["KafkaResource"] = None) -> KprioConfig:
        """The whole configuration; the Kafka secrets only when the Kafka resource is given."""
        if self._config is None:
            sections = {
                "kafka": self.kafka.settings().model_copy(update={"secrets": {}}),
                "spark": self.spark.settings(),
                "ledger": self.ledger.settings(),
            }
            self._config = _validated(KprioConfig, {**_values(self, KPRIO_FIELDS), **sections}, "kprio")
        if kafka is None:
            return self._config
        return self._config.model_copy(update={"kafka": kafka.settings()})


RESOURCE_SECTIONS = {"kafka": KafkaResource, "spark": SparkResource, "ledger": LedgerResource}
"""Sections of KprioConfig held by their own resource, field by field; KprioSettings holds the others whole."""

KPRIO_FIELDS = tuple(name for name in KprioConfig.model_fields if name not in RESOURCE_SECTIONS)


def start_in_background(resource: SparkResource) -> threading.Thread:
    """Start ``resource``'s session on a thread (:func:`spark_jobs.session.start_in_background`): the JVM
    starts while the caller does other work (a tick); a run's :attr:`SparkResource.session` waits for it."""
    from spark_jobs.session import start_in_background as start

    return start(lambda: resource.session)


def resources_from_config(config: KprioConfig, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The four resources, keyed as the assets, checks, sensor and jobs expect them.

    Every secret setting present in the configuration, or whose variable is set in ``env``,
    becomes a ``dg.EnvVar`` of its ``KPRIO_KAFKA_*`` variable, so Dagster reads it at run time
    and its value is in no run config, log, metadata or repr.
    """
    env = os.environ if env is None else env
    secrets = {
        secret_field(setting): dg.EnvVar(setting_variable(setting))
        for setting in SECRET_SETTINGS
        if setting in config.kafka.secrets or env.get(setting_variable(setting))
    }
    # As kprio.yaml writes them: enums by value, tuples as lists, the topics' `schema` by its name.
    kafka = KafkaResource(**config.kafka.model_dump(mode="json", include=set(KAFKA_FIELDS)), **secrets)
    spark = SparkResource(**config.spark.model_dump(mode="json"))
    ledger = LedgerResource(**config.ledger.model_dump(mode="json"))
    sections = config.model_dump(mode="json", by_alias=True, include=set(KPRIO_FIELDS))
    return {
        "kafka": kafka,
        "spark": spark,
        "ledger": ledger,
        "kprio": KprioSettings(kafka=kafka, spark=spark, ledger=ledger, **sections),
    }
