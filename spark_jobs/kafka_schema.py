"""The row shape of a Kafka record, as Spark's own Kafka source defines it.

``timestampType`` follows Kafka's ``TimestampType.id`` (0 = CreateTime, 1 = LogAppendTime,
-1 = none); confluent-kafka numbers them one higher (range_reader.py subtracts one).
``headers`` is null for a record without headers (as Spark's source with ``includeHeaders``).

>>> KAFKA_COLUMNS
('key', 'value', 'topic', 'partition', 'offset', 'timestamp', 'timestampType', 'headers')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")

def kafka_struct() -> StructType:
    """The Spark schema of Spark's Kafka source (every field nullable, as there)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    return StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("timestampType", IntegerType()),
            StructField("headers", ArrayType(header)),
        ]
    )


def arrow_schema_of(struct: StructType) -> pa.Schema:
    """The Arrow schema PySpark expects for ``struct`` (it compares batches with exactly this)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(struct, timezone="UTC")
