"""Per-range statistics of a drained batch, measured on the rows written.

For every planned range: records, bytes (key + value lengths), first and last offset, records
with an error, and the offsets missing from the output.

Three ways, same answer, none a second pass over complete data:

- the fused drain (:mod:`spark_jobs.drain_source`): each task counts the rows it hands to
  the writer per read split (:class:`RangeCounter`, vectorised on the Arrow batches) and puts
  the counts on its last row, in :data:`~spark_jobs.columns.STATS_COLUMN`; :func:`observe_counted`
  collects them with Spark's ``observe`` (next to a count of all rows, so rows outside every
  range or a count that disagrees with the JVM's are caught) and drops the column before the
  write; :func:`counted_stats` sums the splits of every planned range. Only successful task
  attempts count, as for any observation.
- the shuffle drain: :func:`observe_ranges` measures the rows on their way to the writer with
  conditional aggregates per range (more JVM work per row: the fused path avoids it).
- :func:`range_stats` reads the written rows back and also counts distinct offsets; the
  drain uses it for shuffled plans with very many ranges.

A range holding ``end - start`` records from ``start`` to ``end - 1`` is complete because no
offset can be written twice (splits are disjoint, each split is read once in strictly
increasing order, each lane is handled by one task in strictly increasing order, all checked).
Only incomplete ranges pay for finding their gaps (runs of consecutive offsets, found with
``offset - row_number()`` on the written rows).

>>> from kprio_core.offsets import OffsetRange
>>> s = RangeStats("t-2", 0, 2, 10, 20, records=8, bytes=800, first_offset=10, last_offset=19, errors=1,
...                lost=(OffsetRange("t-2", 0, 13, 15),))
>>> s.to_dict()["lost"]
[[13, 15]]
>>> s.complete
False
>>> import pyarrow as pa
>>> c = RangeCounter("t-2", 0, [(10, 20), (20, 30)])
>>> c.observe(pa.record_batch({"key": [b"k", None, b"kk"], "value": [b"vvv", b"v", None], "offset": [12, 13, 25],
...                            "error": [None, "bad", None]}))
>>> [(e["start"], e["records"], e["bytes"], e["first"], e["last"], e["errors"]) for e in c.entries()]
[(10, 2, 5, 12, 13, 1), (20, 1, 2, 25, 25, 0)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kprio_core.errors import DrainOutputInvalid
from kprio_core.offsets import OffsetRange
from kprio_core.drain_plan import PlannedRange
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
    n = len(ranges)
    counts = [int(m.get(f"n{i}") or 0) for i in range(n)]
    outside = int(m.get("total") or 0) - sum(counts)
    return _assemble(spark, written, ranges, counts, [int(m.get(f"b{i}") or 0) for i in range(n)],
                     [m.get(f"lo{i}") for i in range(n)], [m.get(f"hi{i}") for i in range(n)],
                     [int(m.get(f"e{i}") or 0) for i in range(n)], outside)


def _assemble(spark: SparkSession, written: DataFrame, ranges: Sequence[PlannedRange], counts: list[int],
              sizes: list[int], lo: list[int | None], hi: list[int | None], errors: list[int],
              outside: int) -> tuple[RangeStats, ...]:
    """RangeStats from per-range measures; DrainOutputInvalid when rows break the plan; gaps of short ranges."""
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
            rng.topic, rng.partition, planned.priority, rng.start, rng.end, records=counts[i], bytes=sizes[i],
            first_offset=lo[i], last_offset=hi[i], errors=errors[i],
            lost=missing_offsets(rng, runs.get(i, [])) if i in short else (),
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


class RangeCounter:
    """What one task handed to the writer per read range of one topic partition (executor side)."""

    def __init__(self, topic: str, partition: int, ranges: Sequence[tuple[int, int]]) -> None:
        import numpy as np

        self.topic, self.partition = topic, partition
        self.starts = np.array([r[0] for r in ranges], dtype=np.int64)
        self.ends = np.array([r[1] for r in ranges], dtype=np.int64)
        k = len(ranges)
        self.records = np.zeros(k, dtype=np.int64)
        self.bytes = np.zeros(k, dtype=np.int64)
        self.errors = np.zeros(k, dtype=np.int64)
        self.first = np.full(k, np.iinfo(np.int64).max, dtype=np.int64)
        self.last = np.full(k, -1, dtype=np.int64)

    def observe(self, batch: Any) -> None:
        """Count a batch of output rows (``key``, ``value``, ``offset``, ``error`` columns)."""
        import numpy as np
        import pyarrow.compute as pc

        offsets = batch.column("offset").to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        idx = np.searchsorted(self.starts, offsets, side="right") - 1
        inside = (idx >= 0) & (offsets < self.ends[np.maximum(idx, 0)])
        # Rows outside every range are not counted: the driver compares with the JVM's row count.
        idx, offsets = idx[inside], offsets[inside]
        size = pc.add(pc.binary_length(batch.column("key")).fill_null(0),
                      pc.binary_length(batch.column("value")).fill_null(0))
        size = size.to_numpy(zero_copy_only=False).astype(np.int64)[inside]
        bad = batch.column("error").is_valid().to_numpy(zero_copy_only=False)[inside]
        k = len(self.starts)
        self.records += np.bincount(idx, minlength=k)
        self.bytes += np.bincount(idx, weights=size, minlength=k).astype(np.int64)
        self.errors += np.bincount(idx, weights=bad, minlength=k).astype(np.int64)
        np.minimum.at(self.first, idx, offsets)
        np.maximum.at(self.last, idx, offsets)

    def entries(self) -> list[dict[str, Any]]:
        """One entry per read range, in the shape of ``STATS_COLUMN``'s elements."""
        return [
            {"topic": self.topic, "partition": self.partition, "start": int(self.starts[i]), "end": int(self.ends[i]),
             "records": int(n), "bytes": int(self.bytes[i]), "first": int(self.first[i]) if n else None,
             "last": int(self.last[i]) if n else None, "errors": int(self.errors[i])}
            for i, n in enumerate(self.records)
        ]


def observe_counted(df: DataFrame) -> tuple[DataFrame, Any]:
    """The fused rows without ``STATS_COLUMN``, and the Observation holding the tasks' counts after the write."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    from spark_jobs.columns import STATS_COLUMN

    observation = Observation("kprio_counted_stats")
    observed = df.observe(observation, F.count(F.lit(1)).alias("total"), F.collect_list(STATS_COLUMN).alias("tasks"))
    return observed.drop(STATS_COLUMN), observation


def counted_stats(observation: Any, spark: SparkSession, written: DataFrame,
                  ranges: Sequence[PlannedRange]) -> tuple[RangeStats, ...]:
    """Stats of every planned range from the tasks' counts; gaps of incomplete ranges found on the written rows."""
    import bisect

    m = observation.get
    by_partition: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
    for i, planned in enumerate(ranges):
        r = planned.range
        by_partition.setdefault((r.topic, r.partition), []).append((r.start, r.end, i))
    for spans in by_partition.values():
        spans.sort()
    n = len(ranges)
    counts, sizes, errors = [0] * n, [0] * n, [0] * n
    lo: list[int | None] = [None] * n
    hi: list[int | None] = [None] * n
    counted = 0
    for task in m.get("tasks") or []:
        for e in task:
            spans = by_partition.get((e["topic"], e["partition"]), [])
            at = bisect.bisect_right(spans, (e["start"], float("inf"), 0)) - 1
            if at < 0 or not (spans[at][0] <= e["start"] and e["end"] <= spans[at][1]):
                raise DrainOutputInvalid(f"a task read {e['topic']}[{e['partition']}]@[{e['start']},{e['end']}), "
                                         "which is in no planned range")
            i = spans[at][2]
            counts[i] += e["records"]
            sizes[i] += e["bytes"]
            errors[i] += e["errors"]
            counted += e["records"]
            if e["records"]:
                lo[i] = e["first"] if lo[i] is None else min(lo[i], e["first"])
                hi[i] = e["last"] if hi[i] is None else max(hi[i], e["last"])
    outside = int(m.get("total") or 0) - counted
    return _assemble(spark, written, ranges, counts, sizes, lo, hi, errors, outside)
