"""The demo end to end at a hand-checkable scale: real broker, real Spark, a real Dagster instance.

100 orders and 5 poison records (one of each kind), budget 70, two steady waves, the burst
after batch 1 (demo_workload(100, steady_waves=2, burst_after=1, poison=5)): before batch 1:
p0 65 (60 orders, the 5 poison records among them), p1 13. Exponential quotas of 70 are
{2: 40, 1: 20, 0: 10}; p2 is idle, so lag-aware water-filling gives p1 its 13 and p0 the other
57. Then p1's second wave (12) and the burst (15 of p2) arrive; batch 2 drains p2 15, p1 12
and p0's last 8, which waited one batch. Nothing is left: two batches. The 5 poison records
(spread over p0's partitions, at most 2 per partition, far below the 5 % ratio of a range's
100-record floor) are quarantined to the dead letters; both batches commit.
"""

from __future__ import annotations

import json
from pathlib import Path
from secrets import token_urlsafe

import pytest
from typer.testing import CliRunner

from kprio_core.config import OutputFormat, ValueFormat, load_config
from orchestration.cli.demo import print_result
from orchestration.cli.main import app
from orchestration.demo.run import DemoOptions, run_demo
from orchestration.demo.workload import demo_workload
from orchestration.services.broker import BrokerSecurity, Security
from tests.fixtures.secured_broker import files_holding

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]


class Recorder:
    """Listener that keeps what the demo reported."""

    def __init__(self) -> None:
        self.stages: list[str] = []
        self.arrivals: list = []
        self.runs: list = []

    def stage(self, text: str) -> None:
        self.stages.append(text)

    def produced(self, arrival) -> None:
        self.arrivals.append(arrival)

    def drained(self, run) -> None:
        self.runs.append(run)


def test_the_workload_of_this_test_is_the_one_the_docstring_computes() -> None:
    w = demo_workload(100, steady_waves=2, burst_after=1, poison=5)
    assert [(x.priority, x.records, x.poison, x.after_batch) for x in w.waves] == [
        (0, 60, 5, 0), (1, 13, 0, 0), (1, 12, 0, 1), (2, 15, 0, 1)]


@pytest.mark.parametrize("output_format", list(OutputFormat))
def test_demo_drains_everything_with_the_burst_first_and_the_poison_quarantined(
        kafka_bootstrap: str, spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys,
        output_format: OutputFormat) -> None:
    monkeypatch.setenv("KPRIO_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "elsewhere"))  # restored after the demo points it at its own
    recorder = Recorder()
    options = DemoOptions(records=100, data_dir=tmp_path / "demo", record_budget=70, steady_waves=2, burst_after=1,
                          poison=5, output_format=output_format)

    result = run_demo(options, recorder)

    # The table: records (output and dead letters), dead letters, batches, median / max wait, checks passed.
    table = [(r.priority, r.records, r.dead_letters, r.batches, r.median_wait, r.max_wait, r.checks)
             for r in result.rows]
    assert table == [
        (2, 15, 0, 1, 0, 0, "1/1"),
        (1, 25, 0, 2, 0, 0, "2/2"),
        (0, 65, 5, 2, 0, 1, "2/2"),
    ]
    assert [sum(run.records.values()) for run in recorder.runs] == [70, 35]
    assert [run.records for run in recorder.runs] == [{1: 13, 0: 57}, {2: 15, 1: 12, 0: 8}]
    assert [run.state.value for run in recorder.runs] == ["committed", "committed"]
    assert sum(run.dead_letters for run in recorder.runs) == 5
    assert [(a.priority, a.first_batch, a.records, a.poison) for a in recorder.arrivals] == [
        (0, 1, 65, 5), (1, 1, 13, 0), (1, 2, 12, 0), (2, 2, 15, 0)]
    assert result.drain_ok and result.drain_stopped == "no backlog left"

    # Conservation: each of the 105 produced offsets exactly once in the output (100) or the dead letters (5).
    assert result.conservation.ok
    assert (result.conservation.in_output, result.conservation.in_dead_letters) == (100, 5)
    assert result.conservation.line() == (
        "conservation: OK: 105 of 105 produced offsets exactly once in the output (100) or the dead letters (5), "
        "never both; committed == high watermark on 12 of 12 partitions")

    # The files the user is told about.
    layout = result.layout
    assert layout.plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    demo_config = load_config(layout.config_file, env={})
    assert demo_config.topics[0].name == result.logical_topic
    assert demo_config.kafka.bootstrap_servers == kafka_bootstrap
    assert demo_config.ledger.url == f"sqlite:///{layout.ledger}"
    assert demo_config.drain.dead_letter_path == str(layout.dead_letters)
    assert demo_config.drain.format is output_format
    assert (layout.dagster_home / "dagster.yaml").is_file()
    assert not list(layout.output.glob("_staging/*")) and not list(layout.dead_letters.glob("_staging/*"))
    saved = json.loads(layout.report.read_text())
    assert saved["conservation"]["ok"] and saved["batches"] == 2 and saved["dead_letters"] == 5
    assert saved["priorities"]["0"] == {"priority": 0, "produced": 65, "records": 65, "dead_letters": 5,
                                        "batches": 2, "median_wait_batches": 0, "max_wait_batches": 1,
                                        "checks_passed": 2}

    # What `kprio demo` prints from it: the table, the conservation line, where the dead letters are.
    print_result(result, as_json=False)
    out = capsys.readouterr().out
    assert result.conservation.line() in out
    assert f"DAGSTER_HOME={layout.dagster_home} dagster dev" in out
    assert f"dead letters: 5 records quarantined in {layout.dead_letters / result.logical_topic}" in out
    assert f"show them: kprio dead-letters --config {layout.config_file}" in out
    if output_format is OutputFormat.DELTA:
        # The output table's log: one commit per batch, with its ranges; and how to query the table.
        runs = {run.batch_id: run for run in recorder.runs}
        assert [entry["batch_id"] for entry in result.table_log] == list(runs)
        assert [entry["version"] for entry in result.table_log] == [0, 1]
        assert all(entry["attempt"] == 1 and entry["ranges"] for entry in result.table_log)
        assert f"Delta table {layout.output / result.logical_topic}: 2 commits for 2 batches" in out
        assert "version 0: b-000001 attempt 1: " in out
        assert f"DeltaTable('{layout.output / result.logical_topic}').to_pandas()" in out
    elif output_format is OutputFormat.ICEBERG:
        # One snapshot per batch with its ranges in the summary, in the catalog in the data dir.
        runs = {run.batch_id: run for run in recorder.runs}
        assert [entry["batch_id"] for entry in result.table_log] == list(runs)
        assert all(entry["attempt"] == 1 and entry["ranges"] and entry["epoch"] >= 1 for entry in result.table_log)
        assert f"Iceberg table kprio.{result.logical_topic} ({layout.output / result.logical_topic}, catalog " \
               f"{layout.iceberg_catalog}): 2 snapshots for 2 batches" in out
        assert f"snapshot {result.table_log[0]['snapshot_id']}: b-000001 attempt 1: " in out
        assert "load_table('kprio." in out and "Delta table" not in out
    else:
        assert "Delta table" not in out and "Iceberg table" not in out and result.table_log == []
    # One DuckDB query over the output as published, in every format: every record of the output once.
    reader = {"parquet": "read_parquet(", "delta": "delta_scan(", "iceberg": "iceberg_scan("}[output_format.value]
    assert reader in result.duckdb_query and f"DuckDB: {result.duckdb_query}" in out
    assert [(p, n) for p, n, *_ in result.duckdb_rows] == [(2, 15), (1, 25), (0, 60)]
    assert "  priority 0: 60 records, " in out
    row_p0 = next(line for line in out.splitlines() if line.replace("│", " ").split()[:1] == ["0"])
    assert row_p0.replace("│", " ").split() == ["0", "65", "5", "2", "0", "1", "2/2"]
    print_result(result, as_json=True)
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] and doc["records"] == 105 and doc["dead_letters"] == 5
    assert doc["priorities"]["2"]["max_wait_batches"] == 0 and len(doc["runs"]) == 2

    # The command the demo prints shows the five dead letters, one of each kind, with their errors.
    shown = CliRunner().invoke(app, ["dead-letters", "--config", str(layout.config_file), "--json"])
    assert shown.exit_code == 0, shown.output
    letters = json.loads(shown.stdout)["dead_letters"]
    assert len(letters) == 5 and {d["priority"] for d in letters} == {0}
    assert sorted(d["key"] for d in letters) == [f"poison-{k}" for k in range(5)]


def test_demo_over_sasl_ssl_drains_with_every_client_authenticated_and_writes_no_secret(
        spark, spark_files, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """`kprio demo --security sasl_ssl`: its own broker takes only SCRAM-SHA-512 or PLAIN logins over TLS, so the
    producer, the admin client, the reader and the commits all authenticated for the drain to end at zero lag."""
    monkeypatch.delenv("KPRIO_BOOTSTRAP_SERVERS", raising=False)  # the demo's own broker, not the session's
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "elsewhere"))
    secrets = {"KPRIO_KAFKA_SASL_PASSWORD": f"sasl-{token_urlsafe(18)}",
               "KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD": f"keystore-{token_urlsafe(18)}"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    options = DemoOptions(records=100, data_dir=tmp_path / "demo", record_budget=70, steady_waves=2, burst_after=1,
                          security=BrokerSecurity(Security.SASL_SSL))

    result = run_demo(options)

    assert result.ok, result.drain_stopped
    assert result.conservation.line() == (
        "conservation: OK: 100 of 100 produced offsets exactly once in the output (100) or the dead letters (0), "
        "never both; committed == high watermark on 12 of 12 partitions")
    assert result.made_up == () and result.security.mode is Security.SASL_SSL
    # The kprio.yaml it wrote is the secured broker's, the password left to the environment.
    written = load_config(result.layout.config_file, env=secrets).kafka
    assert written.client == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                              "sasl.username": "kprio", "ssl.ca.location": str(result.layout.broker / "tls" / "ca.pem")}
    print_result(result, as_json=False)
    print_result(result, as_json=True)
    shown = capsys.readouterr().out
    assert result.conservation.line() in shown
    assert not [s for s in secrets.values() if s in shown]
    assert files_holding([tmp_path, spark_files], secrets.values()) == {}


@pytest.mark.registry
def test_demo_with_avro_values_drains_typed_columns_through_the_registry(
        kafka_bootstrap: str, spark, schema_registry_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys) -> None:
    """`kprio demo --values avro --format delta --config C`: the orders written by AvroSerializer through the
    registry C names (the session's Apicurio Registry: one per test session), the same hand-checked batches as the
    JSON demo, typed columns in the table, the five poison records (not in the wire format) in the dead letters
    with the reason."""
    from orchestration.services.registry import EmbeddedRegistry

    monkeypatch.setenv("KPRIO_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "elsewhere"))
    config = tmp_path / "kprio.yaml"
    config.write_text(json.dumps({"schema_registry": {"url": schema_registry_url}}))
    options = DemoOptions(records=100, data_dir=tmp_path / "demo", record_budget=70, steady_waves=2, burst_after=1,
                          poison=5, output_format=OutputFormat.DELTA, values=ValueFormat.AVRO, config=config)

    result = run_demo(options)

    assert result.ok, result.drain_stopped
    assert result.registry_url == schema_registry_url  # the registry of --config: the demo starts none of its own
    assert (result.conservation.in_output, result.conservation.in_dead_letters) == (100, 5)
    assert dict(result.columns) == {
        "order_id": "string", "customer": "string", "sku": "string", "quantity": "int32",
        "amount": "decimal128(10, 2)", "tier": "string", "created": "timestamp[us, tz=UTC]"}
    assert load_config(result.layout.config_file, env={}).topics[0].value_format is ValueFormat.AVRO
    assert not EmbeddedRegistry(result.layout.registry).status().running  # none runs in the demo's data dir
    print_result(result, as_json=False)
    out = capsys.readouterr().out
    assert f"typed columns (from the schema registry at {result.registry_url}): order_id string" in out
    assert "amount decimal128(10, 2)" in out
    shown = CliRunner().invoke(app, ["dead-letters", "--config", str(result.layout.config_file), "--json"])
    letters = json.loads(shown.stdout)["dead_letters"]
    assert len(letters) == 5 and all(d["error"].startswith("wrong magic byte ") for d in letters), letters
