"""``priority_lag_sensor``: lag snapshot -> rate quotas -> plan -> ledger -> dynamic partition -> run request.

On each tick, for every logical topic, :func:`orchestration.planning.decide` says what to do;
the sensor records a new plan in the ledger, asks Dagster to add the batch's partition and
requests a run of ``drain_job`` for it with ``run_key`` = the batch id (a replayed attempt:
``<id>.attempt-<n>``). A tick that launches nothing says why in its skip reason, per topic.

Why the sensor writes to the ledger (STYLE.md wants sensors without side effects of their
own): recording the plan *is* step 4 of DESIGN.md, and it has to happen before the run
exists so that two batches can never reserve the same offsets. It is the sensor's only side
effect and it is idempotent in effect: a plan recorded on a tick whose result Dagster then
lost is a planned batch without a run, and the next tick requests its run with the same
deterministic run key (Dagster launches a run key once). Everything else the sensor does is
read (the broker, the ledger, the instance's runs) and return.
"""


import json
import time

import dagster as dg

from kprio_core.errors import RangeConflict
from kprio_core.ledger import Batch, Ledger
from orchestration.partitions import batch_partitions
from orchestration.planning import BUSY, BatchRuns, decide, run_key
from orchestration.resources import KafkaResource, KprioSettings, LedgerResource

SENSOR_NAME = "priority_lag_sensor"
RUN_KEY_TAG = "dagster/run_key"
"""The tag Dagster stores a run's run key under (the daemon dedupes run keys with it)."""
PARTITION_TAG = "dagster/partition"
DRAIN_JOB = "drain_job"
TOPIC_TAG = "kprio/logical_topic"
BATCH_TAG = "kprio/batch_id"


def existing_runs(instance: dg.DagsterInstance, ledger: Ledger, topic: str) -> BatchRuns:
    """The latest drain_job run of each batch in flight of the topic, and which of their run keys exist."""
    status: dict[str, str] = {}
    keys: set[str] = set()
    for batch in ledger.in_flight(topic):
        latest = instance.get_run_records(
            filters=dg.RunsFilter(job_name=DRAIN_JOB, tags={PARTITION_TAG: batch.batch_id}), limit=1
        )
        if latest:
            status[batch.batch_id] = latest[0].dagster_run.status.value
        key = run_key(batch)
        if instance.get_run_records(filters=dg.RunsFilter(tags={RUN_KEY_TAG: key}), limit=1):
            keys.add(key)
    return BatchRuns(status, frozenset(keys))


def run_request(batch: Batch) -> dg.RunRequest:
    return dg.RunRequest(
        run_key=run_key(batch),
        partition_key=batch.batch_id,
        tags={TOPIC_TAG: batch.logical_topic, BATCH_TAG: batch.batch_id},
    )


def evaluate(
    context: dg.SensorEvaluationContext,
    kafka: KafkaResource,
    ledger: LedgerResource,
    kprio: KprioSettings,
    now_s: float | None = None,
) -> dg.SensorResult:
    """One tick over every logical topic (the sensor's body, callable with a given clock)."""
    now_s = time.time() if now_s is None else now_s
    config = kprio.config()
    book = ledger.ledger
    requests: list[dg.RunRequest] = []
    reasons: list[str] = []
    # The cursor says what each topic is waiting for, so a caller (kprio drain) need not parse reasons.
    state: dict[str, dict] = {}
    for topic in config.topics:
        decision = decide(
            config, topic, edge=kafka.edge, ledger=book, now_s=now_s,
            runs=existing_runs(context.instance, book, topic.name),
        )
        batches = list(decision.launch)
        kind, reason = decision.kind, decision.reason
        if decision.plan is not None:
            try:
                batches.append(book.record_plan(decision.plan, max_in_flight=config.planner.max_in_flight))
            except RangeConflict as err:  # another planner (the manual job) got there first
                kind, reason = BUSY, str(err)
                reasons.append(f"{topic.name}: {err}")
        state[topic.name] = {
            "kind": kind,
            "reason": None if batches else reason,
            "retry_in_s": decision.retry_in_s,
            "batches": [b.batch_id for b in batches],
        }
        for batch in batches:
            context.log.info(f"{topic.name}: batch {batch.batch_id} ({batch.plan.records} records) -> drain_job")
            requests.append(run_request(batch))
        if not batches and decision.reason:
            reasons.append(f"{topic.name}: {decision.reason}" if len(config.topics) > 1 else decision.reason)
    cursor = json.dumps(state, sort_keys=True)
    if not requests:
        return dg.SensorResult(skip_reason="; ".join(reasons) or "no logical topic configured", cursor=cursor)
    for reason in reasons:
        context.log.info(reason)
    return dg.SensorResult(
        cursor=cursor,
        run_requests=requests,
        dynamic_partitions_requests=[batch_partitions.build_add_request([r.partition_key for r in requests])],
    )


def build_priority_lag_sensor(drain_job, interval_s: int) -> dg.SensorDefinition:
    """The sensor, ticking at most every ``interval_s`` seconds, on by default."""

    @dg.sensor(
        name=SENSOR_NAME,
        target=drain_job,
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Watches the lag of every priority topic; plans the next batch (rate quotas, burst, budgets), "
        "records it in the ledger and launches drain_job for it. Skips say why nothing was launched.",
    )
    def priority_lag_sensor(
        context: dg.SensorEvaluationContext,
        kafka: KafkaResource,
        ledger: LedgerResource,
        kprio: KprioSettings,
    ) -> dg.SensorResult:
        return evaluate(context, kafka, ledger, kprio)

    return priority_lag_sensor
