"""Avro records decoded a field at a time across a whole Arrow batch with numpy: the drain's fast path.

fastavro makes a Python object per value, four times the cost of Arrow's JSON reader. Here every record of one writer
schema has a cursor into the batch's data buffer and each field is read for all records at once. A record this reader
doubts is flagged, never guessed (a read past its end, bytes left, a union branch, enum index or boolean out of range,
invalid UTF-8, a varint over 10 bytes): fastavro reads it again and gives the exact dead-letter reason. Schemas not
covered (unions of several types, recursive types, decimals of 38 digits or more) give ``None`` from :func:`plan`.

>>> import pyarrow as pa
>>> schema = {"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"},
...     {"name": "s", "type": ["null", "string"]}, {"name": "d", "type": {"type": "bytes",
...     "logicalType": "decimal", "precision": 5, "scale": 2}}]}
>>> values = pa.array([b"\\x00\\x00\\x00\\x00\\x01" b"\\x06" b"\\x02\\x04hi" b"\\x04\\x04\\xd2",
...                    b"\\x00\\x00\\x00\\x00\\x01" b"\\x05" b"\\x00" b"\\x02\\xff" b"!"], pa.binary())
>>> columns, bad = plan(schema).read(values, np.array([0, 1]))
>>> [c.to_pylist() for c in columns], bad.tolist()
([[3, -3], ['hi', None], [Decimal('12.34'), Decimal('-0.01')]], [False, True])
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from kprio_core.values.avro_columns import TIMESTAMPS, Names
from kprio_core.values.kinds import arrow_type
from kprio_core.values.wire import HEADER_BYTES

Node = tuple
"""A compiled schema node: ``(how, arrow type, details)``."""


MOST_ITEMS = 64
"""Items of one array or map block read across records; a longer block (a numpy call per item) goes to fastavro."""


class Unsupported(ValueError):
    """A schema this reader leaves to fastavro."""


def plan(schema: Any, names: Names | None = None) -> VectorPlan | None:
    """The plan of a record schema (parsed JSON or text), or None when fastavro must read it."""
    if isinstance(schema, str):
        schema = json.loads(schema)
    try:
        return VectorPlan(_compile(schema, names or Names(), None, ()))
    except (ValueError, KeyError, TypeError, AttributeError):  # Unsupported, or a fault fastavro will name
        return None


def _compile(schema: Any, names: Names, space: str | None, open_records: tuple) -> Node:
    """The node of ``schema``; mirrors :func:`kprio_core.values.avro_columns._kind`, which gives the columns."""
    if isinstance(schema, str):
        if schema in ("boolean", "int", "long", "float", "double", "string", "bytes"):
            return (schema, arrow_type(schema), None)
        if schema == "null":
            return ("null", arrow_type("string"), None)
        return _compile(names.find(schema, space), names, space, open_records)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1 or len(schema) != 2:
            raise Unsupported("a union of several types")
        inner = _compile(branches[0], names, space, open_records)
        return ("nullable", inner[1], (schema.index("null"), inner))
    kind, logical = schema["type"], schema.get("logicalType")
    if kind in ("record", "error"):
        return _compile_record(schema, names, space, open_records)
    if kind == "enum":
        names.define(schema, space)
        return ("enum", arrow_type("string"), list(schema["symbols"]))
    if kind == "fixed":
        names.define(schema, space)
    raw = ("fixed", arrow_type("bytes"), int(schema["size"])) if kind == "fixed" else None
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
        if precision >= 38:
            raise Unsupported("a decimal of 38 digits or more")
        return ("decimal", arrow_type(("decimal", precision, scale)), raw or ("bytes", arrow_type("bytes"), None))
    if raw:
        return raw
    if kind in ("array", "map"):
        import pyarrow as pa

        item = _compile(schema["items" if kind == "array" else "values"], names, space, open_records)
        return (kind, pa.list_(item[1]) if kind == "array" else pa.map_(pa.string(), item[1]), item)
    if logical == "date" and kind == "int":
        return ("scaled", arrow_type("date"), ("int", 1))
    if logical in TIMESTAMPS and kind == "long":
        return ("scaled", arrow_type("timestamp"), ("long", TIMESTAMPS[logical]))
    if logical in ("time-millis", "time-micros"):
        if kind not in ("int", "long"):
            raise Unsupported(f"{logical} on {kind}")
        return ("scaled", arrow_type("long"), (kind, 1000 if logical == "time-millis" else 1))
    return _compile(kind, names, space, open_records)


def _compile_record(schema: Any, names: Names, space: str | None, open_records: tuple) -> Node:
    """A record's node (its fields' nodes, in its namespace); a record inside itself (``open_records``) is refused."""
    full = names.define(schema, space)
    if id(schema) in open_records:
        raise Unsupported("a recursive record")
    fields = [(f["name"], _compile(f["type"], names, full, (*open_records, id(schema)))) for f in
              schema["fields"]]
    import pyarrow as pa

    return ("record", pa.struct([pa.field(n, node[1]) for n, node in fields]), fields)


def resolution(writer: Any, reader: Any, writer_plan: VectorPlan, reader_plan: VectorPlan) -> list | None:
    """How the reader's fields come from the writer's record (both schemas parsed JSON): each ``("field", index of
    the writer's field)`` or ``("default", value)``; None when fastavro must resolve them (a field's type changed, a
    promotion, an alias, a default not a plain value, another record name): it also says which are incompatible.

    >>> v1 = {"type": "record", "name": "E", "fields": [{"name": "n", "type": "long"}, {"name": "x", "type": "int"}]}
    >>> v2 = {**v1, "fields": [v1["fields"][0], {"name": "s", "type": ["null", "string"], "default": None}]}
    >>> resolution(v1, v2, plan(v1), plan(v2))
    [('field', 0), ('default', None)]
    >>> resolution(v1, {**v1, "fields": [{"name": "n", "type": "double"}]}, plan(v1), plan(v1)) is None
    True
    """
    if writer.get("name", "").rsplit(".", 1)[-1] != reader.get("name", "").rsplit(".", 1)[-1]:
        return None
    theirs = {f["name"]: (i, f) for i, f in enumerate(writer["fields"])}
    out: list = []
    for spec, (name, node) in zip(reader["fields"], reader_plan.root[2]):
        if spec.get("aliases"):
            return None
        if name in theirs:
            index, their = theirs[name]
            same = json.dumps(their["type"], sort_keys=True) == json.dumps(spec["type"], sort_keys=True)
            if not same or writer_plan.root[2][index][1] != node:  # the same text may name other types
                return None
            out.append(("field", index))
        elif "default" in spec and _plain(node, spec["default"]):
            out.append(("default", spec["default"]))
        else:
            return None
    return out


def _plain(node: Node, value: Any) -> bool:
    """Whether ``value`` is a default the column takes as it is (Avro's JSON form equals the column's value)."""
    how = node[0]
    if how == "nullable":
        return node[2][0] == 0 and value is None
    if how in ("int", "long"):
        return isinstance(value, int) and not isinstance(value, bool)
    if how in ("float", "double"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return (how == "boolean" and isinstance(value, bool)) or (how == "string" and isinstance(value, str)) or \
        (how == "enum" and value in node[2]) or (how == "null" and value is None)


class VectorPlan:
    """Reads the records of one writer schema from a binary Arrow array; one plan per schema id."""

    def __init__(self, root: Node) -> None:
        if root[0] != "record":
            raise Unsupported("not a record")
        self.root = root

    def read(self, values: Any, rows: np.ndarray) -> tuple[list[Any], np.ndarray]:
        """``(one Arrow array per top-level field, flagged)`` of ``values[rows]`` (non-null values in the wire
        format of this plan's schema); the flagged records' entries are meaningless, read them again."""
        offsets = np.frombuffer(values.buffers()[1], np.int32)[values.offset:values.offset + len(values) + 1]
        data = values.buffers()[2]
        cursor = _Cursor(np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8),
                         offsets[rows].astype(np.int64) + HEADER_BYTES, offsets[rows + 1].astype(np.int64))
        every = np.arange(len(rows))
        columns = [cursor.node(node, every) for _, node in self.root[2]]
        cursor.bad |= cursor.pos != cursor.end  # bytes left after the record
        return columns, cursor.bad


class _Cursor:
    """One position per record in the batch's data buffer, and whether the record is flagged."""

    def __init__(self, data: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        self.data, self.pos, self.end = data, start, end
        self.bad = np.zeros(len(start), bool)
        self.last = len(data) - 1

    def node(self, node: Node, act: np.ndarray) -> Any:
        """The Arrow array of ``node`` for the records ``act`` (indices into the cursors), advancing them."""
        import pyarrow as pa

        how, target, detail = node
        if how == "record":
            children = [self.node(child, act) for _, child in detail]
            return pa.StructArray.from_arrays(children, fields=list(target)) if children else \
                pa.array([{}] * len(act), target)
        if how == "nullable":
            null_branch, inner = detail
            branch = self.varint(act)
            self.flag(act, (branch != 0) & (branch != 1))
            present = branch != null_branch
            child = self.node(inner, act[present])
            rank = np.cumsum(present) - 1
            return child.take(pa.array(np.where(present, rank, 0), pa.int64(), mask=~present))
        if how == "null":
            return pa.nulls(len(act), target)
        if how in ("int", "long"):
            return pa.array(self.integers(act, how), target)
        if how == "boolean":
            raw = self.fixed_bytes(act, 1)[:, 0]
            self.flag(act, raw > 1)
            return pa.array(raw == 1, target)
        if how in ("float", "double"):
            size = 4 if how == "float" else 8
            return pa.array(self.fixed_bytes(act, size).view("<f4" if size == 4 else "<f8")[:, 0], target)
        if how == "enum":
            index = self.varint(act)
            self.flag(act, (index < 0) | (index >= len(detail)))
            return pa.array(detail, target).take(pa.array(np.clip(index, 0, len(detail) - 1)))
        if how in ("string", "bytes", "fixed"):
            return self.binary(act, how == "string", detail if how == "fixed" else None)
        if how in ("array", "map"):
            return self.blocks(act, target, detail, how == "map")
        if how == "decimal":
            return self.decimal(act, target, detail)
        if how == "scaled":
            import pyarrow.compute as pc

            read, factor = detail
            arr = pa.array(self.integers(act, read), arrow_type(read))
            if factor != 1:
                arr = pc.multiply_checked(arr.cast(pa.int64()), factor)
            if target == pa.date32():
                return arr.cast(target)
            return arr.cast(pa.int64()).cast(target)
        raise Unsupported(how)

    def blocks(self, act: np.ndarray, target: Any, item: Node, keyed: bool) -> Any:
        """An array's or map's blocks, the ``j``-th item of every record's block at once; a block over
        :data:`MOST_ITEMS` items, or with more items than bytes left, flags its record."""
        import pyarrow as pa

        total = np.zeros(len(act), np.int64)
        owners, ordinals, keys, items = [], [], [], []
        going = np.arange(len(act))
        while len(going):
            count = self.varint(act[going])
            sized = count < 0
            if sized.any():
                self.varint(act[going[sized]])
            count = np.abs(count)
            self.flag(act[going], (count > MOST_ITEMS) | (count > self.end[act[going]] - self.pos[act[going]]))
            count = np.where(self.bad[act[going]], 0, count)
            going, count = going[count > 0], count[count > 0]
            for j in range(int(count.max()) if len(count) else 0):
                rows = going[count > j]
                owners.append(rows)
                ordinals.append(total[rows] + j)
                if keyed:
                    keys.append(self.binary(act[rows], True, None))
                items.append(self.node(item, act[rows]))
            total[going] += count
        order = np.lexsort((np.concatenate(ordinals), np.concatenate(owners))) if owners else np.zeros(0, np.int64)
        flat = (pa.concat_arrays(items) if items else pa.array([], item[1])).take(pa.array(order, pa.int64()))
        offsets = pa.array(np.concatenate([[0], np.cumsum(total)]).astype(np.int32), pa.int32())
        if not keyed:
            return pa.ListArray.from_arrays(offsets, flat, type=target)
        names = (pa.concat_arrays(keys) if keys else pa.array([], pa.string())).take(pa.array(order, pa.int64()))
        return pa.MapArray.from_arrays(offsets, names, flat, type=target)

    def flag(self, act: np.ndarray, mask: np.ndarray) -> None:
        self.bad[act[mask]] = True

    def take(self, act: np.ndarray, size: np.ndarray) -> np.ndarray:
        """Where ``size`` bytes start for each record of ``act``; a record without them is flagged."""
        start = self.pos[act]
        self.flag(act, (size < 0) | (start + size > self.end[act]))
        self.pos[act] = start + np.maximum(size, 0)
        return start

    def varint(self, act: np.ndarray) -> np.ndarray:
        """A zigzag varint (Avro's int and long) of each record of ``act``."""
        pos = self.pos[act]
        value = np.zeros(len(act), np.uint64)
        used = np.zeros(len(act), np.int64)
        going = np.arange(len(act))
        for k in range(10):
            byte = self.data[np.minimum(pos[going] + k, self.last)].astype(np.uint64) if self.last >= 0 else \
                np.zeros(len(going), np.uint64)
            value[going] |= (byte & np.uint64(0x7F)) << np.uint64(7 * k)
            used[going] = k + 1
            going = going[(byte & np.uint64(0x80)) != 0]
            if not len(going):
                break
        self.flag(act[going], np.ones(len(going), bool))  # more than 10 bytes
        self.take(act, used)
        return ((value >> np.uint64(1)).astype(np.int64)) ^ -((value & np.uint64(1)).astype(np.int64))

    def integers(self, act: np.ndarray, kind: str) -> np.ndarray:
        value = self.varint(act)
        if kind == "int":
            self.flag(act, (value < -(1 << 31)) | (value >= (1 << 31)))
            return value.astype(np.int32)
        return value

    def fixed_bytes(self, act: np.ndarray, size: int) -> np.ndarray:
        """``size`` bytes of each record of ``act``, one row each."""
        start = self.take(act, np.full(len(act), size, np.int64))
        if self.last < 0:
            return np.zeros((len(act), size), np.uint8)
        return self.data[np.minimum(start[:, None] + np.arange(size), self.last)].copy()

    def lengths(self, act: np.ndarray, fixed: int | None) -> tuple[np.ndarray, np.ndarray]:
        size = np.full(len(act), fixed, np.int64) if fixed is not None else self.varint(act)
        start = self.take(act, size)
        return start, np.where(self.bad[act], 0, np.maximum(size, 0))

    def gather(self, start: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bytes ``[start, start + size)`` of each record, back to back, and their Arrow offsets."""
        offsets = np.zeros(len(size) + 1, np.int64)
        np.cumsum(size, out=offsets[1:])
        total = int(offsets[-1])
        index = np.repeat(start - offsets[:-1], size) + np.arange(total)
        return self.data[index], offsets

    def binary(self, act: np.ndarray, text: bool, fixed: int | None) -> Any:
        import pyarrow as pa

        start, size = self.lengths(act, fixed)
        data, offsets = self.gather(start, size)
        kind = pa.large_binary() if offsets[-1] >= 1 << 31 else pa.binary()
        arr = pa.Array.from_buffers(kind, len(act), [None, pa.py_buffer(offsets.astype(
            np.int64 if kind == pa.large_binary() else np.int32)), pa.py_buffer(data)])
        if not text:
            return arr.cast(pa.binary())
        try:
            return arr.cast(pa.string())
        except pa.ArrowInvalid:  # not UTF-8: find which (rare), flag them, keep the rest
            wrong = np.array([not _utf8(v) for v in arr.to_pylist()], bool)
            self.flag(act, wrong)
            return pa.array([None if w else v.decode() for v, w in zip(arr.to_pylist(), wrong)], pa.string())

    def decimal(self, act: np.ndarray, target: Any, raw: Node) -> Any:
        """Avro's decimals into decimal128 without a Python object each: bytes reversed to 16, sign-extended."""
        import pyarrow as pa

        start, size = self.lengths(act, raw[2] if raw[0] == "fixed" else None)
        self.flag(act, size > 16)
        size = np.minimum(size, 16)
        j = np.arange(16)
        source = np.clip(start[:, None] + (size[:, None] - 1 - j), 0, max(self.last, 0))
        inside = j < size[:, None]
        first = self.data[np.minimum(start, max(self.last, 0))] if self.last >= 0 else np.zeros(len(act), np.uint8)
        fill = np.where((size > 0) & (first >= 0x80), 0xFF, 0).astype(np.uint8)
        picked = self.data[source] if self.last >= 0 else np.zeros(source.shape, np.uint8)
        rows = np.where(inside, picked, fill[:, None]).astype(np.uint8)
        wide = pa.Array.from_buffers(pa.decimal128(38, target.scale), len(act), [None, pa.py_buffer(rows.tobytes())])
        return wide.cast(target)  # a value wider than the precision raises: the caller reads the group by fastavro


def _utf8(value: bytes) -> bool:
    try:
        value.decode()
        return True
    except UnicodeDecodeError:
        return False
