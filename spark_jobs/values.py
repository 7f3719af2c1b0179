"""How a batch's values are decoded, chosen on the driver as its drain starts: handler, columns, registry readers.

- ``json`` (default): ``drain.handler`` (:func:`~spark_jobs.handlers.decode_json` unless named), the topic's ``schema``;
- ``avro``, ``protobuf``, ``json_schema``: each priority topic's subject's latest version read once, here (an
  unreachable registry fails the attempt as transient, before Spark runs); columns are those schemas' fields
  (:func:`kprio_core.values.avro.merged_columns`), the handler :func:`~spark_jobs.handlers.decode_avro` (or the
  user's, which finds the registry in its context);
- ``raw``: :func:`~spark_jobs.handlers.keep_raw` (or the user's), no column.

>>> from kprio_core.config import KprioConfig, TopicSettings
>>> value_decoding(KprioConfig(), TopicSettings(name="o", schema={"n": "long"}), ())
('spark_jobs.handlers:decode_json', (('n', 'long'),), None)
>>> value_decoding(KprioConfig(), TopicSettings(name="o", value_format="raw"), ())[:2]
('spark_jobs.handlers:keep_raw', ())
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kprio_core.config import DrainSettings, KprioConfig, TopicSettings, ValueFormat
from kprio_core.model.drain_plan import PlannedRange
from kprio_core.values.avro import ValueDecoding, merged_columns, reader_schemas, value_subject

if TYPE_CHECKING:
    from kprio_core.model.registry import RegistryEndpoint
    from kprio_core.values.avro import ReaderSchema

DEFAULT_HANDLER = DrainSettings.model_fields["handler"].default
FORMAT_HANDLERS = {ValueFormat.JSON: DEFAULT_HANDLER, ValueFormat.AVRO: "spark_jobs.handlers:decode_avro",
                   ValueFormat.PROTOBUF: "spark_jobs.handlers:decode_registry_values",
                   ValueFormat.JSON_SCHEMA: "spark_jobs.handlers:decode_registry_values",
                   ValueFormat.RAW: "spark_jobs.handlers:keep_raw"}


def value_decoding(config: KprioConfig, topic: TopicSettings, ranges: Iterable[PlannedRange]
                   ) -> tuple[str, tuple[tuple[str, str], ...], ValueDecoding | None]:
    """``(handler, columns, decoding)`` of one batch of ``topic`` reading ``ranges``."""
    fmt = topic.value_format
    handler = config.drain.handler if config.drain.handler != DEFAULT_HANDLER else FORMAT_HANDLERS[fmt]
    if fmt is ValueFormat.JSON:
        return handler, tuple(topic.schema_.items()), None
    if fmt is ValueFormat.RAW:
        return handler, (), None
    kind = fmt.registry_type or "AVRO"
    endpoint, readers, missing = registry_readers(config, topic, ranges, kind, topic.value_subject)
    return handler, merged_columns(readers), ValueDecoding(endpoint, readers, kind, missing)


def registry_readers(config: KprioConfig, topic: TopicSettings, ranges: Iterable[PlannedRange], kind: str,
                     template: str, setting: str = "value_format",
                     ) -> tuple[RegistryEndpoint, tuple[ReaderSchema, ...], tuple[tuple[str, str], ...]]:
    """The registry's endpoint, each priority topic's reader schema (its ``template`` subject's latest version), and
    the ``(topic, subject)`` pairs the registry lacks (their records become dead letters, the batch goes on)."""
    from kprio_core.values.registry import shared_registry

    assert config.schema_registry is not None  # the configuration refuses registry formats without a registry
    endpoint = config.schema_registry.endpoint()
    topics = sorted({r.range.topic for r in ranges}) or [topic.priority_topic(p) for p in range(topic.priorities)]
    subjects = {t: value_subject(t, template) for t in topics}
    readers = reader_schemas(shared_registry(endpoint), subjects, kind, missing_ok=True, setting=setting)
    found = {r.topic for r in readers}
    return endpoint, readers, tuple((t, s) for t, s in sorted(subjects.items()) if t not in found)
