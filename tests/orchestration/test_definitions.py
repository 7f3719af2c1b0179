"""The code location: what it defines, that it loads, and that secrets stay out of its config."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from kprio_core.config import load_config, parse_config
from kprio_core.errors import ConfigError
from orchestration.definitions import build_definitions
from orchestration.quality import CHECK_NAMES
from orchestration.resources import resources_from_config

REPO = Path(__file__).resolve().parents[2]
CONFIG = parse_config({"topics": [{"name": "orders", "priorities": 3}], "sensor": {"interval_s": 12}}, env={})

pytestmark = pytest.mark.dagster


def test_definitions_are_loadable_and_complete():
    defs = build_definitions(CONFIG)
    dg.Definitions.validate_loadable(defs)

    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} == {
        "drained_batch", "committed_offsets", "replayed_window"
    }
    checks = {k.name: graph.get_check_spec(k) for k in graph.asset_check_keys}
    assert set(checks) == set(CHECK_NAMES)
    assert all(spec.blocking and spec.asset_key == dg.AssetKey("drained_batch") for spec in checks.values())
    specs = {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}
    assert specs["drained_batch"].kinds >= {"spark", "kafka"}
    assert specs["committed_offsets"].kinds == {"kafka"}
    assert all(s.owners == ["team:kprio"] and s.description for s in specs.values())
    assert [d.asset_key for d in specs["committed_offsets"].deps] == [dg.AssetKey("drained_batch")]

    sensor = defs.resolve_sensor_def("priority_lag_sensor")
    assert sensor.minimum_interval_seconds == 12
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert sensor.job_name == "drain_job"
    assert {j.name for j in defs.resolve_all_job_defs()} >= {"drain_job", "plan_batch_job", "replay_window_job"}
    assert defs.resolve_job_def("drain_job").partitions_def.name == "kprio_batches"


def test_kafka_secret_is_an_env_var_resolved_at_run_time(monkeypatch):
    monkeypatch.setenv("KPRIO_KAFKA_SASL_PASSWORD", "hunter2")
    monkeypatch.setenv("KPRIO_KAFKA_SASL_USERNAME", "kprio")
    config = load_config(env={"KPRIO_KAFKA_SASL_PASSWORD": "hunter2", "KPRIO_KAFKA_SASL_USERNAME": "kprio"})
    resources = resources_from_config(config)

    assert isinstance(resources["kafka"].sasl_password, dg.EnvVar)
    assert "hunter2" not in resources["kprio"].config_yaml
    assert "hunter2" not in repr(resources["kafka"])
    with dg.build_resources({"kafka": resources["kafka"]}) as built:
        settings = built.kafka.settings()
    assert settings.client_config()["sasl.password"] == "hunter2"
    assert settings.client_config()["sasl.username"] == "kprio"
    assert settings.redacted()["sasl.password"] == "***"


@pytest.mark.parametrize("variable, setting", [
    ("KPRIO_KAFKA_SASL_OAUTHBEARER_CONFIG", "sasl.oauthbearer.config"),
    ("KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD", "ssl.keystore.password"),
    ("KPRIO_KAFKA_SSL_KEY_PASSWORD", "ssl.key.password"),
])
def test_every_secret_setting_reaches_the_resource_only_as_an_env_var(monkeypatch, variable, setting):
    monkeypatch.setenv(variable, "s3cret-value")
    config = load_config(env={variable: "s3cret-value"})
    resources = resources_from_config(config)
    assert "s3cret-value" not in repr(resources["kafka"]) + resources["kprio"].config_yaml
    with dg.build_resources({"kafka": resources["kafka"]}) as built:
        assert built.kafka.settings().client_config()[setting] == "s3cret-value"


def test_a_secret_the_resource_cannot_carry_is_refused_by_name():
    config = load_config(env={"KPRIO_KAFKA_SASL_JAAS_CONFIG": "x"})
    with pytest.raises(ConfigError, match=r"sasl\.jaas\.config"):
        resources_from_config(config)


def test_config_round_trips_through_the_settings_resource():
    resource = resources_from_config(CONFIG)["kprio"]
    assert resource.config() == CONFIG


@pytest.mark.slow
def test_workspace_loads_with_the_dagster_cli(tmp_path):
    # The same check `dagster dev` makes when it loads workspace.yaml from the repository root.
    result = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path), "KPRIO_CONFIG": ""},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Validation successful" in result.stdout + result.stderr
