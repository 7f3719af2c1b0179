"""``replayed_window``: the records of one UTC hour of every priority topic, drained again into the replay output.

Each hour maps to offsets with offsets-for-times on every priority topic and is drained like a
batch (same drain, same handler, invalid records to the replay's dead letters) into
``drain.replay_path``; no consumer group offset is touched, so live draining is unaffected. The
hour running now replays what has arrived so far and says so in its metadata (``partial_hour``);
materializing it again later adds what arrived since. A rerun replaces the hour's files.

A replay runs the checks a drained batch runs (:func:`orchestration.runtime.checks.check_batch`,
per logical topic, the same six blocking checks as asset checks of ``replayed_window``): a
topic's output is published only when every check passed on it; otherwise nothing of that topic
is published, the failed checks are recorded on the replay's partition, and the run fails
saying which check failed where.
"""


import time
from collections.abc import Iterator, Mapping

import dagster as dg

from kprio_core.drain_plan import DrainPlan, PlanMode, PlannedRange
from kprio_core.offsets import OffsetRange
from kprio_core.results import CheckReport
from orchestration.dagster.batch_asset import GROUP, OWNERS, per_priority
from orchestration.dagster.checks import check_results, check_specs
from orchestration.dagster.partitions import window_batch_id, window_bounds_ms
from orchestration.dagster.resources import KafkaResource, KprioSettings, SparkResource

REPLAY_DEAD_LETTERS = "_dead_letters"
"""Directory under ``drain.replay_path`` holding the invalid records of replays."""


def replay_plan(logical_topic: str, ranges_by_priority: Mapping[int, list[OffsetRange]], n_priorities: int) -> DrainPlan:
    """A plan of explicit ranges (a time window), recorded nowhere: its budget is its own size.

    >>> plan = replay_plan("orders", {1: [OffsetRange("orders-1", 0, 10, 20)]}, 2)
    >>> plan.records, plan.records_by_priority()
    (10, {1: 10, 0: 0})
    """
    planned = tuple(
        PlannedRange(p, r) for p in sorted(ranges_by_priority, reverse=True) for r in ranges_by_priority[p] if r.count
    )
    counts = {p: sum(r.count for r in ranges_by_priority.get(p, [])) for p in range(n_priorities - 1, -1, -1)}
    return DrainPlan(logical_topic=logical_topic, mode=PlanMode.LAG_AWARE, record_budget=max(1, sum(counts.values())),
                     byte_budget=None, quotas=counts, grants=counts, ranges=planned)


def build_replayed_window(partitions_def: dg.HourlyPartitionsDefinition) -> dg.AssetsDefinition:
    """The ``replayed_window`` asset over the given hourly partitions."""

    @dg.asset(
        name="replayed_window",
        partitions_def=partitions_def,
        group_name=GROUP,
        owners=OWNERS,
        kinds={"spark", "kafka", "parquet"},
        check_specs=check_specs("replayed_window", partitions_def),
        description="The records of one UTC hour of every priority topic (offsets-for-times), drained with Spark "
        "into drain.replay_path; a rerun replaces the hour; the running hour replays what has arrived so far; "
        "no consumer group offset is touched; published only when the batch checks pass.",
    )
    def replayed_window(
        context: dg.AssetExecutionContext,
        spark: SparkResource,
        kafka: KafkaResource,
        kprio: KprioSettings,
    ) -> Iterator[dg.AssetCheckResult | dg.MaterializeResult]:
        from orchestration.runtime.checks import check_batch
        from spark_jobs.drain import discard, drain_batch, publish

        start_ms, end_ms = window_bounds_ms(context.partition_time_window)
        now_ms = int(time.time() * 1000)
        partial = end_ms > now_ms
        window_id = window_batch_id(context.partition_key)
        config = kprio.config(kafka)
        root = config.drain.replay_path
        dead_root = f"{root.rstrip('/')}/{REPLAY_DEAD_LETTERS}"
        meta: dict[str, object] = {"window_start_ms": start_ms, "window_end_ms": end_ms,
                                   "partial_hour": partial}
        if partial:
            meta["replayed_until_ms"] = now_ms
            context.log.info(f"{context.partition_key} is the hour running now: replaying what arrived until now; "
                             "materialize it again later for the rest")
        totals = dict.fromkeys(range(max(t.priorities for t in config.topics)), 0)
        dead = 0
        reports, failures = [], {}
        for topic in config.topics:
            ranges = kafka.edge.window_ranges(topic, start_ms, end_ms)
            plan = replay_plan(topic.name, ranges, topic.priorities)
            if plan.is_empty:
                meta[f"records_{topic.name}"] = 0
                continue
            # One topic at a time: the topics of a replay share its batch id, so their staging too.
            result = drain_batch(spark.session, config, topic, window_id, 1, plan, output_root=root,
                                 dead_letter_root=dead_root)
            failed = result.failed_ranges
            if failed:
                discard(result, output_root=root, dead_letter_root=dead_root)
                raise dg.Failure(description=f"replay of {context.partition_key} failed: "
                                             + "; ".join(f"{s.range}: {s.failure}" for s in failed[:3]))
            report = check_batch(result.ranges, quality=config.quality, required_fields=topic.required_fields)
            reports.append(report)
            if not report.passed:
                discard(result, output_root=root, dead_letter_root=dead_root)
                failures[topic.name] = report.reason()
                continue
            publish(result, output_root=root, dead_letter_root=dead_root)
            for p, (out, bad) in result.by_priority().items():
                totals[p] = totals.get(p, 0) + out
                dead += bad
            meta[f"records_{topic.name}"] = result.records
        if not reports:  # nothing in the hour: the checks of an empty output, which pass
            reports.append(check_batch((), quality=config.quality, required_fields=()))
        yield from check_results(CheckReport.merged(reports), "replayed_window")
        if failures:
            raise dg.Failure(description=f"replay of {context.partition_key} failed its checks; nothing of "
                                         f"{', '.join(failures)} was published: "
                                         + "; ".join(f"{name}: {why}" for name, why in failures.items()))
        meta.update(per_priority("records", totals))
        meta.update(records=sum(totals.values()), dead_letters=dead, output=dg.MetadataValue.path(root),
                    batch_id=window_id)
        yield dg.MaterializeResult(metadata=meta)

    return replayed_window
