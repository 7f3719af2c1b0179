"""Which drained rows are invalid: one case per rule, each with why."""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_jobs.validity import Validity

ROW = {"key": b"k", "value": b"{}", "error": None, "n": 1}


@pytest.mark.parametrize(
    ("row", "rules", "error"),
    [
        ({}, {}, None),  # a decoded record with its required field: valid
        ({"error": "value is not JSON"}, {}, "value is not JSON"),  # the handler refused it
        ({"n": None}, {}, "required field 'n' is null"),  # decoded, but a required field is missing
        ({"n": None, "error": "value is a JSON list"}, {}, "value is a JSON list"),  # refused: fields null because of it
        ({"value": None, "n": None}, {}, None),  # tombstone: a record by default, nothing to require
        ({"value": None, "n": None}, {"tombstones": "invalid"},
         "tombstone (null value) and quality.tombstones is 'invalid'"),
        ({"key": None}, {}, None),  # a null key is a record by default
        ({"key": None}, {"null_keys": "invalid"}, "null key and quality.null_keys is 'invalid'"),
        ({"key": None, "n": None}, {"null_keys": "invalid"},
         "required field 'n' is null; null key and quality.null_keys is 'invalid'"),  # every reason, in rule order
        ({"n": None}, {"required": ()}, None),  # not required: null is fine
    ],
)
def test_rules(row, rules, error):
    validity = Validity(**{"required": ("n",), **rules})
    batch = pa.RecordBatch.from_pylist([ROW, {**ROW, **row}], schema=pa.schema(
        [("key", pa.binary()), ("value", pa.binary()), ("error", pa.string()), ("n", pa.int64())]))
    valid, dead = validity.split(batch)
    if error is None:
        assert dead is None and valid.num_rows == 2
    else:
        assert valid.to_pylist() == [ROW] and dead.column("error").to_pylist() == [error]
        raw = {k: v for k, v in {**ROW, **row}.items() if k != "error"}
        assert {k: v for k, v in dead.to_pylist()[0].items() if k != "error"} == raw  # raw columns untouched
    assert validity.invalid_count(valid) == 0
    assert validity.invalid_count(batch) == (0 if error is None else 1)
