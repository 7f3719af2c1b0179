"""``kprio spark start|stop|status``: a long-lived local Spark Connect server drains reuse.

With ``spark.remote: sc://localhost:15002``, the daemon's runs (new processes) share this one warm Spark.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from orchestration.cli.boundary import KprioSubgroup
from orchestration.cli.common import (
    ConfigOption,
    JsonOption,
    config_from,
    existing_directory,
    print_json,
    using_path,
)

app = typer.Typer(
    cls=KprioSubgroup,
    help="Run a local Spark Connect server that every drain reuses (set spark.remote: sc://localhost:15002).\n\n"
    "Example: kprio spark start --config kprio.yaml   then   kprio spark status   and   kprio spark stop",
    no_args_is_help=True,
)

PortOption = Annotated[
    int | None,
    typer.Option("--port", "-p", min=1, max=65535, show_default=False,
                 help="Port of the server (default: spark.connect_port, 15002)."),
]
TimeoutOption = Annotated[float, typer.Option("--timeout", min=1, max=3600,
                                              help="Seconds to wait for the server to start or stop.")]


def _server(config, port: int | None = None, timeout: float = 180.0):  # noqa: ANN001, ANN202
    """The server of ``spark.connect_dir``; PathUnusable when that is a file (or under one)."""
    from orchestration.services.spark_connect import SparkConnectServer

    settings = config_from(config).spark
    existing_directory(CONNECT_DIR, settings.connect_dir)
    return SparkConnectServer(settings, port=port, start_timeout_s=timeout, stop_timeout_s=timeout)


CONNECT_DIR = "spark.connect_dir"


@app.command()
def start(config: ConfigOption = None, port: PortOption = None, timeout: TimeoutOption = 180.0,
          as_json: JsonOption = False) -> None:
    """Start the Spark Connect server in the background and wait until it answers (idempotent).

    It runs spark.master with spark.conf; its state and log (server.log) go to spark.connect_dir.

    Example: kprio spark start --config kprio.yaml --port 15002
    """
    server = _server(config, port, timeout)
    with using_path(CONNECT_DIR, server.connect_dir, doing="write"):
        status, started = server.start()
    now = time.time()
    if as_json:
        print_json({**status.to_doc(now), "started": started})
        return
    if not started:
        typer.echo(f"already running: {status.describe(now)}")
    else:
        typer.echo(status.describe(now))
    typer.echo(f"drain through it with spark.remote: {status.url}  (in kprio.yaml)")


@app.command()
def stop(config: ConfigOption = None, timeout: TimeoutOption = 30.0) -> None:
    """Stop the Spark Connect server and every process it started (SIGTERM, then SIGKILL after --timeout).

    Example: kprio spark stop --config kprio.yaml
    """
    server = _server(config, timeout=timeout)
    with using_path(CONNECT_DIR, server.connect_dir):
        was = server.stop()
    if was is None:
        typer.echo(f"no Spark Connect server running from {server.connect_dir}")
    else:
        typer.echo(f"spark connect server stopped (was pid {was.pid} at {was.url})")


@app.command()
def status(config: ConfigOption = None, as_json: JsonOption = False) -> None:
    """Say whether the Spark Connect server runs: pid, port, sc:// URL and uptime.

    Example: kprio spark status --json
    """
    server = _server(config)
    with using_path(CONNECT_DIR, server.connect_dir):
        current = server.status()
    now = time.time()
    if as_json:
        print_json(current.to_doc(now))
    else:
        typer.echo(current.describe(now))
