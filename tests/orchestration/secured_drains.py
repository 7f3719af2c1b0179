"""What the tests of secured clusters share: a test's configuration on the secured broker, and a drain through
the Dagster sensor's tick and drain_job to zero lag with conservation (test_secured_kafka*.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


from kprio_core.config import KprioConfig, TopicSettings, parse_config
from kprio_core.kafka import KafkaEdge
from orchestration.dagster import drain_loop
from orchestration.dagster.definitions import build_definitions
from tests.fixtures.secured_broker import SecuredKafka
from tests.fixtures.spark import TEST_SPARK
from tests.orchestration.conservation import conservation, lag
from tests.fixtures.dagster_instances import fresh_instance


def secured_config(secured: SecuredKafka, folder: Path, topic: TopicSettings, *, reader: str = "python",
                   client: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> KprioConfig:
    """The test's configuration: the client settings the broker printed (``client`` over them, None removing one),
    the secrets from ``env`` (the broker's) only, its ledger and outputs in ``folder``."""
    raw = {
        "kafka": secured.raw(**(client or {})),
        "topics": [topic.model_dump(mode="json", by_alias=True)],
        "spark": {"master": TEST_SPARK.master, "conf": dict(TEST_SPARK.conf), "reader": reader},
        "ledger": {"url": f"sqlite:///{folder / 'ledger.db'}"},
        "drain": {"output_path": str(folder / "output"), "dead_letter_path": str(folder / "dead-letters"),
                  "replay_path": str(folder / "replay")},
        "sensor": {"interval_s": 1},
        "recovery": {"backoff_s": 0.2, "backoff_max_s": 1},
        "planner": {"record_budget": 30},
    }
    return parse_config(raw, "test", env=secured.env if env is None else env)


def drain_to_zero_lag(config: KprioConfig, topic: TopicSettings, records: Mapping[int, int], folder: Path) -> None:
    """Drain through the sensor's tick and drain_job on a Dagster instance in ``folder`` (so a sweep reads its
    runs and event log), then prove: every batch committed, zero lag, conservation."""
    (folder / "dagster").mkdir(parents=True)
    with fresh_instance(temp_dir=str(folder / "dagster")) as instance:
        report = drain_loop.drain(build_definitions(config), instance)
    runs = [(b.batch_id, b.state.value, b.success, b.reason) for b in report.batches]
    assert report.ok, (report.stopped, runs)
    assert report.records() == dict(records), (report.records(), runs)
    assert {b.state.value for b in report.batches} == {"committed"}
    with KafkaEdge(config.kafka) as edge:
        assert lag(topic, edge) == dict.fromkeys(range(topic.priorities - 1, -1, -1), 0)
        result = conservation(config, topic, edge)
    assert result.ok and result.expected == sum(records.values()), str(result)
