"""Dagster resources of kprio: the Kafka edge, Spark, the batch ledger and the drain settings.

A resource's fields are the fields of a section of :class:`~kprio_core.config.KprioConfig`,
derived from the pydantic model (same names, descriptions and defaults, in Dagster config types:
a sub-model becomes a ``dg.Config`` class, a tuple a list), so a setting is defined once, in
``kprio_core/config.py``, and no resource copies a field by hand:

- ``kafka`` (:class:`KafkaResource`): ``KafkaSettings`` without its secrets, plus one field per
  :data:`~kprio_core.config.SECRET_SETTINGS` entry that only a ``dg.EnvVar`` of its
  ``KPRIO_KAFKA_*`` variable may set, read by Dagster at run time;
- ``spark`` (:class:`SparkResource`): ``SparkSettings``, plus the application name;
- ``ledger`` (:class:`LedgerResource`): ``LedgerSettings``;
- ``kprio`` (:class:`KprioSettings`): every other section, and the three resources above as
  dependencies, so :meth:`KprioSettings.config` is the whole configuration with each section
  taken from the one resource that holds it.

Each resource turns its fields back into its pydantic model (``settings()``), so the model's
validators judge a launchpad edit as they judge kprio.yaml. Clients are lazy private attributes
(created on first use, so the copies Dagster makes of a resource that is also a dependency open
nothing) and closed in ``teardown_after_execution``.

Why derived fields and not one ``config_yaml`` string or hand-written fields: the UI shows every
setting typed and described on its resource, a new field of config.py appears there without an
edit here, and ``tests/kprio_core/test_config_reference.py`` proves every field comes back out.
"""

# No `from __future__ import annotations`: Dagster reads the ResourceDependency annotations of
# KprioSettings as types when the class is created.
import os
import threading
import types
from collections.abc import Collection, Mapping
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, Optional, TypeVar, Union, get_args, get_origin

import dagster as dg
from pydantic import BaseModel, Field, PrivateAttr, SecretStr, ValidationError, create_model
from pydantic_core import to_jsonable_python

from kprio_core.config import (
    SECRET_SETTINGS,
    KafkaSettings,
    KprioConfig,
    LedgerSettings,
    SparkSettings,
    format_validation_error,
    setting_variable,
)
from kprio_core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kprio_core.kafka import KafkaEdge
    from kprio_core.ledger import Ledger

Model = TypeVar("Model", bound=BaseModel)

RESOURCE_SECTIONS = ("kafka", "spark", "ledger")
"""Sections of KprioConfig held by their own resource; KprioSettings holds the others."""


# --- Dagster fields from the pydantic models -----------------------------------------------------


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field type holds (``tuple[TopicSettings, ...]`` -> ``[TopicSettings]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


def _dagster_type(annotation: Any, inside: bool = False) -> Any:
    """The Dagster config type of a pydantic field type.

    Dagster has no tuples, no unions of scalars and (inside a list or dict) no Literal: those
    become lists, Any and str, checked when the resource validates the section.
    """
    origin, args = get_origin(annotation), get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return config_class(annotation)
    if origin in (tuple, list):
        return list[_dagster_type(args[0], inside=True)]
    if origin is dict:
        return dict[_dagster_type(args[0], inside=True), _dagster_type(args[1], inside=True)]
    if origin in (Union, types.UnionType):
        present = [arg for arg in args if arg is not type(None)]
        inner = _dagster_type(present[0], inside) if len(present) == 1 else Any
        return Optional[inner] if len(present) < len(args) else inner  # noqa: UP007 (Any | None fails)
    if origin is Literal and inside:
        return str
    return annotation


def _fields(model: type[BaseModel], exclude: Collection[str] = ()) -> dict[str, Any]:
    """``create_model`` field definitions mirroring ``model``'s fields."""
    fields: dict[str, Any] = {}
    for name, info in model.model_fields.items():
        if name in exclude:
            continue
        models = _models_in(info.annotation)
        # A section is described by its model's docstring (KprioConfig's fields have no description).
        about = info.description or (models and (models[0].__doc__ or "").strip().partition("\n")[0]) or None
        extra: dict[str, Any] = {"description": about, "alias": info.alias}
        # A section (a sub-model) has no Dagster default: resources_from_config always gives it.
        if not info.is_required() and not models:
            default = info.get_default(call_default_factory=True)
            extra["default"] = list(default) if isinstance(default, tuple) else default
        fields[name] = (_dagster_type(info.annotation), Field(**extra))
    return fields


@cache
def config_class(model: type[BaseModel]) -> type[dg.Config]:
    """The ``dg.Config`` class with the fields of ``model`` (one class per model)."""
    return create_model(f"{model.__name__}Config", __base__=dg.Config, __module__=__name__, **_fields(model))


def _resource_fields(model: type[BaseModel], exclude: Collection[str] = (), **extra: Any) -> type[Any]:
    """A ``dg.ConfigurableResource`` base class whose fields are ``model``'s (less ``exclude``) and ``extra``."""
    return create_model(
        f"{model.__name__}Fields",
        __base__=dg.ConfigurableResource,
        __module__=__name__,
        **_fields(model, exclude),
        **extra,
    )


def _section(resource: Any, model: type[Model], names: Collection[str], source: str, **values: Any) -> Model:
    """``model`` validated from the resource's fields ``names`` (plus ``values``): the one parse of a section."""
    data = {name: to_jsonable_python(getattr(resource, name), by_alias=True) for name in names}
    try:
        return model.model_validate({**data, **values})
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, f"resource {source!r}")) from None


# --- the resources ------------------------------------------------------------------------------


def secret_field(setting: str) -> str:
    """The KafkaResource field of a secret setting: ``sasl.password`` -> ``sasl_password``."""
    return setting.replace(".", "_")


KAFKA_FIELDS = tuple(n for n in KafkaSettings.model_fields if n != "secrets")

_SECRET_FIELDS = {
    secret_field(setting): (
        Optional[str],  # noqa: UP007
        Field(
            default=None,
            description=f"{setting} (a secret): set only as dg.EnvVar('{setting_variable(setting)}'), which "
            "Dagster reads at run time, never in run config.",
        ),
    )
    for setting in SECRET_SETTINGS
}


class KafkaResource(_resource_fields(KafkaSettings, exclude={"secrets"}, **_SECRET_FIELDS)):  # type: ignore[misc]
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
            self._settings = _section(self, KafkaSettings, KAFKA_FIELDS, "kafka", secrets=secrets)
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


class SparkResource(_resource_fields(SparkSettings)):  # type: ignore[misc]
    """The SparkSession of a run: local[*], a master URL or a Spark Connect remote."""

    app_name: str = Field(default="kprio", description="Spark application name.")

    _session: Optional["SparkSession"] = PrivateAttr(default=None)
    _created: bool = PrivateAttr(default=False)

    def settings(self) -> SparkSettings:
        return _section(self, SparkSettings, SparkSettings.model_fields, "spark")

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        # Stop only a session this resource started: a session that was already active (the
        # test session, the in-process drain loop's) belongs to whoever started it.
        if self._session is not None and self._created:
            self._session.stop()
        self._session, self._created = None, False

    @property
    def session(self) -> "SparkSession":
        """The run's SparkSession (getOrCreate: an active session is reused); started on first use."""
        if self._session is None:
            from spark_jobs.session import build_session

            existed = session_running()
            self._session = build_session(self.settings(), app_name=self.app_name)
            self._created = not existed
        return self._session


class LedgerResource(_resource_fields(LedgerSettings)):  # type: ignore[misc]
    """The batch ledger: every plan, its reserved ranges and its state (SQLAlchemy URL)."""

    _ledger: Optional["Ledger"] = PrivateAttr(default=None)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    def settings(self) -> LedgerSettings:
        return _section(self, LedgerSettings, LedgerSettings.model_fields, "ledger")

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


KPRIO_FIELDS = tuple(n for n in KprioConfig.model_fields if n not in RESOURCE_SECTIONS)


class KprioSettings(_resource_fields(KprioConfig, exclude=RESOURCE_SECTIONS)):  # type: ignore[misc]
    """The drain settings (topics, planner, quality, recovery, splits, rate, ordering, drain, sensor)
    and, through the resources it depends on, the kafka, spark and ledger sections."""

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
            self._config = _section(self, KprioConfig, KPRIO_FIELDS, "kprio", **sections)
        if kafka is None:
            return self._config
        return self._config.model_copy(update={"kafka": kafka.settings()})


def session_running() -> bool:
    """True when this process already has an active or default SparkSession (getOrCreate reuses it)."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    try:
        SparkSession.active()
    except PySparkRuntimeError:
        return False
    return True


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
    kafka = KafkaResource(**config.kafka.model_dump(include=set(KAFKA_FIELDS)), **secrets)
    spark = SparkResource(**config.spark.model_dump())
    ledger = LedgerResource(**config.ledger.model_dump())
    sections = config.model_dump(by_alias=True, include=set(KPRIO_FIELDS))
    return {
        "kafka": kafka,
        "spark": spark,
        "ledger": ledger,
        "kprio": KprioSettings(kafka=kafka, spark=spark, ledger=ledger, **sections),
    }
