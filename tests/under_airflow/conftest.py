"""Fixtures of the Airflow tests: kprio's configuration on the session's broker and Spark, as a kprio.yaml file.

``airflow_config(topic, **sections)`` writes the test's kprio.yaml (the same sections the Dagster
tests use: a ledger and outputs under tmp_path) and returns its path and the typed config;
``kprio_dag(path, dag_id)`` builds that DAG as the dags folder would (the two-line file that
``kprio airflow init`` writes, which ``dag.test()`` parses to serialize the DAG).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kprio_core.config import KprioConfig, TopicSettings
from tests.fixtures.airflow import AirflowHome
from tests.orchestration.dagster_env import kprio_env  # noqa: F401 (a fixture)


@pytest.fixture
def airflow_config(kprio_env, tmp_path: Path) -> Callable[..., tuple[Path, KprioConfig]]:  # noqa: F811 (fixture)
    def make(topic: TopicSettings, **sections: dict) -> tuple[Path, KprioConfig]:
        config = kprio_env(topic, **sections).config
        path = tmp_path / "kprio.yaml"
        path.write_text(yaml.safe_dump(config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})))
        return path, config

    return make


@pytest.fixture
def kprio_dag(airflow_home: AirflowHome, monkeypatch: pytest.MonkeyPatch):
    """``kprio_dag(config_path, dag_id)``: the dags folder's kprio_dags.py written for ``config_path``, the DAG."""
    from orchestration.cli.main import app

    def make(config_path: Path, dag_id: str):
        from orchestration.airflow.dags import kprio_dags

        result = CliRunner().invoke(app, ["airflow", "init", "--dags-folder", str(airflow_home.dags), "--config",
                                          str(config_path), "--no-pool", "--force"])
        assert result.exit_code == 0, result.output
        return kprio_dags(config_path)[dag_id]

    return make
