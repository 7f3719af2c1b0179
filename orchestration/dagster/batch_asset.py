"""One batch, drained, checked and committed: the ``drained_batch`` and ``committed_offsets`` assets.

A Dagster adapter over :class:`orchestration.runtime.batch.BatchRun`, with no rule of its own: it gives the
runtime what only Dagster knows (the partition, the launcher from the run's tags, the run id, whether a lease
owner's run ended, the dynamic partitions) and turns the runtime's events into Dagster's (check results,
materializations, a later batch committed on the way as its own partition's event, ``dg.Failure``).

Both assets are materialized by one op, so every way to re-drain a batch (asset page, graph, job page, backfill,
sensor, retry) is the same single drain of the ledger's ranges, then the checks and the commit. An op selected
for one asset alone still does all of the work (:func:`selected_only`), so the catalog tells what happened.

>>> dagster_metadata({"records": 5, "output": PathText("/out/orders")})["output"]
PathMetadataValue(fspath='/out/orders')
"""

from collections.abc import Iterator, Mapping

import dagster as dg

from kprio_core.errors import BatchNotFound
from orchestration.dagster.checks import check_results, check_specs
from orchestration.dagster.partitions import BATCH_PARTITIONS_NAME, batch_partitions
from orchestration.dagster.resources import (
    KafkaResource,
    KprioSettings,
    LedgerResource,
    SparkResource,
)
from orchestration.dagster.runs import DagsterRuns
from orchestration.dagster.tags import intent_of
from orchestration.runtime.batch import (
    BatchRun,
    Checked,
    Committed,
    Drained,
    Event,
    RunFailed,
)
from orchestration.runtime.batch_metadata import Markdown, PathText
from orchestration.runtime.batch_metadata import (
    per_priority as per_priority,  # replay_asset's metadata uses it
)

OWNERS = ["team:kprio"]
GROUP = "kprio"
DRAINED = dg.AssetKey("drained_batch")
COMMITTED = dg.AssetKey("committed_offsets")
DRAIN_POOL = "kprio_drain"
"""The Dagster pool of the drain op (its limit is set in the shipped dagster.yaml)."""


@dg.multi_asset(
    name="drain_batch",
    specs=[
        dg.AssetSpec(
            DRAINED, partitions_def=batch_partitions, group_name=GROUP, owners=OWNERS,
            kinds={"spark", "kafka", "parquet"}, skippable=True,
            description="One batch drained with Spark: exactly the ledger's offset ranges of the batch, read from "
            "Kafka, ordered per lane, passed to the handler; valid records to the output, invalid ones to the "
            "dead letters, published only after the blocking checks passed (a rerun replaces its files).",
        ),
        dg.AssetSpec(
            COMMITTED, deps=[DRAINED], partitions_def=batch_partitions, group_name=GROUP, owners=OWNERS,
            kinds={"kafka"}, skippable=True,
            description="The batch's offsets committed to each priority's consumer group, only after its checks "
            "passed and its output was published; offsets never move backwards (a re-drain commits nothing new).",
        ),
    ],
    check_specs=check_specs(DRAINED),
    partitions_def=batch_partitions,
    can_subset=True,  # a selection of either asset runs all of it once (see selected_only)
    pool=DRAIN_POOL,
    description="Drain, check, publish and commit one batch (the partition is its ledger id). Materializing either "
    "asset runs all of it once: a re-drain of a committed batch replaces its output and commits nothing new.",
)
def drain_batch_assets(
    context: dg.AssetExecutionContext,
    spark: SparkResource,
    kafka: KafkaResource,
    ledger: LedgerResource,
    kprio: KprioSettings,
) -> Iterator:
    run = BatchRun(
        batch_id=context.partition_key, intent=intent_of(context.run.tags), run_id=context.run.run_id,
        ledger=ledger.ledger, config=kprio.config(kafka), spark=lambda: spark.session, edge=lambda: kafka.edge,
        owner_dead=DagsterRuns(context.instance).owner_dead,
        add_batch=lambda batch_id: context.instance.add_dynamic_partitions(BATCH_PARTITIONS_NAME, [batch_id]),
        log=context.log,
    )
    yield from selected_only(context, dagster_events(context, run, repr(ledger.ledger)))


def dagster_events(context: dg.AssetExecutionContext, run: BatchRun, ledger_name: str) -> Iterator:
    """The run's events as Dagster's; its failure as ``dg.Failure`` with the same one line."""
    try:
        for event in run.events():
            yield from _as_dagster(context, event)
    except RunFailed as failed:
        raise dg.Failure(description=str(failed)) from failed.__cause__
    except BatchNotFound:
        raise dg.Failure(description=(
            f"{context.partition_key} is not a batch of {ledger_name}: the partitions of drained_batch are the "
            "batches the sensor (or kprio drain) recorded, and a partition added by hand in the UI names no "
            "offsets to drain. Pick an existing partition of drained_batch.")) from None


def _as_dagster(context: dg.AssetExecutionContext, event: Event) -> Iterator:
    if isinstance(event, Checked):
        yield from check_results(event.report, DRAINED)
    elif isinstance(event, Drained):
        yield dg.MaterializeResult(asset_key=DRAINED, metadata=dagster_metadata(event.metadata))
    elif isinstance(event, Committed) and event.batch_id == context.partition_key:
        yield dg.MaterializeResult(asset_key=COMMITTED, metadata=dagster_metadata(event.metadata))
    elif isinstance(event, Committed):  # a later batch that waited for this one: its own partition's event
        context.log_event(dg.AssetMaterialization(asset_key=COMMITTED, partition=event.batch_id,
                                                  metadata=dagster_metadata(event.metadata), description=event.note))


def dagster_metadata(metadata: Mapping[str, object]) -> dict[str, object]:
    """The runtime's metadata with its typed values as Dagster's (a path, Markdown)."""
    def value(v: object) -> object:
        if isinstance(v, PathText):
            return dg.MetadataValue.path(str(v))
        if isinstance(v, Markdown):
            return dg.MetadataValue.md(str(v))
        return v

    return {k: value(v) for k, v in metadata.items()}


def selected_only(context: dg.AssetExecutionContext, events: Iterator) -> Iterator:
    """The run's events, its outputs narrowed to what the run selected; an unselected asset's materialization is
    logged as an event of its partition, unselected check results (they still gated the commit) as text."""
    assets, checks = context.selected_asset_keys, context.selected_asset_check_keys
    for event in events:
        if isinstance(event, dg.MaterializeResult) and event.asset_key not in assets:
            context.log_event(dg.AssetMaterialization(
                asset_key=event.asset_key, partition=context.partition_key, metadata=event.metadata,
                description="done by this run's drain (the run selected only the other asset of the batch)"))
        elif isinstance(event, dg.AssetCheckResult) and dg.AssetCheckKey(event.asset_key,
                                                                          event.check_name) not in checks:
            context.log.info(f"{event.check_name}: {'passed' if event.passed else 'failed'} "
                             f"({event.description})")
        else:
            yield event
