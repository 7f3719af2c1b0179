"""``kprio drain``: the sensor's logic and the runs it requests, in this process, on one warm Spark session.

The runs go to the configured Dagster instance (``$DAGSTER_HOME``, else ``./kprio-data/dagster_home``),
so ``dagster dev`` on the same home shows them. ``--follow`` runs kprio as a service without the
Dagster daemon. SIGTERM (or Ctrl-C) finishes the batch in flight and exits 0 with one line
saying so; a second one abandons the batch in flight (the next start resumes it).
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from orchestration.cli.common import ConfigOption, JsonOption, clean_errors, config_from, fail, print_json

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

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


@contextmanager
def stop_on_signals(stop: threading.Event, current: dict[str, str | None]) -> Iterator[None]:
    """SIGTERM / SIGINT set ``stop`` (the batch in flight finishes); a second one interrupts it.

    The signals are blocked in this thread (and the threads it starts) and taken by a watcher
    thread with ``sigwait``, so no handler (Dagster's included) can cut the batch short on the
    first one. The Spark JVM must be started before: a child inherits the blocked mask.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

    def watch() -> None:
        received = 0
        while True:
            signum = signal.sigwait(STOP_SIGNALS)
            received += 1
            stop.set()
            name = signal.Signals(signum).name
            batch = current.get("batch")
            if received == 1:
                doing = f"finishing {batch}, then exiting" if batch else "exiting"
                print(f"kprio drain: {name}: {doing} (send it again to abandon the batch)", file=sys.stderr)
            else:
                print(f"kprio drain: {name} again: abandoning {batch or 'nothing'}", file=sys.stderr)
                _thread.interrupt_main(signal.SIGINT)  # Dagster's handler interrupts the op

    threading.Thread(target=watch, name="kprio-signals", daemon=True).start()
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@clean_errors
def drain(
    config: ConfigOption = None,
    json_out: JsonOption = False,
    until_empty: UntilEmptyOption = True,
    follow: FollowOption = False,
    max_batches: MaxBatchesOption = None,
    topic: TopicOption = None,
) -> None:
    """Drain the backlog through the sensor's logic and drain_job, in process, batch by batch.

    Example: kprio drain --until-empty --max-batches 20 --json --config kprio.yaml
    """
    from kprio_core.kafka import KafkaEdge
    from orchestration.definitions import build_definitions
    from orchestration.drain_loop import Until, drain as run_drain
    from orchestration.instance import open_instance

    settings = config_from(config)
    if topic is not None:
        settings = settings.model_copy(update={"topics": (settings.topic(topic),)})
    defs = build_definitions(settings)
    until = Until.FOLLOW if follow else (Until.EMPTY if until_empty else Until.ONCE)
    stop = threading.Event()
    current: dict[str, str | None] = {"batch": None}

    def show(batch: Any) -> None:
        current["batch"] = None
        if not json_out:
            typer.echo(batch.line())

    with open_instance(settings) as instance:
        # One line per batch is the progress report; Dagster's own event log stays in the instance.
        report = run_drain(defs, instance, until=until, max_batches=max_batches, stop=stop, log_level="WARNING",
                           on_batch=show, guard=lambda: stop_on_signals(stop, current),
                           on_start=lambda batch_id: current.update(batch=batch_id))
    committed: dict[str, dict[str, int | None]] = {}
    with KafkaEdge(settings.kafka) as edge:
        for logical in settings.topics:
            for (name, partition), offset in sorted(edge.committed(logical).items()):
                committed.setdefault(name, {})[str(partition)] = offset
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
        raise typer.Exit(1) if json_out else fail(report.stopped)
