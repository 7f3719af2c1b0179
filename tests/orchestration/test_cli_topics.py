"""``kprio topics create|verify`` on the embedded broker: creation as configured, idempotence, and one
line per mismatch (every mismatch, not only the first)."""

from __future__ import annotations

import json

import pytest
import yaml
from confluent_kafka.admin import ConfigResource
from typer.testing import CliRunner

from kprio_core.kafka.client import new_admin
from orchestration.cli.main import app
from orchestration.services.process import free_port

pytestmark = pytest.mark.broker

runner = CliRunner()


def run(*args: str):  # noqa: ANN201
    return runner.invoke(app, list(args))


def write_config(path, bootstrap: str, *topics: dict, timeout_s: float = 20.0):  # noqa: ANN001, ANN201
    path.write_text(yaml.safe_dump({"kafka": {"bootstrap_servers": bootstrap, "timeout_s": timeout_s},
                                    "topics": list(topics)}))
    return str(path)


@pytest.fixture(autouse=True)
def no_env_bootstrap(monkeypatch):
    # The config file under test names the cluster; an exported override must not replace it.
    monkeypatch.delenv("KPRIO_BOOTSTRAP_SERVERS", raising=False)


def test_create_then_verify(kafka_settings, topic_name, tmp_path):
    config = write_config(tmp_path / "kprio.yaml", kafka_settings.bootstrap_servers,
                          {"name": topic_name, "priorities": 3, "partitions": 2,
                           "topic_config": {"retention.ms": "-1", "cleanup.policy": "delete"}})
    created = run("topics", "create", "--config", config)
    assert created.exit_code == 0, created.output
    names = [f"{topic_name}-{p}" for p in range(3)]
    assert created.stdout.splitlines() == [f"{topic_name}: created {', '.join(names)} (2 partitions each)"]
    admin = new_admin(kafka_settings)
    metadata = admin.list_topics(timeout=20)
    assert {n: len(metadata.topics[n].partitions) for n in names} == dict.fromkeys(names, 2)
    described = admin.describe_configs([ConfigResource("topic", names[0])])
    entries = next(iter(described.values())).result(20)
    assert (entries["retention.ms"].value, entries["cleanup.policy"].value) == ("-1", "delete"), (
        "topic_config reaches the created topics")
    verified = run("topics", "verify", "--config", config)
    assert verified.exit_code == 0, verified.output
    assert verified.stdout.splitlines() == [
        f"ok: 3 priority topics of 1 logical topic match the configuration on {kafka_settings.bootstrap_servers}"]


def test_a_second_create_says_the_topics_exist(kafka_settings, topic_name, tmp_path):
    config = write_config(tmp_path / "kprio.yaml", kafka_settings.bootstrap_servers,
                          {"name": topic_name, "priorities": 2, "partitions": 1})
    assert run("topics", "create", "--config", config).exit_code == 0
    again = run("topics", "create", "--config", config, "--json")
    assert again.exit_code == 0, again.output
    doc = json.loads(again.stdout)
    assert doc["ok"] and doc["mismatches"] == []
    assert doc["topics"] == [{"topic": topic_name, "created": [], "existing": [f"{topic_name}-0", f"{topic_name}-1"],
                              "partitions": 1, "replication_factor": None, "topic_config": {}}]
    text = run("topics", "create", "--config", config)
    assert text.stdout.splitlines() == [f"{topic_name}: {topic_name}-0, {topic_name}-1 already exist (left as is)"]


def test_create_adds_only_the_missing_priority_topics(make_topic, kafka_settings, tmp_path):
    topic = make_topic(priorities=2, partitions=2)
    config = write_config(tmp_path / "kprio.yaml", kafka_settings.bootstrap_servers,
                          {"name": topic.name, "priorities": 3, "partitions": 2})
    result = run("topics", "create", "--config", config)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"{topic.name}: created {topic.name}-2 (2 partitions each)",
        f"{topic.name}: {topic.name}-0, {topic.name}-1 already exist (left as is)",
    ]


def test_verify_reports_every_mismatch_one_line_each(make_topic, kafka_settings, tmp_path):
    narrow = make_topic(priorities=2, partitions=2)  # the configuration says 3 partitions
    short = make_topic(priorities=1, partitions=1)  # the configuration says 2 priorities
    config = write_config(tmp_path / "kprio.yaml", kafka_settings.bootstrap_servers,
                          {"name": narrow.name, "priorities": 2, "partitions": 3},
                          {"name": short.name, "priorities": 2, "partitions": 1})
    result = run("topics", "verify", "--config", config)
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        f"{narrow.name}-0: 2 partitions, the configuration expects 3 (topics[{narrow.name}].partitions)",
        f"{narrow.name}-1: 2 partitions, the configuration expects 3 (topics[{narrow.name}].partitions)",
        f"{short.name}-1: missing (priority 1 of logical topic '{short.name}')",
    ]
    assert result.stderr.strip() == (f"kprio: error: 3 mismatches between the topics on "
                                     f"{kafka_settings.bootstrap_servers} and the configuration (topics) "
                                     "[topics_mismatch]")
    only = run("topics", "verify", "--config", config, "--topic", short.name, "--json")
    assert only.exit_code == 1
    doc = json.loads(only.stdout)
    assert doc["checked"] == [f"{short.name}-0", f"{short.name}-1"] and not doc["ok"]
    assert [(m["topic"], m["kind"]) for m in doc["mismatches"]] == [(f"{short.name}-1", "missing")]


def test_verify_checks_the_replication_factor_when_configured(make_topic, kafka_settings, tmp_path):
    topic = make_topic(priorities=1, partitions=1)
    config = write_config(tmp_path / "kprio.yaml", kafka_settings.bootstrap_servers,
                          {"name": topic.name, "priorities": 1, "partitions": 1, "replication_factor": 3})
    result = run("topics", "verify", "--config", config)
    assert result.exit_code == 1
    replicas = len(new_admin(kafka_settings).list_topics(timeout=20).topics[f"{topic.name}-0"].partitions[0].replicas)
    assert result.stdout.splitlines() == [
        f"{topic.name}-0: replication factor {replicas}, the configuration expects 3 "
        f"(topics[{topic.name}].replication_factor)"]


def test_create_needs_the_partition_count(kafka_settings, topic_name, tmp_path):
    config = write_config(tmp_path / "kprio.yaml", kafka_settings.bootstrap_servers,
                          {"name": topic_name, "priorities": 2})
    result = run("topics", "create", "--config", config)
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"kprio: error: topics[{topic_name}].partitions is not set: say how many partitions each priority topic "
        f"gets (e.g. partitions: 6) to create them ({config}) [config_invalid]"]
    assert f"{topic_name}: partition counts not checked" in run("topics", "verify", "--config", config).stdout


def test_an_unreachable_broker_is_one_line(tmp_path):
    bootstrap = f"127.0.0.1:{free_port()}"
    config = write_config(tmp_path / "kprio.yaml", bootstrap, {"name": "orders", "partitions": 1}, timeout_s=1.0)
    for command in ("create", "verify"):
        result = run("topics", command, "--config", config)
        assert result.exit_code == 1
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"kprio: error: no Kafka broker answered at {bootstrap}")
