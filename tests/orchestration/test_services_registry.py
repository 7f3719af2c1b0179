"""The embedded schema registry: ``kprio registry start|status|stop`` and confluent-kafka's clients against it."""

from __future__ import annotations

import json
import shutil
import signal
import time

import pytest
from typer.testing import CliRunner

from orchestration.cli.main import app
from orchestration.services.process import pid_alive
from orchestration.services.registry import EmbeddedRegistry, RegistryProcessError

pytestmark = pytest.mark.registry

runner = CliRunner()

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "kprio.test",
            "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}]}


def test_cli_starts_reports_and_stops_a_registry_that_keeps_its_schemas(tmp_path):
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    data_dir = tmp_path / "registry"
    started = runner.invoke(app, ["registry", "start", "--port", "0", "--data-dir", str(data_dir), "--json"])
    assert started.exit_code == 0, started.output
    doc = json.loads(started.output)
    assert doc["running"] and doc["url"].startswith("http://127.0.0.1:") and doc["url"].endswith("/apis/ccompat/v7")
    try:
        client = SchemaRegistryClient({"url": doc["url"]})
        schema_id = client.register_schema("orders-value", Schema(json.dumps(ORDER_V1), "AVRO"))
        status = runner.invoke(app, ["registry", "status", "--data-dir", str(data_dir)])
        assert status.exit_code == 0 and f"running at {doc['url']}" in status.output
        # A second start reuses the running registry.
        again = runner.invoke(app, ["registry", "start", "--port", "0", "--data-dir", str(data_dir), "--json"])
        assert again.exit_code == 0 and json.loads(again.output)["pid"] == doc["pid"]
    finally:
        stopped = runner.invoke(app, ["registry", "stop", "--data-dir", str(data_dir)])
    assert stopped.exit_code == 0 and "stopped" in stopped.output
    assert not pid_alive(doc["pid"])
    assert "stopped" in runner.invoke(app, ["registry", "status", "--data-dir", str(data_dir)]).output
    # Its schemas (and their ids) survive a restart: records already written still name them.
    restarted = runner.invoke(app, ["registry", "start", "--port", "0", "--data-dir", str(data_dir), "--json"])
    assert restarted.exit_code == 0, restarted.output
    try:
        client = SchemaRegistryClient({"url": json.loads(restarted.output)["url"]})
        assert json.loads(client.get_schema(schema_id).schema_str)["name"] == "Order"
    finally:
        runner.invoke(app, ["registry", "stop", "--data-dir", str(data_dir)])


def test_stop_and_status_of_nothing_write_nothing(tmp_path):
    absent = tmp_path / "none"
    assert "no embedded schema registry running" in runner.invoke(app, ["registry", "stop", "-d", str(absent)]).output
    assert "stopped" in runner.invoke(app, ["registry", "status", "-d", str(absent)]).output
    assert not absent.exists()


def test_confluent_avro_serializer_and_client_work_against_it(schema_registry_url, subject_stem):
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": schema_registry_url})
    topic = subject_stem
    serialize = AvroSerializer(client, json.dumps(ORDER_V1))
    context = SerializationContext(topic, MessageField.VALUE)
    payload = serialize({"id": 7, "item": "tea"}, context)
    assert payload[0] == 0  # the wire format: magic byte 0, then the schema id (big-endian)
    schema_id = int.from_bytes(payload[1:5], "big")
    latest = client.get_latest_version(f"{topic}-value")
    assert latest.schema_id == schema_id and latest.version == 1
    assert AvroDeserializer(client)(payload, context) == {"id": 7, "item": "tea"}
    # A compatible second version (a new field with a default) under BACKWARD compatibility.
    client.set_compatibility(f"{topic}-value", "BACKWARD")
    v2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}
    second = client.register_schema(f"{topic}-value", Schema(json.dumps(v2), "AVRO"))
    # (A fresh client: one caches a subject's latest version once it asked for it.)
    fresh = SchemaRegistryClient({"url": schema_registry_url})
    assert second != schema_id and fresh.get_latest_version(f"{topic}-value").version == 2


def test_a_build_maven_cannot_do_fails_in_one_line_naming_its_log(tmp_path, monkeypatch):
    from orchestration.services.registry_build import RegistryBuildFailed, build

    monkeypatch.setenv("KPRIO_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(RegistryBuildFailed) as caught:
        build("0.0.1.Nope")  # no such Apicurio release: Maven cannot resolve its BOM
    line = str(caught.value)
    assert "\n" not in line and "\x1b" not in line
    assert line.startswith("Maven could not build Apicurio Registry 0.0.1.Nope: ")
    assert "io.apicurio:apicurio-registry:pom:0.0.1.Nope" in line
    assert caught.value.where.endswith("/build/maven.log") and (tmp_path / "cache").exists()


# --- a restart keeps what the registry acknowledged (issue 53: Avro records dead-lettered after a restart) -------


def registered(url: str, subjects: list[str]) -> dict[str, int]:
    """Register a schema of its own under each subject; the ids the registry answered."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": url})
    return {s: client.register_schema(s, Schema(json.dumps({**ORDER_V1, "name": f"Order{i}"}), "AVRO"))
            for i, s in enumerate(subjects)}


def served(url: str) -> dict[str, int]:
    """Each subject the registry serves, with its latest schema id (a fresh client: nothing cached)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    client = SchemaRegistryClient({"url": url})
    return {s: client.get_latest_version(s).schema_id for s in client.get_subjects()}


def test_a_schema_the_registry_acknowledged_survives_a_kill(tmp_path):
    """Its H2 store writes a commit before the registry answers: a crash, or a stop that had to kill it, loses no
    schema a serializer was told is registered (H2 wrote them up to half a second later: a kill lost them)."""
    registry = EmbeddedRegistry(tmp_path / "registry", start_timeout_s=120)
    acknowledged: dict[str, int] = {}
    try:
        registry.start()
        for i in range(4):
            acknowledged |= registered(registry.url, [f"killed-{i}-value"])
            registry.kill()  # at once, as a crash would
            registry.start()
        assert served(registry.url) == acknowledged
    finally:
        registry.stop()


def test_a_stop_is_graceful_when_the_process_that_started_it_ignores_sigterm(tmp_path):
    """Dagster maps SIGTERM to SIGINT's handler (an ignored SIGINT: an ignored SIGTERM), and a JVM keeps a SIGTERM it
    was started with ignored: every stop of such a registry waited out its deadline and killed it (its store closed
    unclean). It is started with SIGTERM as it should be, and stops gracefully."""
    registry = EmbeddedRegistry(tmp_path / "registry", start_timeout_s=120, stop_timeout_s=60)
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        registry.start()
    finally:
        signal.signal(signal.SIGTERM, previous)
    try:
        acknowledged = registered(registry.url, ["graceful-value"])
    finally:
        registry.stop()
    assert "kprio-registry stopped in" in registry.log_path.read_text(), "Quarkus' own shutdown, not a SIGKILL"
    with registry:
        assert served(registry.url) == acknowledged


def test_a_restarted_registry_serves_what_it_held_or_does_not_start(tmp_path):
    """Ready means its store serves every subject it held when it stopped: one that came back without them (its
    store lost, or not loaded) is not left serving (it would make every record naming them a dead letter)."""
    registry = EmbeddedRegistry(tmp_path / "registry", start_timeout_s=120)
    with registry:
        acknowledged = registered(registry.url, ["held-a-value", "held-b-value"])
    with registry:
        assert served(registry.url) == acknowledged
    shutil.rmtree(tmp_path / "registry" / "db")  # the store lost between a stop and a start
    started = time.monotonic()
    try:
        with pytest.raises(RegistryProcessError) as caught:
            registry.start()
    finally:
        registry.stop()  # nothing to stop when it refused, as it must
    # Said once it answered its list of subjects (its SQL store read), not after waiting out its start timeout.
    assert time.monotonic() - started < registry.start_timeout_s
    line = str(caught.value)
    assert "\n" not in line and "its store serves 0 of the 2 subjects it held when it stopped" in line, line
    assert not registry.status().running
