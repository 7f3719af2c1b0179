"""Freshness objectives steer the plan, on real parts: the broker, priority_lag_sensor's evaluation on a real Dagster
instance, the drain's runs in process, the freshness checks of ``priority_lag``, and conservation."""

from __future__ import annotations

import json
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml
from typer.testing import CliRunner

from kprio_core.planner import Budget, plan_batch
from orchestration.cli.main import app
from orchestration.dagster.freshness import check_name
from orchestration.dagster.sensors import SENSOR_NAME
from tests.fixtures.kafka import fill
from tests.orchestration.conservation import conservation

pytestmark = pytest.mark.broker

HOUR_MS = 3_600_000
OBJECTIVES = {"max_age_s": {2: 86_400, 0: 600}}
"""Priority 2 may wait a day, priority 0 ten minutes."""


def one_sensor_evaluation(env, instance: dg.DagsterInstance) -> list[dg.RunRequest]:
    """Evaluate priority_lag_sensor once and execute the runs it requests in process, tagged as the daemon tags them."""
    sensor, job = env.defs.resolve_sensor_def(SENSOR_NAME), env.defs.resolve_job_def("drain_job")
    with dg.build_sensor_context(instance=instance, cursor=None, resources=env.defs.resources) as context:
        result = sensor(context)
    for request in result.dynamic_partitions_requests or ():
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    for request in result.run_requests or ():
        run = job.execute_in_process(instance=instance, partition_key=request.partition_key, raise_on_error=False,
                                     tags={**request.tags, "dagster/run_key": request.run_key,
                                           "dagster/sensor_name": SENSOR_NAME})
        assert run.success, [e.message for e in run.all_events if e.is_failure]
    return list(result.run_requests or ())


def freshness(env, instance: dg.DagsterInstance, topic) -> dict[int, dg.AssetCheckEvaluation]:
    """priority_lag's freshness checks of ``topic``, by priority, as its job evaluates them now."""
    evaluated = env.defs.resolve_job_def("priority_lag_job").execute_in_process(instance=instance)
    assert evaluated.success
    checks = {c.check_name: c for c in evaluated.get_asset_check_evaluations()}
    return {p: checks[check_name(topic.name, p)] for p in OBJECTIVES["max_age_s"]}


def config_file(env, tmp_path: Path) -> str:
    path = tmp_path / "kprio-steered.yaml"
    path.write_text(yaml.safe_dump(env.config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})))
    return str(path)


@pytest.mark.dagster
@pytest.mark.spark
def test_the_plan_steered_by_the_objectives_keeps_the_one_the_fixed_split_breaks(
        make_topic, kprio_env, kafka_settings, dagster_instance, spark, tmp_path):
    # Each topic: 30 fresh records of priority 2, and 12 of priority 0 an hour old (its objective: 10 minutes).
    # A batch of 20 records: the fixed split gives priority 0 its quota (2 of 20), the deadlines all 12.
    now_ms = int(time.time() * 1000)
    fixed_topic, steered_topic = (make_topic(priorities=3, partitions=1, records={2: 30}, base_ts_ms=now_ms)
                                  for _ in range(2))
    for topic in (fixed_topic, steered_topic):
        fill(kafka_settings, topic.priority_topic(0), 12, 1, base_ts_ms=now_ms - HOUR_MS)
    planner = {"record_budget": 20, "target_batch_s": None}
    fixed = kprio_env(fixed_topic, planner={**planner, "mode": "flipkart"}, slo=OBJECTIVES)
    steered = kprio_env(steered_topic, planner=planner, slo=OBJECTIVES)
    # Without objectives, the lag-aware planner splits this snapshot as the fixed quotas do.
    today = plan_batch(steered.edge.snapshot(steered_topic, now_ms=now_ms), Budget(20))
    assert today.records_by_priority() == {2: 18, 1: 0, 0: 2}

    [request] = one_sensor_evaluation(fixed, dagster_instance)
    assert fixed.ledger.batches.get(request.partition_key).plan.records_by_priority() == {2: 13, 1: 0, 0: 2}
    broken = freshness(fixed, dagster_instance, fixed_topic)
    assert not broken[0].passed and broken[0].severity == dg.AssetCheckSeverity.ERROR
    assert broken[0].description.startswith(f"{fixed_topic.name} priority 0: oldest pending record ")
    assert broken[2].passed

    shown = json.loads(CliRunner().invoke(app, ["plan", "--json", "--config", config_file(steered, tmp_path)]).stdout)
    assert shown[0]["plan"]["due"]["0"] == "12 records at or past their objective"  # kprio plan says why, too
    [request] = one_sensor_evaluation(steered, dagster_instance)
    batch = steered.ledger.batches.get(request.partition_key)
    assert batch.plan.records_by_priority() == {2: 8, 1: 0, 0: 12}
    assert batch.plan.due[0] == "12 records at or past their objective"
    assert batch.plan.due[2].startswith("8 records due within ")
    drained = dagster_instance.get_latest_materialization_event(dg.AssetKey("drained_batch"))
    assert drained.asset_materialization.metadata["due_p0"].value == "12 records at or past their objective"
    kept = freshness(steered, dagster_instance, steered_topic)
    assert kept[0].passed and kept[2].passed, (kept[0].description, kept[2].description)

    for env, topic in ((fixed, fixed_topic), (steered, steered_topic)):
        while one_sensor_evaluation(env, dagster_instance):  # the rest, batch by batch
            pass
        check = conservation(env.config, topic, env.edge)
        assert check.ok, check


def test_the_airflow_plan_task_logs_why_the_objectives_planned_as_they_did(make_topic, kafka_settings, tmp_path):
    """One line of the plan task's log (Airflow shows it in the task's log): the plan's reason per priority."""
    import logging

    from orchestration.airflow.tasks import TaskIdentity, plan_batches

    now_ms = int(time.time() * 1000)
    topic = make_topic(priorities=3, partitions=1, records={2: 30}, base_ts_ms=now_ms)
    fill(kafka_settings, topic.priority_topic(0), 12, 1, base_ts_ms=now_ms - HOUR_MS)
    path = tmp_path / "kprio.yaml"
    path.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": kafka_settings.bootstrap_servers}, "topics": [topic.model_dump(mode="json")],
        "ledger": {"url": f"sqlite:///{tmp_path / 'ledger.db'}"}, "drain": {"output_path": str(tmp_path / "out")},
        "planner": {"record_budget": 20, "target_batch_s": None}, "slo": OBJECTIVES}))
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    log = logging.getLogger("kprio.airflow")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)  # as in an Airflow task
    try:
        [order] = plan_batches(str(path), False, TaskIdentity("plan-1")).orders
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
    [line] = [s for s in said if "planned by the objectives" in s]
    assert line.startswith(f"{topic.name}: planned by the objectives: priority 2: 8 records due within ")
    assert line.endswith("; priority 0: 12 records at or past their objective"), line
