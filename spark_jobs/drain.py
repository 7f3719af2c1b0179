"""The drain of one batch attempt, driver side: one path from plan to staged files and per-range stats.

``drain_batch`` never touches ``sparkContext`` or the JVM (same in a local or classic session and over Spark Connect):

1. before Spark runs: checks the handler and output schema, cuts the plan into splits (``config.splits``),
   refuses overlapping ranges;
2. creates the attempt's staging directories and proves them writable
   (:func:`spark_jobs.output.prepare_staging`: ``OutputUnavailable`` with path and cause otherwise);
3. runs the drain task (:mod:`spark_jobs.drain_task`) on the executors, as :func:`handler_in_read` picks:

   - **fused** (default): the ``kprio-kafka`` source in drain mode, one task per topic partition reading its
     splits in offset order (partitions packed into about as many tasks as cores); only stats rows come back;
   - **key-order shuffle** (key order with few partitions on many cores, or the ``native`` reader): parallel
     split reads -> ``lane`` added -> repartition by ``(topic, partition, lane)``, sorted by offset -> the drain
     task in ``mapInArrow``. A failed read stage fails the planned ranges its typed record names (a field, never
     parsed from text); the others are drained again without them;
4. merges the stats rows into one :class:`~kprio_core.model.results.RangeStats` per planned range
   (:func:`spark_jobs.range_counts.merge_counts`), measured on the rows written.

A range whose drain raised carries its ``failure`` and typed ``error``; its staged files stay until
:func:`~spark_jobs.output.discard`. Only failures of Spark itself raise (:class:`~kprio_core.errors.SparkUnavailable`,
:mod:`spark_jobs.remote_errors`; staging then stays for :func:`~spark_jobs.output.sweep_staging`). Nothing is
published: the orchestration calls :func:`spark_jobs.output.publish` once the checks passed.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kprio_core.config import KprioConfig, SparkReader, TopicSettings
from kprio_core.errors import RangeConflict
from kprio_core.lanes import Ordering
from kprio_core.model.drain_plan import DrainPlan, PlannedRange
from kprio_core.model.results import DrainResult, ErrorRecord
from kprio_core.splits import split_ranges
from spark_jobs.columns import drain_struct
from spark_jobs.drain_task import DrainSpec
from spark_jobs.handler_contract import resolve_handler
from spark_jobs.keys import key_decoding, output_columns
from spark_jobs.layout import DEAD_LETTERS, OUTPUT, absolute
from spark_jobs.native import lost_read_in
from spark_jobs.output import discard, prepare_staging, publish, sweep_staging
from spark_jobs.range_counts import failed_row, merge_counts
from spark_jobs.remote_errors import failures_in, spark_boundary
from spark_jobs.session import priority_pool
from spark_jobs.validity import Validity
from spark_jobs.values import value_decoding

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["discard", "drain_batch", "handler_in_read", "plan_splits", "publish", "sweep_staging"]
"""What comes after a drain (publish, discard, sweep) lives in :mod:`spark_jobs.output`; re-exported here."""


def drain_batch(
    spark: SparkSession,
    config: KprioConfig,
    topic: TopicSettings,
    batch_id: str,
    attempt: int,
    plan: DrainPlan,
    *,
    output_root: str | None = None,
    dead_letter_root: str | None = None,
) -> DrainResult:
    """Drain ``plan`` as attempt ``attempt`` of ``batch_id`` into staged files; per-range stats (not published)."""
    started = time.monotonic()
    # Avro: the reader schemas from the registry, once for the whole batch (transient when it is down).
    handler, columns, values = value_decoding(config, topic, plan.ranges)
    keys = key_decoding(config, topic, plan.ranges)  # the same for keys in the registry's wire format
    resolve_handler(handler)  # wrong name or signature: fail before Spark runs
    drain_struct(dict(output_columns(columns, keys)))  # a field named like a drain column: the same
    splits = plan_splits(config, plan)
    ordering = config.ordering.mode
    lanes = config.ordering.lanes if ordering is Ordering.KEY else 1
    roots = {OUTPUT: absolute(output_root or config.drain.output_path),
             DEAD_LETTERS: absolute(dead_letter_root or config.drain.dead_letter_path)}
    staging = prepare_staging(roots, batch_id, attempt)
    spec = DrainSpec(
        batch_id, attempt, topic.name, handler, columns,
        Validity(tuple(topic.required_fields), config.quality.tombstones, config.quality.null_keys),
        ordering, lanes, plan.ranges, staging[0], staging[1], config.spark.arrow_batch_records,
        tuple(sorted(plan.incarnations.items())), values, keys,
    )
    rows, fused, record_seconds = _drain_rows(spark, config, plan, spec, splits, lanes)
    # The shuffle path's (allowed) losses do not reach the stats rows: the log's bounds tell them.
    bounds = _log_bounds(config, plan) if splits and not fused and config.drain.allow_data_loss else None
    stats = merge_counts(rows, plan.ranges, allow_data_loss=config.drain.allow_data_loss, every_range_reported=fused,
                         log_bounds=bounds)
    return DrainResult(batch_id, attempt, topic.name, stats, staging=staging[0], seconds=time.monotonic() - started,
                       record_seconds=record_seconds, reader=config.spark.reader, ordering=ordering, lanes=lanes)


def _drain_rows(spark: SparkSession, config: KprioConfig, plan: DrainPlan, spec: DrainSpec,
                splits: Sequence[PlannedRange], lanes: int) -> tuple[list[dict[str, Any]], bool, float | None]:
    """The drain's Spark jobs: (the tasks' stats rows, whether the handler ran in the read, its time on records)."""
    top = max((r.priority for r in plan.ranges), default=0)
    # Spark gone: SparkUnavailable. The batch's jobs run in the scheduler pool of its highest priority.
    native = config.kafka if config.spark.reader is SparkReader.NATIVE else None
    with spark_boundary(native), priority_pool(spark, top):
        cores = _parallelism(spark)
        fused = config.spark.reader is SparkReader.PYTHON and handler_in_read(lanes, splits, cores or 1)
        if not splits:
            return [], fused, None
        if fused:
            from spark_jobs.source import drain_stats

            tasks = drain_tasks(cores, splits)
            rows = _collect(drain_stats(spark, config, splits, spec, tasks=tasks))
            return rows, fused, _record_seconds(rows, cores, tasks)
        return _shuffled(spark, config, plan, spec), fused, None


def _record_seconds(rows: Sequence[dict[str, Any]], cores: int | None, tasks: int | None) -> float | None:
    """The fused drain's time on records as wall time: its tasks' seconds over the cores they ran on at once.

    None when Spark's cores are unknown. Unequal or shared tasks make this a lower bound.

    >>> _record_seconds([{"seconds": 1.5}, {"seconds": 0.5}, {"seconds": 1.0}], cores=2, tasks=3)
    1.5
    >>> _record_seconds([{"seconds": 0.25}], cores=2, tasks=1), _record_seconds([{"seconds": 1.0}], None, None)
    (0.25, None)
    """
    if cores is None:
        return None
    slots = max(1, min(cores, tasks if tasks is not None else len(rows)))
    return sum(r.get("seconds") or 0.0 for r in rows) / slots


def _log_bounds(config: KprioConfig, plan: DrainPlan) -> dict[tuple[str, int], tuple[int, int]]:
    """(log start, readable end) of every partition of the plan, read once after the drain (two ListOffsets)."""
    from kprio_core.kafka.client import Deadline, new_admin
    from kprio_core.kafka.reads import log_starts, readable_ends

    deadline = Deadline(config.kafka.timeout_s, config.kafka.bootstrap_servers)
    admin = new_admin(config.kafka)
    parts = sorted({r.range.topic_partition for r in plan.ranges})
    starts = log_starts(admin, parts, deadline)
    ends = readable_ends(admin, parts, deadline, config.kafka.isolation_level)
    return {tp: (starts[tp], ends[tp]) for tp in parts}


def plan_splits(config: KprioConfig, plan: DrainPlan) -> list[PlannedRange]:
    """The plan's ranges cut into read splits (``config.splits``); RangeConflict when two overlap."""
    ordered = sorted(r.range for r in plan.ranges if r.range.count)
    for before, after in zip(ordered, ordered[1:]):
        if before.overlaps(after):
            raise RangeConflict(f"the plan reads {before} and {after}, which overlap")
    return split_ranges(plan.ranges, config.splits.max_records, config.splits.max_bytes)


def handler_in_read(lanes: int, splits: Sequence[PlannedRange], parallelism: int) -> bool:
    """Whether the drain is fused into the read (each topic partition in one task, no shuffle).

    Fused saves the shuffle and a second trip through Python; only key order (lanes > 1) with split
    partitions fewer than cores makes the shuffle's parallel reads and lanes pay.

    >>> from kprio_core.model.offsets import OffsetRange
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


MAX_TASK_RECORDS = 50_000
"""Most planned records of one fused task when partitions outnumber cores: ~1/3 s of work, the longest another
priority's batch waits for a core (Spark never takes a core from a running task)."""


def drain_tasks(cores: int | None, splits: Sequence[PlannedRange]) -> int | None:
    """How many tasks the fused drain packs the plan's topic partitions into (None: one per partition).

    The cores Spark has (a task costs ~0.1 s fixed), more when a task would exceed :data:`MAX_TASK_RECORDS`,
    at most one per partition.

    >>> from kprio_core.model.offsets import OffsetRange
    >>> twelve = [PlannedRange(0, OffsetRange("t", p, 0, 5_000)) for p in range(12)]
    >>> drain_tasks(2, twelve), drain_tasks(None, twelve)
    (2, None)
    >>> big = [PlannedRange(0, OffsetRange("t", p, 0, 125_000)) for p in range(8)]
    >>> drain_tasks(2, big), drain_tasks(2, big[:2])
    (8, 2)
    """
    if cores is None:
        return None
    partitions = len({s.range.topic_partition for s in splits})
    records = sum(s.range.count for s in splits)
    return max(1, min(partitions, max(cores, math.ceil(records / MAX_TASK_RECORDS))))


def _parallelism(spark: SparkSession) -> int | None:
    """Cores Spark runs tasks on; over Spark Connect ``spark.default.parallelism`` or ``local[N]``'s N, else None.

    >>> _cores_of_master("local[3]"), _cores_of_master("local"), _cores_of_master("spark://h:7077")
    (3, 1, None)
    """
    if not _is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    value = spark.conf.get("spark.default.parallelism", None)
    if value:
        return int(value)
    return _cores_of_master(spark.conf.get("spark.master", None) or "")


def _cores_of_master(master: str) -> int | None:
    m = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\d+)?\])?", master)
    if m is None:
        return None  # a cluster: its size is not in its URL
    cores = m.group(1)
    if cores is None:
        return 1
    return (os.cpu_count() or 1) if cores == "*" else int(cores)


def _is_connect(spark: Any) -> bool:
    return type(spark).__module__.startswith("pyspark.sql.connect")


def _collect(df: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict(recursive=True) for row in df.collect()]


def _shuffled(spark: SparkSession, config: KprioConfig, plan: DrainPlan, spec: DrainSpec) -> list[dict[str, Any]]:
    """The key-order shuffle; a failed read stage fails the ranges its record names, the rest is drained again.

    The record: :func:`spark_jobs.remote_errors.failures_in`, :func:`spark_jobs.native.lost_read_in`."""
    failed: list[dict[str, Any]] = []
    todo = list(plan.ranges)
    while todo:
        try:
            return failed + _collect(_shuffle_frame(spark, config, todo, spec))
        except Exception as exc:
            records = failures_in(exc) or (lost_read_in(exc),)
            cause = records[-1]
            if cause is None:
                raise  # Spark's own failure
            named = [r for r in todo if cause.where is not None and r.range.overlaps(cause.where)]
            hit = named or todo  # a kprio error naming no range: every range it may have come from
            failed += [failed_row(r.range, f"{r.range}: {cause.message}",
                                  ErrorRecord(cause.kind, cause.message, cause.transient, r.range)) for r in hit]
            todo = [r for r in todo if r not in hit]
    return failed


def _shuffle_frame(spark: SparkSession, config: KprioConfig, ranges: Sequence[PlannedRange],
                   spec: DrainSpec) -> DataFrame:
    from pyspark.sql.types import IntegerType, StructField, StructType

    from spark_jobs.drain_task import drain_sorted
    from spark_jobs.kafka_schema import kafka_struct
    from spark_jobs.lane_batches import assign_lanes
    from spark_jobs.range_counts import stats_struct

    if config.spark.reader is SparkReader.NATIVE:
        from spark_jobs.native import read_native

        records = read_native(spark, config, ranges)
    else:
        from spark_jobs.source import read_records

        records = read_records(spark, config, split_ranges(ranges, config.splits.max_records, config.splits.max_bytes))
    laned = records.mapInArrow(assign_lanes(spec.ordering, spec.lanes),
                               StructType([*kafka_struct().fields, StructField("lane", IntegerType())]))
    partitions = {r.range.topic_partition for r in ranges}
    shuffle = int(spark.conf.get("spark.sql.shuffle.partitions") or 8)
    n = max(1, min(len(partitions) * spec.lanes, shuffle))
    ordered = laned.repartition(n, "topic", "partition", "lane").sortWithinPartitions(
        "topic", "partition", "lane", "offset")
    return ordered.mapInArrow(drain_sorted(spec), stats_struct())
