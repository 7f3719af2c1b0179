"""``kprio metrics``: kprio's Prometheus metrics beside a Dagster daemon or Airflow, which drain in other processes.

The metrics of ``kprio drain --metrics-port``, from the broker and the ledger: every batch the ledger shows ended
since it started counts, whoever drained it. Runs until SIGTERM or Ctrl-C (exit 0).
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Annotated

import typer

from kprio_core.extras import METRICS, require
from orchestration.cli.common import ConfigOption, config_from

HostOption = Annotated[
    str, typer.Option("--host", help="Address the endpoint binds (loopback unless told otherwise).")
]
PortOption = Annotated[int, typer.Option("--port", min=0, max=65535, help="Serve /metrics on this port.")]
IntervalOption = Annotated[
    float | None, typer.Option("--interval", min=0.1, max=3600, show_default=False,
                               help="Seconds between two reads of the broker and the ledger (default: sensor.interval_s).")
]


def metrics(config: ConfigOption = None, port: PortOption = 9466, host: HostOption = "127.0.0.1",
            interval: IntervalOption = None) -> None:
    """Serve kprio's Prometheus metrics (backlog, age, holds, verdicts, freshness, batches) until stopped.

    Example: kprio metrics --port 9466 --config kprio.yaml
    """
    from kprio_core.errors import PartitionCountMismatch, TopicMissing
    from kprio_core.kafka import KafkaEdge
    from orchestration.cli.drain import release

    require(METRICS, "kprio metrics")
    from orchestration.observe.endpoint import serve_metrics
    from orchestration.observe.feed import MetricsFeed
    from orchestration.observe.metrics import KprioMetrics

    settings = config_from(config)
    with KafkaEdge(settings.kafka) as edge:  # an unreachable broker is one line, before the endpoint opens
        for logical in settings.topics:
            try:
                edge.partitions(logical)
            except (TopicMissing, PartitionCountMismatch):
                pass  # shown as held or missing by the metrics themselves
    stop = threading.Event()

    def say(line: str) -> None:
        print(f"kprio metrics: {line}", file=sys.stderr, flush=True)

    def on_signal(signum: int, _frame: object) -> None:
        stop.set()

    served = KprioMetrics(version=release())
    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with serve_metrics(served.registry, port, addr=host, where="--port / --host") as endpoint, \
                MetricsFeed(settings, served, interval_s=interval, on_error=say, count_ledger=True):
            say(f"serving {endpoint.url}")
            stop.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
