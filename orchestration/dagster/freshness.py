"""The lag verdict and freshness objectives in Dagster: the ``priority_lag`` asset, its checks, job and sensor.

Each ``priority_lag`` materialization records, per topic and priority, the backlog, the oldest pending record's
age and the lag verdict (with its reason) as metadata, so its page plots them over time. Each priority with an
objective (``slo.max_age_s``) has a check ``<topic>_p<priority>_fresh``: passed at or under the warn threshold,
failed with WARN severity above it and ERROR above the objective, described by the breach's one line; Dagster's
alert policies fire on a failed check. ``priority_lag_freshness_sensor`` requests ``priority_lag_job`` every
``max(10, sensor.interval_s)`` s (on by default when an objective is set), so the checks run whoever drains.

>>> check_name("orders.eu-west", 2)
'orders_eu_west_p2_fresh'
"""

import re
import time
from typing import Any

import dagster as dg

from kprio_core.config import KprioConfig
from kprio_core.freshness import Freshness, FreshnessResult
from orchestration.dagster.resources import KafkaResource, KprioSettings, LedgerResource
from orchestration.observe.judging import judge_topic, objectives

LAG_ASSET = "priority_lag"
LAG_JOB = "priority_lag_job"
FRESHNESS_SENSOR = "priority_lag_freshness_sensor"
MIN_INTERVAL_S = 10


def check_name(topic: str, priority: int) -> str:
    """The name of the freshness check of ``topic``'s ``priority`` (Dagster names are identifiers)."""
    return f"{re.sub(r'[^A-Za-z0-9_]', '_', topic)}_p{priority}_fresh"


def check_specs(config: KprioConfig) -> list[dg.AssetCheckSpec]:
    """One check per topic and priority that has an objective."""
    goals = objectives(config)
    return [dg.AssetCheckSpec(check_name(t.name, p), asset=LAG_ASSET,
                              description=f"The oldest pending record of {t.name} priority {p} is at most "
                                          f"{goals[p].max_age_s:g} s old (slo.max_age_s; warns above "
                                          f"{goals[p].warn_at_s:g} s).")
            for t in config.topics for p in sorted(goals, reverse=True) if p < t.priorities]


def check_result(result: FreshnessResult) -> dg.AssetCheckResult:
    """A priority's freshness outcome as Dagster's check result (WARN and ERROR severities)."""
    return dg.AssetCheckResult(
        check_name=check_name(result.topic, result.priority),
        passed=result.status is Freshness.PASS,
        severity=dg.AssetCheckSeverity.WARN if result.status is Freshness.WARN else dg.AssetCheckSeverity.ERROR,
        description=result.line,
        metadata={"status": result.status.value, "age_s": result.age_s, "objective_s": result.objective.max_age_s,
                  "cause": result.cause.value if result.cause is not None else None},
    )


def build_priority_lag_asset(config: KprioConfig) -> dg.AssetsDefinition:
    """``priority_lag`` with the freshness checks of ``config``'s objectives."""

    @dg.asset(
        name=LAG_ASSET,
        check_specs=check_specs(config),
        kinds={"kafka"},
        owners=["team:kprio"],
        description="The lag of every priority now: backlog, the oldest pending record's age and the lag verdict "
        "(Burrow's OK, WARN, REWIND, STALL, ERR, STOP) per topic and priority; its checks are the freshness "
        "objectives (slo.max_age_s).",
    )
    def priority_lag(context: dg.AssetExecutionContext, kafka: KafkaResource, ledger: LedgerResource,
                     kprio: KprioSettings) -> dg.MaterializeResult:
        settings = kprio.config(kafka)
        now_s = time.time()
        metadata: dict[str, Any] = {}
        results = []
        for topic in settings.topics:
            known = {b.topic for b in ledger.ledger.beliefs.of(topic.name).values()}
            snap = kafka.edge.snapshot(topic, now_ms=int(now_s * 1000), avg_record_bytes={}, with_age=True,
                                       deleted_ok=known)
            judged = judge_topic(settings, topic, snap, ledger.ledger, now_s=now_s)
            for v in judged.verdicts:
                key = f"{topic.name}_p{v.priority}"
                metadata[f"{key}_backlog"] = v.lag
                metadata[f"{key}_verdict"] = v.state.value
                metadata[f"{key}_verdict_reason"] = v.reason
                age = [r.age_s for r in judged.freshness if r.priority == v.priority]
                if age and age[0] is not None:
                    metadata[f"{key}_oldest_age_s"] = round(age[0], 3)
            for r in judged.freshness:
                if r.status is not Freshness.PASS:
                    context.log.warning(r.line)
                results.append(check_result(r))
        return dg.MaterializeResult(metadata=metadata, check_results=results)

    return priority_lag


def build_priority_lag_job():  # noqa: ANN201 - an unresolved asset job (no public type name)
    return dg.define_asset_job(LAG_JOB, selection=dg.AssetSelection.assets(LAG_ASSET),
                               description="Take the lag of every priority and evaluate the freshness objectives.")


def build_freshness_sensor(job, config: KprioConfig) -> dg.SensorDefinition:
    """Requests ``priority_lag_job`` every interval (on by default when an objective is configured)."""
    interval = max(MIN_INTERVAL_S, config.sensor.interval_s)
    status = dg.DefaultSensorStatus.RUNNING if config.slo.max_age_s else dg.DefaultSensorStatus.STOPPED

    @dg.sensor(name=FRESHNESS_SENSOR, target=job, minimum_interval_seconds=interval, default_status=status,
               description=f"Evaluates the freshness objectives every {interval} s: a run of priority_lag_job.")
    def priority_lag_freshness_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        return dg.SensorResult(run_requests=[dg.RunRequest()])

    return priority_lag_freshness_sensor
