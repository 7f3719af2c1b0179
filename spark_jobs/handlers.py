"""Record handlers shipped with kprio: JSON (default), registry formats (:func:`decode_avro`), raw (:func:`keep_raw`).

:func:`decode_json` adds one column per field of the topic's schema (``TopicSettings.schema_``, e.g.
``{"amount": "double", "at": "timestamp"}``); the raw ``value`` stays. A value that is not a JSON object, or a
field of the wrong type, gives the record an ``error`` (other fields still decoded); a tombstone is a fine
record with every field null. A missing field is null, not an error: required fields are for the checks.

Types: ``string``, ``long`` (JSON integer), ``double`` (any JSON number), ``boolean``, ``timestamp``
(ISO-8601 string, UTC when no offset is given, or epoch milliseconds as a number).

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

from kprio_core.errors import HandlerError
from spark_jobs.handler_contract import LaneContext


def decode_json(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """The default handler, pandas form of :func:`decode_values` (columns as pandas' nullable types)."""
    import pyarrow as pa

    fields = context.fields
    for frame in frames:
        values = pa.array(frame["value"].tolist(), type=pa.binary())
        columns, errors = decode_values(values, fields)
        typed = {name: _pandas(columns[name]) for name in fields}
        yield frame.assign(**typed, error=errors.to_pylist())


def decode_json_arrow(batches: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """Arrow form of :func:`decode_json` (the drain uses it): same rows, no pandas."""
    import pyarrow as pa

    fields = context.fields
    for batch in batches:
        columns, errors = decode_values(batch.column("value"), fields)
        yield pa.RecordBatch.from_arrays([*columns.values(), errors], names=[*columns, "error"])


decode_json.arrow = decode_json_arrow  # type: ignore[attr-defined]


def decode_avro(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """Registry wire-format values into the batch's columns (:mod:`kprio_core.values.avro`); pandas form."""
    import pyarrow as pa

    arrow = decode_avro_arrow((pa.RecordBatch.from_pandas(f[["value"]], preserve_index=False) for f in frames),
                              context)
    for batch in arrow:
        yield batch.to_pandas()


def decode_avro_arrow(batches: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """Arrow form of :func:`decode_avro` (the drain uses it), with the decoder ``context.values`` gives.

    A record that cannot be decoded gets an ``error`` (a dead letter with its raw bytes); an unreachable
    registry raises (transient: the batch waits)."""
    import pyarrow as pa

    if context.values is None:
        raise HandlerError(f"handler decode_avro has no registry for {context}: set the topic's value_format to avro")
    missing = context.values.missing_subject(context.topic)
    decoder = context.values.decoder(context.schema) if missing is None else None
    for batch in batches:
        if decoder is None:  # no schema of this topic's subject: every value is a bad record, tombstones are fine
            values = batch.column("value")
            why = f"subject {missing!r} is not in the schema registry: no schema to read the value with"
            errors = pa.array([None if v is None else why for v in values.to_pylist()], type=pa.string())
            yield pa.RecordBatch.from_arrays([errors], names=["error"])
            continue
        columns, errors = decoder.decode(batch.column("value"), context.topic)
        yield pa.RecordBatch.from_arrays([*columns.values(), errors], names=[*columns, "error"])


decode_avro.arrow = decode_avro_arrow  # type: ignore[attr-defined]

decode_registry_values = decode_avro
"""Any registry value format (``avro``, ``protobuf``, ``json_schema``): ``context.values`` says which."""


def keep_raw(frames: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """``value_format: raw``: nothing decoded, every record fine (its ``value`` stays as it was)."""
    import pandas as pd

    for frame in frames:
        yield pd.DataFrame({"error": pd.Series([None] * len(frame), dtype=object)})


def keep_raw_arrow(batches: Iterator[Any], context: LaneContext) -> Iterator[Any]:
    """Arrow form of :func:`keep_raw`."""
    import pyarrow as pa

    for batch in batches:
        yield pa.RecordBatch.from_arrays([pa.nulls(batch.num_rows, pa.string())], names=["error"])


keep_raw.arrow = keep_raw_arrow  # type: ignore[attr-defined]


_ARROW_TYPES = {"long": "int64", "double": "float64", "boolean": "bool_", "string": "string"}
_WHITESPACE = (b"", b" ", b"\t", b"\n", b"\r", b"\x0b", b"\x0c")


def arrow_type(kind: str) -> Any:
    """The Arrow type of a schema field kind (timestamps: microseconds, UTC)."""
    import pyarrow as pa

    return pa.timestamp("us", tz="UTC") if kind == "timestamp" else getattr(pa, _ARROW_TYPES[kind])()


def decode_values(values: Any, fields: Mapping[str, str]) -> tuple[dict[str, Any], Any]:
    """Decode a binary Arrow array of JSON values: ``({field: array}, error array)``.

    Arrow's JSON reader parses them in one go; when it refuses (malformed, wrong type, timestamps) they are
    decoded record by record, so each bad record gets its own error.

    >>> import pyarrow as pa
    >>> cols, errs = decode_values(pa.array([b'{"n": 1}', None, b'{"n": 2}'], pa.binary()), {"n": "long"})
    >>> cols["n"].to_pylist(), errs.null_count
    ([1, None, 2], 3)
    >>> cols, errs = decode_values(pa.array([b'{"n": 1}', b'{"n": "x"}'], pa.binary()), {"n": "long"})
    >>> cols["n"].to_pylist(), errs.to_pylist()
    ([1, None], [None, "field 'n': expected long, got str 'x'"])
    """
    import pyarrow as pa

    decoded = _decode_vectorised(values, fields)
    if decoded is not None:
        return decoded, pa.nulls(len(values), pa.string())
    columns: dict[str, list[Any]] = {name: [] for name in fields}
    errors: list[str | None] = []
    for value in values.to_pylist():
        fields_of, error = decode_value(value, fields)
        for name, item in fields_of.items():
            columns[name].append(item)
        errors.append(error)
    typed = {name: pa.array(columns[name], type=arrow_type(kind)) for name, kind in fields.items()}
    return typed, pa.array(errors, type=pa.string())


def _decode_vectorised(values: Any, fields: Mapping[str, str]) -> dict[str, Any] | None:
    """All fields of the values at once, or None when Arrow cannot vouch for every record."""
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    if any(kind not in _ARROW_TYPES for kind in fields.values()):
        return None  # timestamps accept more spellings than Arrow's parser: record by record
    schema = pa.schema([(name, arrow_type(kind)) for name, kind in fields.items()])
    present = values.drop_null() if values.null_count else values
    if len(present) == 0:
        return {name: pa.nulls(len(values), field.type) for name, field in zip(schema.names, schema, strict=True)}
    # One record per line: a value holding a newline, or a blank one, could shift the lines.
    if pc.any(pc.is_in(pc.binary_slice(present, 0, 1), value_set=pa.array(_WHITESPACE, pa.binary()))).as_py():
        if any(not v.strip() for v in present.to_pylist()):
            return None
    text = b"\n".join(present.to_pylist())
    if text.count(b"\n") != len(present) - 1 or b"\r" in text:
        return None
    try:
        table = pj.read_json(
            io.BytesIO(text),
            # One block for the whole frame; no thread pool: a Spark task has one core to itself.
            read_options=pj.ReadOptions(use_threads=False, block_size=len(text) + 1),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError):
        return None
    if table.num_rows != len(present):
        return None  # e.g. two objects on one line
    out = {name: table.column(name).combine_chunks() for name in fields}
    if values.null_count:  # tombstones: null fields in their rows
        valid = values.is_valid().to_numpy(zero_copy_only=False)
        index = pa.array(np.cumsum(valid) - 1, mask=~valid)
        out = {name: column.take(index) for name, column in out.items()}
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


def _pandas(column: Any) -> Any:
    """An Arrow column as a pandas array of a nullable type (Int64, Float64, boolean, object, datetime)."""
    import pandas as pd
    import pyarrow as pa

    mapper = {pa.int64(): pd.Int64Dtype(), pa.float64(): pd.Float64Dtype(), pa.bool_(): pd.BooleanDtype()}
    return column.to_pandas(types_mapper=mapper.get).array
