"""Per-range statistics of a drained batch, measured on the rows written.

For every planned range: records, bytes (key + value lengths), first and last offset, records
with an error, and the offsets missing from the output.

Two ways, same answer. :func:`observe_ranges` measures the rows on their way to the writer
(Spark's ``observe``: no second pass over the data); a range holding ``end - start`` records
from ``start`` to ``end - 1`` is complete because no offset can be written twice (splits are
disjoint, each split is read once in strictly increasing order, each lane is handled by one
task in strictly increasing order, all checked). :func:`range_stats` reads the written rows
back and also counts distinct offsets; the drain uses it for plans with very many ranges.
Only incomplete ranges pay for finding their gaps (runs of consecutive offsets, found with
``offset - row_number()`` on the written rows).

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
    runs = _runs(joined, short) if short else {}
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


MAX_OBSERVED_RANGES = 256
"""Above this many ranges, per-range observed metrics get too wide: read the output back instead."""


def observe_ranges(df: DataFrame, ranges: Sequence[PlannedRange]) -> tuple[DataFrame, Any]:
    """``df`` with per-range metrics attached, and the Observation that holds them after the write."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation("kprio_range_stats")
    size = F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))
    exprs = [F.count(F.lit(1)).alias("total")]
    for i, planned in enumerate(ranges):
        r = planned.range
        inside = ((F.col("topic") == r.topic) & (F.col("partition") == r.partition)
                  & (F.col("offset") >= r.start) & (F.col("offset") < r.end))
        exprs += [
            F.count(F.when(inside, 1)).alias(f"n{i}"),
            F.sum(F.when(inside, size)).alias(f"b{i}"),
            F.min(F.when(inside, F.col("offset"))).alias(f"lo{i}"),
            F.max(F.when(inside, F.col("offset"))).alias(f"hi{i}"),
            F.count(F.when(inside & F.col("error").isNotNull(), 1)).alias(f"e{i}"),
        ]
    return df.observe(observation, *exprs), observation


def observed_stats(observation: Any, spark: SparkSession, written: DataFrame,
                   ranges: Sequence[PlannedRange]) -> tuple[RangeStats, ...]:
    """Stats from the observed metrics; gaps of incomplete ranges found on the written rows."""
    m = observation.get
    counts = [int(m.get(f"n{i}") or 0) for i in range(len(ranges))]
    outside = int(m.get("total") or 0) - sum(counts)
    if outside:
        raise DrainOutputInvalid(f"{outside} written records are outside the planned ranges")
    over = [str(r.range) for r, n in zip(ranges, counts, strict=True) if n > r.range.count]
    if over:
        raise DrainOutputInvalid(f"offsets written more than once in {', '.join(over)}")
    short = [i for i, r in enumerate(ranges) if counts[i] < r.range.count]
    runs = _runs(_with_rid(written, ranges), short) if short else {}
    stats = []
    for i, planned in enumerate(ranges):
        rng = planned.range
        stats.append(RangeStats(
            rng.topic, rng.partition, planned.priority, rng.start, rng.end, records=counts[i],
            bytes=int(m.get(f"b{i}") or 0), first_offset=m.get(f"lo{i}"), last_offset=m.get(f"hi{i}"),
            errors=int(m.get(f"e{i}") or 0), lost=missing_offsets(rng, runs.get(i, [])) if i in short else (),
        ))
    return tuple(stats)


def _with_rid(written: DataFrame, ranges: Sequence[PlannedRange]) -> DataFrame:
    """The written offsets tagged with the index of the planned range holding them."""
    from pyspark.sql import functions as F

    spark = written.sparkSession
    plan = spark.createDataFrame(
        [(i, r.range.topic, r.range.partition, r.range.start, r.range.end) for i, r in enumerate(ranges)],
        "rid int, r_topic string, r_partition int, r_start long, r_end long",
    )
    rows = written.select("topic", "partition", "offset")
    return rows.join(
        F.broadcast(plan),
        (rows["topic"] == plan["r_topic"]) & (rows["partition"] == plan["r_partition"])
        & (rows["offset"] >= plan["r_start"]) & (rows["offset"] < plan["r_end"]),
    ).select("rid", "offset")


def _runs(joined: DataFrame, rids: list[int]) -> dict[int, list[tuple[int, int]]]:
    """Inclusive runs of consecutive offsets present in the given ranges."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    present = joined.where(F.col("rid").isin(rids)).select("rid", "offset")
    numbered = present.withColumn("run", F.col("offset") - F.row_number().over(Window.partitionBy("rid").orderBy("offset")))
    out: dict[int, list[tuple[int, int]]] = {}
    for row in numbered.groupBy("rid", "run").agg(F.min("offset").alias("lo"), F.max("offset").alias("hi")).collect():
        out.setdefault(row["rid"], []).append((row["lo"], row["hi"]))
    return out
