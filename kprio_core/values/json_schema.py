"""JSON Schema values in the wire format (Confluent's ``JSONSerializer``): the header, then JSON text, checked against
the writer's schema and decoded into the columns of the subject's latest schema.

The columns are the top-level ``properties`` of an ``object`` schema (-> :mod:`~kprio_core.values.kinds`): ``string`` ->
string (``format: date-time`` / ``date`` -> timestamp (UTC) / date); ``integer``, ``number``, ``boolean`` -> long,
double, boolean; ``object`` with ``properties`` -> struct; ``array`` with ``items`` -> array; null and one type -> that
type; anything else (``oneOf``, ``$ref``, no type) -> string (the value as JSON). JSON breaking its writer's schema (the
first violation is the reason, as Confluent's deserializer refuses it), the wire format's failures and text that is not
JSON make bad records; a missing field is null.

>>> json_schema_columns({"type": "object", "properties": {"id": {"type": "integer"},
...     "at": {"type": "string", "format": "date-time"}, "tags": {"type": "array", "items": {"type": "string"}},
...     "ship": {"type": "object", "properties": {"city": {"type": ["null", "string"]}}}, "any": {}}})
(('id', 'long'), ('at', 'timestamp'), ('tags', 'array<string>'), ('ship', 'struct<city:string>'), ('any', 'string'))
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from typing import Any

from kprio_core.values.kinds import arrow_type, render
from kprio_core.values.registry import RegisteredSchema, SchemaRegistry, WriterSchemas
from kprio_core.values.wire import header

Convert = Callable[[Any], Any]
"""A JSON value into the one Arrow takes for its column's type (raises ValueError or TypeError when it cannot)."""


def json_schema_columns(schema: Any) -> tuple[tuple[str, str], ...]:
    """The columns (name, kind) of an object schema (parsed JSON or its text)."""
    return tuple((name, render(tree)) for name, tree, _ in json_schema_fields(schema))


def json_schema_fields(schema: Any) -> list[tuple[str, Any, Convert]]:
    """``(name, kind tree, converter)`` of every top-level property."""
    if isinstance(schema, str):
        schema = json.loads(schema)
    if not isinstance(schema, dict) or schema.get("type") != "object" or not isinstance(schema.get("properties"), dict):
        raise ValueError("the schema is not a JSON Schema object with properties: kprio decodes its properties into "
                         "columns")
    return [(name, *_kind(sub)) for name, sub in schema["properties"].items()]


def _kind(schema: Any) -> tuple[Any, Convert]:
    if not isinstance(schema, dict):
        return "string", _as_json
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) != 1:
            return "string", _as_json
        kind = kinds[0]
    if kind == "string":
        fmt = schema.get("format")
        if fmt == "date-time":
            return "timestamp", _timestamp
        if fmt == "date":
            return "date", _date
        return "string", _typed(str)
    if kind == "integer":
        return "long", _integer
    if kind == "number":
        return "double", _number
    if kind == "boolean":
        return "boolean", _typed(bool)
    if kind == "object" and isinstance(schema.get("properties"), dict):
        fields = [(name, *_kind(sub)) for name, sub in schema["properties"].items()]
        return ("struct", tuple((n, t) for n, t, _ in fields)), _record(fields)
    if kind == "array" and isinstance(schema.get("items"), dict):
        item, convert = _kind(schema["items"])
        return ("array", item), _array(convert)
    return "string", _as_json


def _typed(kind: type) -> Convert:
    def convert(value: Any) -> Any:
        if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
        return value

    return convert


def _integer(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected integer, got {type(value).__name__}")
    return value


def _number(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"expected number, got {type(value).__name__}")
    return float(value)


def _timestamp(value: Any) -> Any:
    parsed = dt.datetime.fromisoformat(_typed(str)(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def _date(value: Any) -> Any:
    return dt.date.fromisoformat(_typed(str)(value))


def _record(fields: list[tuple[str, Any, Convert]]) -> Convert:
    def convert(value: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected object, got {type(value).__name__}")
        return {name: None if value.get(name) is None else conv(value[name]) for name, _, conv in fields}

    return convert


def _array(item: Convert) -> Convert:
    def convert(value: Any) -> Any:
        if not isinstance(value, list):
            raise TypeError(f"expected array, got {type(value).__name__}")
        return [None if v is None else item(v) for v in value]

    return convert


def _as_json(value: Any) -> Any:
    return json.dumps(value, sort_keys=True)


class JsonSchemaDecoder:
    """Decodes one batch's JSON Schema values (per topic) into ``columns``; see the module docstring."""

    def __init__(self, registry: SchemaRegistry, readers: Sequence[Any], columns: Sequence[tuple[str, str]]) -> None:
        self.registry = registry
        self.converters = {r.topic: {name: conv for name, _, conv in json_schema_fields(r.schema.text)}
                           for r in readers}
        self.columns = tuple(columns)
        self.types = {name: arrow_type(kind) for name, kind in self.columns}
        self._validators = WriterSchemas(registry, "JSON", "JSON Schema", validator, (ValueError, TypeError),
                                         "is not a JSON Schema")  # schema id -> a validator, or why not

    def decode(self, values: Any, topic: str) -> tuple[dict[str, Any], Any]:
        """``({column: Arrow array}, error array)`` for a binary Arrow array of ``topic``'s values."""
        import pyarrow as pa

        converters = self.converters[topic]
        rows: dict[str, list[Any]] = {name: [] for name, _ in self.columns}
        errors: list[str | None] = []
        for value in values.to_pylist():
            record, error = (None, None) if value is None else self._record(value)
            if record is not None:
                converted, error = self._convert(record, converters)
                record = converted if error is None else None
            for name in rows:
                rows[name].append(None if record is None else record.get(name))
            errors.append(error)
        columns = {name: pa.array(items, type=self.types[name]) for name, items in rows.items()}
        return columns, pa.array(errors, type=pa.string())

    def _record(self, value: bytes) -> tuple[Any, str | None]:
        head = header(value)
        if isinstance(head, str):
            return None, head
        schema_id, start = head
        validator = self._validators.get(schema_id)
        if isinstance(validator, str):
            return None, validator
        try:
            record = json.loads(value[start:])
        except ValueError as err:  # UnicodeDecodeError is a ValueError too
            return None, f"payload of schema id {schema_id} is not JSON: {err}"
        problem = next(iter(validator.iter_errors(record)), None)
        if problem is not None:
            where = "/".join(str(p) for p in problem.absolute_path) or "the record"
            return None, f"{where} does not satisfy schema id {schema_id}: {problem.message}"[:300]
        if not isinstance(record, dict):
            return None, f"schema id {schema_id} decodes to a JSON {type(record).__name__}, not an object"
        return record, None

    @staticmethod
    def _convert(record: dict, converters: dict[str, Convert]) -> tuple[dict | None, str | None]:
        out = {}
        for name, convert in converters.items():
            item = record.get(name)
            try:
                out[name] = None if item is None else convert(item)
            except (TypeError, ValueError) as err:
                return None, f"field {name!r}: {err}"
        return out, None


def validator(schema: RegisteredSchema) -> Any:
    """A jsonschema validator of a registered JSON Schema (its draft as the schema says)."""
    from jsonschema.validators import validator_for

    parsed = json.loads(schema.text)
    return validator_for(parsed)(parsed)
