"""The columns of a drained batch: Spark's Kafka columns, then kprio's, then the decoded fields.

Two row shapes leave a drain:

- an **output** row (:func:`drain_struct`): the Kafka columns, ``priority``, ``batch_id``, ``lane``, ``error``
  (always null here), one column per decoded field named as in the topic's schema (so no drain column's name),
  then ``decoded_key`` when keys are decoded (:mod:`spark_jobs.keys`);
- a **dead-letter** row (:func:`dead_letter_struct`): the raw Kafka columns, ``priority``, ``batch_id``,
  ``lane`` and ``error`` (never null: why the record is invalid).

>>> [f.name for f in drain_struct({"amount": "double"}).fields][8:]
['priority', 'batch_id', 'lane', 'error', 'amount']
>>> [f.name for f in dead_letter_struct().fields][8:]
['priority', 'batch_id', 'lane', 'error']
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
    from pyspark.sql.types import DataType, StructType

KPRIO_COLUMNS = ("priority", "batch_id", "lane")
"""Added by the drain before the handler runs."""

INPUT_COLUMNS = KAFKA_COLUMNS + KPRIO_COLUMNS
"""What a handler's frames hold."""

ERROR_COLUMN = "error"
RESERVED = frozenset(INPUT_COLUMNS) | {ERROR_COLUMN}


def field_type(kind: str) -> DataType:
    """The Spark type of a column kind (:mod:`kprio_core.values.kinds`), Arrow's type as PySpark converts it.

    >>> field_type("timestamp"), field_type("struct<at:date,price:decimal(10,2)>")
    (TimestampType(), StructType([StructField('at', DateType(), True), StructField('price', DecimalType(10,2), True)]))
    """
    from pyspark.sql.pandas.types import from_arrow_type

    from kprio_core.values.kinds import arrow_type

    return from_arrow_type(arrow_type(kind))


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


def dead_letter_struct() -> StructType:
    """The dead-letter schema: input columns (raw key, value, headers, timestamp) and ``error``."""
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType(input_struct().fields + [StructField(ERROR_COLUMN, StringType())])
