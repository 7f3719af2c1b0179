"""``kprio broker start|stop|status``: the embedded Apache Kafka (KRaft) for the demo and local runs.

The broker runs detached: ``start`` returns once it answers metadata, and the broker keeps
running after the command exits until ``kprio broker stop``. ``--nodes 3`` starts a local
three-node cluster instead (three combined broker+controller nodes, replication 3 by default);
``status`` and ``stop`` find out from the data dir which of the two it holds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestration.cli.boundary import KprioSubgroup
from orchestration.cli.common import JsonOption, existing_directory, print_json, using_path
from orchestration.services.broker import DEFAULT_DATA_DIR, DEFAULT_PORT

app = typer.Typer(
    cls=KprioSubgroup,
    help="Run the embedded Kafka broker (Apache Kafka in KRaft mode, from its Maven Central jars that "
    "scripts/setup.sh puts in ~/.cache/kprio) for the demo and local runs.\n\n"
    "Example: kprio broker start --port 9092   then   kprio broker stop",
    no_args_is_help=True,
)

DataDirOption = Annotated[
    Path,
    typer.Option("--data-dir", "-d", help="Where the broker keeps its data (kafka-logs/), its config "
                 "(server.properties), its log (broker.log) and kprio's state file (kprio-broker.json); "
                 "a cluster has one node-<id>/ folder per node."),
]
PortOption = Annotated[
    int, typer.Option("--port", "-p", min=0, max=65535,
                      help="Kafka port to listen on (127.0.0.1); 0 picks a free one. Node i of a cluster "
                      "listens on port + i - 1.")
]
NodesOption = Annotated[
    int | None, typer.Option("--nodes", "-n", min=1, max=9, show_default=False,
                             help="Nodes of the local cluster: 1, or 3 for replication 3 with min.insync.replicas 2 "
                             "(default: as many as --data-dir already holds, else 1).")
]
TimeoutOption = Annotated[float, typer.Option("--timeout", min=1, max=3600,
                                              help="Seconds to wait for the broker to start or stop.")]


def _status_doc(status) -> dict:  # noqa: ANN001 - BrokerStatus, imported lazily
    return {"running": status.running, "bootstrap": status.bootstrap, "pid": status.pid,
            "data_dir": str(status.data_dir), "log": str(status.log),
            "nodes": [{"node_id": n.node_id, "running": n.running, "bootstrap": n.bootstrap, "pid": n.pid,
                       "controller_port": n.controller_port, "log": str(n.log)} for n in status.nodes]}


@app.command()
def start(port: PortOption = DEFAULT_PORT, data_dir: DataDirOption = DEFAULT_DATA_DIR, nodes: NodesOption = None,
          timeout: TimeoutOption = 60.0, as_json: JsonOption = False) -> None:
    """Start the embedded broker (or a local cluster) in the background and wait until it answers.

    Example: kprio broker start --port 9092 --data-dir ./kprio-data/broker
    Example: kprio broker start --nodes 3 --port 19092 --data-dir ./kprio-data/cluster
    """
    from orchestration.services.broker import EmbeddedBroker

    existing_directory("--data-dir", data_dir)
    broker = EmbeddedBroker(data_dir, port=port, nodes=nodes, start_timeout_s=timeout, stop_timeout_s=timeout)
    with using_path("--data-dir", data_dir, doing="write"):
        status = broker.start().status()
    if as_json:
        print_json(_status_doc(status))
    else:
        typer.echo(f"{status.describe()}\nbootstrap.servers={status.bootstrap}  (log: {status.log})")


@app.command()
def stop(data_dir: DataDirOption = DEFAULT_DATA_DIR, timeout: TimeoutOption = 20.0) -> None:
    """Stop the embedded broker, every node of it (SIGTERM, then SIGKILL after --timeout); its data stays.

    With no broker running it writes nothing (a data dir that is not there is not made).

    Example: kprio broker stop --data-dir ./kprio-data/broker
    """
    from orchestration.services.broker import EmbeddedBroker

    if not existing_directory("--data-dir", data_dir):
        typer.echo(f"no embedded broker running in {data_dir.absolute()}")
        return
    broker = EmbeddedBroker(data_dir, stop_timeout_s=timeout)
    was = broker.status()
    if broker.stop():
        typer.echo(f"embedded broker stopped (was pid {was.pid} at {was.bootstrap}); data kept in {broker.data_dir}")
    else:
        typer.echo(f"no embedded broker running in {broker.data_dir}")


@app.command()
def status(data_dir: DataDirOption = DEFAULT_DATA_DIR, as_json: JsonOption = False) -> None:
    """Say whether the embedded broker runs, where, and with which pid (each node of a cluster).

    Example: kprio broker status --json
    """
    from orchestration.services.broker import EmbeddedBroker

    existing_directory("--data-dir", data_dir)
    with using_path("--data-dir", data_dir):
        current = EmbeddedBroker(data_dir).status()
    if as_json:
        print_json(_status_doc(current))
    else:
        typer.echo(current.describe())
