"""Which drained rows are invalid (``config.quality`` and the topic's required fields), and why.

A row is **invalid** when (in this order in its error text):

1. the handler gave it an ``error`` (it could not decode it);
2. a required field is null, except on a tombstone (a null value has no fields to require) and
   on a row the handler already refused (its fields are null because it could not decode them);
3. it is a tombstone and ``quality.tombstones`` is ``invalid``;
4. its key is null and ``quality.null_keys`` is ``invalid``.

Invalid rows go to the dead letters with that text as their ``error``. Each rule is an Arrow mask computed
only when the column has nulls, so a clean batch costs a few ``null_count`` reads.

>>> import pyarrow as pa
>>> rules = Validity(required=("n",), tombstones="record", null_keys="invalid")
>>> batch = pa.record_batch({"key": [b"a", None, b"c", b"d"], "value": [b"{}", b"{}", None, b"x"],
...                          "error": [None, None, None, "value is not JSON"], "n": [1, 2, None, None]})
>>> valid, dead = rules.split(batch)
>>> valid.column("key").to_pylist(), dead.column("error").to_pylist()
([b'a', b'c'], ["null key and quality.null_keys is 'invalid'", 'value is not JSON'])
>>> rules.invalid_count(valid), rules.null_counts(valid)
(0, (('n', 0),))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from spark_jobs.columns import ERROR_COLUMN


@dataclass(frozen=True, slots=True)
class Validity:
    """The quality rules of one logical topic (picklable: it travels to the executors)."""

    required: tuple[str, ...] = ()
    tombstones: Literal["record", "invalid"] = "record"
    null_keys: Literal["record", "invalid"] = "record"

    def reasons(self, batch: Any) -> list[tuple[str, Any]]:
        """``(why, mask)`` for every rule some row of ``batch`` breaks (masks are numpy bool arrays)."""
        out: list[tuple[str, Any]] = []
        errors = batch.column(ERROR_COLUMN)
        refused = _valid(errors) if errors.null_count < len(errors) else None
        if refused is not None:
            out.append(("", refused))  # the handler's own text
        values = batch.column("value")
        tombstone = _null(values) if values.null_count else None
        for name in self.required:
            column = batch.column(name)
            if column.null_count:
                mask = _null(column)
                for exempt in (tombstone, refused):
                    if exempt is not None:
                        mask &= ~exempt
                if mask.any():
                    out.append((f"required field {name!r} is null", mask))
        if tombstone is not None and self.tombstones == "invalid":
            out.append(("tombstone (null value) and quality.tombstones is 'invalid'", tombstone))
        keys = batch.column("key")
        if keys.null_count and self.null_keys == "invalid":
            out.append(("null key and quality.null_keys is 'invalid'", _null(keys)))
        return out

    def split(self, batch: Any) -> tuple[Any, Any | None]:
        """``(valid rows, invalid rows with their error)``; the second is None when every row is valid.

        Both keep ``batch``'s schema: the caller's dead-letter schema drops the decoded fields."""
        import numpy as np
        import pyarrow as pa

        reasons = self.reasons(batch)
        if not reasons:
            return batch, None
        invalid = _any(reasons, batch.num_rows)
        rows = np.flatnonzero(invalid)
        handler_errors = batch.column(ERROR_COLUMN)
        texts = []
        for i in rows.tolist():
            parts = [handler_errors[i].as_py() if why == "" else why for why, mask in reasons if mask[i]]
            texts.append("; ".join(parts))
        dead = batch.take(pa.array(rows))
        dead = dead.set_column(dead.schema.get_field_index(ERROR_COLUMN), ERROR_COLUMN, pa.array(texts, pa.string()))
        return batch.filter(pa.array(~invalid)), dead

    def invalid_count(self, batch: Any) -> int:
        """Rows of ``batch`` that break a rule (0 on rows the drain wrote to the output)."""
        reasons = self.reasons(batch)
        return int(_any(reasons, batch.num_rows).sum()) if reasons else 0

    def null_counts(self, batch: Any) -> tuple[tuple[str, int], ...]:
        """Rows with a null required field, per field, tombstones excepted."""
        values = batch.column("value")
        tombstone = _null(values) if values.null_count else None
        counts = []
        for name in self.required:
            column = batch.column(name)
            if not column.null_count:
                counts.append((name, 0))
                continue
            mask = _null(column)
            if tombstone is not None:
                mask &= ~tombstone
            counts.append((name, int(mask.sum())))
        return tuple(counts)


def _any(reasons: list[tuple[str, Any]], n: int) -> Any:
    import numpy as np

    invalid = np.zeros(n, dtype=bool)
    for _, mask in reasons:
        invalid |= mask
    return invalid


def _null(column: Any) -> Any:
    return column.is_null().to_numpy(zero_copy_only=False)


def _valid(column: Any) -> Any:
    return column.is_valid().to_numpy(zero_copy_only=False)
