"""Jobs: ``drain_job`` (one batch: drain, checks, commit), ``replay_window_job`` and the manual ``plan_batch_job``.

The manual drain is a plan, not a second drain path: ``plan_batch_job`` plans one batch under the sensor's rules,
records it and adds its partition; the sensor's next tick launches ``drain_job`` for it first (run key = batch
id). With the sensor off the batch waits as planned, holding its ranges so no other plan can take them.
"""


import time

import dagster as dg
from pydantic import Field

from orchestration.dagster.batch_asset import COMMITTED, DRAINED
from orchestration.dagster.partitions import BATCH_PARTITIONS_NAME
from orchestration.dagster.resources import KafkaResource, KprioSettings, LedgerResource
from orchestration.dagster.runs import DagsterRuns
from orchestration.runtime.tick import decide


def build_drain_job():
    """One batch partition: drained_batch, its blocking checks, then committed_offsets, in one op."""
    return dg.define_asset_job(
        "drain_job",
        selection=dg.AssetSelection.assets(DRAINED, COMMITTED),
        # In process: in a spawned subprocess PySpark's import of Connect can exit it; one Spark session per op.
        executor_def=dg.in_process_executor,
        description="Drain one batch (the partition = its ledger id), check it with Great Expectations, publish "
        "and commit it. Launched by priority_lag_sensor; backfill chosen partitions to re-drain them.",
    )


def build_replay_window_job(replayed_window: dg.AssetsDefinition):
    return dg.define_asset_job(
        "replay_window_job",
        selection=dg.AssetSelection.assets(replayed_window),
        executor_def=dg.in_process_executor,
        description="Replay UTC hours of every priority topic into drain.replay_path (no offsets committed).",
    )


class PlanBatchConfig(dg.Config):
    """What to drain by hand."""

    logical_topic: str = Field(description="The logical topic, as named under topics: in kprio.yaml.")
    priorities: list[int] | None = Field(
        default=None, description="Priorities to include (e.g. [2, 1]); default: all of them."
    )
    record_budget: int | None = Field(
        default=None, ge=1, description="Most records of the batch; default: planner.record_budget."
    )


@dg.op(
    description="Plan one batch of a logical topic now, record it in the ledger and add its kprio_batches "
    "partition; priority_lag_sensor launches drain_job for it on its next tick.",
)
def plan_batch_op(
    context: dg.OpExecutionContext,
    config: PlanBatchConfig,
    kafka: KafkaResource,
    ledger: LedgerResource,
    kprio: KprioSettings,
) -> str:
    settings = kprio.config()
    topic = settings.topic(config.logical_topic)
    bad = sorted(p for p in config.priorities or [] if not 0 <= p < topic.priorities)
    if bad:
        raise dg.Failure(description=f"{topic.name} has priorities 0..{topic.priorities - 1}, not {bad}")
    book = ledger.ledger
    # The tick's rules, narrowed to the Launchpad's priorities and budget; only the plan is recorded here.
    decision = decide(DagsterRuns(context.instance), kafka.edge, book, settings, topic, now_s=time.time(),
                      priorities=config.priorities, record_budget=config.record_budget)
    if decision.plan is None:
        raise dg.Failure(description=f"{topic.name}: nothing planned: {decision.summary()}")
    batch = book.batches.record_plan(decision.plan, max_in_flight=settings.planner.max_in_flight)
    context.instance.add_dynamic_partitions(BATCH_PARTITIONS_NAME, [batch.batch_id])
    by_p = batch.plan.records_by_priority()
    context.add_output_metadata(
        {"batch_id": batch.batch_id, "records": batch.plan.records, **{f"records_p{p}": n for p, n in by_p.items()}}
    )
    context.log.info(
        f"batch {batch.batch_id} planned ({batch.plan.records} records); priority_lag_sensor launches drain_job "
        f"for partition {batch.batch_id} on its next tick"
    )
    return batch.batch_id


class ResetPartitionConfig(dg.Config):
    """A person's decision for a partition held because the log changed under kprio (as ``kprio reset``)."""

    partition: str = Field(description="The partition as topic[partition], e.g. orders-2[0].")
    to: str = Field(description="earliest, latest, or an offset inside the log.")


@dg.op(description="Commit a held partition's offset (earliest, latest or an offset) and record the decision in "
       "the ledger, as kprio reset does; the sensor's next tick releases the hold.")
def reset_partition_op(context: dg.OpExecutionContext, config: ResetPartitionConfig, kafka: KafkaResource,
                       ledger: LedgerResource, kprio: KprioSettings) -> str:
    from kprio_core.log_changes import parse_partition
    from orchestration.runtime.log_changes import reset_partition

    try:
        name, number = parse_partition(config.partition)
        line = reset_partition(kafka.edge, ledger.ledger, kprio.config(), name, number, config.to,
                               now_ms=int(time.time() * 1000))
    except ValueError as err:
        raise dg.Failure(description=f"{config.partition}: {err}") from None
    context.log.info(line)
    context.add_output_metadata({"decision": line})
    return line


@dg.job(name="reset_partition_job", description="Decide for a held partition (topic recreated, committed offset "
        "beyond the log): the Launchpad's partition and --to, as kprio reset.")
def reset_partition_job() -> None:
    reset_partition_op()


@dg.job(
    name="plan_batch_job",
    description="Manual drain: plan one batch with the Launchpad's config (topic, priorities, budget); the sensor "
    "then drains, checks and commits it through drain_job.",
)
def plan_batch_job() -> None:
    plan_batch_op()
