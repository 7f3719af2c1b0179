"""OpenLineage: one run event per committed batch, through openlineage-python's configured transport (off by default).

With ``lineage.enabled``, the run that commits a batch (any driver) emits a ``COMPLETE`` run event once the ledger
marked it committed:

- **job**: ``<lineage.namespace>`` / ``<topic>.drain``, with a ``jobType`` facet (BATCH, KPRIO, DRAIN);
- **run**: a UUID of the ledger, the batch and its attempt (the same run whoever sends it), the ``kprio_batch`` facet;
- **inputs**: each priority topic read (namespace ``kafka://<first bootstrap server>``), with the
  ``kprio_offsetRanges`` facet: the priority and the half-open offset ranges per partition;
- **outputs**: the topic's output (``file`` namespace for a local path, scheme and bucket for an object store) with
  ``outputStatistics`` and the checks as ``dataQualityAssertions``; the dead letters with their row count.

``lineage.transport``: openlineage-python's ``transport`` settings (empty: its own configuration). A failed emit
never fails the batch (committed already): the run logs one line and goes on. Facet schemas: ``schemas/``.

>>> dataset_of("./kprio-data/output", "orders")[0], dataset_of("s3://lake/kprio/out", "orders")
('file', ('s3://lake', 'kprio/out/orders'))
>>> kafka_namespace("broker-1:9092,broker-2:9092")
'kafka://broker-1:9092'
"""

from __future__ import annotations

import os
import re
import uuid
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import attr
from openlineage.client.event_v2 import InputDataset, Job, OutputDataset, Run, RunEvent, RunState
from openlineage.client.facet_v2 import InputDatasetFacet, RunFacet
from openlineage.client.generated import data_quality_assertions_dataset as dq
from openlineage.client.generated import job_type_job, output_statistics_output_dataset

from kprio_core.config import KprioConfig, TopicSettings
from orchestration.observe.errors import LineageConfigInvalid, LineageEmitFailed

SCHEMAS = Path(__file__).parent / "schemas"
OFFSET_RANGES_FACET = "kprio_offsetRanges"
BATCH_FACET = "kprio_batch"
SCHEMA_BASE = "urn:kprio:openlineage:facets:1-0-0:"
"""kprio's facets' schemas are files of kprio (``orchestration/observe/schemas/<name>.json``), named by URN."""
RUN_NAMESPACE = uuid.UUID("5b3c51b4-4b33-4c56-9f4b-1b1b8f7e2a45")
"""The namespace of the run ids (uuid5 of ledger, batch and attempt)."""


def producer() -> str:
    """kprio as OpenLineage's producer (a URI)."""
    try:
        release = version("kprio")
    except PackageNotFoundError:
        release = "unknown"
    return f"urn:kprio:{release}"


@attr.define
class OffsetRangesInputDatasetFacet(InputDatasetFacet):
    """The offset ranges of one priority topic a committed batch drained (``until`` exclusive)."""

    priority: int
    ranges: list[dict[str, int]]

    @staticmethod
    def _get_schema() -> str:
        return f"{SCHEMA_BASE}OffsetRangesInputDatasetFacet"


@attr.define
class BatchRunFacet(RunFacet):
    """The kprio batch a run event stands for."""

    batchId: str  # noqa: N815 - OpenLineage's camel case
    attempt: int
    logicalTopic: str  # noqa: N815

    @staticmethod
    def _get_schema() -> str:
        return f"{SCHEMA_BASE}BatchRunFacet"


def kafka_namespace(bootstrap_servers: str) -> str:
    """OpenLineage's namespace of a Kafka cluster: ``kafka://`` and its first bootstrap server."""
    return f"kafka://{bootstrap_servers.split(',')[0].strip()}"


def dataset_of(root: str, logical_topic: str) -> tuple[str, str]:
    """(namespace, name) of a topic's directory under an output root, as OpenLineage names files."""
    parsed = urlparse(root)
    if parsed.scheme and parsed.scheme != "file" and len(parsed.scheme) > 1:
        return f"{parsed.scheme}://{parsed.netloc}", f"{parsed.path.strip('/')}/{logical_topic}"
    path = parsed.path if parsed.scheme == "file" else root
    return "file", f"{os.path.abspath(path).rstrip('/')}/{logical_topic}"


def run_id(ledger_id: str, batch_id: str, attempt: int) -> str:
    return str(uuid.uuid5(RUN_NAMESPACE, f"{ledger_id}/{batch_id}/{attempt}"))


def batch_event(config: KprioConfig, topic: TopicSettings, batch: Any, ledger_id: str) -> RunEvent:
    """The run event of a committed batch (see the module docstring)."""
    by_topic: dict[str, tuple[int, list[dict[str, int]]]] = {}
    for planned in batch.plan.ranges:
        r = planned.range
        if r.count:
            by_topic.setdefault(r.topic, (planned.priority, []))[1].append(
                {"partition": r.partition, "fromOffset": r.start, "untilOffset": r.end})
    kafka = kafka_namespace(config.kafka.bootstrap_servers)
    inputs = [InputDataset(kafka, name, inputFacets={OFFSET_RANGES_FACET: OffsetRangesInputDatasetFacet(
                  priority=priority, ranges=sorted(ranges, key=lambda x: (x["partition"], x["fromOffset"])),
                  producer=producer())})
              for name, (priority, ranges) in sorted(by_topic.items())]
    drain = batch.drain
    rows = drain.records if drain is not None else 0
    size = drain.bytes if drain is not None else 0
    dead = drain.dead if drain is not None else 0
    assertions = [dq.Assertion(assertion=o.name, success=o.passed, description=o.description or None)
                  for o in (batch.checks.outcomes if batch.checks is not None else ())]
    out_ns, out_name = dataset_of(config.drain.output_path, topic.name)
    dead_ns, dead_name = dataset_of(config.drain.dead_letter_path, topic.name)
    outputs = [
        OutputDataset(out_ns, out_name,
                      facets={"dataQualityAssertions": dq.DataQualityAssertionsDatasetFacet(
                          assertions=assertions, producer=producer())},
                      outputFacets={"outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                          rowCount=rows, size=size, producer=producer())}),
        OutputDataset(dead_ns, dead_name,
                      outputFacets={"outputStatistics": output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
                          rowCount=dead, producer=producer())}),
    ]
    at = batch.committed_at or datetime.now(UTC)
    return RunEvent(
        eventType=RunState.COMPLETE, eventTime=at.astimezone(UTC).isoformat(), producer=producer(),
        run=Run(runId=run_id(ledger_id, batch.batch_id, batch.attempts),
                facets={BATCH_FACET: BatchRunFacet(batchId=batch.batch_id, attempt=batch.attempts,
                                                   logicalTopic=topic.name, producer=producer())}),
        job=Job(namespace=config.lineage.namespace, name=f"{topic.name}.drain",
                facets={"jobType": job_type_job.JobTypeJobFacet(processingType="BATCH", integration="KPRIO",
                                                                jobType="DRAIN", producer=producer())}),
        inputs=inputs, outputs=outputs,
    )


def client_of(config: KprioConfig) -> Any:
    """openlineage-python's client for ``lineage.transport`` (empty: its own configuration)."""
    from openlineage.client.client import OpenLineageClient

    try:
        if config.lineage.transport:
            return OpenLineageClient(config={"transport": dict(config.lineage.transport)})
        return OpenLineageClient()
    except Exception as err:  # noqa: BLE001 - openlineage-python's own errors for a transport it cannot make
        raise LineageConfigInvalid(f"openlineage-python cannot make the transport: {type(err).__name__}: "
                                   f"{str(err).splitlines()[0] if str(err) else ''}".rstrip(": "),
                                   where="lineage.transport") from None


def emit_committed(config: KprioConfig, topic: TopicSettings, batch: Any, ledger_id: str) -> bool:
    """Emit a committed batch's run event when ``lineage.enabled`` (False: off); when it cannot,
    :class:`LineageEmitFailed` (or :class:`LineageConfigInvalid`)."""
    settings = config.lineage
    if not settings.enabled:
        return False
    event = batch_event(config, topic, batch, ledger_id)
    client = client_of(config)
    try:
        client.emit(event)
    except Exception as err:  # noqa: BLE001 - any transport's failure is one line; the batch stays committed
        said = str(err).splitlines()[0] if str(err) else "no message"
        raise LineageEmitFailed(f"the lineage event of {batch.batch_id} was not delivered: {type(err).__name__}: "
                                f"{without_user_info(said)}", where="lineage.transport") from None
    return True


def without_user_info(text: str) -> str:
    """``text`` with the user info of every URL in it hidden (a transport's error may quote its URL).

    >>> without_user_info("POST http://bob:s3cret@lineage:5000/api/v1/lineage failed")
    'POST http://***@lineage:5000/api/v1/lineage failed'
    """
    return re.sub(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]+@", r"\1***@", text)
