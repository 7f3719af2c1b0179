"""The whole configuration: every section, and the checks that span sections."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from kprio_core.config.base import Section
from kprio_core.config.drain import DrainSettings
from kprio_core.config.environment import java_untranslatable
from kprio_core.config.kafka import KafkaSettings
from kprio_core.config.operate import LineageSettings, SensorSettings, SloSettings, VerdictSettings
from kprio_core.config.planning import (
    OrderingSettings,
    PlannerSettings,
    QualitySettings,
    RateSettings,
    RecoverySettings,
    SplitSettings,
)
from kprio_core.config.services import (
    LedgerSettings,
    SchemaRegistrySettings,
    SparkReader,
    SparkSettings,
    WorkersSettings,
)
from kprio_core.config.topics import TopicSettings
from kprio_core.errors import ConfigError


class KprioConfig(Section):
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
    workers: WorkersSettings = WorkersSettings()
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
        # Two logical topics on one Kafka topic (their templates make the same name) would drain it twice.
        owner: dict[str, str] = {}
        for t in value:
            for kind, names, fix in (("priority topic", t.priority_topics().values(), "topic_template"),
                                     ("consumer group", [t.priority_group(p) for p in t.priority_topics()],
                                      "group or group_template")):
                for name in names:
                    first = owner.setdefault(f"{kind} {name}", t.name)
                    if first != t.name:
                        raise ValueError(f"topics {first!r} and {t.name!r} both have the {kind} {name!r}: give each "
                                         f"its own {fix}")
        return value

    @model_validator(mode="after")
    def _avro_topics_have_a_registry(self) -> KprioConfig:
        needs = [(t.name, what, fmt.value) for t in self.topics
                 for what, fmt in (("value_format", t.value_format), ("key_format", t.key_format)) if fmt.registry_type]
        if needs and self.schema_registry is None:
            name, what, fmt = needs[0]
            raise ValueError(f"topic {name!r} has {what} {fmt}: add a schema_registry section with its url")
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
