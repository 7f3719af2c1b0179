"""``replayed_window``: the records of one UTC hour of every priority topic, drained again into the replay output.

The replay itself is :func:`orchestration.runtime.replay.replay_window` (Airflow's ``kprio_replay`` runs it too).
The hour running now replays what has arrived so far (metadata ``partial_hour``); materializing it again later
adds the rest. The six blocking checks are asset checks of the replay's partition: a topic failing one publishes
nothing, and the run fails saying which check failed where.
"""


import time
from collections.abc import Iterator

import dagster as dg

from orchestration.dagster.batch_asset import GROUP, OWNERS, per_priority
from orchestration.dagster.checks import check_results, check_specs
from orchestration.dagster.partitions import window_batch_id, window_bounds_ms
from orchestration.dagster.resources import KafkaResource, KprioSettings, SparkResource
from orchestration.runtime.replay import ReplayFailed, replay_window


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
        start_ms, end_ms = window_bounds_ms(context.partition_time_window)
        now_ms = int(time.time() * 1000)
        partial = end_ms > now_ms
        config = kprio.config(kafka)
        meta: dict[str, object] = {"window_start_ms": start_ms, "window_end_ms": end_ms,
                                   "partial_hour": partial}
        if partial:
            meta["replayed_until_ms"] = now_ms
            context.log.info(f"{context.partition_key} is the hour running now: replaying what arrived until now; "
                             "materialize it again later for the rest")
        window_id = window_batch_id(context.partition_key)
        try:
            done = replay_window(config, spark.session, kafka.edge, start_ms, end_ms, window_id)
        except ReplayFailed as failed:
            raise dg.Failure(description=f"replay of {context.partition_key} failed: {failed}") from None
        yield from check_results(done.report, "replayed_window")
        if done.failures:
            raise dg.Failure(description=f"replay of {context.partition_key} failed its checks; nothing of "
                                         f"{', '.join(done.failures)} was published: "
                                         + "; ".join(f"{name}: {why}" for name, why in done.failures.items()))
        meta.update({f"records_{name}": n for name, n in done.by_topic.items()})
        meta.update(per_priority("records", done.records))
        meta.update(records=sum(done.records.values()), dead_letters=done.dead_letters,
                    output=dg.MetadataValue.path(config.drain.replay_path), batch_id=window_id)
        yield dg.MaterializeResult(metadata=meta)

    return replayed_window
