"""Column kinds: the names of a decoded column's type, one small grammar shared by every value format.

Scalars ``string``, ``long``, ``double``, ``boolean``, ``timestamp`` (a topic's JSON ``schema``), and from a registry
schema also ``int``, ``float``, ``bytes``, ``date``, ``decimal(p,s)``, ``array<kind>``, ``map<kind>`` (string keys),
``struct<name:kind,...>``. A plain string, so it travels in drain specs and ledgers as it is; :func:`arrow_type` gives
its Arrow type (Spark's and Delta's follow).

>>> parse("struct<id:long,tags:array<string>,price:decimal(10,2)>")
('struct', (('id', 'long'), ('tags', ('array', 'string')), ('price', ('decimal', 10, 2))))
>>> arrow_type("map<date>")
MapType(map<string, date32[day]>)
>>> arrow_type("timestamp")
TimestampType(timestamp[us, tz=UTC])
>>> parse("list<long>")
Traceback (most recent call last):
...
ValueError: unknown column kind 'list<long>'
"""

from __future__ import annotations

import re
from typing import Any

SCALARS = ("string", "long", "double", "boolean", "timestamp", "int", "float", "bytes", "date")

_DECIMAL = re.compile(r"decimal\((\d+),(\d+)\)")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse(kind: str) -> Any:
    """The kind as a tree: a scalar name, or ``("decimal", p, s)``, ``("array", item)``, ``("map", value)``,
    ``("struct", ((name, kind), ...))``."""
    tree, rest = _parse(kind.replace(" ", ""), kind)
    if rest:
        raise ValueError(f"unknown column kind {kind!r}")
    return tree


def _parse(text: str, whole: str) -> tuple[Any, str]:
    for scalar in SCALARS:
        if text.startswith(scalar) and not _NAME.match(text[len(scalar):len(scalar) + 1] or " "):
            return scalar, text[len(scalar):]
    if m := _DECIMAL.match(text):
        return ("decimal", int(m.group(1)), int(m.group(2))), text[m.end():]
    for nested in ("array", "map"):
        if text.startswith(f"{nested}<"):
            item, rest = _parse(text[len(nested) + 1:], whole)
            if not rest.startswith(">"):
                break
            return (nested, item), rest[1:]
    if text.startswith("struct<"):
        rest, fields = text[len("struct<"):], []
        while not rest.startswith(">"):
            name = _NAME.match(rest)
            if name is None or rest[name.end():name.end() + 1] != ":":
                raise ValueError(f"unknown column kind {whole!r}")
            item, rest = _parse(rest[name.end() + 1:], whole)
            fields.append((name.group(), item))
            if rest.startswith(","):
                rest = rest[1:]
            elif not rest.startswith(">"):
                raise ValueError(f"unknown column kind {whole!r}")
        return ("struct", tuple(fields)), rest[1:]
    raise ValueError(f"unknown column kind {whole!r}")


def render(tree: Any) -> str:
    """The kind string of a tree (``parse``'s inverse).

    >>> render(("struct", (("a", "int"), ("b", ("decimal", 4, 1)))))
    'struct<a:int,b:decimal(4,1)>'
    """
    if isinstance(tree, str):
        return tree
    if tree[0] == "decimal":
        return f"decimal({tree[1]},{tree[2]})"
    if tree[0] in ("array", "map"):
        return f"{tree[0]}<{render(tree[1])}>"
    return "struct<" + ",".join(f"{name}:{render(item)}" for name, item in tree[1]) + ">"


def arrow_type(kind: str | Any) -> Any:
    """The Arrow type of a kind (timestamps: microseconds, UTC, as Spark and Delta keep them)."""
    import pyarrow as pa

    tree = parse(kind) if isinstance(kind, str) else kind
    if isinstance(tree, str):
        return {
            "string": pa.string(), "long": pa.int64(), "double": pa.float64(), "boolean": pa.bool_(),
            "timestamp": pa.timestamp("us", tz="UTC"), "int": pa.int32(), "float": pa.float32(),
            "bytes": pa.binary(), "date": pa.date32(),
        }[tree]
    if tree[0] == "decimal":
        return pa.decimal128(tree[1], tree[2])
    if tree[0] == "array":
        return pa.list_(arrow_type(tree[1]))
    if tree[0] == "map":
        return pa.map_(pa.string(), arrow_type(tree[1]))
    return pa.struct([(name, arrow_type(item)) for name, item in tree[1]])
