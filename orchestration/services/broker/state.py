"""What an embedded broker records and reports: each node's ports and process (the state file), and its status.

The state file (a :class:`~orchestration.services.process.StateFile`) holds each node's ports and, once spawned, its
pid and create time, for ``status``/``stop`` from another process; a node runs only while :func:`node_process` finds it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from orchestration.services.broker.props import NodePorts
from orchestration.services.broker_security import BrokerSecurity
from orchestration.services.process import StateFile, live_process


@dataclass(frozen=True)
class NodeState:
    """What the state file records about one node: its ports and, once spawned, its process."""

    node_id: int
    port: int
    controller_port: int
    pid: int | None = None
    created_at: float | None = None  # psutil create time: a reused pid has another
    class_dump: str | None = None  # where this JVM dumps its class-data archive at exit, if it does

    @property
    def ports(self) -> NodePorts:
        return NodePorts(self.node_id, self.port, self.controller_port)


def read_nodes(state: StateFile) -> list[NodeState]:
    """The nodes the state file records (none: no file, or one kprio did not write)."""
    doc = state.read()
    try:
        return [NodeState(**node) for node in doc["nodes"]] if doc is not None else []
    except (KeyError, TypeError, ValueError):
        return []


def write_nodes(state: StateFile, host: str, nodes: Sequence[NodeState]) -> None:
    state.write({"host": host, "nodes": [asdict(n) for n in nodes]})


def ports_of(nodes: Sequence[NodeState]) -> list[NodePorts]:
    return [n.ports for n in sorted(nodes, key=lambda n: n.node_id)]


def node_process(node: NodeState | None, config: Path) -> psutil.Process | None:
    """The node's JVM (the one started with ``config``, at its recorded time), when it still runs."""
    if node is None or node.pid is None:
        return None
    return live_process(node.pid, command_has=str(config), created_at=node.created_at)


@dataclass(frozen=True)
class NodeStatus:
    """One node of the data dir: whether it runs, its ports, pid and log."""

    node_id: int
    running: bool
    host: str
    port: int | None = None
    controller_port: int | None = None
    pid: int | None = None
    log: Path | None = None

    @property
    def bootstrap(self) -> str | None:
        return f"{self.host}:{self.port}" if self.port is not None else None

    def describe(self) -> str:
        if not self.running:
            was = f" (was {self.bootstrap}, pid {self.pid})" if self.port is not None else ""
            return f"node {self.node_id}: stopped{was}"
        return (f"node {self.node_id}: running at {self.bootstrap} (pid {self.pid}, "
                f"controller port {self.controller_port}, log {self.log})")


@dataclass(frozen=True)
class BrokerStatus:
    """What runs in a data dir: an up broker's pid and Kafka port (node 1's in a cluster, all in ``nodes``)."""

    data_dir: Path
    running: bool
    pid: int | None = None
    port: int | None = None
    host: str = "127.0.0.1"
    log: Path | None = None
    nodes: tuple[NodeStatus, ...] = ()
    security: BrokerSecurity = BrokerSecurity()
    client: Mapping[str, str] | None = None
    """The ``kafka.client`` settings a kprio client needs (no secret; empty for plaintext)."""

    @property
    def bootstrap(self) -> str | None:
        if len(self.nodes) > 1:
            known = [n.bootstrap for n in self.nodes if n.bootstrap is not None]
            return ",".join(known) if self.running and known else None
        return f"{self.host}:{self.port}" if self.port is not None else None

    @property
    def running_nodes(self) -> int:
        return sum(n.running for n in self.nodes)

    def describe(self) -> str:
        if len(self.nodes) <= 1:
            if not self.running:
                return f"embedded broker: stopped (data dir {self.data_dir})"
            return (f"embedded broker: running at {self.bootstrap} (Apache Kafka, {self.security.describe()}, "
                    f"pid {self.pid}, data dir {self.data_dir})")
        if not self.running:
            head = f"embedded Kafka cluster: stopped ({len(self.nodes)} nodes, data dir {self.data_dir})"
        else:
            head = (f"embedded Kafka cluster: {self.running_nodes} of {len(self.nodes)} nodes running at "
                    f"{self.bootstrap} ({self.security.describe()}, data dir {self.data_dir})")
        return "\n".join([head, *(f"  {n.describe()}" for n in self.nodes)])
