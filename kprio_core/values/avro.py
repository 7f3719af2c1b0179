"""Avro values in the wire format, decoded into typed Arrow columns (on the executors): most records a field at a time
across the batch (:mod:`kprio_core.values.avro_vector`), the others (and the dead letters' reasons) with fastavro.

Each record is read with the **writer's** schema (its header's id) and the **reader's**, the subject's latest version
when the batch started (:func:`reader_schemas`): an older writer decodes with Avro's resolution defaults, and every
record has the same columns. A topic's subject is ``<topic>-value`` unless the topic names another. A record that cannot
be decoded (not in the wire format, unknown schema id, not Avro, a payload that does not decode or has bytes left) is
kept with a reason for the dead letters, never dropped, never a stall. An unreachable registry raises
:class:`~kprio_core.errors.SchemaRegistryUnavailable` (transient, no record blamed); a writer the reader cannot follow,
:class:`~kprio_core.errors.SchemaIncompatible` naming subject, schemas and field. A tombstone: every column null.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kprio_core.errors import SchemaIncompatible
from kprio_core.values.avro_columns import record_fields, referenced_names, without_logical_types
from kprio_core.values.kinds import arrow_type
from kprio_core.values.registry import RegisteredSchema, RegistryEndpoint, SchemaRegistry, WriterSchemas
from kprio_core.values.wire import HEADER_BYTES, header


@dataclass(frozen=True)
class ReaderSchema:
    """The schema a topic's records are read with: its subject's latest version when the batch started."""

    topic: str
    subject: str
    schema: RegisteredSchema

    @property
    def columns(self) -> tuple[tuple[str, str], ...]:
        """Its columns: an Avro record's fields, or a JSON Schema object's properties."""
        if self.schema.schema_type == "JSON":
            from kprio_core.values.json_schema import json_schema_columns

            return json_schema_columns(self.schema.text)
        if self.schema.schema_type == "PROTOBUF":  # the first message of the file, as serializers mostly write
            from kprio_core.values.protobuf import file_descriptor, message_columns, message_of

            return message_columns(message_of(file_descriptor(self.schema), [0]))
        from kprio_core.values.avro_columns import record_fields, referenced_names
        from kprio_core.values.kinds import render

        names = referenced_names(self.schema.references)
        return tuple((name, render(tree)) for name, tree, _ in record_fields(self.schema.text, names))


@dataclass(frozen=True)
class ValueDecoding:
    """What an executor needs to decode a batch's registry values: the registry, each topic's reader schema (frozen
    when the drain started, so every task gives the same columns), ``schema_type`` (AVRO, JSON or PROTOBUF)."""

    endpoint: RegistryEndpoint
    readers: tuple[ReaderSchema, ...]
    schema_type: str = "AVRO"
    missing: tuple[tuple[str, str], ...] = ()
    """``(topic, subject)`` of topics whose subject the registry lacks: their records are bad, never a failed batch."""
    wrap: str | None = None
    """Avro: every schema that is not a record (a ``string`` key, say) is read as a record of one field of this name
    (:func:`as_record`; the readers are given so already); None: a schema that is not a record is refused."""

    def missing_subject(self, topic: str) -> str | None:
        """The subject of ``topic`` when the registry does not have it."""
        return next((subject for t, subject in self.missing if t == topic), None)

    def decoder(self, columns: Sequence[tuple[str, str]]) -> Any:
        """A decoder over the process's shared registry client (each schema id fetched once per executor)."""
        from kprio_core.values.registry import shared_registry

        if self.schema_type == "JSON":
            from kprio_core.values.json_schema import JsonSchemaDecoder

            return JsonSchemaDecoder(shared_registry(self.endpoint), self.readers, columns)
        if self.schema_type == "PROTOBUF":
            from kprio_core.values.protobuf import ProtobufDecoder

            return ProtobufDecoder(shared_registry(self.endpoint), self.readers, columns)
        return AvroDecoder(shared_registry(self.endpoint), self.readers, columns, wrap=self.wrap)


def as_record(schema: RegisteredSchema, field: str) -> RegisteredSchema:
    """``schema`` as a record of one field, ``field``, when it is not a record (records stay as they are): Avro
    writes a record as its fields one after another, so both read the same bytes.

    >>> as_record(RegisteredSchema(3, '"string"'), "key").text
    '{"type": "record", "name": "kprio_wrapped", "fields": [{"name": "key", "type": "string"}]}'
    >>> record = RegisteredSchema(4, '{"type": "record", "name": "K", "fields": []}')
    >>> as_record(record, "key") is record
    True
    """
    import dataclasses
    import json

    parsed = schema.parsed
    if isinstance(parsed, dict) and parsed.get("type") == "record":
        return schema
    wrapped = {"type": "record", "name": "kprio_wrapped", "fields": [{"name": field, "type": parsed}]}
    return dataclasses.replace(schema, text=json.dumps(wrapped))


def value_subject(topic: str, template: str = "{topic}-value") -> str:
    """The subject of a topic's values (``{topic}`` is the priority topic's name).

    >>> value_subject("orders-2"), value_subject("orders-2", "orders-value")
    ('orders-2-value', 'orders-value')
    """
    return template.format(topic=topic)


def reader_schemas(registry: SchemaRegistry, subjects: Mapping[str, str], schema_type: str = "AVRO", *,
                   missing_ok: bool = False, setting: str = "value_format") -> tuple[ReaderSchema, ...]:
    """The latest version of each topic's subject (``{topic: subject}``), of ``schema_type``; ``missing_ok``: a subject
    the registry lacks is left out, not refused; ``setting``: what another format asks to change."""
    latest: dict[str, RegisteredSchema] = {}
    out = []
    for topic, subject in sorted(subjects.items()):
        if subject not in latest:
            if missing_ok and not registry.has_subject(subject):
                continue
            latest[subject] = registry.latest(subject)
            if latest[subject].schema_type != schema_type:
                raise SchemaIncompatible(f"subject {subject!r} holds a {latest[subject].schema_type} schema, "
                                         f"not {schema_type}: set the topic's {setting} to match",
                                         where=registry.endpoint.url)
        out.append(ReaderSchema(topic, subject, latest[subject]))
    return tuple(out)


def merged_columns(readers: Sequence[ReaderSchema]) -> tuple[tuple[str, str], ...]:
    """Every reader schema's columns, in order of first appearance; one name with two kinds is an incompatible change.

    >>> s = RegisteredSchema(1, '{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}')
    >>> t = RegisteredSchema(2, '{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}')
    >>> merged_columns([ReaderSchema("o-1", "o-1-value", s), ReaderSchema("o-0", "o-0-value", s)])
    (('a', 'long'),)
    >>> merged_columns([ReaderSchema("o-1", "o-1-value", s), ReaderSchema("o-0", "o-0-value", t)])
    Traceback (most recent call last):
    ...
    kprio_core.errors.SchemaIncompatible: column 'a' is long in subject 'o-1-value' (schema id 1) but string in subject 'o-0-value' (schema id 2)
    """
    columns: dict[str, tuple[str, ReaderSchema]] = {}
    for reader in readers:
        try:
            found = reader.columns
        except (ValueError, KeyError) as err:
            raise SchemaIncompatible(f"subject {reader.subject!r} (schema id {reader.schema.schema_id}): {err}") from None
        for name, kind in found:
            seen = columns.setdefault(name, (kind, reader))
            if seen[0] != kind:
                raise SchemaIncompatible(
                    f"column {name!r} is {seen[0]} in subject {seen[1].subject!r} (schema id "
                    f"{seen[1].schema.schema_id}) but {kind} in subject {reader.subject!r} (schema id "
                    f"{reader.schema.schema_id})")
    return tuple((name, kind) for name, (kind, _) in columns.items())


def parse(schema: RegisteredSchema) -> Any:
    """fastavro's parse of a schema, references first, without logical types (the column builders apply them)."""
    import fastavro

    named: dict[str, Any] = {}
    for _, text in schema.references:
        fastavro.parse_schema(without_logical_types(_loads(text)), named_schemas=named)
    return fastavro.parse_schema(without_logical_types(schema.parsed), named_schemas=named)


def _loads(text: str) -> Any:
    import json

    return json.loads(text)


class _Reader:
    """One topic's reader schema, parsed, with its fields' column builders."""

    def __init__(self, reader: ReaderSchema) -> None:
        self.reader = reader
        self.parsed = parse(reader.schema)
        names = referenced_names(reader.schema.references)
        self.builders = {name: build for name, _, build in record_fields(reader.schema.text, names)}
        self.vector: Any = False  # its plan for the vector path (avro_vector.plan), made on first use


class AvroDecoder:
    """Decodes one batch's values (per topic) into ``columns``; see the module docstring."""

    def __init__(self, registry: SchemaRegistry, readers: Sequence[ReaderSchema],
                 columns: Sequence[tuple[str, str]], *, wrap: str | None = None) -> None:
        self.registry = registry
        self.readers = {r.topic: _Reader(r) for r in readers}
        self.columns = tuple(columns)
        self.types = {name: arrow_type(kind) for name, kind in self.columns}
        # wrap: a writer's schema that is not a record is read as the readers are (ValueDecoding.wrap)
        make = parse if wrap is None else (lambda schema: parse(as_record(schema, wrap)))
        self._writers = WriterSchemas(registry, "AVRO", "Avro", make, (Exception,), "does not parse as Avro",
                                      describe=_short)  # schema id -> parsed writer schema, or why it cannot be used
        self._groups: dict[tuple[str, int], Any] = {}  # (topic, writer's schema id) -> vector plan and resolution

    def decode(self, values: Any, topic: str) -> tuple[dict[str, Any], Any]:
        """``({column: Arrow array}, error array)`` for a binary Arrow array of ``topic``'s values (see the module)."""
        import numpy as np
        import pyarrow as pa

        reader = self.readers.get(topic)
        if reader is None:
            raise SchemaIncompatible(f"no reader schema for topic {topic!r} in this batch")
        if values.type != pa.binary():
            values = values.cast(pa.binary())
        n = len(values)
        fast, fast_columns = self._fast(values, reader)
        slow = np.ones(n, bool)
        slow[fast] = False
        slow &= ~values.is_null().to_numpy(zero_copy_only=False)
        slow_rows = np.nonzero(slow)[0]
        records, errors = self._slow(values.take(pa.array(slow_rows, pa.int64())), reader)
        if len(fast) == n:
            where = None
        else:  # each row's place in [fast rows, slow rows]; a tombstone's none (every column null)
            place = np.full(n, -1, np.int64)
            place[fast], place[slow_rows] = np.arange(len(fast)), len(fast) + np.arange(len(slow_rows))
            where = pa.array(np.maximum(place, 0), pa.int64(), mask=place < 0)
        columns = {}
        for name, _ in self.columns:
            build = reader.builders.get(name)
            if build is None:  # a column of another topic's subject in this batch
                columns[name] = pa.nulls(n, self.types[name])
                continue
            column = fast_columns.get(name, pa.nulls(len(fast), self.types[name]))
            if len(records):
                items = [None if r is None else r.get(name) for r in records]
                column = pa.concat_arrays([column, self._column(items, build, self.types[name], errors, name)])
            columns[name] = column if where is None else column.take(where)
        every = [None] * n
        for row, error in zip(slow_rows.tolist(), errors):
            every[row] = error
        return columns, pa.array(every, type=pa.string())

    def _fast(self, values: Any, reader: _Reader) -> tuple[Any, dict[str, Any]]:
        """``(rows, {column: Arrow array of those rows})`` of the records the vector path reads surely."""
        import numpy as np
        import pyarrow as pa

        from kprio_core.values.avro_vector import plan

        none = np.zeros(0, np.int64), {}
        if reader.vector is False:
            reader.vector = plan(reader.reader.schema.text, referenced_names(reader.reader.schema.references))
        if reader.vector is None or not len(values) or not (values.buffers()[2] or b""):  # no byte to read
            return none
        offsets = np.frombuffer(values.buffers()[1], np.int32)[values.offset:values.offset + len(values) + 1]
        data = np.frombuffer(values.buffers()[2], np.uint8)
        starts = np.minimum(offsets[:-1], len(data) - 1)
        framed = (offsets[1:] - offsets[:-1] >= HEADER_BYTES) & (data[starts] == 0)
        framed &= ~values.is_null().to_numpy(zero_copy_only=False)
        ids = np.zeros(len(values), np.int64)
        for k in range(1, HEADER_BYTES):
            ids = (ids << 8) | data[np.minimum(starts + k, len(data) - 1)]
        found, columns = [], []
        for schema_id in np.unique(ids[framed]).tolist():
            group = self._group(reader, schema_id)
            if group is None:
                continue
            vector, how = group
            rows = np.nonzero(framed & (ids == schema_id))[0]
            try:
                read, bad = vector.read(values, rows)
            except (pa.ArrowInvalid, OverflowError, ValueError):  # a value its type refuses: fastavro says whose
                continue
            keep = pa.array(~bad)
            out = {}
            for (name, _), (source, value) in zip(reader.vector.root[2], how):
                if name not in self.types:
                    continue
                if source == "field":
                    column = read[value].filter(keep) if bad.any() else read[value]
                else:  # a field the writer's version lacks: the reader's default
                    column = pa.array([value], self.types[name]).take(pa.array(np.zeros(int((~bad).sum()), np.int64)))
                out[name] = column if column.type == self.types[name] else column.cast(self.types[name])
            found.append(rows[~bad])
            columns.append(out)
        if not found:
            return none
        if len(columns) == 1:
            return found[0], columns[0]
        return np.concatenate(found), {name: pa.concat_arrays([c[name] for c in columns]) for name in columns[0]}

    def _group(self, reader: _Reader, schema_id: int) -> tuple[Any, list] | None:
        """``(vector plan, resolution)`` of ``schema_id``'s records for ``reader``, or None (fastavro reads them); made
        once per id. The reader's own id is asked of the registry too: one it no longer serves fails like any other."""
        from kprio_core.values.avro_vector import plan, resolution

        key = (reader.reader.topic, schema_id)
        if key not in self._groups:
            self._groups[key] = None
            writer = None if isinstance(self._writers.get(schema_id), str) else self.registry.schema(schema_id)
            if writer is not None and schema_id == reader.reader.schema.schema_id:
                self._groups[key] = reader.vector, [("field", i) for i in range(len(reader.vector.root[2]))]
            elif writer is not None:
                vector = plan(writer.text, referenced_names(writer.references))
                how = vector and resolution(writer.parsed, reader.reader.schema.parsed, vector, reader.vector)
                self._groups[key] = (vector, how) if how else None
        return self._groups[key]

    def _slow(self, values: Any, reader: _Reader) -> tuple[list[Any], list[str | None]]:
        """Each of ``values`` (none null) read by fastavro: ``(records, errors)``."""
        from fastavro import schemaless_reader
        from fastavro.read import SchemaResolutionError

        records: list[Any] = []
        errors: list[str | None] = []
        for value in values.to_pylist():
            record, error = self._record(value, reader, schemaless_reader, SchemaResolutionError)
            records.append(record)
            errors.append(error)
        return records, errors

    def _record(self, value: bytes, reader: _Reader, read: Any, resolution_error: type) -> tuple[Any, str | None]:
        head = header(value)
        if isinstance(head, str):
            return None, head
        schema_id, start = head
        writer = self._writers.get(schema_id)
        if isinstance(writer, str):
            return None, writer
        stream = io.BytesIO(value)
        stream.seek(start)
        same = schema_id == reader.reader.schema.schema_id
        try:
            record = read(stream, writer, None if same else reader.parsed)
        except resolution_error as err:
            raise self._incompatible(reader.reader, schema_id, err) from None
        except Exception as err:  # noqa: BLE001 - whatever a corrupt payload makes fastavro raise is that record's
            return None, f"payload does not decode with schema id {schema_id}: {_short(err)}"
        left = len(value) - stream.tell()
        if left:
            return None, f"payload has {left} bytes after the record of schema id {schema_id}"
        if not isinstance(record, dict):
            return None, f"schema id {schema_id} decodes to a {type(record).__name__}, not a record"
        return record, None

    def _incompatible(self, reader: ReaderSchema, schema_id: int, err: BaseException) -> SchemaIncompatible:
        """The error of a record the reader's schema cannot follow: the subject, both versions, the column."""
        from kprio_core.values.avro_columns import record_columns

        writer = self.registry.schema(schema_id)
        version = self.registry.version_in(reader.subject, schema_id)
        written = f"version {version} (schema id {schema_id})" if version else f"schema id {schema_id}"
        column = ""
        try:
            theirs = dict(record_columns(writer.text)) if writer is not None else {}
            changed = [name for name, kind in reader.columns if name in theirs and theirs[name] != kind]
            if changed:
                column = f", column {changed[0]!r} ({theirs[changed[0]]} -> {dict(reader.columns)[changed[0]]})"
        except ValueError:
            pass
        return SchemaIncompatible(
            f"subject {reader.subject!r} changed incompatibly{column}: a record of topic {reader.topic!r} written with "
            f"{written} cannot be read with version {reader.schema.version} (schema id {reader.schema.schema_id}): "
            f"{_short(err)}")

    @staticmethod
    def _column(items: list[Any], build: Any, kind: Any, errors: list[str | None], name: str) -> Any:
        """One column's Arrow array; a value its type refuses makes its record a bad one, not a failed batch."""
        import pyarrow as pa

        refused = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError, ValueError, AttributeError)
        try:
            column = build(items)
            return column if column.type == kind else column.cast(kind)
        except refused:
            pass
        kept = []
        for i, item in enumerate(items):
            try:
                build([item])
                kept.append(item)
            except refused as err:
                kept.append(None)
                if errors[i] is None:
                    errors[i] = f"field {name!r}: {_short(err)}"
        column = build(kept)
        return column if column.type == kind else column.cast(kind)


def _short(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 200 else text[:197] + "..."
