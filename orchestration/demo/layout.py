"""Where the demo keeps everything, and the kprio.yaml it writes so `dagster dev` and `kprio lag` see the same instance.

>>> d = DemoLayout(Path("/tmp/kd"))
>>> str(d.broker), str(d.dagster_home), str(d.config_file)
('/tmp/kd/broker', '/tmp/kd/dagster_home', '/tmp/kd/kprio.yaml')
>>> cfg = demo_config(d, "127.0.0.1:19092", record_budget=125)
>>> cfg.topics[0].name, cfg.topics[0].priorities, cfg.topics[0].partitions, cfg.planner.record_budget
('orders', 3, 4, 125)
>>> cfg.ledger.url, cfg.drain.output_path, cfg.drain.dead_letter_path
('sqlite:////tmp/kd/ledger.db', '/tmp/kd/output', '/tmp/kd/dead-letters')
>>> cfg.planner.target_batch_s is None  # batches sized by the budget alone: the demo's numbers repeat
True
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import yaml

from kprio_core.config import KafkaSettings, KprioConfig, OutputFormat, SchemaRegistrySettings
from orchestration.demo.workload import ORDER_SCHEMA, PRIORITIES, REQUIRED_FIELDS

DEFAULT_DATA_DIR = Path("kprio-data") / "demo"
LOGICAL_TOPIC = "orders"
PARTITIONS = 4
SENSOR_INTERVAL_S = 5

DEMO_SPARK_CONF = {
    # Small batches: a few shuffle partitions and no Spark UI keep each batch quick on a laptop.
    "spark.sql.shuffle.partitions": "4",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
}


@dataclass(frozen=True)
class DemoLayout:
    """Paths under the demo's data dir (all absolute when the data dir is)."""

    root: Path

    @property
    def broker(self) -> Path:
        return self.root / "broker"

    @property
    def registry(self) -> Path:
        """The embedded schema registry's data dir (``--values avro``)."""
        return self.root / "registry"

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster_home"

    @property
    def output(self) -> Path:
        return self.root / "output"

    @property
    def dead_letters(self) -> Path:
        """Where quarantined (invalid) records go: the dead-letter output, same layout as the output."""
        return self.root / "dead-letters"

    @property
    def replay(self) -> Path:
        return self.root / "replay"

    @property
    def ledger(self) -> Path:
        return self.root / "ledger.db"

    @property
    def iceberg_catalog(self) -> Path:
        """The SQL catalog (SQLite) of ``--format iceberg``'s tables."""
        return self.root / "iceberg-catalog.db"

    @property
    def config_file(self) -> Path:
        return self.root / "kprio.yaml"

    @property
    def plot(self) -> Path:
        return self.root / "backlog.png"

    @property
    def report(self) -> Path:
        return self.root / "report.json"

    @property
    def log(self) -> Path:
        """Dagster's event log and Spark's warnings of the last run (truncated by the next, never cleared)."""
        return self.root / "demo.log"

    def owned(self) -> tuple[Path, ...]:
        """What a demo run creates; only these are removed when the next run starts afresh."""
        return (self.broker, self.registry, self.dagster_home, self.output, self.dead_letters, self.replay, self.ledger,
                self.iceberg_catalog, self.config_file, self.plot, self.report)

    def clear(self) -> None:
        """Remove what an earlier demo run left (never anything else in the data dir)."""
        for path in self.owned():
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)


def demo_config(layout: DemoLayout, bootstrap: str, *, record_budget: int, kafka: KafkaSettings | None = None,
                logical_topic: str = LOGICAL_TOPIC, today: datetime | None = None,
                output_format: OutputFormat = OutputFormat.PARQUET,
                registry: SchemaRegistrySettings | None = None) -> KprioConfig:
    """The demo's configuration: one logical topic of 3 priorities x 4 partitions on ``bootstrap``; ``kafka``: a real
    or secured broker's client settings (bootstrap replaced); with ``registry``, Avro values typed by the registry."""
    values = ({"value_format": "avro"} if registry is not None else {"schema": dict(ORDER_SCHEMA)})
    base = kafka or KafkaSettings(timeout_s=20.0)
    day = (today or datetime.now(UTC)).strftime("%Y-%m-%d")
    return KprioConfig.model_validate({
        "kafka": base.model_copy(update={"bootstrap_servers": bootstrap}),
        "topics": [{
            "name": logical_topic,
            "priorities": PRIORITIES,
            "partitions": PARTITIONS,
            **values,
            "required_fields": list(REQUIRED_FIELDS),
        }],
        "schema_registry": registry,
        # Batches sized by the record budget alone (not by measured throughput): the same run gives the same table.
        "planner": {"record_budget": record_budget, "target_batch_s": None},
        "drain": {"format": output_format, "output_path": str(layout.output), "dead_letter_path": str(layout.dead_letters),
                  "replay_path": str(layout.replay), "replay_start": day,
                  # --format iceberg: the tables' catalog in the data dir, cleared with the rest by the next run.
                  "iceberg": {"catalog": {"type": "sql", "uri": f"sqlite:///{layout.iceberg_catalog}"}}},
        "spark": {"master": "local[2]", "conf": dict(DEMO_SPARK_CONF)},
        "ledger": {"url": f"sqlite:///{layout.ledger}"},
        "sensor": {"interval_s": SENSOR_INTERVAL_S},
    })


def write_config(config: KprioConfig, path: Path) -> Path:
    """``config`` as kprio.yaml (Kafka secrets never written: they stay in the environment)."""
    data = config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})
    header = ("# Written by `kprio demo`. Use it with:\n"
              f"#   KPRIO_CONFIG={path} DAGSTER_HOME={path.parent / 'dagster_home'} dagster dev -m orchestration.definitions\n"
              f"#   kprio lag --config {path}\n"
              f"#   kprio dead-letters --config {path}\n")
    path.write_text(header + yaml.safe_dump(data, sort_keys=False))
    return path
