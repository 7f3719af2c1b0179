"""``kprio registry start|stop|status``: the embedded schema registry (Apicurio Registry) for the demo and local runs.

It runs detached until ``kprio registry stop``; clients use its Confluent-compatible API at the URL ``start`` and
``status`` print (``schema_registry.url``). Its schemas live in the data dir (an H2 database): ids survive a restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kprio_core.extras import REGISTRY, require
from orchestration.cli.boundary import KprioSubgroup
from orchestration.cli.common import JsonOption, existing_directory, print_json, using_path
from orchestration.services.registry import DEFAULT_DATA_DIR, DEFAULT_PORT

app = typer.Typer(
    cls=KprioSubgroup,
    help="Run the embedded schema registry (Apicurio Registry, built from Maven Central by scripts/setup.sh "
    "into ~/.cache/kprio) with a Confluent-compatible API, for the demo and local runs.\n\n"
    "Example: kprio registry start --port 8081   then   kprio registry stop",
    no_args_is_help=True,
)

DataDirOption = Annotated[
    Path,
    typer.Option("--data-dir", "-d", help="Where the registry keeps its schemas (db/), its log (registry.log) and "
                 "kprio's state file (kprio-registry.json)."),
]
PortOption = Annotated[int, typer.Option("--port", "-p", min=0, max=65535,
                                         help="HTTP port to listen on (127.0.0.1); 0 picks a free one.")]
TimeoutOption = Annotated[float, typer.Option("--timeout", min=1, max=3600,
                                              help="Seconds to wait for the registry to start or stop.")]


def _status_doc(status) -> dict:  # noqa: ANN001 - RegistryStatus, imported lazily
    return {"running": status.running, "url": status.url if status.running else None, "pid": status.pid,
            "version": status.version, "data_dir": str(status.data_dir), "log": str(status.log)}


@app.command()
def start(port: PortOption = DEFAULT_PORT, data_dir: DataDirOption = DEFAULT_DATA_DIR, timeout: TimeoutOption = 60.0,
          as_json: JsonOption = False) -> None:
    """Start the embedded schema registry in the background and wait until it answers.

    Example: kprio registry start --port 8081 --data-dir ./kprio-data/registry
    """
    from orchestration.services.registry import EmbeddedRegistry

    require(REGISTRY, "the embedded schema registry")  # it is asked whether it is ready over httpx
    existing_directory("--data-dir", data_dir)
    registry = EmbeddedRegistry(data_dir, port=port, start_timeout_s=timeout, stop_timeout_s=timeout)
    with using_path("--data-dir", data_dir, doing="write"):
        status = registry.start().status()
    if as_json:
        print_json(_status_doc(status))
    else:
        typer.echo("\n".join([status.describe(), f"schema_registry.url={status.url}  (log: {status.log})"]))


@app.command()
def stop(data_dir: DataDirOption = DEFAULT_DATA_DIR, timeout: TimeoutOption = 20.0) -> None:
    """Stop the embedded schema registry (SIGTERM, then SIGKILL after --timeout); its schemas stay.

    With no registry running it writes nothing.

    Example: kprio registry stop --data-dir ./kprio-data/registry
    """
    from orchestration.services.registry import EmbeddedRegistry

    if not existing_directory("--data-dir", data_dir):
        typer.echo(f"no embedded schema registry running in {data_dir.absolute()}")
        return
    registry = EmbeddedRegistry(data_dir, stop_timeout_s=timeout)
    was = registry.status()
    if registry.stop():
        typer.echo(f"embedded schema registry stopped (was pid {was.pid} at {was.url}); schemas kept in "
                   f"{registry.data_dir}")
    else:
        typer.echo(f"no embedded schema registry running in {registry.data_dir}")


@app.command()
def status(data_dir: DataDirOption = DEFAULT_DATA_DIR, as_json: JsonOption = False) -> None:
    """Say whether the embedded schema registry runs, where, and with which pid.

    Example: kprio registry status --json
    """
    from orchestration.services.registry import EmbeddedRegistry

    existing_directory("--data-dir", data_dir)
    with using_path("--data-dir", data_dir):
        current = EmbeddedRegistry(data_dir).status()
    if as_json:
        print_json(_status_doc(current))
    else:
        typer.echo(current.describe())
