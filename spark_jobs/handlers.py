"""Record handlers shipped with kprio. The default decodes JSON values into typed columns.

:func:`decode_json` reads the topic's schema (``TopicSettings.schema_``, e.g.
``{"amount": "double", "at": "timestamp"}``) and adds one column per field, named after the
field. The raw ``value`` stays as it was. A value that is not a JSON object, or a field of the
wrong type, gives the record an ``error`` (the other fields still decoded); a tombstone (null
value) is a fine record with every field null. A missing field is null, not an error: which
fields are required is for the checks to say.

Types: ``string`` (JSON string), ``long`` (JSON integer), ``double`` (any JSON number),
``boolean``, ``timestamp`` (ISO-8601 string, UTC when no offset is given, or epoch
milliseconds as a number).

>>> decode_value(b'{"n": 3, "x": 1.5, "at": "2024-01-01T00:00:00Z"}', {"n": "long", "x": "double", "at": "timestamp"})
({'n': 3, 'x': 1.5, 'at': datetime.datetime(2024, 1, 1, 0, 0, tzinfo=datetime.timezone.utc)}, None)
>>> decode_value(b'{"n": "three"}', {"n": "long", "x": "double"})
({'n': None, 'x': None}, "field 'n': expected long, got str 'three'")
>>> decode_value(b'not json', {"n": "long"})[1]
'value is not JSON: Expecting value: line 1 column 1 (char 0)'
>>> decode_value(None, {"n": "long"})
({'n': None}, None)
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

from spark_jobs.handler_contract import LaneContext


def decode_json(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """The default handler: decode each JSON value into the schema's typed columns (see module doc).

    A frame is first parsed in one go by Arrow's JSON reader (strict types, as below); a frame
    it refuses (a malformed value, a wrong type, a timestamp field) is decoded record by record
    so each bad record gets its own error and the good ones are unaffected.
    """
    import pandas as pd

    fields = context.fields
    for frame in frames:
        values = frame["value"].tolist()
        typed = _decode_vectorised(values, fields, pd)
        if typed is not None:
            yield frame.assign(**typed, error=None)
            continue
        columns: dict[str, list[Any]] = {name: [] for name in fields}
        errors: list[str | None] = []
        for value in values:
            decoded, error = decode_value(value, fields)
            for name, item in decoded.items():
                columns[name].append(item)
            errors.append(error)
        typed = {name: _typed(columns[name], kind, pd) for name, kind in fields.items()}
        yield frame.assign(**typed, error=errors)


_ARROW_TYPES = {"long": "int64", "double": "float64", "boolean": "bool_", "string": "string"}


def _decode_vectorised(values: list[bytes | None], fields: Mapping[str, str], pd: Any) -> dict[str, Any] | None:
    """All fields of a frame at once, or None when Arrow cannot vouch for every record."""
    import io

    import pyarrow as pa
    import pyarrow.json as pj

    if any(kind not in _ARROW_TYPES for kind in fields.values()):
        return None  # timestamps accept more spellings than Arrow's parser: record by record
    present = [v for v in values if v is not None]
    # One record per line: a value holding a newline, or a blank one, could shift the lines.
    if any(b"\n" in v or b"\r" in v or not v.strip() for v in present):
        return None
    schema = pa.schema([(name, getattr(pa, _ARROW_TYPES[kind])()) for name, kind in fields.items()])
    if present:
        try:
            table = pj.read_json(
                io.BytesIO(b"\n".join(present)),
                read_options=pj.ReadOptions(block_size=max(1 << 20, sum(map(len, present)) + len(present) + 1)),
                parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
            )
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError):
            return None
        if table.num_rows != len(present):
            return None  # e.g. two objects on one line
    else:
        table = schema.empty_table()
    out = {}
    for name, kind in fields.items():
        decoded = table.column(name).to_pylist()
        if len(present) != len(values):  # tombstones: null fields in their rows
            it = iter(decoded)
            decoded = [None if v is None else next(it) for v in values]
        out[name] = _typed(decoded, kind, pd)
    return out


def decode_value(value: bytes | None, fields: Mapping[str, str]) -> tuple[dict[str, Any], str | None]:
    """One record's fields and its error (None when fine)."""
    out: dict[str, Any] = dict.fromkeys(fields)
    if value is None:
        return out, None
    try:
        obj = json.loads(value)
    except ValueError as err:  # UnicodeDecodeError is a ValueError too
        return out, f"value is not JSON: {err}"
    if not isinstance(obj, dict):
        return out, f"value is a JSON {type(obj).__name__}, not an object"
    problems = []
    for name, kind in fields.items():
        raw = obj.get(name)
        if raw is None:
            continue
        converted = _convert(raw, kind)
        if converted is _BAD:
            problems.append(f"field {name!r}: expected {kind}, got {type(raw).__name__} {_clip(raw)}")
        else:
            out[name] = converted
    return out, "; ".join(problems) or None


_BAD = object()


def _convert(raw: Any, kind: str) -> Any:
    if kind == "string":
        return raw if isinstance(raw, str) else _BAD
    if kind == "long":
        return raw if isinstance(raw, int) and not isinstance(raw, bool) else _BAD
    if kind == "double":
        return float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else _BAD
    if kind == "boolean":
        return raw if isinstance(raw, bool) else _BAD
    if kind == "timestamp":
        return _timestamp(raw)
    raise ValueError(f"unknown field type {kind!r}")


def _timestamp(raw: Any) -> Any:
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return datetime.fromtimestamp(raw / 1000, tz=timezone.utc)
    if isinstance(raw, str):
        try:
            parsed = datetime.fromisoformat(raw)
        except ValueError:
            return _BAD
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    return _BAD


def _clip(raw: Any) -> str:
    text = repr(raw)
    return text if len(text) <= 40 else text[:37] + "..."


_DTYPES = {"long": "Int64", "double": "Float64", "boolean": "boolean", "string": "object"}


def _typed(values: list[Any], kind: str, pd: Any) -> Any:
    if kind == "timestamp":
        return pd.to_datetime(pd.Series(values, dtype="object"), utc=True)
    return pd.array(values, dtype=_DTYPES[kind])
