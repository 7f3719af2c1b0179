"""OpenLineage: each committed batch emits one run event through openlineage-python's transport (off by default).

A real drain of three priorities (the loop on the session's Spark) with the file transport writes one
event per committed batch; each is checked against the OpenLineage model and kprio's facet schemas:

- the event and its standard facets are rebuilt with openlineage-python's generated classes (generated
  from the OpenLineage spec, ``openlineage.client.generated``): an unknown or missing field, a run id
  that is no UUID, an event time without a time zone fail; the ``schemaURL`` is the 2-0-2 spec's RunEvent;
- kprio's own facets validate against the JSON schemas kprio ships (``orchestration/observe/schemas``);
- the inputs are exactly the batch's priority topics and offset ranges in the ledger, the output its
  directory with the rows and the checks' results (every blocking check, passed).

The drain is watched by ``kprio metrics`` meanwhile (an exporter process, see its test module).
The same batch sent through the HTTP transport reaches a local HTTP server as the same JSON; a server that
does not answer is one line (``lineage_emit_failed``); with lineage off nothing is sent; a secret in
``lineage.transport`` is refused, naming the variable to use.
"""

from __future__ import annotations

import json
import threading
import uuid
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import jsonschema
import pytest
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.generated import (
    data_quality_assertions_dataset,
    job_type_job,
    output_statistics_output_dataset,
    tags_run,
)

from kprio_core.config import parse_config
from kprio_core.errors import ConfigError
from kprio_core.ledger import BatchState
from kprio_core.lifecycle.loop import Until
from orchestration.dagster import drain_loop
from orchestration.observe.errors import LineageEmitFailed
from orchestration.observe.lineage import SCHEMAS, emit_committed
from orchestration.runtime.checks import CHECK_NAMES
from orchestration.services.process import free_port
from tests.orchestration.observe.exporter import exporter

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster]

RECORDS = {2: 40, 1: 120, 0: 200}
SPEC_RUN_EVENT = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"


def _plain(facet: dict) -> dict:
    return {k: v for k, v in facet.items() if k not in ("_producer", "_schemaURL")}


STANDARD = {
    "jobType": lambda f: job_type_job.JobTypeJobFacet(**_plain(f)),
    "outputStatistics": lambda f: output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(**_plain(f)),
    "dataQualityAssertions": lambda f: data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet(
        assertions=[data_quality_assertions_dataset.Assertion(**a) for a in f["assertions"]]),
    "tags": lambda f: tags_run.TagsRunFacet(tags=[tags_run.TagsRunFacetFields(**t) for t in f["tags"]]),
}
"""The standard facets kprio's events carry, rebuilt by openlineage-python's generated (spec) classes."""


def check_facets(facets: dict) -> None:
    for name, facet in facets.items():
        url = facet["_schemaURL"]
        jsonschema.validate(facet["_producer"], {"type": "string", "minLength": 1})
        if url.startswith("urn:kprio:"):
            schema = json.loads((SCHEMAS / f"{url.rsplit(':', 1)[1]}.json").read_text())
            jsonschema.validate(facet, schema)
        else:
            assert url.startswith("https://openlineage.io/spec/"), url
            assert url.rsplit("/", 1)[1].split(".json")[0] == type(STANDARD[name](facet)).__name__, (name, url)


def check_event(doc: dict) -> RunEvent:
    """``doc`` checked against the OpenLineage model (see the module docstring); the event rebuilt."""
    assert set(doc) == {"eventTime", "eventType", "producer", "schemaURL", "run", "job", "inputs", "outputs"}, doc
    assert doc["schemaURL"] == SPEC_RUN_EVENT
    assert datetime.fromisoformat(doc["eventTime"]).tzinfo is not None
    assert str(uuid.UUID(doc["run"]["runId"])) == doc["run"]["runId"]
    for part in (doc["run"], doc["job"]):
        check_facets(part["facets"])
    for dataset in doc["inputs"] + doc["outputs"]:
        check_facets(dataset["facets"])
        check_facets(dataset.get("inputFacets", {}))
        check_facets(dataset.get("outputFacets", {}))
    return RunEvent(
        eventType=RunState(doc["eventType"]), eventTime=doc["eventTime"], producer=doc["producer"],
        run=Run(runId=doc["run"]["runId"]), job=Job(namespace=doc["job"]["namespace"], name=doc["job"]["name"]),
        inputs=[InputDataset(d["namespace"], d["name"]) for d in doc["inputs"]],
        outputs=[OutputDataset(d["namespace"], d["name"]) for d in doc["outputs"]],
    )


def read_events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Collector(BaseHTTPRequestHandler):
    received: list[tuple[str, dict]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Collector.received.append((self.path, json.loads(body)))
        self.send_response(201)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_each_committed_batch_emits_one_valid_event(make_topic, kprio_env, dagster_instance, tmp_path):
    topic = make_topic(priorities=3, partitions=2, records=RECORDS)
    events = tmp_path / "lineage.jsonl"
    env = kprio_env(topic, planner={"record_budget": 150, "target_batch_s": None},
                    lineage={"enabled": True, "transport": {"type": "file", "log_file_path": str(events),
                                                            "append": True}})
    # `kprio metrics` watches the same drain from a process of its own (tests/orchestration/observe/exporter.py).
    with exporter(env, tmp_path) as watched:
        report = drain_loop.drain(env.defs, dagster_instance, config=env.config, until=Until.EMPTY,
                                  log_level="WARNING")
        assert report.ok, report.stopped
        committed = {b.batch_id: b for b in env.ledger.batches.find(topic.name, states=[BatchState.COMMITTED])}
        watched.finished(topic, RECORDS, len(committed))

    docs = read_events(events)
    assert len(committed) >= 3 and len(docs) == len(committed), "one event per committed batch"
    by_batch = {d["run"]["facets"]["kprio_batch"]["batchId"]: d for d in docs}
    assert set(by_batch) == set(committed)
    drained = 0
    for batch_id, doc in by_batch.items():
        check_event(doc)
        batch = committed[batch_id]
        assert doc["eventType"] == "COMPLETE"
        assert doc["job"] == {"namespace": "kprio", "name": f"{topic.name}.drain", "facets": doc["job"]["facets"]}
        assert doc["job"]["facets"]["jobType"]["processingType"] == "BATCH"
        planned = {(r.range.topic, r.range.partition, r.range.start, r.range.end, r.priority)
                   for r in batch.plan.ranges if r.range.count}
        seen = {(d["name"], r["partition"], r["fromOffset"], r["untilOffset"], d["inputFacets"]["kprio_offsetRanges"]
                 ["priority"]) for d in doc["inputs"] for r in d["inputFacets"]["kprio_offsetRanges"]["ranges"]}
        assert seen == planned
        assert {d["namespace"] for d in doc["inputs"]} == {f"kafka://{env.config.kafka.bootstrap_servers}"}
        output, dead = doc["outputs"]
        assert (output["namespace"], output["name"]) == ("file", f"{env.config.drain.output_path}/{topic.name}")
        assert output["outputFacets"]["outputStatistics"]["rowCount"] == batch.drain.records
        assert dead["name"] == f"{env.config.drain.dead_letter_path}/{topic.name}"
        assertions = output["facets"]["dataQualityAssertions"]["assertions"]
        assert {a["assertion"] for a in assertions} == set(CHECK_NAMES) and all(a["success"] for a in assertions)
        drained += output["outputFacets"]["outputStatistics"]["rowCount"] + dead["outputFacets"]["outputStatistics"][
            "rowCount"]
    assert drained == sum(RECORDS.values())

    # The HTTP transport sends the same event to a server (a local one here), POST /api/v1/lineage.
    batch = next(iter(committed.values()))
    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        http = env.config.model_copy(update={"lineage": env.config.lineage.model_copy(
            update={"transport": {"type": "http", "url": url}})})
        Collector.received.clear()
        assert emit_committed(http, topic, batch, env.ledger.ledger_id)
        [(path, sent)] = Collector.received
        assert path == "/api/v1/lineage" and sent == by_batch[batch.batch_id]
        check_event(sent)
    finally:
        server.shutdown()
        server.server_close()

    # A server that does not answer is one line; the batch stays committed.
    gone = env.config.model_copy(update={"lineage": env.config.lineage.model_copy(
        update={"transport": {"type": "http", "url": f"http://127.0.0.1:{free_port()}", "timeout": 2}})})
    with pytest.raises(LineageEmitFailed) as failed:
        emit_committed(gone, topic, batch, env.ledger.ledger_id)
    assert failed.value.code == "lineage_emit_failed" and "\n" not in str(failed.value)
    assert str(failed.value).startswith(f"the lineage event of {batch.batch_id} was not delivered: ")

    # Off (the default): nothing is sent.
    before = events.read_text()
    off = env.config.model_copy(update={"lineage": env.config.lineage.model_copy(update={"enabled": False})})
    assert emit_committed(off, topic, batch, env.ledger.ledger_id) is False
    assert events.read_text() == before


def test_a_secret_in_the_transport_is_refused_naming_its_variable():
    with pytest.raises(ConfigError) as err:
        parse_config({"lineage": {"transport": {"type": "http", "url": "http://lineage:5000",
                                                "auth": {"type": "api_key", "apiKey": "s3cret-4711"}}}},
                     "kprio.yaml", env={})
    assert "OPENLINEAGE__TRANSPORT__AUTH" in str(err.value) and "s3cret-4711" not in str(err.value)
    with pytest.raises(ConfigError) as err:
        parse_config({"lineage": {"transport": {"type": "http", "url": "http://bob:s3cret-4712@lineage:5000"}}},
                     "kprio.yaml", env={})
    assert "transport.url holds a password" in str(err.value) and "s3cret-4712" not in str(err.value)
    assert parse_config({}, "kprio.yaml", env={}).lineage.enabled is False
