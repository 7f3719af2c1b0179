"""The shipped dagster.yaml: Dagster itself loads it and holds each setting; a fresh home is created
once and safely by processes starting together; ``kprio instance init|show``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
import yaml
from typer.testing import CliRunner

from kprio_core.config import KprioConfig
from kprio_core.errors import UsageError
from orchestration.cli.main import app
from orchestration.dagster.instance import (
    DAGSTER_YAML,
    LOCK_FILE,
    ensure_home,
    open_instance,
)
from orchestration.dagster.instance_yaml import (
    DEFAULT_PG_PASSWORD_ENV,
    dagster_yaml,
    total_slots,
)

pytestmark = pytest.mark.dagster

REPO = Path(__file__).resolve().parents[2]

CONFIGS = {
    # why: the defaults a new user gets (one demo topic of 3 priorities, one batch per slot, 3 attempts)
    "defaults": KprioConfig(),
    # why: priorities differ per topic (slot tags up to the largest), two slots each, more attempts
    "two topics": KprioConfig.model_validate({
        "topics": [{"name": "orders", "priorities": 3}, {"name": "audit", "priorities": 5}],
        "planner": {"max_in_flight": 2},
        "recovery": {"max_attempts": 4},
    }),
    # why: one attempt only: Dagster must not retry a run
    "no retries": KprioConfig.model_validate({"recovery": {"max_attempts": 1}}),
}


def load(home: Path) -> dg.DagsterInstance:
    """The instance Dagster builds from ``<home>/dagster.yaml`` (its own schema validation included)."""
    return dg.DagsterInstance.from_config(str(home))


@pytest.mark.parametrize("name", list(CONFIGS))
def test_dagster_loads_the_shipped_yaml_and_holds_each_setting(name, tmp_path):
    config = CONFIGS[name]
    home = tmp_path / "home"
    home.mkdir()
    (home / DAGSTER_YAML).write_text(dagster_yaml(config))
    with load(home) as instance:
        assert instance.get_settings("telemetry") == {"enabled": False}
        assert instance.get_settings("nux") == {"enabled": False}, "the 'Join the community' modal stays off"

        monitoring = instance.run_monitoring_settings
        assert instance.run_monitoring_enabled
        assert monitoring["poll_interval_seconds"] == 5
        assert monitoring["start_timeout_seconds"] > 0 and 600 <= monitoring["max_runtime_seconds"] <= 24 * 3600
        assert monitoring["max_resume_run_attempts"] == 0, "the default run launcher cannot resume runs"
        assert monitoring["free_slots_after_run_end_seconds"] > 0

        retries = config.recovery.max_attempts - 1
        assert instance.run_retries_enabled is (retries > 0)
        assert instance.run_retries_max_retries == retries
        assert instance.run_retries_retry_on_asset_or_op_failure is True

        assert type(instance.run_launcher).__name__ == "WarmRunLauncher", "runs execute on warm workers"
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        assert instance.run_coordinator.dequeue_interval_seconds == 1
        concurrency = instance.get_concurrency_config()
        top = max(t.priorities for t in config.topics)
        per_value = {"applyLimitPerUniqueValue": True}
        assert concurrency.run_queue_config.tag_concurrency_limits == [
            *({"key": f"kprio/slot-p{p}", "value": per_value, "limit": config.planner.max_in_flight}
              for p in range(top)),
            {"key": "dagster/partition", "value": per_value, "limit": 1},
        ]
        assert concurrency.pool_config.default_pool_limit == total_slots(config)
        assert concurrency.pool_config.pool_granularity.value == "run"

        sensors = instance.get_settings("sensors")
        assert sensors["use_threads"] is True and sensors["num_workers"] >= 2
        assert instance.get_settings("backfills")["use_threads"] is True

        # SQLite storage in the home, Dagster's default layout.
        assert (home / "history" / "runs.db").exists() and (home / "schedules" / "schedules.db").exists()
        assert instance.event_log_storage.supports_global_concurrency_limits, "pools need the concurrency tables"


def test_every_setting_line_is_explained_by_a_comment():
    text = dagster_yaml(CONFIGS["defaults"])
    blocks = [line for line in text.splitlines() if line and not line.startswith((" ", "#"))]
    assert sorted(blocks) == sorted(["telemetry:", "nux:", "run_launcher:", "run_monitoring:", "run_retries:",
                                     "run_queue:", "concurrency:", "sensors:", "backfills:", "retention:"])
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line in blocks:
            assert lines[i - 1].startswith("#"), f"{line} has no comment above it"


YAML_CASES = {
    # why: the defaults a new user gets (one demo topic of 3 priorities, 3 attempts): SQLite storage
    "defaults": ({}, {}),
    # why: one attempt only: run retries off
    "no retries": ({"recovery": {"max_attempts": 1}}, {}),
    # why: priorities differ per topic, two slots each, more attempts, another sensor interval
    "two topics": ({"topics": [{"name": "orders", "priorities": 3}, {"name": "audit", "priorities": 5}],
                    "planner": {"max_in_flight": 2}, "recovery": {"max_attempts": 4}, "sensor": {"interval_s": 30}},
                   {}),
    # why: many slots: max_concurrent_runs follows the slots above 10
    "many slots": ({"topics": [{"name": "orders", "priorities": 6}], "planner": {"max_in_flight": 3}}, {}),
    # why: a Postgres URL with a password, another driver and query parameters
    "postgres url": ({}, {"postgres_url": "postgresql+psycopg://kprio:s3cret@db.internal:6432/dagster"
                                          "?sslmode=require&options=a&options=b"}),
    # why: a Postgres URL without password nor port
    "postgres url, no password": ({}, {"postgres_url": "postgresql://kprio@db.internal/dagster"}),
    # why: the password from a named variable
    "postgres url, password variable": ({}, {"postgres_url": "postgresql://kprio@db.internal/dagster",
                                             "postgres_password_env": "MY_PG_PASSWORD"}),
    # why: the whole URL from a variable
    "postgres url variable": ({}, {"postgres_url_env": "DAGSTER_PG_URL"}),
}
"""Every branch of ``dagster_yaml``: (the kprio.yaml document, its keyword arguments)."""


@pytest.mark.parametrize("name", list(YAML_CASES))
def test_the_typed_yaml_holds_what_the_joined_strings_held(name):
    before = yaml.safe_load((Path(__file__).parent / "dagster_yaml_before.yaml").read_text())
    document, options = YAML_CASES[name]
    text = dagster_yaml(KprioConfig.model_validate(document), **options)
    # The one block the joined strings did not have: kprio's warm run launcher (issue 50).
    launcher = {"run_launcher": {"module": "orchestration.dagster.workers.launcher", "class": "WarmRunLauncher"}}
    assert yaml.safe_load(text) == {**before["defaults"], **before[name], **launcher}
    assert "s3cret" not in text, "a password is never written"


def test_ensure_home_writes_a_missing_file_and_never_replaces_one(tmp_path):
    fresh = ensure_home(tmp_path / "fresh", KprioConfig())
    assert yaml.safe_load((fresh / DAGSTER_YAML).read_text())["run_monitoring"]["enabled"] is True
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / DAGSTER_YAML).write_text("telemetry:\n  enabled: true\n")
    ensure_home(mine, KprioConfig())
    assert (mine / DAGSTER_YAML).read_text() == "telemetry:\n  enabled: true\n"


def test_open_instance_creates_a_new_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with open_instance(CONFIGS["two topics"]) as instance:
        assert instance.run_retries_max_retries == 3
    assert (home / LOCK_FILE).exists() and (home / DAGSTER_YAML).exists()


OPENER = """
import sys, time
from pathlib import Path
go = Path(sys.argv[1])
Path(sys.argv[2]).touch()  # ready: imports done
deadline = time.monotonic() + 120
while not go.exists():  # start together: poll for the go file, bounded by the deadline
    if time.monotonic() > deadline:
        sys.exit("no go signal within 120 s")
    time.sleep(0.005)
from orchestration.dagster.instance import open_instance
with open_instance() as instance:
    print(instance.get_runs_count())
"""


@pytest.mark.slow
def test_processes_starting_together_on_a_fresh_home_all_open_it(tmp_path):
    """Without the home's lock, 2 of 4 such processes died on `alembic_version` (measured)."""
    home, n = tmp_path / "home", 4
    go = tmp_path / "go"
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(REPO)}
    env.pop("KPRIO_CONFIG", None)
    procs = [subprocess.Popen([sys.executable, "-c", OPENER, str(go), str(tmp_path / f"ready{i}")], cwd=tmp_path,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(n)]
    try:
        from orchestration.services.process import wait_for

        assert wait_for(lambda: all((tmp_path / f"ready{i}").exists() for i in range(n)), 180, 0.05), (
            "the processes did not get ready")
        go.touch()
        outcomes = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (out, err) in zip(procs, outcomes, strict=True):
        assert p.returncode == 0, f"a process failed to open the fresh home: {err.strip().splitlines()[-3:]}"
        assert out.strip() == "0"
    with load(home) as instance:
        assert instance.get_runs_count() == 0


def test_postgres_url_parts_are_written_but_never_its_password():
    text = dagster_yaml(KprioConfig(), postgres_url="postgresql+psycopg://dagster:hunter2@db.internal:6432/dg")
    assert "hunter2" not in text
    storage = yaml.safe_load(text)["storage"]["postgres"]["postgres_db"]
    assert storage == {"username": "dagster", "hostname": "db.internal", "port": 6432, "db_name": "dg",
                       "scheme": "postgresql+psycopg2", "password": {"env": DEFAULT_PG_PASSWORD_ENV}}
    from_env = yaml.safe_load(dagster_yaml(KprioConfig(), postgres_url_env="DAGSTER_PG_URL"))["storage"]
    assert from_env == {"postgres": {"postgres_url": {"env": "DAGSTER_PG_URL"}}}
    with pytest.raises(UsageError, match="needs a user, a host and a database"):
        dagster_yaml(KprioConfig(), postgres_url="postgresql://db.internal")


runner = CliRunner()


def test_cli_instance_init_show_and_force(tmp_path, monkeypatch):
    monkeypatch.delenv("KPRIO_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    shown = runner.invoke(app, ["instance", "show"])
    assert shown.exit_code == 0 and shown.stdout == dagster_yaml(KprioConfig())
    first = runner.invoke(app, ["instance", "init", "--home", str(home)])
    assert first.exit_code == 0, first.output
    assert f"wrote {home / DAGSTER_YAML}" in first.stdout and (home / "history" / "runs.db").exists()
    again = runner.invoke(app, ["instance", "init", "--home", str(home)])
    assert again.exit_code == 1 and "exists" in again.stderr and "--force" in again.stderr
    (home / DAGSTER_YAML).write_text("telemetry:\n  enabled: false\n")
    forced = runner.invoke(app, ["instance", "init", "--home", str(home), "--force"])
    assert forced.exit_code == 0, forced.output
    assert (home / (DAGSTER_YAML + ".bak")).read_text() == "telemetry:\n  enabled: false\n"
    assert (home / DAGSTER_YAML).read_text() == dagster_yaml(KprioConfig())
    bad = runner.invoke(app, ["instance", "show", "--postgres-url", "mysql://u@h/d"])
    assert bad.exit_code == 2 and bad.stderr.startswith("kprio: error: must start with postgresql://, not mysql://")
