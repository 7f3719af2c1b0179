"""The ``topics`` section: one logical topic per entry, its priority topics, groups and value format."""

from __future__ import annotations

import re
import string
from enum import StrEnum
from typing import Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from kprio_core.config.base import Section
from kprio_core.extras import REGISTRY, missing
from kprio_core.model.priority import Priority

MAX_PRIORITIES = 16
"""Most priority levels of a logical topic."""

_TEMPLATE_FIELDS = {"topic_template": ("topic", "priority"), "group_template": ("group", "topic", "priority")}
"""Fields each template may use (what priority_topic / priority_group pass to str.format)."""


REGISTRY_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}
"""The schema registry's name (``schemaType``) of each format of values and keys in its wire format."""


class ValueFormat(StrEnum):
    """How a topic's record values are decoded into columns; the registry formats are in its wire format (magic
    byte 0, 4-byte schema id), columns from the subject's latest schema."""

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
        return REGISTRY_TYPES.get(self.value)


class KeyFormat(StrEnum):
    """How a topic's record keys are decoded into ``decoded_key``; the raw ``key`` (what key lanes hash) stays."""

    RAW = "raw"
    STRING = "string"
    AVRO = "avro"
    PROTOBUF = "protobuf"
    JSON_SCHEMA = "json_schema"

    @property
    def registry_type(self) -> str | None:
        """The schema registry's name of the format (``schemaType``), None for formats without a registry.

        >>> KeyFormat.PROTOBUF.registry_type, KeyFormat.STRING.registry_type
        ('PROTOBUF', None)
        """
        return REGISTRY_TYPES.get(self.value)


class TopicSettings(Section):
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
    key_format: KeyFormat = Field(
        KeyFormat.RAW, description="How keys are decoded into the decoded_key column: raw (not decoded: no column), "
        "string (UTF-8), avro, protobuf or json_schema (the schema registry's wire format, a struct of the registry "
        "schema's fields: needs the schema_registry section). The raw key column is kept either way.")
    key_subject: str = Field(
        "{topic}-key", min_length=1, description="avro, protobuf, json_schema keys: the registry subject of a priority "
        "topic's keys ({topic} is the priority topic's name); its latest version is the reader's schema of a batch.")
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

    @field_validator("value_format", "key_format")
    @classmethod
    def _registry_installed(cls, value: ValueFormat | KeyFormat) -> ValueFormat | KeyFormat:
        """A registry format's libraries missing fail at load, naming the extra."""
        why = missing(REGISTRY, value.value) if value.registry_type else None
        if why:
            raise ValueError(why)
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
        for name, template in (("value_subject", self.value_subject), ("key_subject", self.key_subject)):
            try:
                template.format(topic="t")
            except (ValueError, LookupError, AttributeError, TypeError) as err:
                raise ValueError(f"{name} {template!r} is not a valid format string with {{topic}}: {err}") from None
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
