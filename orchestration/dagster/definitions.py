"""kprio's Dagster definitions (assets, checks, sensors, jobs, schedule, resources), built from one configuration.

The code location (:mod:`orchestration.definitions`) builds them from kprio.yaml; tests and ``kprio drain`` from the
configuration they hold; a warm run worker from a run's configuration, over the worker's own Spark session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import dagster as dg

from kprio_core.config import KprioConfig
from orchestration.dagster.batch_asset import drain_batch_assets
from orchestration.dagster.freshness import (
    build_freshness_sensor,
    build_priority_lag_asset,
    build_priority_lag_job,
)
from orchestration.dagster.jobs import (
    build_drain_job,
    build_replay_window_job,
    plan_batch_job,
    reset_partition_job,
)
from orchestration.dagster.maintenance import (
    build_maintenance_schedule,
    tables_maintenance_job,
)
from orchestration.dagster.partitions import replay_partitions
from orchestration.dagster.replay_asset import build_replayed_window
from orchestration.dagster.resources import resources_from_config
from orchestration.dagster.sensors import build_priority_lag_sensor

if TYPE_CHECKING:
    from spark_jobs.session import SparkProvider


def build_definitions(config: KprioConfig, spark: SparkProvider | None = None) -> dg.Definitions:
    """Everything Dagster shows for ``config``; ``spark``: the session all runs' Spark resources share (a worker's)."""
    replayed_window = build_replayed_window(replay_partitions(config.drain.replay_start))
    drain_job = build_drain_job()
    lag_job = build_priority_lag_job()
    return dg.Definitions(
        assets=[drain_batch_assets, replayed_window, build_priority_lag_asset(config)],
        jobs=[drain_job, build_replay_window_job(replayed_window), plan_batch_job, reset_partition_job, lag_job,
              tables_maintenance_job],
        sensors=[build_priority_lag_sensor(drain_job, config.sensor.interval_s,
                                           config.sensor.default_status == "running"), build_freshness_sensor(lag_job, config)],
        schedules=[build_maintenance_schedule(config)],
        resources=resources_from_config(config, spark=spark),
        # A batch is one step: the multiprocess default would only add a child process (and imports) to UI runs.
        executor=dg.in_process_executor,
    )

