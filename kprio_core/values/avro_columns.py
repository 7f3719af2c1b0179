"""An Avro record schema's columns: one typed column per top-level field, nested records as structs.

Types map as Kafka Connect's and Spark's ``from_avro`` map them, kept typed (Avro -> :mod:`~kprio_core.values.kinds`):
the numbers and boolean as they are; string, enum, ``uuid`` -> string; bytes, fixed -> bytes; ``decimal`` ->
decimal(p,s) (above 38 digits: string); ``date`` -> date; ``(local-)timestamp-millis/micros`` -> timestamp (UTC,
microseconds); ``time-millis/micros`` -> long (microseconds since midnight); record -> struct; array, map -> array, map
(string keys); null and one type -> that type; a union of several types -> string (the value as JSON). Every column is
nullable: a tombstone has none, and an older writer may lack a field. Speed: :mod:`~kprio_core.values.avro_vector` reads
most records; fastavro the rest without logical types, which Arrow applies per column (:data:`Builder`): a ``Decimal``
and a ``datetime`` per record cost twice the time.

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
>>> builders = {name: build for name, _, build in record_fields(schema)}
>>> builders["price"]([bytes.fromhex("04d2"), bytes.fromhex("ff"), None]).to_pylist()
[Decimal('12.34'), Decimal('-0.01'), None]
>>> builders["ship"]([{"day": 19723}, None]).to_pylist()
[{'day': datetime.date(2024, 1, 1)}, None]
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kprio_core.values.kinds import arrow_type, render

Builder = Callable[[list], Any]
"""Makes a column's Arrow array from its values as fastavro reads them without logical types."""

PRIMITIVES = {"boolean": "boolean", "int": "int", "long": "long", "float": "float", "double": "double",
              "string": "string", "bytes": "bytes", "null": "string"}
TIMESTAMPS = {"timestamp-millis": 1000, "timestamp-micros": 1, "local-timestamp-millis": 1000,
              "local-timestamp-micros": 1}
"""Microseconds per unit of each timestamp logical type (local ones are read as UTC)."""


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
    """The columns (name, kind) of a record schema (parsed JSON); ValueError for a schema that is not a record."""
    return tuple((name, render(tree)) for name, tree, _ in record_fields(schema))


def record_fields(schema: Any, names: Names | None = None) -> list[tuple[str, Any, Builder]]:
    """``(name, kind tree, builder)`` of every top-level field of a record schema."""
    names = names or Names()
    if isinstance(schema, str):
        schema = json.loads(schema)
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ValueError("the schema is not an Avro record: kprio decodes a record's fields into columns")
    space = names.define(schema, None)
    return [(f["name"], *_kind(f["type"], names, space)) for f in schema["fields"]]


def referenced_names(references: Any) -> Names:
    """The named types a schema's references define (``(name, schema text)``, theirs first), for its walk."""
    names = Names()
    for _, text in references:
        _kind(json.loads(text), names, None)
    return names


def without_logical_types(schema: Any) -> Any:
    """The schema (parsed JSON) with every ``logicalType`` left out: what fastavro reads the raw values with.

    >>> without_logical_types({"type": "array", "items": {"type": "long", "logicalType": "timestamp-millis"}})
    {'type': 'array', 'items': {'type': 'long'}}
    """
    if isinstance(schema, dict):
        return {k: without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [without_logical_types(v) for v in schema]
    return schema


def _plain(tree: Any) -> Builder:
    target = arrow_type(tree)

    def build(values: list) -> Any:
        import pyarrow as pa

        return pa.array(values, type=target)

    return build


def _kind(schema: Any, names: Names, space: str | None) -> tuple[Any, Builder]:
    if isinstance(schema, str):
        if schema in PRIMITIVES:
            return PRIMITIVES[schema], _plain(PRIMITIVES[schema])
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
        tree = ("struct", tuple((n, t) for n, t, _ in fields))
        return tree, _struct(fields, tree)
    if kind == "enum":
        names.define(schema, space)
        return "string", _plain("string")
    if kind == "fixed":
        names.define(schema, space)
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        if precision <= 38:
            return ("decimal", precision, scale), _decimal(precision, scale)
        return "string", _decimal_text(scale)
    if kind == "fixed":
        return "bytes", _plain("bytes")
    if kind == "array":
        item, build = _kind(schema["items"], names, space)
        return ("array", item), _list(build, ("array", item))
    if kind == "map":
        item, build = _kind(schema["values"], names, space)
        return ("map", item), _map(build, ("map", item))
    if logical == "date" and kind == "int":
        return "date", _scaled("int", 1, "date")
    if logical in TIMESTAMPS and kind == "long":
        return "timestamp", _scaled("long", TIMESTAMPS[logical], "timestamp")
    if logical in ("time-millis", "time-micros"):
        return "long", _scaled(kind, 1000 if logical == "time-millis" else 1, "long")
    if kind in PRIMITIVES:  # uuid: its string
        return PRIMITIVES[kind], _plain(PRIMITIVES[kind])
    return _kind(kind, names, space)  # {"type": "SomeNamedType"}


def _scaled(read: str, factor: int, target: str) -> Builder:
    """Whole numbers read as ``read``, times ``factor`` (checked for overflow), as ``target``."""
    source, goal = arrow_type(read), arrow_type(target)

    def build(values: list) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        arr = pa.array(values, type=source)
        if factor != 1:
            arr = pc.multiply_checked(arr.cast(pa.int64()), factor)
        if target == "date":
            return arr.cast(goal)
        return arr.cast(pa.int64()).cast(goal) if target == "timestamp" else arr.cast(goal)

    return build


def _decimal(precision: int, scale: int) -> Builder:
    """Avro's decimals into a decimal128 column without a ``Decimal`` each: 16 little-endian bytes per value."""
    target = arrow_type(("decimal", precision, scale))

    def build(values: list) -> Any:
        import pyarrow as pa

        limit = 10 ** precision
        out, valid = bytearray(), []
        for value in values:
            if value is None:
                out += bytes(16)
                valid.append(False)
                continue
            unscaled = int.from_bytes(value, "big", signed=True)
            if not -limit < unscaled < limit:
                raise ValueError(f"decimal {unscaled}e-{scale} has more than {precision} digits")
            out += unscaled.to_bytes(16, "little", signed=True)
            valid.append(True)
        mask = None if all(valid) else pa.array(valid, pa.bool_()).buffers()[1]
        return pa.Array.from_buffers(target, len(values), [mask, pa.py_buffer(bytes(out))],
                                     null_count=valid.count(False))

    return build


def _decimal_text(scale: int) -> Builder:
    def build(values: list) -> Any:
        from decimal import Decimal

        import pyarrow as pa

        return pa.array([None if v is None else str(Decimal(int.from_bytes(v, "big", signed=True)).scaleb(-scale))
                         for v in values], type=pa.string())

    return build


def _struct(fields: list[tuple[str, Any, Builder]], tree: Any) -> Builder:
    target = arrow_type(tree)

    def build(values: list) -> Any:
        import pyarrow as pa

        missing = [v is None for v in values]
        children = [child([None if v is None else v.get(name) for v in values]) for name, _, child in fields]
        mask = pa.array(missing, pa.bool_()) if any(missing) else None
        return pa.StructArray.from_arrays(children, fields=list(target), mask=mask)

    return build


def _offsets(values: list) -> tuple[list[int], list, list[bool]]:
    offsets, flat, missing = [0], [], []
    for v in values:
        if v is not None:
            flat.extend(v)
        offsets.append(len(flat))
        missing.append(v is None)
    return offsets, flat, missing


def _list(item: Builder, tree: Any) -> Builder:
    target = arrow_type(tree)

    def build(values: list) -> Any:
        import pyarrow as pa

        offsets, flat, missing = _offsets(values)
        mask = pa.array(missing, pa.bool_()) if any(missing) else None
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), item(flat), type=target, mask=mask)

    return build


def _map(item: Builder, tree: Any) -> Builder:
    target = arrow_type(tree)

    def build(values: list) -> Any:
        import pyarrow as pa

        offsets, keys, missing = _offsets([None if v is None else list(v) for v in values])
        items = [x for v in values if v is not None for x in v.values()]
        mask = pa.array(missing, pa.bool_()) if any(missing) else None
        return pa.MapArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(keys, pa.string()), item(items),
                                       type=target, mask=mask)

    return build


def _as_json(values: list) -> Any:
    """A union of several types: each value as JSON (bytes as hex; logical types as written: ints, bytes)."""
    import pyarrow as pa

    return pa.array([None if v is None else json.dumps(v, default=_json_default, sort_keys=True) for v in values],
                    type=pa.string())


def _json_default(value: Any) -> Any:
    return value.hex() if isinstance(value, bytes) else str(value)
