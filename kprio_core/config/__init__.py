"""kprio's configuration: one YAML file (``kprio.yaml``), validated with pydantic.

One module per group of sections (``kafka``, ``topics``, ``planning``, ``drain``, ``services``, ``operate``), the whole
in ``kprio_config``, reading and errors in ``load``; every public name is here too, where its users import it.

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

from kprio_core.config.base import Section, a_path
from kprio_core.config.drain import (
    ICEBERG_SECRET_WORDS,
    REPLAY_HOUR_FORMAT,
    DrainSettings,
    IcebergSettings,
    MaintenanceSettings,
    OnOffsetOutOfRange,
    OutputFormat,
    TimePartition,
    iceberg_secret_property,
    parse_replay_start,
    roots_overlap,
)
from kprio_core.config.environment import (
    DEFAULT_CONFIG_FILE,
    ENV_BOOTSTRAP,
    ENV_CONFIG_PATH,
    ENV_KAFKA_PREFIX,
    ENV_KAFKA_TIMEOUT,
    ENV_LEDGER_PASSWORD,
    ENV_REGISTRY_KEY_PASSWORD,
    ENV_REGISTRY_PASSWORD,
    JAVA_ONLY_SETTINGS,
    JAVA_SASL_MECHANISMS,
    JAVA_SECRETS,
    JAVA_TRANSLATED,
    LIBRDKAFKA_SECRETS,
    SECRET_SETTINGS,
    WITH_SECRETS,
    is_secret_setting,
    is_security_setting,
    java_untranslatable,
    setting_variable,
    variable_setting,
)
from kprio_core.config.kafka import IsolationLevel, KafkaSettings, bootstrap_problem
from kprio_core.config.kprio_config import KprioConfig
from kprio_core.config.load import (
    config_error,
    config_path,
    format_validation_error,
    kind_of,
    load_config,
    parse_config,
)
from kprio_core.config.operate import (
    LINEAGE_TRANSPORTS,
    LineageSettings,
    SensorSettings,
    SloSettings,
    VerdictSettings,
    lineage_secret_key,
)
from kprio_core.config.planning import (
    OrderingSettings,
    PlannerSettings,
    QualitySettings,
    RateQuota,
    RateSettings,
    RecoverySettings,
    SplitSettings,
)
from kprio_core.config.services import (
    SPARK_MASTERS,
    LedgerSettings,
    SchemaRegistrySettings,
    SparkReader,
    SparkSettings,
    WorkersSettings,
)
from kprio_core.config.yaml_file import read_yaml
from kprio_core.config.topics import (
    KAFKA_TOPIC_NAME,
    MAX_PRIORITIES,
    MAX_TOPIC_NAME,
    REGISTRY_TYPES,
    KeyFormat,
    TopicSettings,
    ValueFormat,
    illegal_topic_name,
)

__all__ = [
    "ENV_CONFIG_PATH",
    "ENV_BOOTSTRAP",
    "ENV_KAFKA_PREFIX",
    "ENV_KAFKA_TIMEOUT",
    "ENV_LEDGER_PASSWORD",
    "ENV_REGISTRY_PASSWORD",
    "ENV_REGISTRY_KEY_PASSWORD",
    "DEFAULT_CONFIG_FILE",
    "WITH_SECRETS",
    "LIBRDKAFKA_SECRETS",
    "SECRET_SETTINGS",
    "JAVA_SECRETS",
    "JAVA_ONLY_SETTINGS",
    "JAVA_SASL_MECHANISMS",
    "JAVA_TRANSLATED",
    "is_security_setting",
    "java_untranslatable",
    "is_secret_setting",
    "setting_variable",
    "variable_setting",
    "Section",
    "a_path",
    "bootstrap_problem",
    "IsolationLevel",
    "KafkaSettings",
    "MAX_PRIORITIES",
    "REGISTRY_TYPES",
    "KeyFormat",
    "ValueFormat",
    "TopicSettings",
    "KAFKA_TOPIC_NAME",
    "MAX_TOPIC_NAME",
    "illegal_topic_name",
    "RateQuota",
    "PlannerSettings",
    "QualitySettings",
    "RecoverySettings",
    "SplitSettings",
    "RateSettings",
    "OrderingSettings",
    "OnOffsetOutOfRange",
    "OutputFormat",
    "TimePartition",
    "ICEBERG_SECRET_WORDS",
    "iceberg_secret_property",
    "IcebergSettings",
    "MaintenanceSettings",
    "DrainSettings",
    "REPLAY_HOUR_FORMAT",
    "parse_replay_start",
    "roots_overlap",
    "SparkReader",
    "SPARK_MASTERS",
    "SparkSettings",
    "WorkersSettings",
    "LedgerSettings",
    "SchemaRegistrySettings",
    "SensorSettings",
    "SloSettings",
    "VerdictSettings",
    "LINEAGE_TRANSPORTS",
    "lineage_secret_key",
    "LineageSettings",
    "KprioConfig",
    "config_error",
    "format_validation_error",
    "kind_of",
    "parse_config",
    "config_path",
    "read_yaml",
    "load_config",
]
