"""Every setting of kprio.yaml reaches the code that acts on it.

The walk visits every leaf of :class:`KprioConfig`, as the README's "Configuration reference"
table lists them (``topics[].name`` for a field of each topic, ``rate.quotas.<priority>.x`` for a
field of each quota). For each leaf, :data:`CHANGES` gives another valid value, and:

1. the resources built from a config with that change carry it (``KprioSettings.config``: no
   resource copies a section by hand, so none loses a field);
2. either a named probe in :data:`PROBES` builds a consumer's input from the changed config and
   shows the effect (the Kafka client config, the edge's deadline, the topic and group names,
   the Spark session conf), or :data:`ACTS_IN` names the function that reads the setting and
   why it is not probed here; that function must exist and read the field (checked on its
   source, without importing modules that other work may be rewriting).

A new field without a change value, and a probe or an entry, fails :func:`test_every_leaf_is_covered`.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, get_args, get_origin

import dagster as dg
import pytest
from pydantic import BaseModel

from kprio_core.config import KprioConfig, parse_config, setting_variable
from orchestration.resources import resources_from_config
from spark_jobs.session import session_conf

README = Path(__file__).resolve().parents[2] / "README.md"


# --- the walk ------------------------------------------------------------------------------------


def _model_of(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def leaves(model: type[BaseModel] = KprioConfig, prefix: str = "") -> Iterator[tuple[str, str, str]]:
    """``(key, field name, default)`` of every leaf, keys in the README's spelling.

    ``topics[].name`` is a field of each topic, ``rate.quotas.<priority>.x`` a field of each quota.
    """
    for name, info in model.model_fields.items():
        key = prefix + (info.alias or name)
        default = "(required)" if info.is_required() else repr(info.get_default(call_default_factory=True))
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
}

CHANGES: dict[str, Any] = {
    "kafka.bootstrap_servers": "broker-9:9093",
    "kafka.client": {"client.id": "probe"},
    "kafka.secrets": {"sasl.password": "probe-secret"},  # from the environment only
    "kafka.timeout_s": 2.5,
    "topics[].name": "payments",
    "topics[].priorities": 5,
    "topics[].partitions": 6,
    "topics[].group": "billing",
    "topics[].topic_template": "prio.{priority}.{topic}",
    "topics[].group_template": "{group}.p{priority}",
    "topics[].schema": {"id": "string"},
    "topics[].required_fields": ["id"],
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
    "drain.handler": "probe.handlers:keep",
    "drain.allow_data_loss": True,
    "drain.output_path": "s3://bucket/out",
    "drain.dead_letter_path": "s3://bucket/dead",
    "drain.replay_path": "s3://bucket/replay",
    "drain.replay_start": "2026-03-01",
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
    "sensor.interval_s": 30,
}
"""Another valid value of every leaf."""

COMPANIONS: dict[str, dict[str, Any]] = {"ordering.lanes": {"ordering.mode": "key"}}
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


# --- probes: consumers that can be built here --------------------------------------------------


def kafka_client(config: KprioConfig) -> dict[str, Any]:
    """The Kafka client settings the run's Kafka resource builds clients with (Java's: a superset)."""
    with dg.build_resources(resources_from_config(config, env={})) as built:
        return built.kafka.settings().java_client_config()


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


PROBES: dict[str, Callable[[KprioConfig], object]] = {
    "kafka.bootstrap_servers": kafka_client,
    "kafka.client": kafka_client,
    "kafka.secrets": kafka_client,
    "kafka.timeout_s": kafka_deadline,
    "topics[].name": topic_names,
    "topics[].priorities": topic_names,
    "topics[].group": topic_names,
    "topics[].topic_template": topic_names,
    "topics[].group_template": topic_names,
    "spark.conf": spark_session_conf,
    "spark.arrow_batch_records": spark_session_conf,
}


# --- the rest: where each acts -----------------------------------------------------------------

NEEDS_BROKER = "needs a broker"
NEEDS_SPARK = "needs a Spark session and a drained batch"
REWRITTEN = "its module is being rewritten this round (orchestration core); probe it once it settles"
SPARK_JOBS = "a pure function of spark_jobs, which is being rewritten this round; probe it once it settles"

ACTS_IN: dict[str, tuple[str, str, str]] = {
    "topics[].partitions": ("kprio_core.kafka.topics", "topic_mismatches", NEEDS_BROKER),
    "topics[].replication_factor": ("kprio_core.kafka.edge", "KafkaEdge.create_topics", NEEDS_BROKER),
    "topics[].topic_config": ("kprio_core.kafka.edge", "KafkaEdge.create_topics", NEEDS_BROKER),
    "topics[].schema": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "topics[].required_fields": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "planner.record_budget": ("orchestration.decide", "batch_budget", REWRITTEN),
    "planner.byte_budget": ("orchestration.decide", "batch_budget", REWRITTEN),
    "planner.min_share": ("orchestration.decide", "batch_budget", REWRITTEN),
    "planner.target_batch_s": ("orchestration.decide", "batch_budget", REWRITTEN),
    "planner.mode": ("orchestration.decide", "decide", REWRITTEN),
    "planner.distribution": ("orchestration.decide", "decide", REWRITTEN),
    "planner.window_size": ("orchestration.decide", "decide", REWRITTEN),
    "planner.maxed_out_threshold": ("orchestration.decide", "decide", REWRITTEN),
    "planner.max_in_flight": ("orchestration.decide", "decide", REWRITTEN),
    "quality.invalid": ("orchestration.checks", "summary_frame", NEEDS_SPARK),
    "quality.max_invalid_ratio": ("orchestration.checks", "summary_frame", NEEDS_SPARK),
    "quality.ratio_floor_records": ("orchestration.checks", "summary_frame", NEEDS_SPARK),
    "quality.tombstones": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "quality.null_keys": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "recovery.lease_s": ("orchestration.leases", "Heartbeat.__init__", REWRITTEN),
    "recovery.max_attempts": ("orchestration.decide", "decide", REWRITTEN),
    "recovery.backoff_s": ("orchestration.batch_asset", "BatchWork._retry_at", REWRITTEN),
    "recovery.backoff_max_s": ("orchestration.batch_asset", "BatchWork._retry_at", REWRITTEN),
    "splits.max_records": ("spark_jobs.drain", "plan_splits", SPARK_JOBS),
    "splits.max_bytes": ("spark_jobs.drain", "plan_splits", SPARK_JOBS),
    "rate.samples": ("orchestration.decide", "rate_tracker", REWRITTEN),
    "rate.window_s": ("orchestration.decide", "rate_tracker", REWRITTEN),
    "rate.quotas": ("orchestration.decide", "rate_tracker", REWRITTEN),
    "rate.quotas.<priority>.records_per_s": ("orchestration.decide", "rate_tracker", REWRITTEN),
    "rate.quotas.<priority>.bytes_per_s": ("orchestration.decide", "rate_tracker", REWRITTEN),
    "ordering.mode": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "ordering.lanes": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "drain.handler": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "drain.allow_data_loss": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "drain.output_path": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "drain.dead_letter_path": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "drain.replay_path": ("orchestration.replay_asset", "build_replayed_window", REWRITTEN),
    "drain.replay_start": ("orchestration.definitions", "build_definitions", REWRITTEN),
    "spark.master": ("spark_jobs.session", "build_session", "starts a Spark session"),
    "spark.remote": ("spark_jobs.session", "build_session", "needs a Spark Connect server"),
    "spark.reader": ("spark_jobs.drain", "drain_batch", NEEDS_SPARK),
    "spark.fetch_max_bytes": ("spark_jobs.source", "source_options", SPARK_JOBS),
    "spark.max_partition_fetch_bytes": ("spark_jobs.source", "source_options", SPARK_JOBS),
    "spark.queued_max_messages_kbytes": ("spark_jobs.source", "source_options", SPARK_JOBS),
    "spark.connect_port": ("orchestration.services.spark_connect", "SparkConnectServer.__init__", "starts a server"),
    "spark.connect_dir": ("orchestration.services.spark_connect", "SparkConnectServer.__init__", "starts a server"),
    "ledger.url": ("kprio_core.ledger.ledger", "Ledger.from_settings", "the ledger is being rewritten this round"),
    "sensor.interval_s": ("orchestration.definitions", "build_definitions", REWRITTEN),
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


def test_the_readme_reference_lists_every_leaf_with_its_default() -> None:
    text = README.read_text().split("## Configuration reference", 1)[1].split("\n## ", 1)[0]
    listed = dict(re.findall(r"^\| `([^`]+)` \| `([^`]*)` \|", text, flags=re.MULTILINE))
    expected = {key: default for key, _, default in leaves()}
    missing = [f"| `{key}` | `{expected[key]}` | ... |" for key in expected if key not in listed]
    assert not missing, "README's configuration reference misses:\n" + "\n".join(missing)
    assert not set(listed) - set(expected), f"README lists settings that do not exist: {set(listed) - set(expected)}"
    wrong = {key: (listed[key], default) for key, default in expected.items() if listed[key] != default}
    assert not wrong, f"README shows other defaults (README, code): {wrong}"


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
