"""``kprio drain`` and ``kprio plan`` through the CLI, on the configured (temporary) Dagster home."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import dagster as dg
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
    assert env.ledger.batches.find() == []  # nothing recorded

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


@pytest.mark.spark
@pytest.mark.slow
def test_two_drains_started_together_drain_every_batch_once_and_report_only_their_own(make_topic, kprio_env, spark,
                                                                                        child_spark, tmp_path,
                                                                                        monkeypatch):
    # As a user would: two `kprio drain --until-empty` on one config, one ledger, one Dagster home, at once. Two
    # logical topics, so one tick requests two runs and a process executes the second while the first drains:
    # the other process sees that batch planned and not yet launched (the window of a double launch). One drain
    # is a real process; the other runs in this one (the same command, on the session's warm Spark), started
    # as soon as the first has recorded a plan, so that both work on the same batches at the same time.
    from kprio_core.ledger import BatchState, Ledger, ledger_exists
    from orchestration.dagster.instance import open_instance
    from orchestration.services.process import wait_for
    from tests.orchestration.conservation import conservation
    from tests.orchestration.test_recovery import REPO, child_config

    produced = {2: 60, 1: 80, 0: 100}
    topics = [make_topic(priorities=3, partitions=2, records=produced) for _ in range(2)]
    env = kprio_env(*topics, planner={"record_budget": 120, "target_batch_s": None})
    config = child_config(env, tmp_path, child_spark)
    home = tmp_path / "home"
    home.mkdir()
    err = tmp_path / "drain-child.err"
    with open(err, "wb") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "orchestration.cli", "drain", "--until-empty", "--json", "--config", str(config)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=log,
            env={**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(REPO)})

    def planned() -> bool:
        if not ledger_exists(env.config.ledger.url):
            return False
        with Ledger(env.config.ledger.url) as ledger:
            return bool(ledger.batches.find())

    try:
        assert wait_for(planned, 300, interval_s=0.1), err.read_text(errors="replace")[-3000:]
        here = CliRunner().invoke(app, ["drain", "--until-empty", "--json", "--config", str(config)],
                                  env={"DAGSTER_HOME": str(home)}, catch_exceptions=False)
        output = child.communicate(timeout=600)[0]
    finally:
        child.kill()
        child.wait()
    errors = [err.read_text(errors="replace")[-3000:], here.output[-3000:]]
    assert [child.returncode, here.exit_code] == [0, 0], errors
    outputs = [output, here.stdout]
    summaries = [json.loads(out) for out in outputs]
    assert all(s["ok"] and s["stopped"] == "no backlog left" for s in summaries), summaries

    # Every batch was drained once, by one run of its partition.
    with Ledger(env.config.ledger.url) as ledger:
        batches = ledger.batches.find()
        assert batches and {b.state for b in batches} == {BatchState.COMMITTED}
        for b in batches:
            drained = [e for e in ledger.batches.events(b.batch_id) if e.to_state is BatchState.DRAINED]
            assert (b.attempts, len(drained)) == (1, 1), (b.batch_id, ledger.batches.events(b.batch_id))
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with open_instance(env.config) as instance:
        runs = {b.batch_id: len(instance.get_run_records(dg.RunsFilter(tags={"dagster/partition": b.batch_id})))
                for b in batches}
    assert runs == {b.batch_id: 1 for b in batches}, runs

    # The two summaries together: every batch once, every record committed once (== produced).
    lines = [[b for b in s["batches"] if b["state"] == "committed"] for s in summaries]
    assert sorted(b["batch_id"] for ls in lines for b in ls) == sorted(b.batch_id for b in batches), lines
    totals = [sum(s["records"].values()) for s in summaries]
    assert sum(totals) == 2 * sum(produced.values()), (totals, summaries)
    for topic in topics:
        assert conservation(env.config, topic, env.edge).ok
