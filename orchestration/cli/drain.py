"""``kprio drain``: the sensor's logic in this process, and the runs it requests on warm workers it starts.

Two ``kprio drain`` on one config share the work: each launches only what it claimed and reports its own runs, on
the configured Dagster instance (``$DAGSTER_HOME``, else ``./kprio-data/dagster_home``: ``dagster dev`` there shows
them). SIGTERM (or Ctrl-C) finishes the batch in flight and exits 0; a second one abandons it, exit 0 (the next
start resumes it).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kprio_core.extras import METRICS, require
from orchestration.cli.common import (
    ConfigOption,
    JsonOption,
    chosen_topics,
    config_from,
    print_json,
)
from orchestration.cli.paused_gc import imports

if TYPE_CHECKING:
    from orchestration.dagster.workers.pool import WorkerPool

TopicOption = Annotated[
    str | None, typer.Option("--topic", "-t", help="Drain only this logical topic (default: every configured topic).")
]
UntilEmptyOption = Annotated[
    bool,
    typer.Option(
        "--until-empty/--once",
        help="Keep ticking until no backlog is left (default), or run only what one sensor tick requests.",
    ),
]
FollowOption = Annotated[
    bool,
    typer.Option("--follow", help="Tick for ever (a service without the Dagster daemon); stop with SIGTERM."),
]
MaxBatchesOption = Annotated[
    int | None, typer.Option("--max-batches", min=1, help="Stop after this many runs.", show_default=False)
]

MetricsPortOption = Annotated[
    int | None,
    typer.Option("--metrics-port", min=0, max=65535, show_default=False,
                 help="Serve Prometheus metrics on this port (/metrics) while draining (docs/operations.md, Monitoring)."),
]
MetricsHostOption = Annotated[
    str,
    typer.Option("--metrics-host", help="Address the metrics endpoint binds (loopback unless told otherwise)."),
]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_on_signals(stop: threading.Event, running: set[str]) -> Iterator[None]:
    """SIGTERM / SIGINT set ``stop`` (the batches in flight, ``running``, finish); a second one abandons them.

    The warm workers ignore both (a terminal's Ctrl-C reaches the whole process group). Abandoning exits 0 at once:
    the batches stay where they were, each worker ends after its run, and the next start takes them over.
    """

    def on_signal(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        batch = " and ".join(sorted(running))
        if not stop.is_set():
            stop.set()
            doing = f"finishing {batch}, then exiting" if batch else "exiting"
            print(f"kprio drain: {name}: {doing} (send it again to abandon the batch)", file=sys.stderr, flush=True)
            return
        print(f"kprio drain: {name} again: abandoned {batch or 'nothing'}; the next start resumes it",
              file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(0)

    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def drain(
    config: ConfigOption = None,
    json_out: JsonOption = False,
    until_empty: UntilEmptyOption = True,
    follow: FollowOption = False,
    max_batches: MaxBatchesOption = None,
    topic: TopicOption = None,
    metrics_port: MetricsPortOption = None,
    metrics_host: MetricsHostOption = "127.0.0.1",
) -> None:
    """Drain the backlog through the sensor's logic and drain_job, in process, batch by batch.

    With --metrics-port, a Prometheus server can scrape the drain's metrics on http://127.0.0.1:<port>/metrics.

    Example: kprio drain --until-empty --max-batches 20 --json --config kprio.yaml
    """
    from kprio_core.errors import PartitionCountMismatch, TopicMissing
    from kprio_core.kafka import KafkaEdge

    settings = config_from(config)
    if topic is not None:
        settings = settings.model_copy(update={"topics": tuple(chosen_topics(settings, topic))})
    # A port in use and an unreachable broker are one line each, before Spark starts.
    with serving_metrics(metrics_port, metrics_host) as metrics:
        with KafkaEdge(settings.kafka) as edge:
            for logical in settings.topics:
                try:
                    edge.partitions(logical)
                except (TopicMissing, PartitionCountMismatch):
                    pass  # a priority topic deleted or grown under kprio: the tick holds or picks it up, and says so
        with workers(settings) as pool:
            _drain(settings, pool, json_out=json_out, until_empty=until_empty, follow=follow,
                   max_batches=max_batches, metrics=metrics)


@contextmanager
def serving_metrics(port: int | None, host: str) -> Iterator[Any]:
    """kprio's metrics served on ``host:port`` while the drain runs (None: no endpoint, no metrics)."""
    if port is None:
        yield None
        return
    require(METRICS, "--metrics-port", where="--metrics-port")
    from orchestration.observe.endpoint import serve_metrics
    from orchestration.observe.metrics import KprioMetrics

    metrics = KprioMetrics(version=release())
    with serve_metrics(metrics.registry, port, addr=host, where="--metrics-port / --metrics-host"):
        yield metrics


def release() -> str | None:
    """kprio's installed version (None: run from a source tree without an install)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kprio")
    except PackageNotFoundError:
        return None


def workers(settings: Any) -> AbstractContextManager[WorkerPool]:
    """The loop's warm workers, started before Dagster is imported (about 1.5 s) so they warm up meanwhile; they log
    where this command does. A pool this process made active already (a test session's) is used instead."""
    from orchestration.cli.boundary import RUN
    from orchestration.dagster.workers.pool import workers_for
    from orchestration.dagster.workers.protocol import LogRoute

    log = LogRoute(log_file=str(RUN.log_file) if RUN.log_file else None, verbose=RUN.verbose, debug=RUN.debug,
                   inherit=False)
    return workers_for(settings.spark, settings.workers, log=log)


def _drain(settings: Any, pool: WorkerPool, *, json_out: bool, until_empty: bool, follow: bool,
           max_batches: int | None, metrics: Any = None) -> None:
    with imports():  # Dagster's: about 1.5 s, while the workers warm up
        from orchestration.cli.outage import outage_lines
        from orchestration.dagster.definitions import build_definitions
        from orchestration.dagster.drain_loop import Until
        from orchestration.dagster.drain_loop import drain as run_drain
        from orchestration.dagster.instance import open_instance

    defs = build_definitions(settings)
    until = Until.FOLLOW if follow else (Until.EMPTY if until_empty else Until.ONCE)
    stop = threading.Event()
    running: set[str] = set()

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    # A broker outage the loop rides out is two lines (orchestration/cli/outage.py), not librdkafka's.
    with open_instance(settings) as instance, outage_lines(settings.kafka, say), adoption_lines(say), \
            feeding(metrics, settings, instance, say) as feed:

        def show(batch: Any) -> None:
            running.discard(batch.batch_id)
            if feed is not None:
                feed.on_batch(batch)
            if not json_out:
                typer.echo(batch.line())

        # One line per batch is the progress report; Dagster's own event log stays in the instance.
        report = run_drain(defs, instance, config=settings, until=until, max_batches=max_batches, stop=stop,
                           log_level="WARNING",
                           on_batch=show, guard=lambda: stop_on_signals(stop, running), on_start=running.add,
                           on_event=lambda line: say(f"kprio drain: {line}"), workers=pool,
                           on_tick=feed.on_tick if feed is not None else None)
    _summarize(report, _committed_offsets(settings), json_out=json_out)


def _committed_offsets(settings: Any) -> dict[str, dict[str, int | None]]:
    """Every priority topic's committed offsets after the drain, by topic and partition."""
    from kprio_core.kafka import KafkaEdge

    committed: dict[str, dict[str, int | None]] = {}
    with KafkaEdge(settings.kafka) as edge:
        for logical in settings.topics:
            # The lag snapshot's view: partitions added are listed, a deleted priority topic is left out.
            snap = edge.snapshot(logical, now_ms=0, deleted_ok=set(logical.priority_topics().values()))
            for p in sorted(snap.partitions, key=lambda p: (p.topic, p.partition)):
                committed.setdefault(p.topic, {})[str(p.partition)] = p.committed
    return committed


def _summarize(report: Any, committed: dict[str, dict[str, int | None]], *, json_out: bool) -> None:
    """What the drain did, as JSON or one line; a drain that stopped short fails the command."""
    summary = {
        "batches": [b.to_dict() for b in report.batches],
        "records": {str(p): n for p, n in report.records().items()},
        "committed": committed,
        "stopped": report.stopped,
        "held": report.held,
        "ok": report.ok,
    }
    if json_out:
        print_json(summary)
    else:
        total = sum(report.records().values())
        typer.echo(f"{len(report.batches)} runs, {total} records committed; {report.stopped}")
    if not report.ok:
        # With --json the summary already says why; a line on stderr would only repeat it.
        from kprio_core.errors import DrainStopped

        raise typer.Exit(1) if json_out else DrainStopped(report.stopped)  # its text names the partitions


@contextmanager
def adoption_lines(say: Any) -> Iterator[None]:
    """A new ledger's adoption of an earlier one's output, in one line (every group it moved is in the log)."""
    import logging

    from orchestration.runtime.adoption import ADOPTED, LOGGER

    class Line(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            line = getattr(record, ADOPTED, None)
            if line:
                say(f"kprio drain: {line}")

    handler = Line()
    LOGGER.addHandler(handler)
    try:
        yield
    finally:
        LOGGER.removeHandler(handler)


@contextmanager
def feeding(metrics: Any, settings: Any, instance: Any, say: Any) -> Iterator[Any]:
    """The feed of ``metrics`` while the loop runs (None without metrics); it counts the last runs when it stops."""
    if metrics is None:
        yield None
        return
    from orchestration.observe.feed import MetricsFeed

    with MetricsFeed(settings, metrics, instance=instance, on_error=lambda line: say(f"kprio drain: {line}")) as feed:
        yield feed
