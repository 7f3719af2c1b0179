"""``kprio drain`` and ``kprio plan`` through the CLI, on the configured (temporary) Dagster home."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from orchestration.cli.main import app

pytestmark = [pytest.mark.broker, pytest.mark.dagster]


@pytest.fixture
def cli_config(make_topic, kprio_env, tmp_path, monkeypatch):
    """A kprio.yaml for one fresh topic, and DAGSTER_HOME in tmp_path."""
    topic = make_topic(priorities=3, partitions=2, records={2: 9, 0: 12})
    env = kprio_env(topic, planner={"record_budget": 15})
    path = tmp_path / "kprio.yaml"
    path.write_text(yaml.safe_dump(env.config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir()
    return env, path


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_plan_shows_the_next_batch_without_recording_it(cli_config):
    env, path = cli_config
    result = invoke("plan", "--json", "--config", str(path))
    assert result.exit_code == 0, result.output
    [doc] = json.loads(result.output)
    assert doc["action"] == "plan"
    assert doc["plan"]["records"] == 15
    assert doc["plan"]["records_by_priority"]["2"] == 9
    assert sum(r["records"] for r in doc["plan"]["ranges"]) == 15
    assert env.ledger.batches() == []  # nothing recorded

    table = invoke("plan", "--config", str(path), "--topic", env.topic().name)
    assert table.exit_code == 0
    assert "next batch 15 records" in table.output


@pytest.mark.spark
@pytest.mark.slow
def test_drain_until_empty_prints_a_json_summary(cli_config, spark):
    env, path = cli_config
    result = invoke("drain", "--until-empty", "--json", "--config", str(path))

    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["ok"] and summary["stopped"] == "no backlog left"
    assert summary["records"] == {"2": 9, "0": 12}
    assert [b["state"] for b in summary["batches"]] == ["committed"] * len(summary["batches"])
    topic = env.topic()
    hw = {(p.topic, str(p.partition)): p.high_watermark for p in env.edge.snapshot(topic, now_ms=0).partitions}
    assert {(t, q): o for t, parts in summary["committed"].items() for q, o in parts.items()} == {
        k: (v or None) for k, v in hw.items()
    }

    # Nothing left: a second drain runs no batch and says so; plan agrees.
    again = invoke("drain", "--config", str(path))
    assert again.exit_code == 0
    assert "0 runs, 0 records committed; no backlog left" in again.output
    plan = json.loads(invoke("plan", "--json", "--config", str(path)).output)
    assert [(d["action"], d["reason"], d["launch"], d["held"]) for d in plan] == [("idle", "no backlog", [], [])]
