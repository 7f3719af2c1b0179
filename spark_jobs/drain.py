"""The drain job: read a plan's ranges, order them into lanes, apply the handler, publish Parquet.

``drain_batch`` is the whole batch, driver side:

1. check the handler and the output schema (fail before any Spark job);
2. read the plan's ranges, cut into splits (``config.splits``), with the ``kprio-kafka`` source
   (or Spark's ``kafka`` source when ``spark.reader`` is ``native``); a short range fails there;
3. add ``priority``, ``batch_id`` and ``lane`` (partition order: lane 0; key order:
   murmur2(key) % lanes, see :mod:`kprio_core.lanes`) and run the handler once per lane, on the
   lane's records in offset order. Two ways (:func:`handler_in_read` picks):

   - fused (the default with the ``python`` reader): one task per topic partition reads all of
     the partition's splits in order and runs lanes and handler right there
     (:mod:`spark_jobs.drain_source`); the JVM gets the final rows;
   - shuffle (Spark's ``native`` reader, or key order with few partitions on many cores):
     rows are repartitioned by ``(topic, partition, lane)``, sorted by offset within, and the
     handler runs per lane in ``mapInArrow`` (:mod:`spark_jobs.lane_runner`);
4. write Parquet to a staging dir;
5. measure every planned range on the rows handed to the writer (:mod:`spark_jobs.stats`: counted
   by the fused tasks, or observed on the shuffled rows); a gap fails the batch unless
   ``drain.allow_data_loss``, then it is recorded;
6. publish the staged directories (:mod:`spark_jobs.output`), replacing a previous run's.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.errors import KprioError, RangeConflict
from kprio_core.drain_plan import DrainPlan, PlannedRange
from kprio_core.splits import split_ranges
from spark_jobs.columns import drain_struct, input_struct
from spark_jobs.completeness import incomplete_error
from spark_jobs.handler_contract import resolve_handler
from spark_jobs.lane_runner import lane_assigner, lane_runner
from spark_jobs.output import discard, publish, staging_dir, write_staged
from spark_jobs.remote_errors import kprio_error_in
from spark_jobs.stats import (
    MAX_OBSERVED_RANGES,
    RangeStats,
    counted_stats,
    observe_counted,
    observe_ranges,
    observed_stats,
    range_stats,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass(frozen=True)
class DrainResult:
    """What a drained batch produced: per-range stats, totals and where the output went."""

    batch_id: str
    logical_topic: str
    reader: str
    ordering: str
    lanes: int
    output_root: str
    output_dirs: tuple[str, ...]
    ranges: tuple[RangeStats, ...] = field(default_factory=tuple)

    @property
    def records(self) -> int:
        return sum(r.records for r in self.ranges)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.ranges)

    @property
    def errors(self) -> int:
        return sum(r.errors for r in self.ranges)

    @property
    def lost_offsets(self) -> int:
        return sum(g.count for r in self.ranges for g in r.lost)

    def records_by_priority(self) -> dict[int, int]:
        totals: dict[int, int] = {}
        for r in self.ranges:
            totals[r.priority] = totals.get(r.priority, 0) + r.records
        return dict(sorted(totals.items(), reverse=True))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: totals, records per priority (string keys) and every range's stats."""
        return {
            "batch_id": self.batch_id,
            "logical_topic": self.logical_topic,
            "reader": self.reader,
            "ordering": self.ordering,
            "lanes": self.lanes,
            "output_root": self.output_root,
            "output_dirs": list(self.output_dirs),
            "records": self.records,
            "bytes": self.bytes,
            "errors": self.errors,
            "lost_offsets": self.lost_offsets,
            "records_by_priority": {str(p): n for p, n in self.records_by_priority().items()},
            "ranges": [r.to_dict() for r in self.ranges],
        }


def drain_batch(
    spark: SparkSession,
    config: KprioConfig,
    topic: TopicSettings,
    batch_id: str,
    plan: DrainPlan,
    *,
    output_root: str | None = None,
) -> DrainResult:
    """Drain ``plan`` as batch ``batch_id`` into ``output_root`` (default ``config.drain.output_path``)."""
    resolve_handler(config.drain.handler)  # wrong name or signature: fail before Spark runs
    out_struct = drain_struct(topic.schema_)
    root = _absolute(output_root or config.drain.output_path)
    lanes = config.ordering.lanes if config.ordering.mode == "key" else 1
    staging = staging_dir(root, batch_id)
    try:
        if plan.is_empty:
            stats = tuple(
                RangeStats(r.range.topic, r.range.partition, r.priority, r.range.start, r.range.end, 0, 0,
                           None, None, 0) for r in plan.ranges
            )
        else:
            drained, fused = _drained(spark, config, topic, batch_id, plan)
            measure = None
            if fused:
                drained, observation = observe_counted(drained)
                measure = counted_stats
            elif len(plan.ranges) <= MAX_OBSERVED_RANGES:
                drained, observation = observe_ranges(drained, plan.ranges)
                measure = observed_stats
            write_staged(drained, staging)
            written = spark.read.schema(out_struct).parquet(staging)
            if measure is not None:
                stats = measure(observation, spark, written, plan.ranges)
            else:
                stats = range_stats(spark, written, plan.ranges)
            if not config.drain.allow_data_loss:
                for s in stats:
                    if s.lost:
                        raise incomplete_error(s.range, s.lost, "missing from the drained output")
        dirs = publish(spark, staging, root, topic.name, batch_id)
    except KprioError:
        discard(spark, staging, root)
        raise
    except Exception as exc:
        discard(spark, staging, root)
        typed = kprio_error_in(exc)
        if typed is not None:
            raise typed from exc
        raise
    return DrainResult(batch_id, topic.name, config.spark.reader, config.ordering.mode, lanes, root, dirs, stats)


def drained_frame(spark: SparkSession, config: KprioConfig, topic: TopicSettings, batch_id: str,
                  plan: DrainPlan) -> DataFrame:
    """The batch's output rows, not yet written: read, lanes in offset order, handler applied."""
    from spark_jobs.columns import STATS_COLUMN

    rows, fused = _drained(spark, config, topic, batch_id, plan)
    return rows.drop(STATS_COLUMN) if fused else rows


def _drained(spark: SparkSession, config: KprioConfig, topic: TopicSettings, batch_id: str,
             plan: DrainPlan) -> tuple[DataFrame, bool]:
    """The output rows and whether they came fused (then with the tasks' counts in ``STATS_COLUMN``)."""
    lanes = config.ordering.lanes if config.ordering.mode == "key" else 1
    if config.spark.reader == "python":
        splits = _splits(config, plan)
        if handler_in_read(lanes, splits, _parallelism(spark)):
            from spark_jobs.drain_source import drain_rows

            return drain_rows(spark, config, topic, batch_id, splits, lanes), True
    out_struct = drain_struct(topic.schema_)
    records = _read(spark, config, plan)
    ordered = _in_lane_order(spark, config, plan, _with_lane(records, plan, batch_id, lanes), lanes)
    return ordered.mapInArrow(lane_runner(config.drain.handler, topic.name, topic.schema_, out_struct),
                              out_struct), False


def handler_in_read(lanes: int, splits: Sequence[PlannedRange], parallelism: int) -> bool:
    """Whether lanes and handler run inside the read (one task per topic partition, no shuffle).

    One task per partition keeps every lane of it in one handler call, in offset order, and
    saves the shuffle and the second trip through Python. Only in key order (lanes > 1), with
    partitions cut into several splits and fewer partitions than cores, do the shuffle path's
    parallel reads and parallel lanes pay for it.

    >>> from kprio_core.offsets import OffsetRange
    >>> one_partition_in_3 = [PlannedRange(0, OffsetRange("t", 0, i, i + 10)) for i in (0, 10, 20)]
    >>> handler_in_read(1, one_partition_in_3, 8), handler_in_read(4, one_partition_in_3, 8)
    (True, False)
    >>> handler_in_read(4, one_partition_in_3, 1), handler_in_read(4, one_partition_in_3[:1], 8)
    (True, True)
    """
    partitions = {s.range.topic_partition for s in splits}
    if lanes == 1 or len(splits) == len(partitions):
        return True
    return len(partitions) >= parallelism


def _parallelism(spark: SparkSession) -> int:
    """Cores Spark runs tasks on (1 when the session cannot say, e.g. Spark Connect)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # noqa: BLE001 - Spark Connect has no SparkContext
        return 1


def _absolute(root: str) -> str:
    # A relative path would resolve against each executor's working directory.
    return root if "://" in root or root.startswith("file:") else os.path.abspath(root)


def _splits(config: KprioConfig, plan: DrainPlan) -> list[PlannedRange]:
    splits = split_ranges(plan.ranges, config.splits.max_records, config.splits.max_bytes)
    _check_disjoint(splits)
    return splits


def _check_disjoint(splits: list[PlannedRange]) -> None:
    """No offset may be read twice: the completeness stats rely on it."""
    ordered = sorted(s.range for s in splits)
    for before, after in zip(ordered, ordered[1:]):
        if before.overlaps(after):
            raise RangeConflict(f"the plan reads {before} and {after}, which overlap")


def _read(spark: SparkSession, config: KprioConfig, plan: DrainPlan) -> DataFrame:
    if config.spark.reader == "native":
        from spark_jobs.native import read_native

        return read_native(spark, config, plan.ranges)
    from spark_jobs.datasource import read_ranges

    return read_ranges(spark, config, _splits(config, plan))


def _with_lane(records: DataFrame, plan: DrainPlan, batch_id: str, lanes: int) -> DataFrame:
    from pyspark.sql import functions as F

    priority = None
    for topic, p in sorted({(r.range.topic, r.priority) for r in plan.ranges}):
        cond = F.col("topic") == topic
        priority = F.when(cond, F.lit(p)) if priority is None else priority.when(cond, F.lit(p))
    with_cols = records.select(
        *records.columns,
        priority.cast("int").alias("priority"),
        F.lit(batch_id).alias("batch_id"),
        F.lit(0).cast("int").alias("lane"),
    )
    if lanes == 1:
        return with_cols
    return with_cols.mapInArrow(lane_assigner(lanes), input_struct())


def _in_lane_order(spark: SparkSession, config: KprioConfig, plan: DrainPlan, df: DataFrame, lanes: int) -> DataFrame:
    """Rows of each lane together and in offset order within every task."""
    splits = _splits(config, plan)
    partitions = {s.range.topic_partition for s in splits}
    if config.spark.reader == "python" and len(partitions) == len(splits):
        # One split per partition: each task holds one partition, read in offset order already.
        return df if lanes == 1 else df.sortWithinPartitions("lane", "offset")
    shuffle = int(spark.conf.get("spark.sql.shuffle.partitions") or 8)
    n = max(1, min(len(partitions) * lanes, shuffle))
    return df.repartition(n, "topic", "partition", "lane").sortWithinPartitions("topic", "partition", "lane", "offset")
