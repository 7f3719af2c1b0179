"""The drain job: read a plan's ranges, order them into lanes, apply the handler, publish Parquet.

``drain_batch`` is the whole batch, driver side:

1. check the handler and the output schema (fail before any Spark job);
2. read the plan's ranges, cut into splits (``config.splits``), with the ``kprio-kafka`` source
   (or Spark's ``kafka`` source when ``spark.reader`` is ``native``); a short range fails there;
3. add ``priority``, ``batch_id`` and ``lane`` (partition order: lane 0; key order:
   murmur2(key) % lanes, see :mod:`kprio_core.lanes`);
4. bring each lane together in offset order: when every partition is one split, a split is one
   task already in offset order and at most a local sort by lane is needed; otherwise the rows
   are repartitioned by ``(topic, partition, lane)`` and sorted by offset within;
5. run the handler per lane (:mod:`spark_jobs.lane_runner`), write Parquet to a staging dir;
6. measure every planned range on the written rows (:mod:`spark_jobs.stats`): a gap fails the
   batch unless ``drain.allow_data_loss``, then it is recorded;
7. publish the staged directories (:mod:`spark_jobs.output`), replacing a previous run's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.errors import KprioError, RangeConflict
from kprio_core.plan import DrainPlan, PlannedRange
from kprio_core.splits import split_ranges
from spark_jobs.columns import drain_struct, input_struct
from spark_jobs.completeness import incomplete_error
from spark_jobs.handler_contract import resolve_handler
from spark_jobs.lane_runner import lane_assigner, lane_runner
from spark_jobs.output import discard, publish, staging_dir, write_staged
from spark_jobs.remote_errors import kprio_error_in
from spark_jobs.stats import MAX_OBSERVED_RANGES, RangeStats, observe_ranges, observed_stats, range_stats

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
            drained = drained_frame(spark, config, topic, batch_id, plan)
            observed = len(plan.ranges) <= MAX_OBSERVED_RANGES
            if observed:
                drained, observation = observe_ranges(drained, plan.ranges)
            write_staged(drained, staging)
            written = spark.read.schema(out_struct).parquet(staging)
            if observed:
                stats = observed_stats(observation, spark, written, plan.ranges)
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
    lanes = config.ordering.lanes if config.ordering.mode == "key" else 1
    out_struct = drain_struct(topic.schema_)
    records = _read(spark, config, plan)
    ordered = _in_lane_order(spark, config, plan, _with_lane(records, plan, batch_id, lanes), lanes)
    return ordered.mapInArrow(lane_runner(config.drain.handler, topic.name, topic.schema_, out_struct), out_struct)


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
