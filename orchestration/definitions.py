"""The Dagster code location of kprio: assets, checks, sensor, jobs and resources, built from kprio.yaml.

``dagster dev`` (workspace.yaml) loads ``defs``; :func:`build_definitions` builds the same thing
from any configuration (tests, ``kprio drain``).
"""

from __future__ import annotations

import dagster as dg

from kprio_core.config import KprioConfig, load_config
from orchestration.batch_asset import drain_batch_assets
from orchestration.jobs import build_drain_job, build_replay_window_job, plan_batch_job, reset_partition_job
from orchestration.partitions import replay_partitions
from orchestration.replay_asset import build_replayed_window
from orchestration.resources import resources_from_config
from orchestration.sensors import build_priority_lag_sensor


def build_definitions(config: KprioConfig) -> dg.Definitions:
    """Everything Dagster shows for ``config``."""
    replayed_window = build_replayed_window(replay_partitions(config.drain.replay_start))
    drain_job = build_drain_job()
    return dg.Definitions(
        assets=[drain_batch_assets, replayed_window],
        jobs=[drain_job, build_replay_window_job(replayed_window), plan_batch_job, reset_partition_job],
        sensors=[build_priority_lag_sensor(drain_job, config.sensor.interval_s)],
        resources=resources_from_config(config),
        # A batch is one step (the drain_batch multi-asset): the multiprocess default would only add a
        # child process, with its imports, to every run the UI launches (backfills, Materialize).
        executor=dg.in_process_executor,
    )


defs = build_definitions(load_config())
