"""``kprio demo``: the whole of kprio in one command, on an embedded broker (or a real cluster).

``--json`` prints the report as one JSON document. Exits 1 when the drain stopped early or conservation failed.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from kprio_core.config import OutputFormat, ValueFormat
from kprio_core.errors import UsageError
from kprio_core.extras import OUTPUT_FORMATS, REGISTRY, REPORT, require
from orchestration.cli.common import JsonOption, print_json
from orchestration.services.broker_security import BrokerSecurity, Security

RecordsOption = Annotated[
    int,
    typer.Option("--records", "-n", min=10, help="Orders to produce in all (60% low backlog, 25% steady middle, "
                 "15% late high burst); the record budget is set so it drains in about 6-8 batches."),
]
DataDirOption = Annotated[
    Path,
    typer.Option("--data-dir", "-d", help="Where the demo keeps broker data, ledger, output, Dagster home, "
                 "kprio.yaml and the plot (an earlier demo's files there are replaced)."),
]
KeepBrokerOption = Annotated[
    bool, typer.Option("--keep-broker", help="Leave the embedded broker running afterwards (for `dagster dev`).")
]
PoisonOption = Annotated[
    int,
    typer.Option("--poison", min=0, help="Also produce this many malformed records (not JSON, not UTF-8, a JSON "
                 "list, a wrong type, a missing required field, in turn) among the low-priority backlog: they are "
                 "quarantined to the dead letters and the drain goes on."),
]
FormatOption = Annotated[
    OutputFormat,
    typer.Option("--format", help="drain.format of the demo's kprio.yaml: 'parquet' files, 'delta' Lake tables "
                 "(one commit per batch) or 'iceberg' tables (one snapshot per batch, a SQL catalog on SQLite in the "
                 "data dir); for a table the demo prints its log and how to query it. The report shows a DuckDB "
                 "query over the output in every format."),
]
DemoConfigOption = Annotated[
    Path | None,
    typer.Option("--config", "-c", show_default=False,
                 help="kprio.yaml naming a real Kafka cluster: its kafka section (bootstrap, security settings; "
                 "secrets from KPRIO_KAFKA_*) is used instead of the embedded broker. KPRIO_BOOTSTRAP_SERVERS "
                 "does the same."),
]
SecurityOption = Annotated[
    Security,
    typer.Option("--security", case_sensitive=False,
                 help="Secure the embedded broker: sasl_ssl (SCRAM-SHA-512 over TLS, as managed clusters run), ssl, "
                 "sasl_plaintext; every client of the demo authenticates. Secrets from KPRIO_KAFKA_SASL_PASSWORD and "
                 "KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD, made up for the run (never shown) when not set."),
]
class DemoValues(StrEnum):
    """What the demo's orders are written as."""

    JSON = "json"
    AVRO = "avro"


ValuesOption = Annotated[
    DemoValues,
    typer.Option("--values", case_sensitive=False,
                 help="json orders, or avro: written with confluent-kafka's AvroSerializer through a schema registry "
                 "(the embedded Apicurio Registry the demo starts, or --config's schema_registry), decoded into typed "
                 "columns (decimal amount, timestamp, enum tier) that the report lists."),
]
MtlsOption = Annotated[bool, typer.Option("--mtls", help="With --security ssl or sasl_ssl: clients present a "
                                                         "certificate too (mutual TLS).")]


def demo(
    records: RecordsOption = 20_000,
    data_dir: DataDirOption = Path("kprio-data") / "demo",
    keep_broker: KeepBrokerOption = False,
    config: DemoConfigOption = None,
    poison: PoisonOption = 0,
    output_format: FormatOption = OutputFormat.PARQUET,
    security: SecurityOption = Security.PLAINTEXT,
    mtls: MtlsOption = False,
    values: ValuesOption = DemoValues.JSON,
    as_json: JsonOption = False,
) -> None:
    """Run the one-command demo: broker, 3 priority topics, a realistic workload, the Dagster drain, a report.

    A large low-priority backlog and a steady middle priority are drained through priority_lag_sensor's logic and the drain_job the Dagster daemon runs (in process, on the demo's own Dagster instance); a burst of high priority arrives after the second batch and jumps the queue. Every batch is checked before its offsets are committed.

    With --poison N, N malformed records go into the low-priority backlog: they are quarantined to the dead letters (<data-dir>/dead-letters) with their raw bytes and the error, and everything else still drains.

    At the end: the per-priority table, the conservation check (every produced offset once in the output or once in the dead letters), a backlog plot (<data-dir>/backlog.png) and the command that opens the Dagster UI on the same instance. Dagster's and Spark's logs go to <data-dir>/demo.log.

    With --format delta, the output and the dead letters are Delta Lake tables: the demo prints the output table's log (one commit per batch, with its ranges) and how to query it with pandas, polars, deltalake or Spark. With --format iceberg they are Apache Iceberg tables in a SQL catalog in the data dir: the demo prints the table's snapshots (one per batch, with its ranges) and how to query it with pyiceberg or DuckDB. In every format the report shows a DuckDB query over the output (records per priority, first and last timestamp).

    With --security sasl_ssl the embedded broker takes only SCRAM-SHA-512 or PLAIN logins over TLS, with a CA and certificates it makes in <data-dir>/broker/tls, and every client of the demo authenticates: the producer, the admin client, both readers, the commits.

    Example: kprio demo --records 12000 --poison 4 --keep-broker
    With --values avro the orders are Avro records in the schema registry's wire format (the embedded Apicurio Registry, built by scripts/setup.sh, runs for the demo), and the report lists the output's typed columns.

    Example: kprio demo --security sasl_ssl
    Example: kprio demo --values avro --format delta
    Example: kprio demo --format iceberg
    """
    from orchestration.demo.layout import DemoLayout
    from orchestration.demo.progress import DemoProgress
    from orchestration.demo.quiet import logs_to
    from orchestration.demo.run import DemoOptions, check_options, cluster_settings, run_demo
    from orchestration.demo.workload import PRIORITIES

    cluster = cluster_settings(config)  # a bad --config fails here, before anything starts
    _require_parts(output_format, values)  # so do the parts an option needs that are not installed
    secured = _broker_security(security, mtls)
    options = DemoOptions(records=records, data_dir=data_dir, keep_broker=keep_broker, config=config, poison=poison,
                          output_format=output_format, security=secured, values=ValueFormat(values.value))
    check_options(options, cluster, os.environ)  # and options that cannot be together, before the progress bars
    log = DemoLayout(data_dir.resolve()).log
    # Dagster's event log and Spark's warnings would bury the progress bars: they go to the log.
    with logs_to(log) as terminal, DemoProgress(PRIORITIES, enabled=not as_json, file=terminal) as progress:
        result = run_demo(options, progress)
    print_result(result, as_json=as_json)
    _fail_unless_whole(result, data_dir)


def _require_parts(output_format: OutputFormat, values: DemoValues) -> None:
    """The parts the demo needs installed: its report's, the output format's, the registry's for --values avro."""
    require(REPORT, "kprio demo's report")
    require(OUTPUT_FORMATS[output_format.value].part, output_format.value, where="kprio demo --format")
    require(REGISTRY if values is DemoValues.AVRO else None, "--values avro", where="kprio demo --values")


def _broker_security(security: Security, mtls: bool) -> BrokerSecurity:
    """``--security`` and ``--mtls`` as the embedded broker's security; a combination that cannot be: a usage error."""
    try:
        return BrokerSecurity(security, mtls)
    except ValueError as err:
        raise UsageError(str(err), where="kprio demo --security") from None


def _fail_unless_whole(result, data_dir: Path) -> None:  # noqa: ANN001 - DemoResult, imported lazily
    """After its report, a demo whose drain stopped early or whose conservation check failed fails the command."""
    from orchestration.demo import DemoFailed

    if not result.drain_ok:
        raise DemoFailed(f"the drain stopped early: {result.drain_stopped}", where=str(data_dir))
    if not result.conservation.ok:
        raise DemoFailed(result.conservation.line(), where=str(data_dir))


def print_result(result, *, as_json: bool) -> None:  # noqa: ANN001 - DemoResult, imported lazily
    """The table, the conservation line, the dead letters and the next steps; or the JSON document."""
    if as_json:
        print_json(result.to_dict())
        return
    from rich.console import Console

    from orchestration.demo.report import render_table

    console = Console()
    total = sum(r.records for r in result.rows)
    console.print(render_table(result.rows, title=f"{result.logical_topic}: {total:,} records drained in "
                               f"{result.batch_count} batches ({result.seconds:.0f} s)"))
    console.print(result.conservation.line(), style="green" if result.conservation.ok else "red", highlight=False,
                  soft_wrap=True)
    for line in [*result.column_lines(), *result.table_lines, *result.duckdb_lines(), *result.dead_letter_lines()]:
        console.print(line, highlight=False, soft_wrap=True)
    console.print(f"backlog plot: {result.layout.plot}   log: {result.layout.log}", highlight=False, soft_wrap=True)
    for step in result.next_steps():
        console.print(step, highlight=False, soft_wrap=True)
