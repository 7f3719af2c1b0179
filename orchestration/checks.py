"""Blocking asset checks of ``drained_batch``: the Great Expectations suite of :mod:`orchestration.quality`.

One multi-asset check reads the batch's Parquet output back once and runs the whole suite;
each of the six checks is its own blocking spec, so a failure of any of them stops
``committed_offsets`` in the same run (Dagster skips the downstream step). The checks also
move the batch in the ledger: all passed -> checked; any failed -> failed, with every failed
check and its numbers as the reason (the offsets stay uncommitted, nothing is lost; fix the
cause and re-materialize the partition to retry).
"""


from collections.abc import Iterator

import dagster as dg

from kprio_core.ledger import BatchState
from kprio_core.offsets import OffsetRange
from orchestration.assets import drained_batch
from orchestration.quality import CHECK_DESCRIPTIONS, CHECK_NAMES, validate_batch
from orchestration.resources import KprioSettings, LedgerResource, SparkResource

CHECK_SPECS = [
    dg.AssetCheckSpec(name, asset=drained_batch, blocking=True, description=CHECK_DESCRIPTIONS[name])
    for name in CHECK_NAMES
]


@dg.multi_asset_check(
    specs=CHECK_SPECS,
    name="drained_batch_quality",
    description="Great Expectations on the drained batch's output: count, uniqueness, plan, contiguity, fields, "
    "schema.",
)
def drained_batch_quality(
    context: dg.AssetCheckExecutionContext,
    spark: SparkResource,
    ledger: LedgerResource,
    kprio: KprioSettings,
) -> Iterator[dg.AssetCheckResult]:
    from spark_jobs.output import read_output

    batch_id = context.partition_key
    batch = ledger.ledger.get(batch_id)
    config = kprio.config()
    topic = config.topic(batch.logical_topic)
    try:
        df = read_output(spark.session, config.drain.output_path, topic.name, batch_id, schema=dict(topic.schema_))
        outcomes = validate_batch(
            df,
            batch.plan.offset_ranges(),
            # Gaps only count as expected when the configuration allows losing them.
            lost=recorded_gaps((batch.drain_stats or {}).get("ranges", [])) if config.drain.allow_data_loss else (),
            required_fields=topic.required_fields,
            error_column="error",
        )
    except Exception as err:
        # The checks could not run: the batch is not proven, so it fails (and can be retried).
        if batch.state is BatchState.DRAINED:
            ledger.ledger.mark_failed(batch_id, f"checks could not run: {err}")
        raise
    failed = [o for o in outcomes if not o.passed]
    results = {o.name: {"passed": o.passed, **o.metadata} for o in outcomes}
    # Only a batch that was just drained moves; checks run alone on an old batch just report.
    if batch.state is BatchState.DRAINED:
        if failed:
            ledger.ledger.mark_failed(batch_id, "; ".join(o.failure() for o in failed))
        else:
            ledger.ledger.mark_checked(batch_id, results)
    for outcome in outcomes:
        yield dg.AssetCheckResult(
            asset_key=drained_batch.key,
            check_name=outcome.name,
            passed=outcome.passed,
            metadata=dict(outcome.metadata),
            description=outcome.description,
        )


def recorded_gaps(stats: list[dict]) -> list[OffsetRange]:
    """Offsets the drain recorded as lost to retention (``drain.allow_data_loss``), as ranges.

    >>> recorded_gaps([{"topic": "o-2", "partition": 0, "start": 0, "end": 10, "records": 7, "lost": [[0, 3]]}])
    [OffsetRange(topic='o-2', partition=0, start=0, end=3)]
    """
    return [
        OffsetRange(entry["topic"], int(entry["partition"]), int(start), int(end))
        for entry in stats
        for start, end in entry.get("lost") or []
    ]
