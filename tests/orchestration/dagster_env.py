"""Fixtures of the Dagster tests: a real temporary instance and kprio definitions on the test broker and Spark.

tests/orchestration/conftest.py makes the fixtures available to every test module there.
``kprio_env(topic, **sections)`` builds the configuration of one test (its own ledger, output
and replay directories under tmp_path, the session's broker, the session's Spark settings so
the Spark resource reuses the test session) and the Definitions built from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from kprio_core.config import KafkaSettings, KprioConfig, TopicSettings, parse_config
from kprio_core.kafka import KafkaEdge
from kprio_core.ledger import Ledger
from orchestration.dagster.definitions import build_definitions
from tests.fixtures.spark import TEST_SPARK
from tests.fixtures.dagster_instances import fresh_instance

__all__ = ["KprioEnv", "check_evaluations", "dagster_instance", "kprio_env", "materialized_assets",
           "read_all_dead_letters", "read_all_output"]


@dataclass
class KprioEnv:
    config: KprioConfig
    defs: dg.Definitions
    ledger: Ledger
    edge: KafkaEdge

    def topic(self, name: str | None = None) -> TopicSettings:
        return self.config.topic(name) if name else self.config.topics[0]

    def rebuild(self, **sections: dict) -> KprioEnv:
        """The same environment (ledger, output) with some configuration sections replaced."""
        raw = self.config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})
        for key, value in sections.items():
            raw[key] = value
        config = parse_config(raw, "test", env={})
        return KprioEnv(config, build_definitions(config), self.ledger, KafkaEdge(config.kafka))


@pytest.fixture
def dagster_instance() -> Iterator[dg.DagsterInstance]:
    """A real, temporary Dagster instance (SQLite storage in a temp dir)."""
    with fresh_instance() as instance:
        yield instance


@pytest.fixture
def kprio_env(tmp_path: Path, kafka_settings: KafkaSettings, spark, warm_workers) -> Iterator[Callable[..., KprioEnv]]:
    """Factory: ``kprio_env(topic_settings, planner={...}, ...)`` -> KprioEnv (ledgers closed at teardown)."""
    made: list[KprioEnv] = []

    def make(*topics: TopicSettings, **sections: dict) -> KprioEnv:
        raw = {
            "kafka": {"bootstrap_servers": kafka_settings.bootstrap_servers, "timeout_s": kafka_settings.timeout_s},
            "topics": [t.model_dump(mode="json", by_alias=True) for t in topics],
            "spark": {"master": TEST_SPARK.master, "conf": dict(TEST_SPARK.conf)},
            "ledger": {"url": f"sqlite:///{tmp_path / 'ledger.db'}"},
            "drain": {"output_path": str(tmp_path / "output"), "dead_letter_path": str(tmp_path / "dead-letters"),
                      "replay_path": str(tmp_path / "replay"),
                      # drain.format iceberg: the test's own catalog (the default is relative to where kprio runs).
                      "iceberg": {"catalog": {"type": "sql", "uri": f"sqlite:///{tmp_path / 'iceberg-catalog.db'}",
                                              "warehouse": f"file://{tmp_path / 'warehouse'}"}}},
            "sensor": {"interval_s": 1},
            # Retries back off for a fraction of a second, so tests wait on conditions, not on time.
            "recovery": {"lease_s": 15, "backoff_s": 0.2, "backoff_max_s": 1},
        }
        for key, value in sections.items():
            raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
        config = parse_config(raw, "test", env={})
        env = KprioEnv(config, build_definitions(config), Ledger(config.ledger.url), KafkaEdge(config.kafka))
        made.append(env)
        return env

    yield make
    for env in made:
        env.ledger.close()
        env.edge.close()


def read_all_output(spark, root: str, topic: TopicSettings) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of every record in the output of ``topic`` under ``root``, sorted."""
    from tests.spark_jobs.on_disk import read_output

    rows = read_output(spark, root, topic.name, schema=dict(topic.schema_)).select("topic", "partition", "offset")
    return sorted((r["topic"], r["partition"], r["offset"]) for r in rows.collect())


def read_all_dead_letters(spark, root: str, topic: TopicSettings) -> list[tuple[str, int, int, str]]:
    """(topic, partition, offset, error) of every dead letter of ``topic`` under ``root``, sorted."""
    from tests.spark_jobs.on_disk import read_dead_letters

    rows = read_dead_letters(spark, root, topic.name).select("topic", "partition", "offset", "error")
    return sorted((r["topic"], r["partition"], r["offset"], r["error"]) for r in rows.collect())


def check_evaluations(instance: dg.DagsterInstance, run_id: str) -> dict[str, dg.AssetCheckEvaluation]:
    """The asset check evaluations a run recorded (it executed on a warm worker: its events are in the instance)."""
    entries = instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
    return {e.dagster_event.event_specific_data.check_name: e.dagster_event.event_specific_data for e in entries}


def materialized_assets(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """The assets a run materialized, in order."""
    entries = instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
    return [e.dagster_event.asset_key.to_user_string() for e in entries]
