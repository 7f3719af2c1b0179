"""``kprio broker start|stop|status``: the embedded Apache Kafka (KRaft) for the demo and local runs.

It runs detached, from ``start`` (once it answers metadata) to ``kprio broker stop``; ``--nodes 3`` makes it a local
three-node cluster (``status`` and ``stop`` tell from the data dir). For a ``--security`` broker, ``start`` and
``status`` print a kprio.yaml ``kafka`` section and the variables a client needs, never their values.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kprio_core.errors import UsageError
from orchestration.cli.boundary import KprioSubgroup
from orchestration.cli.common import JsonOption, existing_directory, print_json, using_path
from orchestration.services.broker import DEFAULT_DATA_DIR, DEFAULT_PORT
from orchestration.services.broker_security import Security

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
SecurityOption = Annotated[
    Security | None, typer.Option("--security", show_default=False, case_sensitive=False,
                                  help="Security of every listener: plaintext, sasl_plaintext, sasl_ssl (SCRAM-SHA-512 "
                                  "and PLAIN user kprio over TLS) or ssl (default: as --data-dir was last started, else "
                                  "plaintext). SASL needs KPRIO_KAFKA_SASL_PASSWORD, TLS KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD "
                                  "in the environment (it encrypts the keystores made in <data-dir>/tls).")
]
MtlsOption = Annotated[bool, typer.Option("--mtls", help="With --security ssl or sasl_ssl: clients must present a "
                                                         "certificate signed by the broker's CA (<data-dir>/tls/client.p12).")]


def _status_doc(status) -> dict:  # noqa: ANN001 - BrokerStatus, imported lazily
    return {"running": status.running, "bootstrap": status.bootstrap, "pid": status.pid,
            "data_dir": str(status.data_dir), "log": str(status.log),
            "security": status.security.to_dict(), "client": dict(status.client or {}),
            "secret_variables": list(status.security.secret_variables()),
            "nodes": [{"node_id": n.node_id, "running": n.running, "bootstrap": n.bootstrap, "pid": n.pid,
                       "controller_port": n.controller_port, "log": str(n.log)} for n in status.nodes]}


def client_lines(status) -> list[str]:  # noqa: ANN001 - BrokerStatus, imported lazily
    """The ``kafka`` section of a kprio.yaml for a secured broker, and the names of the variables a client needs."""
    if not status.security.secured:
        return []
    import yaml

    section = yaml.safe_dump({"kafka": {"bootstrap_servers": status.bootstrap, "client": dict(status.client or {})}},
                             sort_keys=False).rstrip().splitlines()
    needs = " and ".join(status.security.secret_variables())
    return ["client settings (kprio.yaml):", *(f"  {line}" for line in section),
            f"secrets from the environment: {needs} (the value the broker was started with)"]


@app.command()
def start(port: PortOption = DEFAULT_PORT, data_dir: DataDirOption = DEFAULT_DATA_DIR, nodes: NodesOption = None,
          timeout: TimeoutOption = 60.0, security: SecurityOption = None, mtls: MtlsOption = False,
          as_json: JsonOption = False) -> None:
    """Start the embedded broker (or a local cluster) in the background and wait until it answers.

    Example: kprio broker start --port 9092 --data-dir ./kprio-data/broker
    Example: kprio broker start --nodes 3 --port 19092 --data-dir ./kprio-data/cluster
    Example: KPRIO_KAFKA_SASL_PASSWORD=... KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD=... kprio broker start --security sasl_ssl
    """
    from orchestration.services.broker import BrokerSecurity, EmbeddedBroker

    if mtls and security is None:
        raise UsageError("--mtls needs --security ssl or sasl_ssl", where="kprio broker start")
    try:
        secured = BrokerSecurity(security, mtls) if security is not None else None
    except ValueError as err:
        raise UsageError(str(err), where="kprio broker start --security") from None
    existing_directory("--data-dir", data_dir)
    broker = EmbeddedBroker(data_dir, port=port, nodes=nodes, start_timeout_s=timeout, stop_timeout_s=timeout,
                            security=secured)
    with using_path("--data-dir", data_dir, doing="write"):
        status = broker.start().status()
    if as_json:
        print_json(_status_doc(status))
    else:
        typer.echo("\n".join([status.describe(), f"bootstrap.servers={status.bootstrap}  (log: {status.log})",
                              *client_lines(status)]))


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
        typer.echo("\n".join([current.describe(), *(client_lines(current) if current.running else [])]))
