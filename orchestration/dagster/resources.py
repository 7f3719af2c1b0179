"""Dagster resources of kprio: the Kafka edge, Spark, the batch ledger and the drain settings.

Each resource carries sections of :class:`~kprio_core.config.KprioConfig`, one field per setting, named as in
kprio.yaml, so the UI shows every setting where it acts: ``kafka`` (:class:`KafkaResource`; each secret of
:data:`~kprio_core.config.SECRET_SETTINGS` only as a ``dg.EnvVar`` of its ``KPRIO_KAFKA_*`` variable, read at run
time), ``spark`` (plus the application name), ``ledger``, and ``kprio`` (:class:`KprioSettings`: every other
section whole, and the three above as dependencies, so :meth:`KprioSettings.config` is the whole configuration).

The fields are made from the models (:mod:`orchestration.dagster.resource_fields`); each resource validates them
back into its model (``settings()``, ``config()``), so a launchpad edit is judged as kprio.yaml is. Clients are
lazy private attributes (so Dagster's copies of a resource that is also a dependency open nothing), closed in
``teardown_after_execution``.
"""

# No `from __future__ import annotations`: Dagster reads KprioSettings' ResourceDependency annotations as types.
import os
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Optional, TypeVar

import dagster as dg
from pydantic import BaseModel, Field, PrivateAttr, SecretStr, ValidationError

from kprio_core.config import (
    SECRET_SETTINGS,
    KafkaSettings,
    KprioConfig,
    LedgerSettings,
    SparkSettings,
    config_error,
    setting_variable,
)
from orchestration.dagster.resource_fields import fields_class

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kprio_core.kafka import KafkaEdge
    from kprio_core.ledger import Ledger
    from spark_jobs.session import SparkProvider

Model = TypeVar("Model", bound=BaseModel)


def secret_field(setting: str) -> str:
    """The KafkaResource field of a secret setting: ``sasl.password`` -> ``sasl_password``."""
    return setting.replace(".", "_")


def secret(setting: str) -> Any:
    """The ``Field`` of the KafkaResource field that holds the secret ``setting``, only as a ``dg.EnvVar``."""
    return Field(None, description=f"{setting} (a secret): set only as dg.EnvVar('{setting_variable(setting)}'), "
                 "which Dagster reads at run time, never in run config.")


SECRET_FIELDS = {secret_field(setting): (Optional[str], secret(setting)) for setting in SECRET_SETTINGS}  # noqa: UP045
"""KafkaResource's fields of the secret settings: ``sasl_password`` for ``sasl.password``, ... (only dg.EnvVar)."""


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


class KafkaResource(fields_class("KafkaFields", KafkaSettings, exclude={"secrets"}, extra=SECRET_FIELDS)):
    """The Kafka cluster: lag snapshots, offsets-for-times and monotonic commits (a KafkaEdge)."""

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


class SparkResource(fields_class("SparkFields", SparkSettings)):
    """The SparkSession of a run: local[*], a master URL or a Spark Connect remote."""

    app_name: str = Field("kprio", description="Spark application name.")

    _provider: Optional["SparkProvider"] = PrivateAttr(default=None)
    _shared: bool = PrivateAttr(default=False)

    def settings(self) -> SparkSettings:
        return _validated(SparkSettings, _values(self, SparkSettings.model_fields), "spark")

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        # Stop only what this provider started: an active session (a test's), a shared provider (a worker's) is theirs.
        if self._provider is not None and not self._shared:
            self._provider.stop()
            self._provider = None

    def sharing(self, provider: "SparkProvider") -> "SparkResource":
        """This resource over a warm worker's ``provider``, shared by every run it executes and never stopped."""
        shared = SparkResource(**_values(self, SparkResource.model_fields))
        shared._provider, shared._shared = provider, True
        return shared

    @property
    def session(self) -> "SparkSession":
        """The run's SparkSession: its provider's, made on first use (an active one reused), or :meth:`sharing`'s."""
        if self._provider is None:
            from spark_jobs.session import SparkProvider

            self._provider = SparkProvider(self.settings(), app_name=self.app_name)
        return self._provider.session()


class LedgerResource(fields_class("LedgerFields", LedgerSettings)):
    """The batch ledger: every plan, its reserved ranges and its state."""

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
        """The ledger, opened on first use; the run's threads share it (its lease heartbeat renews through it)."""
        with self._lock:
            if self._ledger is None:
                from kprio_core.ledger import Ledger

                self._ledger = Ledger.from_settings(self.settings())
            return self._ledger


RESOURCE_SECTIONS = ("kafka", "spark", "ledger")
"""Sections of KprioConfig held by their own resource, field by field; KprioSettings holds the others whole."""


class KprioSettings(fields_class("KprioSections", KprioConfig, exclude=RESOURCE_SECTIONS, sections=True)):
    """The drain settings: every other section of KprioConfig, and the three resources it depends on."""

    kafka: dg.ResourceDependency[KafkaResource]
    spark: dg.ResourceDependency[SparkResource]
    ledger: dg.ResourceDependency[LedgerResource]

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


KPRIO_FIELDS = tuple(name for name in KprioConfig.model_fields if name not in RESOURCE_SECTIONS)


def resources_from_config(config: KprioConfig, env: Mapping[str, str] | None = None,
                          spark: "SparkProvider | None" = None) -> dict[str, Any]:
    """The four resources, keyed as the assets, checks, sensor and jobs expect them.

    ``spark``: a session provider every run's Spark resource shares and never stops (a warm worker's). Every secret
    setting in the configuration, or whose variable ``env`` sets, becomes a ``dg.EnvVar`` of its ``KPRIO_KAFKA_*``
    variable: Dagster reads it at run time, and no run config, log, metadata or repr holds its value.

    >>> resources = resources_from_config(KprioConfig(), env={})
    >>> sorted(resources), resources["spark"].reader, resources["kprio"].config() == KprioConfig()
    (['kafka', 'kprio', 'ledger', 'spark'], 'python', True)
    """
    env = os.environ if env is None else env
    secrets = {
        secret_field(setting): dg.EnvVar(setting_variable(setting))
        for setting in SECRET_SETTINGS
        if setting in config.kafka.secrets or env.get(setting_variable(setting))
    }
    # As kprio.yaml writes them: enums by value, tuples as lists, the topics' `schema` by its name.
    kafka = KafkaResource(**config.kafka.model_dump(mode="json", include=set(KAFKA_FIELDS)), **secrets)
    ledger = LedgerResource(**config.ledger.model_dump(mode="json"))
    sections = config.model_dump(mode="json", by_alias=True, include=set(KPRIO_FIELDS))
    settings = SparkResource(**config.spark.model_dump(mode="json"))
    shared = None if spark is None else dg.ResourceDefinition.hardcoded_resource(settings.sharing(spark))
    return {
        "kafka": kafka,
        "spark": shared or settings,
        "ledger": ledger,
        "kprio": KprioSettings(kafka=kafka, spark=settings, ledger=ledger, **sections),
    }
