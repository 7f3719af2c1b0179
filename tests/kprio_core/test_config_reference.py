"""Every setting of kprio.yaml reaches the code that acts on it.

The walk visits every leaf of :class:`KprioConfig`, as the "Configuration reference" table of
docs/configuration.md lists them (``topics[].name`` for a field of each topic,
``rate.quotas.<priority>.x`` for a field of each quota). For each leaf, :data:`CHANGES` gives
another valid value, and:

1. the resources built from a config with that change carry it (``KprioSettings.config``: no
   resource copies a section by hand, so none loses a field);
2. either a named probe in :data:`PROBES` (the probes are written in config_probes.py) calls the
   code that acts on the setting with the changed config and shows the effect (the Kafka client
   config, the edge's deadline, the topic and group names, the Spark session conf and read options,
   the batch budget, the read splits, the rate quotas, the check limits, the sensor interval and
   replay start), or :data:`ACTS_IN` names the function that reads the setting and why it cannot be
   probed without a broker, a Spark drain or a run; that function must exist and read the field
   (checked on its source).

A new field without a change value, and a probe or an entry, fails :func:`test_every_leaf_is_covered`.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import re
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin

import dagster as dg
import pytest
from pydantic import BaseModel

from kprio_core.config import KprioConfig, parse_config, setting_variable
from orchestration.dagster.resources import resources_from_config
from tests.kprio_core.config_probes import (
    batch_budget,
    check_limits,
    definitions,
    freshness_objectives,
    iceberg_tables,
    kafka_client,
    kafka_deadline,
    key_decoding,
    lag_verdict_policy,
    rate_quotas,
    read_options,
    read_splits,
    registry_endpoint,
    spark_session_conf,
    topic_names,
    value_decoding,
)

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


# --- the walk ------------------------------------------------------------------------------------


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model of a section, optional ones too (``schema_registry: SchemaRegistrySettings | None``)."""
    if get_origin(annotation) in (Union, UnionType):
        found = [a for a in get_args(annotation) if a is not type(None)]
        annotation = found[0] if len(found) == 1 else None
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def leaves(model: type[BaseModel] = KprioConfig, prefix: str = "") -> Iterator[tuple[str, str, str]]:
    """``(key, field name, default)`` of every leaf, keys as the reference spells them.

    ``topics[].name`` is a field of each topic, ``rate.quotas.<priority>.x`` a field of each quota.
    """
    for name, info in model.model_fields.items():
        key = prefix + (info.alias or name)
        value = None if info.is_required() else info.get_default(call_default_factory=True)
        value = value.value if isinstance(value, Enum) else value  # an enum setting is written as its value
        default = "(required)" if info.is_required() else repr(value)
        origin, args = get_origin(info.annotation), get_args(info.annotation)
        if sub := _model_of(info.annotation):
            yield from leaves(sub, key + ".")
        elif origin is tuple and (sub := _model_of(args[0])):
            yield from leaves(sub, key + "[].")
        elif origin is dict and (sub := _model_of(args[1])):
            yield key, name, default  # the map itself (which keys are present) is a setting too
            yield from leaves(sub, key + ".<priority>.")
        else:
            yield key, name, default


LEAVES = {key: name for key, name, _ in leaves()}
"""Field name by leaf key."""


# --- the changes -------------------------------------------------------------------------------

BASE: dict[str, Any] = {
    "topics": [{"name": "orders", "priorities": 3, "schema": {"id": "string", "amount": "double"}}],
    "rate": {"quotas": {2: {"records_per_s": 100.0, "bytes_per_s": 1000.0}}},
    "ledger": {"url": "sqlite:///ledger-probe.db"},
    "slo": {"max_age_s": {2: 60.0}},
}

CHANGES: dict[str, Any] = {
    "kafka.bootstrap_servers": "broker-9:9093",
    "kafka.client": {"client.id": "probe"},
    "kafka.secrets": {"sasl.password": "probe-secret"},  # from the environment only
    "kafka.timeout_s": 2.5,
    "kafka.isolation_level": "read_uncommitted",
    "topics[].name": "payments",
    "topics[].priorities": 5,
    "topics[].partitions": 6,
    "topics[].group": "billing",
    "topics[].topic_template": "prio.{priority}.{topic}",
    "topics[].group_template": "{group}.p{priority}",
    "topics[].schema": {"id": "string"},
    "topics[].required_fields": ["id"],
    "topics[].value_format": "raw",
    "topics[].value_subject": "{topic}-values",
    "topics[].key_format": "string",
    "topics[].key_subject": "{topic}-keys",
    "topics[].replication_factor": 3,
    "topics[].topic_config": {"retention.ms": "3600000"},
    "planner.record_budget": 1000,
    "planner.byte_budget": None,
    "planner.mode": "flipkart",
    "planner.distribution": "linear",
    "planner.min_share": 0.1,
    "planner.window_size": 8,
    "planner.maxed_out_threshold": 2,
    "planner.max_in_flight": 2,
    "planner.target_batch_s": None,
    "quality.invalid": "block",
    "quality.max_invalid_ratio": 0.5,
    "quality.ratio_floor_records": 10,
    "quality.tombstones": "invalid",
    "quality.null_keys": "invalid",
    "recovery.lease_s": 10.0,
    "recovery.max_attempts": 5,
    "recovery.backoff_s": 1.0,
    "recovery.backoff_max_s": 10.0,
    "splits.max_records": 500,
    "splits.max_bytes": 4096,
    "rate.samples": 5,
    "rate.window_s": 2.0,
    "rate.quotas": {1: {"records_per_s": 10.0}},
    "rate.quotas.<priority>.records_per_s": 50.0,
    "rate.quotas.<priority>.bytes_per_s": 500.0,
    "ordering.mode": "key",
    "ordering.lanes": 4,
    "drain.handler": "tests.spark_jobs.handlers_for_tests:record_order",  # it must import: checked at load
    "drain.allow_data_loss": True,
    "drain.on_offset_out_of_range": "earliest",
    "drain.format": "delta",
    "drain.output_path": "s3://bucket/out",
    "drain.dead_letter_path": "s3://bucket/dead",
    "drain.replay_path": "s3://bucket/replay",
    "drain.replay_start": "2026-03-01",
    "drain.iceberg.catalog_name": "lake",
    "drain.iceberg.catalog": {"type": "rest", "uri": "https://catalog.example/api"},
    "drain.iceberg.namespace": "kafka",
    "drain.iceberg.time_partition": "day",
    "drain.maintenance.schedule": "0 3 * * *",
    "drain.maintenance.target_file_mb": 64,
    "drain.maintenance.min_files": 10,
    "drain.maintenance.retention_s": 3600.0,
    "drain.maintenance.keep_snapshots": 3,
    "spark.master": "spark://master:7077",
    "spark.remote": "sc://localhost:15002",
    "spark.reader": "native",
    "spark.conf": {"spark.sql.shuffle.partitions": "4"},
    "spark.fetch_max_bytes": 2048,
    "spark.max_partition_fetch_bytes": 2048,
    "spark.queued_max_messages_kbytes": 64,
    "spark.arrow_batch_records": 77,
    "spark.connect_port": 15099,
    "spark.connect_dir": "/tmp/kprio-connect-probe",
    "ledger.url": "postgresql+psycopg://kprio@db/kprio",
    "workers.count": 3,
    "workers.bulk_nice": 5,
    "workers.max_runs": 7,
    "workers.max_rss_mib": 1024,
    "workers.start_timeout_s": 30.0,
    "sensor.interval_s": 30,
    "sensor.watch_s": None,
    "sensor.default_status": "stopped",
    "slo.max_age_s": {2: 10.0},
    "slo.warn_fraction": 0.5,
    "verdict.expected_commit_s": 5.0,
    "verdict.stop_factor": 5.0,
    "verdict.allowed_lag": 100,
    "verdict.intervals": 5,
    "verdict.window_s": 60.0,
    "lineage.enabled": True,
    "lineage.namespace": "billing",
    "lineage.transport": {"type": "file", "log_file_path": "lineage.jsonl"},
    "schema_registry.url": "http://sr.probe:8081/apis/ccompat/v7",
    "schema_registry.username": "kprio",
    "schema_registry.ssl_ca_location": "/etc/kprio/sr-ca.pem",
    "schema_registry.ssl_certificate_location": "/etc/kprio/sr-client.pem",
    "schema_registry.ssl_key_location": "/etc/kprio/sr-client.key",
    "schema_registry.timeout_s": 3.0,
}
"""Another valid value of every leaf."""

_REGISTRY = {"schema_registry.url": "http://sr.probe:8081"}
COMPANIONS: dict[str, dict[str, Any]] = {
    "ordering.lanes": {"ordering.mode": "key"},
    "topics[].value_format": {"topics[].schema": {}},  # raw values are not decoded: no JSON fields
    **{key: _REGISTRY for key in ("schema_registry.username", "schema_registry.ssl_ca_location",
                                  "schema_registry.ssl_certificate_location", "schema_registry.ssl_key_location",
                                  "schema_registry.timeout_s")},
}
"""Changes that are only valid with another one."""


def _set(raw: dict[str, Any], key: str, value: Any) -> None:
    parts = re.split(r"\.(?![^<]*>)", key.replace("[]", ".0"))
    node: Any = raw
    for part in parts[:-1]:
        part = 2 if part == "<priority>" else int(part) if part.isdigit() else part
        node = node[part] if isinstance(node, list) else node.setdefault(part, {})
    node[parts[-1]] = value


def config_with(key: str | None, monkeypatch: pytest.MonkeyPatch) -> KprioConfig:
    """The base config, with the change of ``key`` (a secret goes through its environment variable)."""
    raw, env = copy.deepcopy(BASE), {}
    changes = {} if key is None else {key: CHANGES[key], **COMPANIONS.get(key, {})}
    for leaf, value in changes.items():
        if leaf == "kafka.secrets":
            env = {setting_variable(setting): secret for setting, secret in value.items()}
        else:
            _set(raw, leaf, value)
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    return parse_config(raw, f"change of {key}", env=env)


# --- probes: consumers that can be built here (written in config_probes.py) ---------------------


PROBES: dict[str, Callable[[KprioConfig], object]] = {
    "topics[].value_format": value_decoding,
    "topics[].key_format": key_decoding,
    "schema_registry.url": registry_endpoint,
    "schema_registry.username": registry_endpoint,
    "schema_registry.ssl_ca_location": registry_endpoint,
    "schema_registry.ssl_certificate_location": registry_endpoint,
    "schema_registry.ssl_key_location": registry_endpoint,
    "schema_registry.timeout_s": registry_endpoint,
    "kafka.bootstrap_servers": kafka_client,
    "kafka.client": kafka_client,
    "kafka.secrets": kafka_client,
    "kafka.timeout_s": kafka_deadline,
    "kafka.isolation_level": read_options,
    "topics[].name": topic_names,
    "topics[].priorities": topic_names,
    "topics[].group": topic_names,
    "topics[].topic_template": topic_names,
    "topics[].group_template": topic_names,
    "planner.record_budget": batch_budget,
    "planner.byte_budget": batch_budget,
    "planner.min_share": batch_budget,
    "planner.target_batch_s": batch_budget,
    "quality.invalid": check_limits,
    "quality.max_invalid_ratio": check_limits,
    "quality.ratio_floor_records": check_limits,
    "splits.max_records": read_splits,
    "splits.max_bytes": read_splits,
    "rate.samples": rate_quotas,
    "rate.window_s": rate_quotas,
    "rate.quotas": rate_quotas,
    "rate.quotas.<priority>.records_per_s": rate_quotas,
    "rate.quotas.<priority>.bytes_per_s": rate_quotas,
    "drain.replay_start": definitions,
    "drain.maintenance.schedule": definitions,
    "drain.iceberg.namespace": iceberg_tables,
    "spark.conf": spark_session_conf,
    "spark.arrow_batch_records": spark_session_conf,
    "spark.fetch_max_bytes": read_options,
    "spark.max_partition_fetch_bytes": read_options,
    "spark.queued_max_messages_kbytes": read_options,
    "sensor.interval_s": definitions,
    "slo.max_age_s": freshness_objectives,
    "slo.warn_fraction": freshness_objectives,
    "verdict.expected_commit_s": lag_verdict_policy,
    "verdict.stop_factor": lag_verdict_policy,
    "verdict.allowed_lag": lag_verdict_policy,
    "verdict.intervals": lag_verdict_policy,
}


# --- the rest: where each acts -----------------------------------------------------------------

NEEDS_BROKER = "needs a broker"
NEEDS_SNAPSHOT = "the tick acts on a lag snapshot (tests/kprio_core/test_lifecycle_tick.py and the sensor tests cover it)"
NEEDS_SPARK = "needs a Spark session and a drained batch (tests/spark_jobs cover it)"
NEEDS_COMMIT = "acts on a committed batch: a broker and Spark (tests/orchestration/observe/test_lineage.py)"
NEEDS_RUN = "acts inside a batch's Dagster run (tests/orchestration/test_recovery.py covers it)"
NEEDS_TABLE = "acts on a table's published files (tests/spark_jobs/test_maintenance.py covers it)"
STARTS_WORKERS = "starts worker processes (tests/orchestration/test_workers.py covers it)"

ACTS_IN: dict[str, tuple[str, str, str]] = {
    "topics[].partitions": ("kprio_core.kafka.topics", "topic_mismatches", NEEDS_BROKER),
    "topics[].replication_factor": ("kprio_core.kafka.edge", "KafkaEdge.create_topics", NEEDS_BROKER),
    "topics[].topic_config": ("kprio_core.kafka.edge", "KafkaEdge.create_topics", NEEDS_BROKER),
    "topics[].schema": ("spark_jobs.values", "value_decoding", NEEDS_SPARK),
    "topics[].value_subject": ("spark_jobs.values", "value_decoding",
                               "reads the subject's latest version from a registry (tests/kprio_core/test_values_avro.py)"),
    "topics[].key_subject": ("spark_jobs.keys", "key_decoding",
                             "reads the subject's latest version from a registry (tests/spark_jobs/test_registry_drain.py)"),
    "topics[].required_fields": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "planner.mode": ("kprio_core.lifecycle.tick", "plan_the_rest", NEEDS_SNAPSHOT),
    "planner.distribution": ("kprio_core.lifecycle.tick", "plan_the_rest", NEEDS_SNAPSHOT),
    "planner.window_size": ("orchestration.runtime.tick", "read_view", NEEDS_SNAPSHOT),
    "planner.maxed_out_threshold": ("orchestration.runtime.tick", "read_view", NEEDS_SNAPSHOT),
    "planner.max_in_flight": ("kprio_core.lifecycle.decision", "TickState.full", NEEDS_SNAPSHOT),
    "quality.tombstones": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "quality.null_keys": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "recovery.lease_s": ("orchestration.runtime.leases", "Heartbeat.__init__", NEEDS_RUN),
    "recovery.max_attempts": ("kprio_core.lifecycle.tick", "retry_due", NEEDS_SNAPSHOT),
    "recovery.backoff_s": ("kprio_core.lifecycle.run", "retry_at", NEEDS_RUN),
    "recovery.backoff_max_s": ("kprio_core.lifecycle.run", "retry_at", NEEDS_RUN),
    "ordering.mode": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "ordering.lanes": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "drain.handler": ("spark_jobs.values", "value_decoding", NEEDS_SPARK),
    "drain.allow_data_loss": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "drain.on_offset_out_of_range": ("kprio_core.lifecycle.log_rules", "log_decisions", NEEDS_SNAPSHOT),
    "drain.format": ("spark_jobs.tables", "output_of", "needs a drained batch: a broker and Spark"),
    "drain.output_path": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "drain.dead_letter_path": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "drain.replay_path": ("orchestration.dagster.replay_asset", "build_replayed_window", "needs a replay run: a broker and Spark"),
    "drain.iceberg.catalog_name": ("spark_jobs.iceberg_catalog", "catalog", "the changed catalog names a REST server"),
    "drain.iceberg.catalog": ("spark_jobs.iceberg_catalog", "catalog", "the changed catalog names a REST server"),
    "drain.iceberg.time_partition": ("spark_jobs.iceberg_table", "_create", "needs a published batch "
                                     "(tests/spark_jobs/test_iceberg_table.py)"),
    "drain.maintenance.target_file_mb": ("spark_jobs.formats.iceberg", "Iceberg._compact", NEEDS_TABLE),
    "drain.maintenance.min_files": ("spark_jobs.formats.iceberg", "Iceberg._compact", NEEDS_TABLE),
    "drain.maintenance.retention_s": ("spark_jobs.formats.iceberg", "Iceberg._expire", NEEDS_TABLE),
    "drain.maintenance.keep_snapshots": ("spark_jobs.formats.iceberg", "Iceberg._expire", NEEDS_TABLE),
    "spark.master": ("spark_jobs.session", "build_session", "starts a Spark session"),
    "spark.remote": ("spark_jobs.session", "build_session", "needs a Spark Connect server"),
    "spark.reader": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "spark.connect_port": ("orchestration.services.spark_connect", "SparkConnectServer.__init__", "starts a server"),
    "spark.connect_dir": ("orchestration.services.spark_connect", "SparkConnectServer.__init__", "starts a server"),
    "ledger.url": ("kprio_core.ledger.ledger", "Ledger.from_settings", "the changed URL names a Postgres server"),
    "verdict.window_s": ("orchestration.observe.judging", "remember", NEEDS_SNAPSHOT),
    "lineage.enabled": ("orchestration.observe.lineage", "emit_committed", NEEDS_COMMIT),
    "lineage.namespace": ("orchestration.observe.lineage", "batch_event", NEEDS_COMMIT),
    "lineage.transport": ("orchestration.observe.lineage", "client_of", NEEDS_COMMIT),
    "sensor.watch_s": ("orchestration.dagster.drain_loop", "DrainLoop._wait",
                       "acts between the ticks of kprio drain's loop (tests/orchestration/test_drain_overlap.py)"),
    "sensor.default_status": ("orchestration.dagster.definitions", "build_definitions", "the sensor's state "
                              "when a code location first loads, in a Dagster instance"),
    "workers.count": ("orchestration.dagster.workers.pool", "WorkerPool.__init__", STARTS_WORKERS),
    "workers.bulk_nice": ("orchestration.dagster.workers.pool", "WorkerPool._started", STARTS_WORKERS),
    "workers.start_timeout_s": ("orchestration.dagster.workers.pool", "WorkerPool._reap_dead", STARTS_WORKERS),
    "workers.max_runs": ("orchestration.dagster.workers.worker", "Worker._retire", STARTS_WORKERS),
    "workers.max_rss_mib": ("orchestration.dagster.workers.worker", "Worker._retire", STARTS_WORKERS),
}
"""Leaf -> (module, function reading it, why no probe here)."""



def _definition(module: str, qualname: str) -> ast.AST | None:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    node: ast.AST = ast.parse(Path(spec.origin).read_text())
    for name in qualname.split("."):
        node = next(
            (n for n in ast.iter_child_nodes(node)
             if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name),
            None,
        )
        if node is None:
            return None
    return node


# --- the tests -----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def test_every_leaf_is_covered() -> None:
    assert set(CHANGES) == set(LEAVES), "give every new setting another valid value in CHANGES"
    assert not set(PROBES) & set(ACTS_IN), "a leaf is probed or listed, not both"
    missing = sorted(set(LEAVES) - set(PROBES) - set(ACTS_IN))
    assert not missing, f"settings without a probe or an ACTS_IN entry: {missing}"
    assert not (set(PROBES) | set(ACTS_IN)) - set(LEAVES), "probes or entries of settings that do not exist"


def test_the_configuration_reference_lists_every_leaf_with_its_default() -> None:
    text = REFERENCE.read_text().split("## Configuration reference", 1)[1].split("\n## ", 1)[0]
    listed = dict(re.findall(r"^\| `([^`]+)` \| `([^`]*)` \|", text, flags=re.MULTILINE))
    expected = {key: default for key, _, default in leaves()}
    missing = [f"| `{key}` | `{expected[key]}` | ... |" for key in expected if key not in listed]
    assert not missing, "docs/configuration.md's reference misses:\n" + "\n".join(missing)
    unknown = set(listed) - set(expected)
    assert not unknown, f"docs/configuration.md lists settings that do not exist: {unknown}"
    wrong = {key: (listed[key], default) for key, default in expected.items() if listed[key] != default}
    assert not wrong, f"docs/configuration.md shows other defaults (docs, code): {wrong}"


@pytest.mark.parametrize("key", list(LEAVES))
def test_every_setting_reaches_the_resources(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    base, changed = config_with(None, monkeypatch), config_with(key, monkeypatch)
    assert changed != base, f"the change of {key} changes nothing"
    resources = resources_from_config(changed, env={})
    with dg.build_resources(resources) as built:
        assert built.kprio.config(built.kafka) == changed


@pytest.mark.parametrize("key", list(PROBES))
def test_a_probe_shows_the_effect(key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = PROBES[key]
    before = probe(config_with(None, monkeypatch))
    after = probe(config_with(key, monkeypatch))
    assert after != before, f"{probe.__name__} does not see {key}"


@pytest.mark.parametrize("key", list(ACTS_IN))
def test_a_listed_consumer_reads_the_setting(key: str) -> None:
    module, qualname, why = ACTS_IN[key]
    node = _definition(module, qualname)
    assert node is not None, f"{key}: {module} defines no {qualname}"
    field = LEAVES[key]
    read = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    assert field in read, f"{key}: {module}.{qualname} never reads .{field}"
    assert why
