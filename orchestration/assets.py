"""kprio's assets: the drained batch, its committed offsets (one partition per batch) and hourly replays.

- ``drained_batch`` reads exactly the ledger's ranges of the batch with Spark and writes them
  (a rerun replaces the batch's output). A failed or committed batch is replayed first
  (``Ledger.replay``): that is how a retry or a UI backfill of chosen batches re-drains them.
- ``committed_offsets`` commits each range's end to its priority's group once the blocking
  checks passed (Dagster skips it when one failed; it also checks the ledger says ``checked``).
  Offsets never move backwards, so a replayed batch commits nothing new.
- ``replayed_window`` drains the records of one UTC hour (offsets-for-times) to the replay
  output, without touching any group's offsets.

Metadata holds numbers only, one entry per priority (``records_p2``, ``lag_after_p2``), so
Dagster plots them across materializations. Never a secret: Kafka settings are not metadata.
"""


import time
from collections.abc import Mapping

import dagster as dg

from kprio_core.ledger import BatchState
from kprio_core.drain_plan import DrainPlan, PlannedRange
from orchestration.partitions import batch_partitions, window_batch_id, window_bounds_ms
from orchestration.planning import RATE_STATE, poll_history, rate_tracker
from orchestration.resources import KafkaResource, KprioSettings, LedgerResource, SparkResource

OWNERS = ["team:kprio"]
GROUP = "kprio"


def stats_metadata(stats: Mapping, priorities: int) -> dict[str, int]:
    """Numbers of a drain's stats: records and bytes per priority and in total, errors, lost records.

    >>> stats_metadata({"ranges": [{"priority": 2, "records": 29, "bytes": 5800, "errors": 1, "lost": []},
    ...                            {"priority": 0, "records": 7, "bytes": 700, "errors": 0, "lost": [[3, 5]]}]}, 3)
    {'records_p2': 29, 'records_p1': 0, 'records_p0': 7, 'records': 36, 'bytes': 6500, 'errors': 1, 'data_lost': 2}
    """
    by_p = dict.fromkeys(range(priorities - 1, -1, -1), 0)
    total_bytes = errors = lost = 0
    for entry in stats.get("ranges", []):
        by_p[int(entry["priority"])] = by_p.get(int(entry["priority"]), 0) + int(entry["records"])
        total_bytes += int(entry.get("bytes", 0))
        errors += int(entry.get("errors", 0))
        lost += sum(int(end) - int(start) for start, end in entry.get("lost") or [])
    meta: dict[str, int] = {f"records_p{p}": n for p, n in by_p.items()}
    meta.update(records=sum(by_p.values()), bytes=total_bytes, errors=errors, data_lost=lost)
    return meta


def drained_by_priority(stats: Mapping) -> dict[int, tuple[int, int]]:
    """(records, bytes) per priority of a drain's stats."""
    out: dict[int, tuple[int, int]] = {}
    for entry in stats.get("ranges", []):
        p = int(entry["priority"])
        records, size = out.get(p, (0, 0))
        out[p] = (records + int(entry["records"]), size + int(entry.get("bytes", 0)))
    return out


def per_priority(prefix: str, values: Mapping[int, int]) -> dict[str, int]:
    """``{2: 5, 0: 1}`` -> ``{"<prefix>_p2": 5, "<prefix>_p0": 1}`` (most urgent first)."""
    return {f"{prefix}_p{p}": int(values[p]) for p in sorted(values, reverse=True)}


@dg.asset(
    partitions_def=batch_partitions,
    group_name=GROUP,
    owners=OWNERS,
    kinds={"spark", "kafka", "parquet"},
    description="One batch drained with Spark: exactly the ledger's offset ranges of the batch, read from Kafka, "
    "ordered per lane, passed to the handler and written as Parquet (a rerun replaces the batch's output).",
)
def drained_batch(
    context: dg.AssetExecutionContext,
    spark: SparkResource,
    kafka: KafkaResource,
    ledger: LedgerResource,
    kprio: KprioSettings,
) -> dg.MaterializeResult:
    from spark_jobs.drain import drain_batch

    batch_id = context.partition_key
    book = ledger.ledger
    batch = book.get(batch_id)
    if batch.state in (BatchState.FAILED, BatchState.COMMITTED):
        context.log.info(f"batch {batch_id} is {batch.state.value}: replaying its exact ranges")
        batch = book.replay(batch_id)
    config = kprio.config(kafka)
    topic = config.topic(batch.logical_topic)
    started = time.monotonic()
    try:
        result = drain_batch(spark.session, config, topic, batch_id, batch.plan, output_root=config.drain.output_path)
    except Exception as err:
        # The ranges are released and stay uncommitted: nothing is lost, the batch can be retried.
        book.mark_failed(batch_id, f"drain failed: {err}")
        raise
    stats = result.to_dict()
    book.mark_drained(batch_id, stats)
    meta: dict[str, object] = stats_metadata(stats, topic.priorities)
    meta.update(per_priority("lag_before", batch.plan.backlog_before))
    meta.update(
        planned_records=batch.plan.records,
        ranges=len(batch.plan.ranges),
        attempt=batch.attempts,
        seconds=round(time.monotonic() - started, 3),
        logical_topic=topic.name,
        mode=batch.plan.mode,
        output=dg.MetadataValue.path(f"{config.drain.output_path}/{topic.name}"),
    )
    return dg.MaterializeResult(metadata=meta)


@dg.asset(
    partitions_def=batch_partitions,
    deps=[drained_batch],
    group_name=GROUP,
    owners=OWNERS,
    kinds={"kafka"},
    description="The batch's offsets committed to each priority's consumer group, only after the blocking checks "
    "of drained_batch passed; offsets never move backwards (a replayed batch commits nothing new).",
)
def committed_offsets(
    context: dg.AssetExecutionContext,
    kafka: KafkaResource,
    ledger: LedgerResource,
    kprio: KprioSettings,
) -> dg.MaterializeResult:
    batch_id = context.partition_key
    book = ledger.ledger
    batch = book.get(batch_id)
    if batch.state is not BatchState.CHECKED:
        raise dg.Failure(
            description=f"batch {batch_id} is {batch.state.value}, not checked: its blocking checks have not "
            "passed on the current output, so nothing is committed"
        )
    config = kprio.config()
    topic = config.topic(batch.logical_topic)
    edge = kafka.edge
    ranges = [r for r in batch.plan.offset_ranges() if r.count]
    report = edge.commit(topic, ranges)
    # One snapshot after the commit proves what the broker holds and gives the lag after.
    snapshot = edge.snapshot(topic, now_ms=int(time.time() * 1000))
    committed = {(p.topic, p.partition): p.committed for p in snapshot.partitions}
    short = [r for r in ranges if (committed.get(r.topic_partition) or 0) < r.end]
    if short:
        # Checked but not committed: the batch keeps its ranges; committing later is safe.
        raise dg.Failure(
            description=f"batch {batch_id}: offsets not committed for {', '.join(map(str, short))} ({report})"
        )
    book.mark_committed(batch_id, commit_report(report))
    stats = batch.drain_stats or {}
    if not batch.replay_of_committed:
        remember_drain(config, book, topic, batch.plan, stats, now_s=time.time())

    after = snapshot.backlog_by_priority()
    meta: dict[str, object] = stats_metadata(stats, topic.priorities)
    meta.update(per_priority("lag_before", batch.plan.backlog_before))
    meta.update(per_priority("lag_after", after))
    meta.update(
        lag_after=sum(after.values()),
        partitions_moved=len(report.moved),
        partitions_already_committed=len(report.skipped),
        replay=int(batch.replay_of_committed),
        logical_topic=topic.name,
    )
    return dg.MaterializeResult(metadata=meta)


def commit_report(report) -> dict:
    """A CommitReport as JSON for the ledger: moved old -> new and skipped with why, per partition."""
    return {
        "moved": [
            {"topic": t, "partition": p, "from": old, "to": new} for (t, p), (old, new) in sorted(report.moved.items())
        ],
        "skipped": [{"topic": t, "partition": p, "why": why} for (t, p), why in sorted(report.skipped.items())],
    }


def remember_drain(config, book, topic, plan: DrainPlan, stats: Mapping, *, now_s: float) -> None:
    """Advance the burst windows and the rate samples with what the batch actually drained."""
    drained = drained_by_priority(stats)
    history = poll_history(config, book, topic)
    history.record({p: n for p, (n, _) in drained.items()}, plan.quotas)
    book.save_history(topic.name, history.to_dict())
    tracker = rate_tracker(config, book, topic.name)
    for p, (records, size) in drained.items():
        tracker.record_batch(p, records, size, now_s)
    book.save_state(topic.name, RATE_STATE, tracker.to_dict())


def replay_plan(logical_topic: str, ranges_by_priority: Mapping[int, list], n_priorities: int) -> DrainPlan:
    """A plan of explicit ranges (a time window), recorded nowhere: budget = its own size."""
    planned = tuple(
        PlannedRange(p, r) for p in sorted(ranges_by_priority, reverse=True) for r in ranges_by_priority[p] if r.count
    )
    counts = {p: sum(r.count for r in ranges_by_priority.get(p, [])) for p in range(n_priorities - 1, -1, -1)}
    return DrainPlan(
        logical_topic=logical_topic,
        mode="lag-aware",
        record_budget=max(1, sum(counts.values())),
        byte_budget=None,
        quotas=counts,
        grants=counts,
        ranges=planned,
    )


def build_replayed_window(partitions_def: dg.HourlyPartitionsDefinition) -> dg.AssetsDefinition:
    """The ``replayed_window`` asset over the given hourly partitions."""

    @dg.asset(
        name="replayed_window",
        partitions_def=partitions_def,
        group_name=GROUP,
        owners=OWNERS,
        kinds={"spark", "kafka", "parquet"},
        description="The records of one UTC hour of every priority topic (offsets-for-times), drained with Spark "
        "into drain.replay_path; a rerun replaces the hour; no consumer group offset is touched.",
    )
    def replayed_window(
        context: dg.AssetExecutionContext,
        spark: SparkResource,
        kafka: KafkaResource,
        kprio: KprioSettings,
    ) -> dg.MaterializeResult:
        from spark_jobs.drain import drain_batch

        start_ms, end_ms = window_bounds_ms(context.partition_time_window)
        window_id = window_batch_id(context.partition_key)
        config = kprio.config(kafka)
        meta: dict[str, object] = {"window_start_ms": start_ms, "window_end_ms": end_ms}
        # Every priority present, 0 when idle, so Dagster's plots have no holes.
        totals = dict.fromkeys(range(max(t.priorities for t in config.topics)), 0)
        for topic in config.topics:
            ranges = kafka.edge.window_ranges(topic, start_ms, end_ms)
            plan = replay_plan(topic.name, ranges, topic.priorities)
            # An empty hour still runs the drain so a rerun clears what an earlier run wrote.
            result = drain_batch(spark.session, config, topic, window_id, plan, output_root=config.drain.replay_path)
            stats = result.to_dict()
            for p, (records, _) in drained_by_priority(stats).items():
                totals[p] = totals.get(p, 0) + records
            meta[f"records_{topic.name}"] = stats_metadata(stats, topic.priorities)["records"]
        meta.update(per_priority("records", totals))
        meta.update(
            records=sum(totals.values()),
            output=dg.MetadataValue.path(config.drain.replay_path),
            batch_id=window_id,
        )
        return dg.MaterializeResult(metadata=meta)

    return replayed_window
