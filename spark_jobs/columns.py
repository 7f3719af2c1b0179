"""The columns of a drained batch: Spark's Kafka columns, then kprio's, then the decoded fields.

Decoded fields get their own columns named after the schema (no prefix), so a field may not
reuse a drain column's name.

>>> [f.name for f in drain_struct({"amount": "double"}).fields][8:]
['priority', 'batch_id', 'lane', 'error', 'amount']
>>> drain_struct({"offset": "long"})
Traceback (most recent call last):
...
kprio_core.errors.ConfigError: schema field 'offset' has the name of a drain column; rename it
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from kprio_core.errors import ConfigError
from spark_jobs.kafka_schema import KAFKA_COLUMNS

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructField, StructType

KPRIO_COLUMNS = ("priority", "batch_id", "lane")
"""Added by the drain before the handler runs."""

INPUT_COLUMNS = KAFKA_COLUMNS + KPRIO_COLUMNS
"""What a handler's frames hold."""

ERROR_COLUMN = "error"
STATS_COLUMN = "_kprio_range_stats"
"""The fused drain's per-task range stats, on one row per task, dropped before the write."""
RESERVED = frozenset(INPUT_COLUMNS) | {ERROR_COLUMN, STATS_COLUMN}


def field_type(kind: str) -> DataType:
    from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, TimestampType

    return {
        "string": StringType(),
        "long": LongType(),
        "double": DoubleType(),
        "boolean": BooleanType(),
        "timestamp": TimestampType(),
    }[kind]


def input_struct() -> StructType:
    """Kafka columns plus priority, batch_id, lane."""
    from pyspark.sql.types import IntegerType, StringType, StructField, StructType

    from spark_jobs.kafka_schema import kafka_struct

    extra = [StructField("priority", IntegerType()), StructField("batch_id", StringType()),
             StructField("lane", IntegerType())]
    return StructType(kafka_struct().fields + extra)


def drain_struct(schema: Mapping[str, str]) -> StructType:
    """The output schema: input columns, ``error``, then one column per decoded field."""
    from pyspark.sql.types import StringType, StructField, StructType

    clash = sorted(set(schema) & RESERVED)
    if clash:
        raise ConfigError(f"schema field {clash[0]!r} has the name of a drain column; rename it")
    fields = [StructField(ERROR_COLUMN, StringType())]
    fields += [StructField(name, field_type(kind)) for name, kind in schema.items()]
    return StructType(input_struct().fields + fields)


def stats_field() -> StructField:
    """``STATS_COLUMN``: per read range, what the task handed to the writer (see :mod:`spark_jobs.stats`)."""
    from pyspark.sql.types import ArrayType, IntegerType, LongType, StringType, StructField, StructType

    longs = ("start", "end", "records", "bytes", "first", "last", "errors")
    entry = StructType([StructField("topic", StringType()), StructField("partition", IntegerType())]
                       + [StructField(name, LongType()) for name in longs])
    return StructField(STATS_COLUMN, ArrayType(entry))
