"""An Avro record schema's columns: one typed column per top-level field, nested records as structs.

Types map as Kafka Connect's and Spark's ``from_avro`` map them, kept typed:

=====================================  ===========================================
Avro                                   column kind (:mod:`kprio_core.values.kinds`)
=====================================  ===========================================
boolean, int, long, float, double      boolean, int, long, float, double
string, enum; ``uuid``                 string
bytes, fixed                           bytes
``decimal`` (bytes or fixed)           decimal(p,s) (above 38 digits: string)
``date``                               date
``timestamp-millis/micros``,           timestamp (UTC, microseconds)
``local-timestamp-millis/micros``
``time-millis``, ``time-micros``       long (microseconds since midnight)
record                                 struct<...>
array, map                             array<...>, map<...> (string keys)
union of null and one type             that type, nullable
union of several types                 string (the value as JSON)
=====================================  ===========================================

Every column is nullable: a tombstone has none, and an older writer may lack a field.

>>> schema = {"type": "record", "name": "Order", "fields": [
...     {"name": "id", "type": "long"},
...     {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
...     {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
...     {"name": "note", "type": ["null", "string"], "default": None},
...     {"name": "ship", "type": {"type": "record", "name": "Ship", "fields": [{"name": "day", "type":
...         {"type": "int", "logicalType": "date"}}]}},
...     {"name": "again", "type": "Ship"}]}
>>> record_columns(schema)
(('id', 'long'), ('price', 'decimal(10,2)'), ('at', 'timestamp'), ('note', 'string'), ('ship', 'struct<day:date>'), ('again', 'struct<day:date>'))
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from typing import Any

from kprio_core.values.kinds import render

Normalizer = Callable[[Any], Any] | None
"""Turns a value as fastavro gives it into one Arrow takes for the column's type (None: as it is)."""

PRIMITIVES = {"boolean": "boolean", "int": "int", "long": "long", "float": "float", "double": "double",
              "string": "string", "bytes": "bytes", "null": "string"}
TIMESTAMPS = ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros")


class Names:
    """The named types (records, enums, fixed) seen so far while walking a schema, by full name."""

    def __init__(self) -> None:
        self.types: dict[str, Any] = {}

    def define(self, schema: dict, namespace: str | None) -> str | None:
        name = schema["name"]
        space = schema.get("namespace", namespace)
        full = name if "." in name or not space else f"{space}.{name}"
        self.types[full] = schema
        self.types.setdefault(name, schema)
        return full.rsplit(".", 1)[0] if "." in full else None

    def find(self, name: str, namespace: str | None) -> Any:
        for candidate in (f"{namespace}.{name}" if namespace and "." not in name else name, name):
            if candidate in self.types:
                return self.types[candidate]
        raise ValueError(f"the schema names the type {name!r} but does not define it")


def record_columns(schema: Any) -> tuple[tuple[str, str], ...]:
    """The columns (name, kind) of a record schema (parsed JSON). Raises ValueError for a schema that is not a
    record."""
    return tuple((name, render(tree)) for name, tree, _ in record_fields(schema))


def record_fields(schema: Any, names: Names | None = None) -> list[tuple[str, Any, Normalizer]]:
    """``(name, kind tree, normalizer)`` of every top-level field of a record schema."""
    names = names or Names()
    if isinstance(schema, str):
        schema = json.loads(schema)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ValueError("the schema is not an Avro record: kprio decodes a record's fields into columns")
    space = names.define(schema, None)
    return [(f["name"], *_kind(f["type"], names, space)) for f in schema["fields"]]


def _kind(schema: Any, names: Names, space: str | None) -> tuple[Any, Normalizer]:
    if isinstance(schema, str):
        if schema in PRIMITIVES:
            return PRIMITIVES[schema], None
        return _kind(names.find(schema, space), names, space)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) == 1:
            return _kind(branches[0], names, space)
        for branch in branches:  # define the named types of every branch
            _kind(branch, names, space)
        return "string", _as_json
    kind = schema["type"]
    logical = schema.get("logicalType")
    if kind in ("record", "error"):
        inner = names.define(schema, space)
        fields = [(f["name"], *_kind(f["type"], names, inner)) for f in schema["fields"]]
        return ("struct", tuple((n, t) for n, t, _ in fields)), _record_normalizer(fields)
    if kind == "enum":
        names.define(schema, space)
        return "string", None
    if kind == "fixed":
        names.define(schema, space)
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        return (("decimal", precision, scale), None) if precision <= 38 else ("string", _as_text)
    if kind == "fixed":
        return "bytes", None
    if kind == "array":
        item, normal = _kind(schema["items"], names, space)
        return ("array", item), (None if normal is None else (lambda v: None if v is None else [normal(x) for x in v]))
    if kind == "map":
        item, normal = _kind(schema["values"], names, space)
        return ("map", item), (None if normal is None else
                               (lambda v: None if v is None else {k: normal(x) for k, x in v.items()}))
    if logical == "date" and kind == "int":
        return "date", None
    if logical in TIMESTAMPS and kind == "long":
        return "timestamp", None
    if logical in ("time-millis", "time-micros"):
        return "long", _time_of_day
    if logical == "uuid" and kind == "string":
        return "string", _as_text
    if kind in PRIMITIVES:
        return PRIMITIVES[kind], None
    return _kind(kind, names, space)  # {"type": "SomeNamedType"}


def _record_normalizer(fields: list[tuple[str, Any, Normalizer]]) -> Normalizer:
    active = [(name, normal) for name, _, normal in fields if normal is not None]
    if not active:
        return None

    def normalize(value: Any) -> Any:
        if value is None:
            return None
        out = dict(value)
        for name, normal in active:
            out[name] = normal(out.get(name))
        return out

    return normalize


def _as_text(value: Any) -> Any:
    return None if value is None else str(value)


def _as_json(value: Any) -> Any:
    return None if value is None else json.dumps(value, default=_json_default, sort_keys=True)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    return str(value)  # Decimal


def _time_of_day(value: Any) -> Any:
    if isinstance(value, dt.time):
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
    return value
