"""The probes of test_config_reference.py: consumers of kprio.yaml's settings that can be built here.

Each takes a config and returns what the code acting on a setting made of it (the Kafka client config, the edge's
deadline, the topic and group names, the Spark session conf and read options, the batch budget, the read splits, the
rate quotas, the check limits, the sensor interval and replay start, ...); ``PROBES`` in test_config_reference.py
names the probe of each setting, and a probe shows a setting's effect when its answer changes with the setting.
"""

from __future__ import annotations

from typing import Any

import dagster as dg

from kprio_core.config import KprioConfig
from kprio_core.model.drain_plan import DrainPlan, PlannedRange
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import RangeStats
from orchestration.dagster.resources import resources_from_config
from spark_jobs.session import session_conf


def kafka_client(config: KprioConfig) -> dict[str, Any]:
    """The Kafka client settings the run's Kafka resource builds clients with (the Java client's are translated from them)."""
    with dg.build_resources(resources_from_config(config, env={})) as built:
        return built.kafka.settings().client_config()


def kafka_deadline(config: KprioConfig) -> float:
    """The bound of every edge operation (KafkaEdge.deadline)."""
    with dg.build_resources(resources_from_config(config, env={})) as built:
        return built.kafka.edge.deadline().timeout_s


def topic_names(config: KprioConfig) -> list[tuple[str, str]]:
    """Priority topics and consumer groups of the first topic, as the run's settings name them."""
    topic = resources_from_config(config, env={})["kprio"].config().topics[0]
    return [(topic.priority_topic(p), topic.priority_group(p)) for p in range(topic.priorities)]


def spark_session_conf(config: KprioConfig) -> dict[str, str]:
    """The settings the Spark resource's session is built with."""
    return session_conf(resources_from_config(config, env={})["spark"].settings())


def read_options(config: KprioConfig) -> dict[str, str]:
    """The options the python data source reads a batch's splits with (the executors' fetch limits)."""
    from spark_jobs.source import source_options

    return source_options(config, [])


def batch_budget(config: KprioConfig) -> object:
    """The budget the sensor plans a batch with, at a measured 1,000 records/s."""
    from kprio_core.lifecycle import batch_budget

    return batch_budget(config, 1000.0)


def read_splits(config: KprioConfig) -> list[PlannedRange]:
    """The read splits of a 200,000-record range of 100-byte records."""
    from spark_jobs.drain import plan_splits

    planned = PlannedRange(2, OffsetRange("orders-2", 0, 0, 200_000), est_bytes=200_000 * 100)
    return plan_splits(config, DrainPlan("orders", "lag-aware", 200_000, None, {2: 200_000}, {2: 200_000}, (planned,)))


def freshness_objectives(config: KprioConfig) -> object:
    """Each priority's freshness objective, as every driver evaluates it and the planner steers by it."""
    from kprio_core.lifecycle import batch_objectives
    from orchestration.observe.judging import objectives

    return objectives(config), batch_objectives(config)


def lag_verdict_policy(config: KprioConfig) -> object:
    """The lag verdict's policy, as every driver judges by it."""
    from orchestration.observe.judging import verdict_policy

    return verdict_policy(config)


def rate_quotas(config: KprioConfig) -> tuple[object, ...]:
    """The quotas and windows of the rate tracker the sensor builds for a topic."""
    from kprio_core.lifecycle import rate_tracker

    tracker = rate_tracker(config, ())
    return tracker.records_per_s, tracker.bytes_per_s, tracker.samples, tracker.window_s


def check_limits(config: KprioConfig) -> list[dict[str, object]]:
    """The summary the checks judge for a range of 30 records with 2 dead letters."""
    from orchestration.runtime.checks import summary_frame

    stats = RangeStats(2, OffsetRange("orders-2", 0, 0, 30), output=28, dead=2, distinct=30, first=0, last=29)
    return summary_frame([stats], quality=config.quality, required_fields=()).to_dict("records")


def definitions(config: KprioConfig) -> tuple[object, ...]:
    """The sensor's interval, the replay partitions' first hour and the maintenance schedule of the code location."""
    from orchestration.dagster.definitions import build_definitions

    defs = build_definitions(config)
    replays = defs.resolve_assets_def("replayed_window").partitions_def
    return (defs.resolve_sensor_def("priority_lag_sensor").minimum_interval_seconds, replays.start,
            defs.resolve_schedule_def("tables_maintenance_schedule").cron_schedule)


def iceberg_tables(config: KprioConfig) -> tuple[str, str]:
    """The Iceberg tables (namespace, name) of a topic's output."""
    from spark_jobs.iceberg_catalog import identifier

    return identifier(config.drain.iceberg, "output", "orders")


def registry_endpoint(config: KprioConfig) -> object:
    """Where and how a batch's drain reaches the schema registry (None: no registry)."""
    settings = resources_from_config(config, env={})["kprio"].config().schema_registry
    endpoint = settings.endpoint(env={}) if settings is not None else None
    return None if endpoint is None else (endpoint.url, endpoint.username, endpoint.ca_location,
                                          endpoint.certificate_location, endpoint.key_location, endpoint.timeout_s)


def value_decoding(config: KprioConfig) -> object:
    """The handler and columns a batch of the first topic is drained with (JSON and raw need no registry)."""
    from spark_jobs.values import value_decoding

    return value_decoding(config, resources_from_config(config, env={})["kprio"].config().topics[0], ())[:2]


def key_decoding(config: KprioConfig) -> object:
    """The column a batch of the first topic decodes its keys into (raw and string need no registry)."""
    from spark_jobs.keys import key_decoding

    keys = key_decoding(config, resources_from_config(config, env={})["kprio"].config().topics[0], ())
    return None if keys is None else keys.columns
