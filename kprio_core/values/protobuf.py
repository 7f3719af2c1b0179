"""Protobuf values in the wire format (Confluent's ``ProtobufSerializer``): the header, the message indexes, then the
message, decoded into the columns of the first message of the subject's latest schema.

After the header come the message's indexes in its file: a zigzag varint count and that many indexes (a single 0: the
first message). A schema is ``.proto`` text (Java serializers; compiled with ``grpc_tools.protoc``) or a base64
``FileDescriptorProto`` (confluent-kafka's Python serializer); well-known types come from the protobuf runtime.
Fields -> :mod:`~kprio_core.values.kinds`: double, float, bool, string, bytes -> double, float, boolean, string, bytes;
int32, sint32, sfixed32 -> int; other integers -> long; enum -> its name; ``google.protobuf.Timestamp`` -> timestamp
(UTC); message -> struct (recursive: JSON text); repeated -> array; map -> map (keys as text). Unset fields with
presence, and fields the writer lacks, are null; a proto3 scalar without presence is its value (0, "", false). Bad
indexes, ids, schemas or payloads: bad records.

>>> message_indexes(bytes([0, 0, 0, 0, 7, 0, 8, 3]), 5)
([0], 6)
>>> message_indexes(bytes([0, 0, 0, 0, 7, 4, 2, 6, 8]), 5)
([1, 3], 8)
"""

from __future__ import annotations

import base64
import datetime as dt
import importlib
import json
from collections.abc import Sequence
from typing import Any

from kprio_core.values.kinds import arrow_type, render
from kprio_core.values.registry import RegisteredSchema, SchemaRegistry, WriterSchemas
from kprio_core.values.wire import header

TIMESTAMP = "google.protobuf.Timestamp"


def _varint(data: bytes, at: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if at >= len(data):
            raise ValueError("the message indexes run past the value's end")
        byte = data[at]
        result |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return result, at
        shift += 7
        if shift > 63:
            raise ValueError("a message index is not a varint")


def _zigzag(data: bytes, at: int) -> tuple[int, int]:
    raw, at = _varint(data, at)
    return (raw >> 1) ^ -(raw & 1), at


def message_indexes(value: bytes, at: int) -> tuple[list[int], int]:
    """The message indexes after the header at ``at``, and where the message starts."""
    count, at = _zigzag(value, at)
    if count == 0:
        return [0], at
    if not 0 < count < 100:
        raise ValueError(f"{count} message indexes")
    out = []
    for _ in range(count):
        index, at = _zigzag(value, at)
        out.append(index)
    return out, at


def _file_proto(name: str, text: str, references: Sequence[tuple[str, str]]) -> Any:
    """A schema's ``FileDescriptorProto`` (plus its references'), from a serialized descriptor or ``.proto`` text."""
    from google.protobuf import descriptor_pb2

    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
        if proto.name or proto.message_type:
            return [proto]
    except Exception:  # noqa: BLE001 - not a serialized descriptor: .proto text
        pass
    return _compile(name, text, references)


def _compile(name: str, text: str, references: Sequence[tuple[str, str]]) -> list[Any]:
    import os
    import tempfile

    import grpc_tools
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    with tempfile.TemporaryDirectory(prefix="kprio-proto-") as tmp:
        for ref_name, ref_text in references:
            path = os.path.join(tmp, ref_name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(ref_text)
        with open(os.path.join(tmp, name), "w") as f:
            f.write(text)
        out = os.path.join(tmp, "set.pb")
        wkt = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
        if protoc.main(["protoc", f"-I{tmp}", f"-I{wkt}", f"--descriptor_set_out={out}", "--include_imports",
                        name]) != 0:
            raise ValueError("protoc could not compile the schema")
        with open(out, "rb") as f:
            return list(descriptor_pb2.FileDescriptorSet.FromString(f.read()).file)


def file_descriptor(schema: RegisteredSchema) -> Any:
    """The schema's file descriptor in a pool of its own (its dependencies added first)."""
    from google.protobuf import descriptor_pb2, descriptor_pool

    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()
    files = []
    for ref_name, ref_text in schema.references:
        files += _file_proto(ref_name, ref_text, ())
    files += _file_proto(f"kprio-schema-{schema.schema_id}.proto", schema.text, schema.references)

    def add(proto: Any) -> None:
        if proto.name in added:
            return
        for dep in proto.dependency:
            known = next((f for f in files if f.name == dep), None)
            if known is not None:
                add(known)
            elif dep not in added:  # a well-known type: from the runtime's own pool, once its module is imported
                if dep.startswith("google/protobuf/"):
                    importlib.import_module(dep[:-len(".proto")].replace("/", ".") + "_pb2")
                wkt = descriptor_pb2.FileDescriptorProto()
                descriptor_pool.Default().FindFileByName(dep).CopyToProto(wkt)
                add(wkt)
        pool.Add(proto)
        added.add(proto.name)

    for proto in files:
        add(proto)
    return pool.FindFileByName(files[-1].name)


def message_of(file: Any, indexes: Sequence[int]) -> Any:
    """The message descriptor at ``indexes`` (top-level, then nested) of a file."""
    messages = list(file.message_types_by_name.values())
    found = None
    for index in indexes:
        if not 0 <= index < len(messages):
            raise ValueError(f"message index {index} is not in the schema")
        found = messages[index]
        messages = list(found.nested_types)
    return found


_SCALARS = {1: "double", 2: "float", 3: "long", 4: "long", 5: "int", 6: "long", 7: "long", 8: "boolean",
            9: "string", 12: "bytes", 13: "long", 15: "int", 16: "long", 17: "int", 18: "long"}
"""FieldDescriptor.type numbers of the scalar types -> kinds."""


def message_columns(message: Any) -> tuple[tuple[str, str], ...]:
    """The columns (name, kind) of a message descriptor."""
    return tuple((field.name, render(_field_kind(field, (message.full_name,)))) for field in message.fields)


def _repeated(field: Any) -> bool:
    """Whether a field is repeated (``is_repeated`` where protobuf has it: ``label`` is deprecated there)."""
    found = getattr(field, "is_repeated", None)
    return bool(found) if found is not None else field.label == 3


def _is_map(field: Any) -> bool:
    return field.type == 11 and field.message_type.GetOptions().map_entry


def _field_kind(field: Any, seen: tuple[str, ...]) -> Any:
    if _is_map(field):
        return ("map", _value_kind(field.message_type.fields_by_name["value"], seen))
    kind = _value_kind(field, seen)
    return ("array", kind) if _repeated(field) else kind


def _value_kind(field: Any, seen: tuple[str, ...]) -> Any:
    if field.type == 14:
        return "string"
    if field.type in (10, 11):  # group, message
        message = field.message_type
        if message.full_name == TIMESTAMP:
            return "timestamp"
        if message.full_name in seen:
            return "string"  # recursive: kept as JSON text
        return ("struct", tuple((f.name, _field_kind(f, (*seen, message.full_name))) for f in message.fields))
    return _SCALARS[field.type]


def message_values(message: Any, columns: Sequence[tuple[str, Any]]) -> dict[str, Any]:
    """A parsed message's values for ``columns`` (name, kind tree), as Arrow takes them for those kinds."""
    fields = message.DESCRIPTOR.fields_by_name
    return {name: _value(message, fields.get(name), kind) for name, kind in columns}


def _value(message: Any, field: Any, kind: Any) -> Any:
    if field is None:
        return None
    if not _repeated(field) and field.has_presence and not message.HasField(field.name):
        return None
    raw = getattr(message, field.name)
    if _is_map(field):
        return [(str(k), _one(raw[k], field.message_type.fields_by_name["value"], kind[1])) for k in raw]
    if _repeated(field):
        return [_one(item, field, kind[1] if isinstance(kind, tuple) else kind) for item in raw]
    return _one(raw, field, kind)


def _one(raw: Any, field: Any, kind: Any) -> Any:
    if field.type == 14:
        value = field.enum_type.values_by_number.get(raw)
        return value.name if value is not None else str(raw)
    if field.type in (10, 11):
        if raw.DESCRIPTOR.full_name == TIMESTAMP:
            return raw.ToDatetime(tzinfo=dt.timezone.utc)
        if kind == "string":
            from google.protobuf.json_format import MessageToDict

            return json.dumps(MessageToDict(raw, preserving_proto_field_name=True), sort_keys=True)
        return {name: _value(raw, raw.DESCRIPTOR.fields_by_name.get(name), sub) for name, sub in kind[1]}
    return raw


class ProtobufDecoder:
    """Decodes one batch's Protobuf values (per topic) into ``columns``; see the module docstring."""

    def __init__(self, registry: SchemaRegistry, readers: Sequence[Any], columns: Sequence[tuple[str, str]]) -> None:
        from kprio_core.values.kinds import parse

        self.registry = registry
        self.columns = tuple(columns)
        self.trees = [(name, parse(kind)) for name, kind in self.columns]
        self.types = {name: arrow_type(kind) for name, kind in self.columns}
        self._files = WriterSchemas(registry, "PROTOBUF", "Protobuf", file_descriptor, (Exception,),
                                    "does not compile")  # schema id -> file descriptor, or why the id cannot be used
        self._classes: dict[tuple[int, tuple[int, ...]], Any] = {}

    def _message_class(self, schema_id: int, indexes: list[int]) -> Any:
        from google.protobuf.message_factory import GetMessageClass

        key = (schema_id, tuple(indexes))
        if key not in self._classes:
            file = self._files.get(schema_id)
            if isinstance(file, str):
                self._classes[key] = file
            else:
                try:
                    self._classes[key] = GetMessageClass(message_of(file, indexes))
                except ValueError as err:
                    self._classes[key] = f"schema id {schema_id}: {err}"
        return self._classes[key]

    def decode(self, values: Any, topic: str) -> tuple[dict[str, Any], Any]:
        """``({column: Arrow array}, error array)`` for a binary Arrow array of ``topic``'s values."""
        import pyarrow as pa

        rows: dict[str, list[Any]] = {name: [] for name, _ in self.columns}
        errors: list[str | None] = []
        for value in values.to_pylist():
            record, error = (None, None) if value is None else self._record(value)
            for name in rows:
                rows[name].append(None if record is None else record[name])
            errors.append(error)
        columns = {}
        for name, items in rows.items():
            try:
                columns[name] = pa.array(items, type=self.types[name])
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
                kept = []
                for i, item in enumerate(items):
                    try:
                        pa.array([item], type=self.types[name])
                        kept.append(item)
                    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as err:
                        kept.append(None)
                        errors[i] = errors[i] or f"field {name!r} does not fit {self.types[name]}: {err}"
                columns[name] = pa.array(kept, type=self.types[name])
        return columns, pa.array(errors, type=pa.string())

    def _record(self, value: bytes) -> tuple[Any, str | None]:
        from google.protobuf.message import DecodeError

        head = header(value)
        if isinstance(head, str):
            return None, head
        schema_id, start = head
        try:
            indexes, start = message_indexes(value, start)
        except ValueError as err:
            return None, f"value of schema id {schema_id} has no valid message indexes: {err}"
        cls = self._message_class(schema_id, indexes)
        if isinstance(cls, str):
            return None, cls
        try:
            message = cls.FromString(value[start:])
        except DecodeError as err:
            return None, f"payload does not parse as {cls.DESCRIPTOR.full_name} of schema id {schema_id}: {err}"
        return message_values(message, self.trees), None
