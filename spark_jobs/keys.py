"""Record keys decoded per topic (``topics[].key_format``) into one more column, ``decoded_key``, beside the raw key.

Formats and failures: docs/configuration.md, "Keys (``key_format``)". The raw ``key`` is never changed (key
lanes hash it, dead letters keep it). Registry formats use the values' decoders (:mod:`kprio_core.values`), key
subjects read once per batch on the driver; a non-record Avro key schema is read as a one-field record
(:func:`kprio_core.values.avro.as_record`). Decoding runs in the drain task after any handler
(:meth:`KeyDecoder.apply`); an unreachable registry raises :class:`~kprio_core.errors.SchemaRegistryUnavailable`
(transient: no record is blamed).

>>> from kprio_core.config import KprioConfig, TopicSettings
>>> keys = key_decoding(KprioConfig(), TopicSettings(name="o", key_format="string"), ())
>>> keys.columns, key_decoding(KprioConfig(), TopicSettings(name="o"), ())
((('decoded_key', 'string'),), None)
>>> import pyarrow as pa
>>> out = pa.record_batch({"key": [b"a", None, b"\\xff"], "topic": ["o-0"] * 3, "error": [None, None, "bad value"],
...                        "decoded_key": pa.nulls(3, pa.string())})
>>> done = KeyDecoder(keys).apply(out)
>>> done.column("decoded_key").to_pylist(), done.column("error").to_pylist()
(['a', None, None], [None, None, 'bad value; key: not UTF-8 text (1 bytes)'])
>>> output_columns((("decoded_key", "long"),), keys)
Traceback (most recent call last):
...
kprio_core.errors.ConfigError: value field 'decoded_key' has the name of the decoded key column (key_format string); rename it
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kprio_core.config import KeyFormat, KprioConfig, TopicSettings
from kprio_core.errors import ConfigError
from kprio_core.model.drain_plan import PlannedRange
from kprio_core.values.avro import ValueDecoding

KEY_COLUMN = "decoded_key"
KEY_FIELD = "key"
"""The one field an Avro key schema that is not a record is read as (its value is ``decoded_key``)."""


@dataclass(frozen=True)
class KeyDecoding:
    """How a batch's keys are decoded (picklable: it travels in the drain spec)."""

    key_format: KeyFormat
    fields: tuple[tuple[str, str], ...] = ()
    registry: ValueDecoding | None = None
    plain: bool = False
    """Every key schema is a non-record Avro one: ``decoded_key`` is its value, not a struct."""

    @property
    def kind(self) -> str | None:
        """The column's kind: ``string``, a ``struct<...>`` of the key fields, or None (no key schema: no column).

        >>> KeyDecoding(KeyFormat.AVRO, (("id", "long"), ("region", "string")), None).kind
        'struct<id:long,region:string>'
        >>> KeyDecoding(KeyFormat.AVRO, (("key", "string"),), None, plain=True).kind
        'string'
        """
        if self.key_format is KeyFormat.STRING:
            return "string"
        if self.plain:
            return self.fields[0][1]
        return "struct<" + ",".join(f"{name}:{kind}" for name, kind in self.fields) + ">" if self.fields else None

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        """The column it adds to the output: ``(("decoded_key", kind),)``, or none."""
        return () if self.kind is None else ((KEY_COLUMN, self.kind),)


def key_decoding(config: KprioConfig, topic: TopicSettings, ranges: Iterable[PlannedRange]) -> KeyDecoding | None:
    """How a batch of ``topic`` decodes its keys (None: ``key_format: raw``); a registry is read here, before Spark."""
    fmt = topic.key_format
    if fmt is KeyFormat.RAW:
        return None
    if fmt is KeyFormat.STRING:
        return KeyDecoding(fmt)
    from dataclasses import replace

    from kprio_core.values.avro import as_record, merged_columns
    from spark_jobs.values import registry_readers

    kind = fmt.registry_type or "AVRO"
    endpoint, readers, missing = registry_readers(config, topic, ranges, kind, topic.key_subject, "key_format")
    if fmt is not KeyFormat.AVRO:
        return KeyDecoding(fmt, merged_columns(readers), ValueDecoding(endpoint, readers, kind, missing))
    wrapped = tuple(replace(r, schema=as_record(r.schema, KEY_FIELD)) for r in readers)
    plain = bool(readers) and all(w.schema is not r.schema for w, r in zip(wrapped, readers, strict=True))
    return KeyDecoding(fmt, merged_columns(wrapped), ValueDecoding(endpoint, wrapped, kind, missing, KEY_FIELD), plain)


def output_columns(columns: Sequence[tuple[str, str]], keys: KeyDecoding | None) -> tuple[tuple[str, str], ...]:
    """The value's decoded columns, then the key's; ConfigError when a value field takes the key column's name."""
    if keys is None:
        return tuple(columns)
    if keys.key_format is not KeyFormat.RAW and any(name == KEY_COLUMN for name, _ in columns):
        raise ConfigError(f"value field {KEY_COLUMN!r} has the name of the decoded key column (key_format "
                          f"{keys.key_format.value}); rename it")
    return (*columns, *keys.columns)


class KeyDecoder:
    """Decodes the keys of the drain's answered frames (on an executor); see the module docstring."""

    def __init__(self, keys: KeyDecoding) -> None:
        self.keys = keys
        self._decoder: Any = None

    def apply(self, out: Any) -> Any:
        """``out`` (one lane's answered rows: one topic) with ``decoded_key`` filled and bad keys' ``error`` set."""
        import pyarrow as pa

        if out.num_rows == 0:
            return out
        keys = out.column("key")
        column = errors = None
        if keys.null_count < len(keys):  # else no key to decode: decoded_key null, no error
            topic = out.column("topic")[0].as_py()
            column, errors = self._string(keys) if self.keys.registry is None else self._registry(keys, topic)
        names = out.schema.names
        if KEY_COLUMN in names:  # always kprio's: whatever a handler answered in it is replaced
            i = names.index(KEY_COLUMN)
            field = out.schema.field(i)
            column = pa.nulls(out.num_rows, field.type) if column is None else column
            out = out.set_column(i, field, column if column.type == field.type else column.cast(field.type))
        if errors is None or errors.null_count == len(errors):
            return out
        i = names.index("error")
        merged = [theirs if why is None else f"key: {why}" if theirs is None else f"{theirs}; key: {why}"
                  for theirs, why in zip(out.column(i).to_pylist(), errors.to_pylist(), strict=True)]
        return out.set_column(i, out.schema.field(i), pa.array(merged, type=pa.string()))

    @staticmethod
    def _string(keys: Any) -> tuple[Any, Any]:
        import pyarrow as pa

        try:
            return keys.cast(pa.string()), pa.nulls(len(keys), pa.string())
        except pa.ArrowInvalid:  # some key is not UTF-8: find which, key by key
            pass
        texts: list[str | None] = []
        errors: list[str | None] = []
        for key in keys.to_pylist():
            try:
                texts.append(None if key is None else key.decode("utf-8"))
                errors.append(None)
            except UnicodeDecodeError:
                texts.append(None)
                errors.append(f"not UTF-8 text ({len(key)} bytes)")
        return pa.array(texts, type=pa.string()), pa.array(errors, type=pa.string())

    def _registry(self, keys: Any, topic: str) -> tuple[Any, Any]:
        import pyarrow as pa
        import pyarrow.compute as pc

        from kprio_core.values.kinds import arrow_type

        registry = self.keys.registry
        assert registry is not None
        missing = registry.missing_subject(topic)
        if missing is not None:  # the registry has no key schema of this topic: every key is a bad one
            why = f"subject {missing!r} is not in the schema registry: no schema to read the key with"
            return None, pa.array([None if k is None else why for k in keys.to_pylist()], type=pa.string())
        if self._decoder is None:
            self._decoder = registry.decoder(self.keys.fields)
        columns, errors = self._decoder.decode(keys, topic)
        if self.keys.kind is None:
            return None, errors
        if self.keys.plain:  # null where the key is null or did not decode
            return columns[KEY_FIELD], errors
        struct = arrow_type(self.keys.kind)
        invalid = pc.or_(pc.is_null(keys), pc.is_valid(errors))  # a null key, or one that did not decode: null
        return pa.StructArray.from_arrays([columns[f.name] for f in struct], fields=list(struct), mask=invalid), errors

