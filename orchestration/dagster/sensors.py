"""``priority_lag_sensor``: the Dagster driver of the tick, with no rule of its own.

Every evaluation runs :func:`orchestration.runtime.tick.tick` over the instance's runs (as ``kprio drain`` does)
and hands Dagster the run requests (deterministic run keys, launched once by the daemon) and the partitions they
need, or a skip reason saying why nothing was launched. Before it, the probe of
:mod:`orchestration.runtime.healing` retries transient failures at once when their cause has passed; the cursor
remembers a failed probe (:data:`~orchestration.runtime.healing.CAUSE_SEEN`). A ledger that does not answer
(``LedgerUnavailable``) is a skip saying so, not a failed tick. Each evaluation also (re)starts the home's warm
workers when the instance uses kprio's run launcher.
"""

from __future__ import annotations

import dagster as dg

from kprio_core.config import KprioConfig
from kprio_core.errors import LedgerUnavailable
from kprio_core.ledger import Ledger
from orchestration.dagster.partitions import batch_partitions
from orchestration.dagster.resources import KafkaResource, KprioSettings, LedgerResource
from orchestration.dagster.runs import DagsterRuns, run_request
from orchestration.dagster.workers.home import warm_for_code_location
from orchestration.runtime import tick as runtime
from orchestration.runtime.healing import CAUSE_SEEN, cause_seen_after, probe_causes

SENSOR_NAME = "priority_lag_sensor"


def tick(instance: dg.DagsterInstance, edge, ledger: Ledger, config: KprioConfig, **kwargs) -> runtime.Tick:
    """One tick over ``instance``'s runs: the sensor's evaluation (``kprio drain`` ticks over the same runs)."""
    return runtime.tick(DagsterRuns(instance), edge, ledger, config, **kwargs)


def build_priority_lag_sensor(drain_job, interval_s: int, running: bool = True) -> dg.SensorDefinition:
    """The sensor, ticking at most every ``interval_s`` seconds, on by default (``sensor.default_status``)."""

    @dg.sensor(
        name=SENSOR_NAME,
        target=drain_job,
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING if running else dg.DefaultSensorStatus.STOPPED,
        description="Watches the lag of every priority topic; heals batches whose run died, retries failed ones, "
        "plans the next batch (rate quotas, burst, budgets, free priority slots), records it in the ledger and "
        "launches drain_job for it. Skips say why nothing was launched and which partitions wait.",
    )
    def priority_lag_sensor(
        context: dg.SensorEvaluationContext,
        kafka: KafkaResource,
        ledger: LedgerResource,
        kprio: KprioSettings,
    ) -> dg.SensorResult:
        config, seen = kprio.config(kafka), context.cursor == CAUSE_SEEN
        warm_for_code_location()  # the home's warm workers, started again should they have stopped
        try:
            probed = probe_causes(ledger.ledger, config, seen)
            if probed.problem:
                context.log.info(f"transient failures wait: {probed.problem}")
            elif probed.passed:
                context.log.info("the cause of the transient failures passed: retrying them now, not at their backoff")
            result = tick(context.instance, kafka.edge, ledger.ledger, config, log=context.log,
                          fresh_start=probed.passed, cause=probed.problem)
        except LedgerUnavailable as err:  # passes by itself: a skip saying so (not a failed tick), asked again next
            return dg.SensorResult(skip_reason=f"the ledger does not answer: {err}; the sensor waits for it",
                                   cursor=context.cursor or "")
        cursor = CAUSE_SEEN if cause_seen_after(seen, probed, result) else ""
        if not result.requests:
            return dg.SensorResult(skip_reason=result.skip_reason, cursor=cursor)
        # The batches recorded now, and any another driver recorded a moment ago and has not added yet.
        added = DagsterRuns(context.instance).missing_partitions(
            [*result.partitions, *(r.partition_key for r in result.requests)])
        return dg.SensorResult(
            run_requests=[run_request(r) for r in result.requests], cursor=cursor,
            dynamic_partitions_requests=[batch_partitions.build_add_request(added)] if added else [],
        )

    return priority_lag_sensor


__all__ = ["SENSOR_NAME", "build_priority_lag_sensor", "tick"]
