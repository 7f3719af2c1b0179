"""kprio's configuration: one YAML file (``kprio.yaml``), validated with pydantic.

One module per group of sections, the whole in ``kprio_config``, reading and errors in ``load``; every public name
is re-exported here. Found at ``--config``, ``$KPRIO_CONFIG``, ``./kprio.yaml``, else built-in defaults; overrides
and secrets (:data:`SECRET_SETTINGS`, ``KPRIO_LEDGER_PASSWORD``: only from the environment, so no file, log or
Dagster page holds one): docs/configuration.md.

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
