"""``run_demo``: broker, topics, workload, the Dagster drain until empty, then the report, plot and conservation check.

Steps: clear what an earlier demo left; start the embedded broker unless a cluster is given; write kprio.yaml,
create the topics, produce the up-front waves (``poison`` bad records in the low backlog); drain with
:func:`orchestration.dagster.drain_loop.drain`, producing later waves as runs end; check, plot and report. A broker
it started is stopped in ``finally`` unless ``keep_broker``.

With ``security`` the embedded broker is secured (:mod:`orchestration.services.broker_security`) and every demo
client authenticates. A secret the environment lacks is made up for the run, set in this process only
(:func:`one_off_secrets`), never shown or written; a kept broker's clients need it, so then it must be set.

With ``values`` avro the orders are Avro through the registry of ``--config``'s kprio.yaml or, without one, the
embedded Apicurio Registry in ``<data-dir>/registry`` (stopped with the broker); the report lists typed columns.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kprio_core.config import (
    ENV_BOOTSTRAP,
    DrainSettings,
    KafkaSettings,
    OutputFormat,
    SchemaRegistrySettings,
    ValueFormat,
    load_config,
    parse_config,
)
from kprio_core.errors import UsageError
from orchestration.demo import DemoFailed
from orchestration.demo.layout import (
    LOGICAL_TOPIC,
    PARTITIONS,
    DemoLayout,
    demo_config,
    write_config,
)
from orchestration.demo.output_view import duckdb_report, output_columns
from orchestration.demo.producer import Arrival, WaveProducer, high_watermarks
from orchestration.demo.report import (
    Conservation,
    PriorityRow,
    check_conservation,
    drains_of,
    priority_rows,
)
from orchestration.demo.workload import Workload, demo_record_budget, demo_workload
from orchestration.services.broker_security import BrokerSecurity

if TYPE_CHECKING:
    from orchestration.dagster.drain_report import BatchOutcome

DEFAULT_RECORDS = 20_000


class DemoListener(Protocol):
    """What the demo reports while it works (progress bars; tests may record it)."""

    def stage(self, text: str) -> None: ...

    def produced(self, arrival: Arrival) -> None: ...

    def drained(self, run: BatchOutcome) -> None: ...


class _Silent:
    def stage(self, text: str) -> None:
        pass

    def produced(self, arrival: Arrival) -> None:
        pass

    def drained(self, run: BatchOutcome) -> None:
        pass


@dataclass(frozen=True)
class DemoOptions:
    """What ``kprio demo`` was asked."""

    records: int = DEFAULT_RECORDS
    data_dir: Path = Path("kprio-data") / "demo"
    keep_broker: bool = False
    config: Path | None = None
    """A kprio.yaml whose kafka section (bootstrap, security settings) names a real cluster."""
    seed: int = 7
    batches: int = 6
    """Target number of full batches: the record budget is ``records / batches`` (see demo_record_budget)."""
    record_budget: int | None = None
    """An explicit record budget instead of the target (tests use it to get hand-checked numbers)."""
    steady_waves: int = 4
    burst_after: int = 2
    poison: int = 0
    """Malformed records produced among the low-priority backlog: quarantined to the dead letters."""
    output_format: OutputFormat = OutputFormat.PARQUET
    """``drain.format``: Parquet files, or Delta Lake tables (one commit per batch)."""
    security: BrokerSecurity = BrokerSecurity()
    """How the embedded broker is secured (``--security``); every client of the demo authenticates."""
    values: ValueFormat = ValueFormat.JSON
    """``--values``: JSON orders, or Avro through the schema registry (typed columns from its schema)."""

    @property
    def budget(self) -> int:
        return self.record_budget or demo_record_budget(self.records, self.batches)


@dataclass
class DemoResult:
    """Everything the demo found, for the table, ``--json`` and the tests."""

    layout: DemoLayout
    bootstrap: str
    logical_topic: str
    embedded: bool
    broker_kept: bool
    rows: list[PriorityRow]
    conservation: Conservation
    batches: list[BatchOutcome]
    """Every run the drain executed, in order (one per batch when nothing failed)."""
    drain_stopped: str
    drain_ok: bool
    seconds: float
    arrivals: list[Arrival] = field(default_factory=list)
    output_format: OutputFormat = OutputFormat.PARQUET
    table_log: list[dict[str, Any]] = field(default_factory=list)
    """The output table's publishes, oldest first (Delta's log, Iceberg's snapshots); none for Parquet files."""
    table_lines: list[str] = field(default_factory=list)
    """What the report shows of the output table and its publishes, in the format's words."""
    query_lines: list[str] = field(default_factory=list)
    """How to query the output with other tools."""
    duckdb_query: str = ""
    """The DuckDB query the report shows, over the output as published (:data:`output_view.DUCKDB_QUERY`)."""
    duckdb_rows: list[tuple] = field(default_factory=list)
    """Its rows: per priority, the records and the first and last record timestamp."""
    security: BrokerSecurity = BrokerSecurity()
    made_up: tuple[str, ...] = ()
    """The secrets the demo made up for its run (their variables' names), see :func:`one_off_secrets`."""
    values: ValueFormat = ValueFormat.JSON
    registry_url: str | None = None
    columns: list[tuple[str, str]] = field(default_factory=list)
    """The output's decoded columns and their types, as a reader of the table sees them."""

    @property
    def batch_count(self) -> int:
        """Batches the drain ran (a batch retried after a failure counts once)."""
        return len({b.batch_id for b in self.batches})

    @property
    def dead_letters(self) -> int:
        """Records quarantined to the dead letters (committed batches)."""
        return sum(r.dead_letters for r in self.rows)

    def dead_letter_lines(self) -> list[str]:
        """Where the dead letters are and how to show them (nothing when there is none)."""
        if not self.dead_letters:
            return []
        n = self.dead_letters
        return [f"dead letters: {n:,} record{'s' if n != 1 else ''} quarantined in "
                f"{self.layout.dead_letters / self.logical_topic}",
                f"show them: kprio dead-letters --config {self.layout.config_file}"]

    @property
    def ok(self) -> bool:
        return self.drain_ok and self.conservation.ok

    def ui_command(self) -> str:
        # -m works from any directory (workspace.yaml only from the repository root).
        return (f"KPRIO_CONFIG={self.layout.config_file} DAGSTER_HOME={self.layout.dagster_home} "
                "dagster dev -m orchestration.definitions")

    def next_steps(self) -> list[str]:
        """How to look at the same instance afterwards."""
        steps = []
        if self.made_up:
            steps.append(f"the demo made up {' and '.join(self.made_up)} for its run (never shown): set your own to "
                         "run it again and use the broker afterwards (--keep-broker)")
        if self.embedded and not self.broker_kept and not self.made_up:
            port = self.bootstrap.rsplit(":", 1)[1]
            steps.append(f"restart the demo broker: kprio broker start --data-dir {self.layout.broker} --port {port}")
        steps += [f"open the UI on this instance: {self.ui_command()}",
                  f"show the lag: kprio lag --config {self.layout.config_file}"]
        return steps + self.query_lines

    def column_lines(self) -> list[str]:
        """The decoded columns of the output and their types (from the registry's schema with --values avro)."""
        if not self.columns:
            return []
        source = f"from the schema registry at {self.registry_url}" if self.values is ValueFormat.AVRO \
            else "from the topic's JSON schema"
        return [f"typed columns ({source}): " + ", ".join(f"{name} {kind}" for name, kind in self.columns)]

    def duckdb_lines(self) -> list[str]:
        """The DuckDB query over the output and its rows."""
        if not self.duckdb_query:
            return []
        lines = [f"DuckDB: {self.duckdb_query}"]
        lines += [f"  priority {p}: {n:,} records, {first} .. {last}" for p, n, first, last in self.duckdb_rows]
        return lines

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "logical_topic": self.logical_topic,
            "bootstrap_servers": self.bootstrap,
            "embedded_broker": self.embedded,
            "security": self.security.to_dict(),
            "broker_kept": self.broker_kept,
            "records": sum(r.records for r in self.rows),
            "dead_letters": self.dead_letters,
            "batches": self.batch_count,
            "runs": [b.to_dict() for b in self.batches],
            "priorities": {str(r.priority): r.to_dict() for r in self.rows},
            "conservation": self.conservation.to_dict(),
            "drain": {"ok": self.drain_ok, "stopped": self.drain_stopped},
            "seconds": round(self.seconds, 1),
            "format": self.output_format.value,
            "values": self.values.value,
            "schema_registry": self.registry_url,
            "columns": {name: kind for name, kind in self.columns},
            "table_log": self.table_log,
            "duckdb": {"query": self.duckdb_query, "rows": [list(map(str, r)) for r in self.duckdb_rows]},
            "files": {"config": str(self.layout.config_file), "dagster_home": str(self.layout.dagster_home),
                      "plot": str(self.layout.plot), "output": str(self.layout.output),
                      "dead_letters": str(self.layout.dead_letters),
                      "ledger": str(self.layout.ledger), "report": str(self.layout.report)},
            "next_steps": self.next_steps(),
        }


def cluster_settings(config: Path | None, env: Mapping[str, str] | None = None) -> KafkaSettings | None:
    """The Kafka settings of a real cluster (``--config`` or ``KPRIO_BOOTSTRAP_SERVERS``), else None: embedded."""
    env = os.environ if env is None else env
    if config is not None:
        return load_config(config, env).kafka
    if env.get(ENV_BOOTSTRAP):
        return parse_config({}, ENV_BOOTSTRAP, env).kafka
    return None


def check_options(options: DemoOptions, cluster: KafkaSettings | None, env: Mapping[str, str]) -> None:
    """Refuse options that cannot go together, before anything starts: ``--security`` with ``--config``'s cluster
    (:class:`UsageError`), ``--keep-broker`` of a secured broker whose secrets ``env`` lacks (:class:`DemoFailed`)."""
    if cluster is not None and options.security.secured:
        raise UsageError("--security secures the embedded broker: a cluster given by --config or "
                         f"{ENV_BOOTSTRAP} has its own security settings", where="kprio demo --security")
    if cluster is None:
        one_off_secrets(options.security, dict(env), keep_broker=options.keep_broker)  # a copy: only its refusal


def one_off_secrets(security: BrokerSecurity, env: MutableMapping[str, str], *, keep_broker: bool) -> list[str]:
    """Set in ``env`` a random value for each secret ``security`` needs that is not set; the names set. The demo's
    clients (Dagster runs too) read them from this process's environment only; with ``keep_broker`` a missing one
    is an error naming it (the caller must know it)."""
    import secrets

    missing = security.missing(env)
    if missing and keep_broker:
        raise DemoFailed(f"--keep-broker with --security {security.mode.value}: set {' and '.join(missing)} in the "
                         "environment first (kprio's clients of the kept broker will need them)")
    for name in missing:
        env[name] = secrets.token_urlsafe(24)
    return missing


def published_offsets(drain: DrainSettings, kind: str, logical_topic: str) -> list[tuple[str, int, int]]:
    """(topic, partition, offset) of every published row (``kind``: output or dead letters) as a reader sees it:
    Parquet files under ``<root>/<logical>/`` (never staging), or the table's current version."""
    from spark_jobs.tables import read_rows

    table = read_rows(drain, kind, logical_topic, columns=("topic", "partition", "offset"))
    if not table.num_columns:
        return []
    cols = table.to_pydict()
    return list(zip(cols["topic"], cols["partition"], cols["offset"], strict=True))


def run_demo(options: DemoOptions, listener: DemoListener | None = None) -> DemoResult:
    """Run the whole demo (see the module docstring); raises kprio's typed errors on failure."""
    listener = listener or _Silent()
    started = time.monotonic()
    layout = DemoLayout(Path(options.data_dir).resolve())
    workload = demo_workload(options.records, steady_waves=options.steady_waves, burst_after=options.burst_after,
                             poison=options.poison)
    cluster = cluster_settings(options.config)
    check_options(options, cluster, os.environ)
    made_up = one_off_secrets(options.security, os.environ, keep_broker=options.keep_broker) if cluster is None else []
    broker, registry, registry_settings = _embedded_services(options, layout, cluster)
    layout.clear()
    layout.root.mkdir(parents=True, exist_ok=True)
    kept = False
    try:
        bootstrap, topic_name, cluster = _demo_kafka(broker, cluster, options.security, listener)
        if registry is not None:
            listener.stage("starting the embedded schema registry (Apicurio Registry)")
            registry_settings = SchemaRegistrySettings(url=registry.start().url)
        config = demo_config(layout, bootstrap, record_budget=options.budget, kafka=cluster, logical_topic=topic_name,
                             output_format=options.output_format, registry=registry_settings)
        write_config(config, layout.config_file)
        result = _drain_demo(config, layout, workload, options, listener)
        kept = broker is not None and options.keep_broker
        result.update(embedded=broker is not None, broker_kept=kept, seconds=time.monotonic() - started)
        demo = DemoResult(layout=layout, bootstrap=bootstrap, logical_topic=topic_name,
                          output_format=options.output_format, security=options.security, made_up=tuple(made_up),
                          values=options.values, registry_url=registry_settings.url if registry_settings else None,
                          **result)
        layout.report.write_text(json.dumps(demo.to_dict(), indent=2))
        return demo
    finally:
        if registry is not None and not kept:
            listener.stage("stopping the embedded schema registry")
            registry.stop()
        if broker is not None and not kept:
            listener.stage("stopping the embedded Kafka broker")
            broker.stop()


def _embedded_services(options: DemoOptions, layout: DemoLayout, cluster: KafkaSettings | None) -> tuple[Any, Any, Any]:
    """(broker, registry, registry settings), not started: the broker without a cluster, the registry for Avro
    when ``--config`` names none (its settings once started)."""
    from orchestration.services.broker import EmbeddedBroker
    from orchestration.services.registry import EmbeddedRegistry

    broker = (EmbeddedBroker(layout.broker, port=None, start_timeout_s=60, security=options.security)
              if cluster is None else None)
    registry_settings = demo_registry(options.config) if options.values is ValueFormat.AVRO else None
    registry = (EmbeddedRegistry(layout.registry, port=None, start_timeout_s=120)
                if options.values is ValueFormat.AVRO and registry_settings is None else None)
    if broker is not None:
        broker.stop()  # a broker an earlier `--keep-broker` run left behind holds the old data
    if registry is not None:
        registry.stop()  # as the broker: an earlier run's registry holds the old schemas
    return broker, registry, registry_settings


def _demo_kafka(broker: Any, cluster: KafkaSettings | None, security: BrokerSecurity,
                listener: DemoListener) -> tuple[str, str, KafkaSettings]:
    """(bootstrap, logical topic, Kafka settings): the embedded broker started, or the cluster given."""
    if broker is None:
        # A real cluster keeps topics across runs: a fresh logical topic keeps each run's counts exact.
        topic_name = f"{LOGICAL_TOPIC}-{datetime.now(UTC):%Y%m%d%H%M%S}-{uuid.uuid4().hex[:4]}"
        return cluster.bootstrap_servers, topic_name, cluster
    listener.stage(f"starting the embedded Kafka broker ({security.describe()})")
    bootstrap = broker.start().bootstrap
    kafka = parse_config({"kafka": {"bootstrap_servers": bootstrap, "client": broker.client_settings(),
                                    "timeout_s": 20.0}}, "the embedded broker").kafka
    return bootstrap, LOGICAL_TOPIC, kafka


def _drain_demo(config, layout: DemoLayout, workload: Workload, options: DemoOptions,  # noqa: ANN001
                listener: DemoListener) -> dict[str, Any]:
    """The demo's topics filled and drained through Dagster until empty; what it left, for :class:`DemoResult`."""
    from kprio_core.kafka import KafkaEdge
    from spark_jobs.layout import OUTPUT
    from spark_jobs.tables import output_of

    topic = config.topics[0]
    with KafkaEdge(config.kafka) as edge:
        producer = _demo_producer(config, topic, edge, options, listener)
        runs, stopped, ok = _drain_waves(config, layout, workload, producer, listener)
        listener.stage("checking conservation")
        batches, rows, conservation = _conservation(config, topic, edge, producer)
        _plot(layout, topic, edge, producer, batches, rows, runs)
    if not runs:
        raise DemoFailed(f"{topic.name}: the drain ran no batch ({stopped})")
    tables = output_of(config.drain)
    table_log = tables.publishes(OUTPUT, topic.name)
    query, answer = duckdb_report(config.drain, topic.name)
    return {"rows": rows, "conservation": conservation, "batches": runs, "drain_stopped": stopped,
            "drain_ok": ok, "arrivals": list(producer.arrivals), "table_log": table_log,
            "table_lines": tables.describe(topic.name, table_log), "query_lines": tables.how_to_query(topic.name),
            "columns": output_columns(config.drain, topic.name), "duckdb_query": query, "duckdb_rows": answer}


def _demo_producer(config, topic, edge, options: DemoOptions, listener: DemoListener) -> WaveProducer:  # noqa: ANN001
    """The demo's priority topics created, and the producer of its waves (Avro values through the registry)."""
    listener.stage(f"creating {', '.join(topic.priority_topics().values())}")
    # retention.ms -1: the demo's records must not expire while the user looks at them.
    edge.ensure_topics(topic, PARTITIONS, config={"retention.ms": "-1"})
    encode = None
    if config.schema_registry is not None:
        from orchestration.demo.avro_values import AvroOrders

        encode = AvroOrders(config.schema_registry.endpoint()).encode
    return WaveProducer(config, topic, edge, seed=options.seed, encode=encode)


def _drain_waves(config, layout: DemoLayout, workload: Workload, producer: WaveProducer,  # noqa: ANN001
                 listener: DemoListener) -> tuple[list[BatchOutcome], str, bool]:
    """(runs, why the drain stopped, ok): the backlog produced, then drained, each later wave when it is due."""
    from orchestration.dagster.definitions import build_definitions
    from orchestration.dagster.drain_loop import Until, drain
    from orchestration.dagster.instance import open_instance
    from orchestration.dagster.workers.pool import workers_for

    produced = set()

    def produce_due(batches_done: int, waves) -> None:  # noqa: ANN001
        for wave in waves:
            listener.produced(producer.produce(wave, batches_done))
            produced.add(wave)

    listener.stage("producing the backlog")
    produce_due(0, workload.due(0))
    runs: list[BatchOutcome] = []

    def on_batch(run: BatchOutcome) -> None:
        runs.append(run)
        listener.drained(run)
        produce_due(len(runs), workload.due(len(runs)))

    defs = build_definitions(config)
    stopped, ok = "", True
    # The demo's own Dagster home (its dagster.yaml, as `dagster dev` uses) and one warm worker pool for every drain.
    with open_instance(config, env={"DAGSTER_HOME": str(layout.dagster_home)}) as instance, \
            workers_for(config.spark, config.workers) as workers:
        while True:
            listener.stage("draining through priority_lag_sensor's tick and drain_job")
            report = drain(defs, instance, until=Until.EMPTY, log_level="INFO", on_batch=on_batch, workers=workers)
            stopped, ok = report.stopped, report.ok
            left = [w for w in workload.waves if w not in produced]
            if not ok or not left:
                break
            # Drained dry before a late wave was due (a tiny --records): it arrives now.
            produce_due(len(runs), left)
    return runs, stopped, ok


def _conservation(config, topic, edge,  # noqa: ANN001
                  producer: WaveProducer) -> tuple[list, list[PriorityRow], Conservation]:
    """(the ledger's batches, the rows per priority, conservation): every record produced is published exactly once."""
    from kprio_core.ledger import Ledger
    from spark_jobs.layout import DEAD_LETTERS, OUTPUT

    with Ledger(config.ledger.url) as ledger:
        batches = ledger.batches.find(topic.name)
    rows = priority_rows(producer.arrivals, drains_of(batches), topic.priorities)
    high = high_watermarks(edge, topic)
    conservation = check_conservation(
        producer.start, high, edge.committed(topic),
        published_offsets(config.drain, OUTPUT, topic.name), published_offsets(config.drain, DEAD_LETTERS, topic.name))
    return batches, rows, conservation


def _plot(layout: DemoLayout, topic, edge, producer: WaveProducer, batches: list,  # noqa: ANN001
          rows: list[PriorityRow], runs: list[BatchOutcome]) -> None:
    """The backlog per priority after each batch, the later waves marked where they arrived."""
    from orchestration.demo.plot import backlog_series, plot_backlog

    after = edge.snapshot(topic, now_ms=int(time.time() * 1000)).backlog_by_priority()
    arrivals_at: dict[int, set[int]] = {}
    for a in producer.arrivals:
        if a.first_batch > 1:
            arrivals_at.setdefault(a.first_batch, set()).add(a.priority)
    labels = {b: "+ " + ", ".join(f"p{p}" for p in sorted(ps, reverse=True)) for b, ps in arrivals_at.items()}
    plot_backlog(backlog_series(batches, after, topic.priorities), layout.plot,
                 title=f"{topic.name}: backlog per priority ({sum(r.records for r in rows):,} records, "
                       f"{len({r.batch_id for r in runs})} batches)", arrivals=labels)


def demo_registry(config: Path | None, env: Mapping[str, str] | None = None) -> SchemaRegistrySettings | None:
    """The schema registry of ``--config``'s kprio.yaml, if it has one (else the demo runs the embedded one)."""
    if config is None:
        return None
    return load_config(config, os.environ if env is None else env).schema_registry
