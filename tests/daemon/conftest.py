"""One real kprio deployment under the Dagster daemon for this package (``dagster dev`` + Spark Connect).

Starting the daemon, the webserver and a Spark Connect server costs about half a minute, so the
tests of this package share one deployment, each on logical topics of its own (created here, on
the session's broker, before ``dagster dev`` loads the configuration); it stops after the
package's last test, so its daemon does not tick through the rest of the suite:

- ``bulk``: backlogs of every priority, drained by the sensor's runs (:func:`bulk_drained`), then
  re-drained from the UI's pages in Chromium;
- ``crash``: the first run that publishes a batch of it dies there (SIGKILL, once): what a
  killed run worker looks like to Dagster and to kprio;
- ``live``: records of the hour running now, replayed by a backfill of the current hour.

The replay of the hour is launched as soon as the deployment runs, and waited for by its test:
a backfill waits for the backfill daemon's fixed 30-second loop, which the drains of the tests
before it overlap. (The backlogs are produced by the tests, one topic at a time: every run is a
new process, and the drains of four topics side by side overload a 2-core machine.)
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kprio_core.config import KafkaSettings, KprioConfig, TopicSettings, load_config
from kprio_core.kafka import KafkaEdge
from kprio_core.kafka.produce import Record, produce
from kprio_core.ledger import BatchState, Ledger
from tests.fixtures.dagster_dev import (
    KprioDeployment,
    deployment_config,
    running_deployment,
    wait_until,
)
from tests.fixtures.kafka import fill
from tests.orchestration.conservation import Conservation, conservation, lag

TOPICS = ("bulk", "crash", "live")
LIVE_RECORDS = 20
SCHEMA = {"i": "long", "amount": "double"}
DRAIN_TIMEOUT_S = 300
ENDED = ("SUCCESS", "FAILURE", "CANCELED")


@dataclass
class Daemon:
    """The running deployment and its logical topics by role."""

    deployment: KprioDeployment
    topics: dict[str, TopicSettings]
    kafka: KafkaSettings
    replay: LiveReplay | None = None
    """The backfill of the hour running now, launched at start over the ``live`` topic's records."""

    @property
    def crash_marker(self) -> Path:
        return self.deployment.root / "crashed-once"

    @property
    def config(self) -> KprioConfig:
        return load_config(self.deployment.config_file, env={})

    def drained(self, topic: TopicSettings) -> None:
        """Wait until the daemon's runs drained ``topic`` to zero lag, and ended (a commit comes before its run's end)."""
        with KafkaEdge(self.kafka) as edge:
            wait_until(lambda: not any(lag(topic, edge).values()), DRAIN_TIMEOUT_S, interval_s=1,
                       what=f"zero lag on {topic.name}\n{self.deployment.log_tail()}")
        wait_until(lambda: all(r["status"] in ENDED for b in self.batch_ids(topic) for r in self.deployment.runs(b)),
                   DRAIN_TIMEOUT_S, interval_s=1, what=f"the runs of {topic.name} to end")

    def conservation(self, topic: TopicSettings) -> Conservation:
        with KafkaEdge(self.kafka) as edge:
            return conservation(self.config, topic, edge)

    def committed(self, topic: TopicSettings) -> dict:
        with KafkaEdge(self.kafka) as edge:
            return edge.committed(topic)

    def batch_ids(self, topic: TopicSettings) -> list[str]:
        with Ledger(self.config.ledger.url) as ledger:
            return sorted(b.batch_id for b in ledger.batches(topic.name))

    def before_redrain(self, topic: TopicSettings, ids: list[str]) -> Before:
        return Before(self.committed(topic), self.conservation(topic).output,
                      {b: len(self.deployment.runs(b)) for b in ids})

    def assert_redrained_once(self, topic: TopicSettings, ids: list[str], before: Before, backfill_id: str) -> None:
        """Each batch got exactly one more run, of that backfill, which re-drained it; nothing else moved."""
        for batch_id in ids:
            runs = self.deployment.runs(batch_id)
            assert len(runs) == before.runs[batch_id] + 1, runs  # one drain each, nothing from the sensor
            assert runs[0]["status"] == "SUCCESS" and runs[0]["tags"].get("dagster/backfill") == backfill_id, runs[0]
        with Ledger(self.config.ledger.url) as ledger:
            batches = [ledger.get(b) for b in ids]
        assert all(b.state is BatchState.COMMITTED and b.replay_of_committed for b in batches), batches
        assert self.committed(topic) == before.committed  # offsets never move backwards, nothing new
        check = self.conservation(topic)
        assert check.ok and check.output == before.output, check  # replaced, not added


@dataclass(frozen=True)
class LiveReplay:
    """A backfill of ``replayed_window`` for ``hour``, launched after ``sent`` records were produced in it."""

    hour: str
    sent: int
    launched: dict
    """What ``launchPartitionBackfill`` answered (``LaunchBackfillSuccess`` with its ``backfillId``)."""


def launch_live_replay(deployment: KprioDeployment, kafka: KafkaSettings, topic: TopicSettings) -> LiveReplay:
    """Produce records of the hour running now and launch its replay through GraphQL, as a user's script would."""
    now_ms = int(time.time() * 1000)
    sent = produce(kafka, topic.priority_topic(2),
                   [Record(f"k{i}", json.dumps({"i": i, "amount": 1.0}), now_ms) for i in range(LIVE_RECORDS)])
    hour = datetime.fromtimestamp(now_ms / 1000, UTC).strftime("%Y-%m-%d-%H:00")
    launched = deployment.graphql(
        """mutation($params: LaunchBackfillParams!) { launchPartitionBackfill(backfillParams: $params) {
            __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message }
            ... on InvalidStepError { invalidStepKey } ... on PartitionSetNotFoundError { message } } }""",
        {"params": {"partitionNames": [hour], "assetSelection": [{"path": ["replayed_window"]}],
                    "fromFailure": False}},
    )["launchPartitionBackfill"]
    return LiveReplay(hour, sent, launched)


@dataclass(frozen=True)
class Before:
    """What a re-drain must leave as it was: committed offsets, output rows, runs per batch."""

    committed: dict
    output: int
    runs: dict[str, int]


@pytest.fixture(scope="package")
def kprio_daemon(kafka_settings: KafkaSettings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("daemon")
    run = uuid.uuid4().hex[:6]
    topics = {role: TopicSettings(name=f"d-{role}-{run}", priorities=3, partitions=2, schema=SCHEMA,
                                  required_fields=("i",)) for role in TOPICS}
    with KafkaEdge(kafka_settings) as edge:
        for topic in topics.values():
            edge.ensure_topics(topic, 2, config={"retention.ms": "-1"})
    config = deployment_config(root, kafka_settings.bootstrap_servers,
                               topics=[t.model_dump(mode="json", by_alias=True) for t in topics.values()],
                               # Full batches of 400 (a cold first run would size the next ones down to
                               # 100 records: target_batch_s), two at a time per priority: each run is a
                               # new process, and the package's drains are most of its minutes.
                               planner={"record_budget": 400, "target_batch_s": None, "max_in_flight": 2})
    env = {"KPRIO_CRASH_AT": f"after-publish:{topics['crash'].name}", "KPRIO_CRASH_ONCE": str(root / "crashed-once")}
    with running_deployment(root, config, env) as deployment:
        replay = launch_live_replay(deployment, kafka_settings, topics["live"])
        yield Daemon(deployment, topics, kafka_settings, replay)


@pytest.fixture(scope="package")
def bulk_drained(kprio_daemon: Daemon) -> TopicSettings:
    """The ``bulk`` topic with backlogs of every priority, drained by the sensor's runs: 1440 records, four
    batches of 400 or less (the UI's two backfills re-drain two each)."""
    topic = kprio_daemon.topics["bulk"]
    fill(kprio_daemon.kafka, topic.priority_topic(0), 1200, partitions=2)
    fill(kprio_daemon.kafka, topic.priority_topic(1), 200, partitions=2)
    fill(kprio_daemon.kafka, topic.priority_topic(2), 40, partitions=2)
    kprio_daemon.drained(topic)
    return topic
