"""Per-range statistics of a drained batch, measured on what was actually written.

For every planned range: records, bytes (key + value lengths), first and last offset, records
with an error, and the offsets missing from the output. A range is complete when it holds
``end - start`` distinct offsets; only incomplete ranges pay for finding their gaps (runs of
consecutive offsets, found with ``offset - row_number()``).

>>> from kprio_core.offsets import OffsetRange
>>> s = RangeStats("t-2", 0, 2, 10, 20, records=8, bytes=800, first_offset=10, last_offset=19, errors=1,
...                lost=(OffsetRange("t-2", 0, 13, 15),))
>>> s.to_dict()["lost"]
[[13, 15]]
>>> s.complete
False
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kprio_core.errors import DrainOutputInvalid
from kprio_core.offsets import OffsetRange
from kprio_core.plan import PlannedRange
from spark_jobs.completeness import missing_offsets

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True, slots=True)
class RangeStats:
    """What one planned range produced."""

    topic: str
    partition: int
    priority: int
    start: int
    end: int
    records: int
    bytes: int
    first_offset: int | None
    last_offset: int | None
    errors: int
    lost: tuple[OffsetRange, ...] = ()

    @property
    def range(self) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, self.start, self.end)

    @property
    def complete(self) -> bool:
        return not self.lost

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic, "partition": self.partition, "priority": self.priority,
            "start": self.start, "end": self.end, "records": self.records, "bytes": self.bytes,
            "first_offset": self.first_offset, "last_offset": self.last_offset, "errors": self.errors,
            "lost": [[g.start, g.end] for g in self.lost],
        }


def range_stats(spark: SparkSession, written: DataFrame, ranges: Sequence[PlannedRange]) -> tuple[RangeStats, ...]:
    """Stats of every planned range from the written rows; DrainOutputInvalid when rows break the plan."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if not ranges:
        return ()
    plan = spark.createDataFrame(
        [(i, r.range.topic, r.range.partition, r.range.start, r.range.end) for i, r in enumerate(ranges)],
        "rid int, r_topic string, r_partition int, r_start long, r_end long",
    )
    rows = written.select(
        "topic", "partition", "offset",
        (F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))).cast("long").alias("size"),
        F.col("error").isNotNull().cast("int").alias("bad"),
    )
    joined = rows.join(
        F.broadcast(plan),
        (rows["topic"] == plan["r_topic"]) & (rows["partition"] == plan["r_partition"])
        & (rows["offset"] >= plan["r_start"]) & (rows["offset"] < plan["r_end"]),
        "left",
    )
    agg = joined.groupBy("rid").agg(
        F.count("*").alias("records"),
        F.countDistinct("offset").alias("distinct"),
        F.sum("size").alias("bytes"),
        F.min("offset").alias("first"),
        F.max("offset").alias("last"),
        F.sum("bad").alias("errors"),
    ).collect()
    by_rid = {row["rid"]: row for row in agg}
    outside = by_rid.pop(None, None)
    if outside is not None:
        raise DrainOutputInvalid(f"{outside['records']} written records are outside the planned ranges")
    dupes = [str(ranges[rid].range) for rid, row in by_rid.items() if row["records"] != row["distinct"]]
    if dupes:
        raise DrainOutputInvalid(f"offsets written more than once in {', '.join(dupes)}")
    short = [rid for rid, r in enumerate(ranges) if by_rid.get(rid) is None or by_rid[rid]["records"] < r.range.count]
    runs = _runs(joined, short, Window, F) if short else {}
    stats = []
    for rid, planned in enumerate(ranges):
        row = by_rid.get(rid)
        rng = planned.range
        lost = missing_offsets(rng, runs.get(rid, [])) if rid in short else ()
        stats.append(RangeStats(
            rng.topic, rng.partition, planned.priority, rng.start, rng.end,
            records=row["records"] if row else 0, bytes=int(row["bytes"] or 0) if row else 0,
            first_offset=row["first"] if row else None, last_offset=row["last"] if row else None,
            errors=int(row["errors"] or 0) if row else 0, lost=lost,
        ))
    return tuple(stats)


def _runs(joined: DataFrame, rids: list[int], Window: Any, F: Any) -> dict[int, list[tuple[int, int]]]:
    """Inclusive runs of consecutive offsets present in the given ranges."""
    present = joined.where(F.col("rid").isin(rids)).select("rid", "offset")
    numbered = present.withColumn("run", F.col("offset") - F.row_number().over(Window.partitionBy("rid").orderBy("offset")))
    out: dict[int, list[tuple[int, int]]] = {}
    for row in numbered.groupBy("rid", "run").agg(F.min("offset").alias("lo"), F.max("offset").alias("hi")).collect():
        out.setdefault(row["rid"], []).append((row["lo"], row["hi"]))
    return out
