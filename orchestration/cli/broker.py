"""``kprio broker start|stop|status``: the embedded noida-db Kafka broker for the demo and local runs.

The broker runs detached: ``start`` returns once it answers metadata, and the broker keeps
running after the command exits until ``kprio broker stop``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestration.services.broker import DEFAULT_DATA_DIR, DEFAULT_PORT
from orchestration.cli.common import JsonOption, clean_errors, print_json

app = typer.Typer(
    help="Run the embedded Kafka broker (noida-db) for the demo and local runs.\n\n"
    "Example: kprio broker start --port 9092   then   kprio broker stop",
    no_args_is_help=True,
)

DataDirOption = Annotated[
    Path,
    typer.Option("--data-dir", "-d", help="Where the broker keeps its data, its log (broker.log) and noida-db's "
                 "control file (noida.control.json)."),
]
PortOption = Annotated[
    int, typer.Option("--port", "-p", min=0, max=65535, help="Kafka port to listen on (127.0.0.1); 0 picks a free one.")
]
TimeoutOption = Annotated[float, typer.Option("--timeout", help="Seconds to wait for the broker to start or stop.")]


def _status_doc(status) -> dict:  # noqa: ANN001 - BrokerStatus, imported lazily
    return {"running": status.running, "bootstrap": status.bootstrap, "pid": status.pid,
            "data_dir": str(status.data_dir), "log": str(status.log)}


@app.command()
@clean_errors
def start(port: PortOption = DEFAULT_PORT, data_dir: DataDirOption = DEFAULT_DATA_DIR,
          timeout: TimeoutOption = 30.0, as_json: JsonOption = False) -> None:
    """Start the embedded broker in the background and wait until it answers.

    Example: kprio broker start --port 9092 --data-dir ./kprio-data/broker
    """
    from orchestration.services.broker import EmbeddedBroker

    broker = EmbeddedBroker(data_dir, port=port, start_timeout_s=timeout, stop_timeout_s=timeout)
    status = broker.start().status()
    if as_json:
        print_json(_status_doc(status))
    else:
        typer.echo(f"{status.describe()}\nbootstrap.servers={status.bootstrap}  (log: {status.log})")


@app.command()
@clean_errors
def stop(data_dir: DataDirOption = DEFAULT_DATA_DIR, timeout: TimeoutOption = 10.0) -> None:
    """Stop the embedded broker (SIGTERM, then SIGKILL after --timeout); its data stays in --data-dir.

    Example: kprio broker stop --data-dir ./kprio-data/broker
    """
    from orchestration.services.broker import EmbeddedBroker

    broker = EmbeddedBroker(data_dir, stop_timeout_s=timeout)
    was = broker.status()
    if broker.stop():
        typer.echo(f"embedded broker stopped (was pid {was.pid} at {was.bootstrap}); data kept in {broker.data_dir}")
    else:
        typer.echo(f"no embedded broker running in {broker.data_dir}")


@app.command()
@clean_errors
def status(data_dir: DataDirOption = DEFAULT_DATA_DIR, as_json: JsonOption = False) -> None:
    """Say whether the embedded broker runs, where, and with which pid.

    Example: kprio broker status --json
    """
    from orchestration.services.broker import EmbeddedBroker

    current = EmbeddedBroker(data_dir).status()
    if as_json:
        print_json(_status_doc(current))
    else:
        typer.echo(current.describe())
