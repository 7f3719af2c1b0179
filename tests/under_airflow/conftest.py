"""Fixtures of the Airflow tests: kprio's configuration on the session's broker and Spark, as a kprio.yaml file.

``airflow_config(topic, **sections)`` writes the test's kprio.yaml (the same sections the Dagster
tests use: a ledger and outputs under tmp_path) and returns its path and the typed config;
``kprio_dag(path, dag_id)`` (:mod:`tests.fixtures.airflow`, for every test directory) builds that DAG.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from kprio_core.config import KprioConfig, TopicSettings
from tests.orchestration.dagster_env import kprio_env  # noqa: F401 (a fixture)


@pytest.fixture
def airflow_config(kprio_env, tmp_path: Path) -> Callable[..., tuple[Path, KprioConfig]]:  # noqa: F811 (fixture)
    def make(topic: TopicSettings, **sections: dict) -> tuple[Path, KprioConfig]:
        config = kprio_env(topic, **sections).config
        path = tmp_path / "kprio.yaml"
        path.write_text(yaml.safe_dump(config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})))
        return path, config

    return make
