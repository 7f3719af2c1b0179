"""Which ports the nodes of an embedded broker take: the recorded ones, the ones asked for, the last run's, or free.

>>> port_free("127.0.0.1", free_port())
True
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from orchestration.services.broker.jvm import start_error
from orchestration.services.broker.props import CONFIG_FILE, NodePorts, listener_ports
from orchestration.services.broker.state import NodeState
from orchestration.services.process import free_port, wait_for

PORT_WAIT_S = 2.0
"""How long a port asked for may stay busy before a start says it is in use."""


def port_free(host: str, port: int, wait_s: float = 0.0) -> bool:
    """True when a server could bind ``host:port`` (with SO_REUSEADDR, as Java does), now or within ``wait_s`` (a
    just-killed process holds its ports a moment after its pid is gone)."""

    def bindable() -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
                return True
            except OSError:
                return False

    return bindable() or (wait_s > 0 and wait_for(bindable, wait_s, interval_s=0.02))


def plan_ports(host: str, port: int | None, node_ids: Sequence[int], state: Sequence[NodeState],
               alive: Mapping[int, object], last: Callable[[], list[NodePorts] | None],
               data_dir: Path) -> list[NodePorts]:
    """The ports of every node: the recorded ones while any node runs (the quorum knows them),
    else ``port + i`` when a port was asked for, else the last run's ports (``last()``) when free (a
    restart keeps its bootstrap), else free ones."""
    recorded = {n.node_id: n for n in state}
    if alive:
        ports = [recorded[i].ports for i in node_ids]
        for p in ports:
            if p.node_id not in alive:
                require_free(host, p, ports, data_dir)
        return ports
    taken: set[int] = set()

    def pick(wanted: int | None) -> int:
        free = wanted is not None and wanted not in taken and port_free(host, wanted, wait_s=PORT_WAIT_S)
        chosen = wanted if free else None
        while chosen is None or chosen in taken:
            chosen = free_port(host)
        taken.add(chosen)
        return chosen

    before = last()
    ports = []
    for i in node_ids:
        if port is not None:
            asked = port + i - 1
            if not port_free(host, asked, wait_s=PORT_WAIT_S):
                raise start_error(data_dir, f"port {asked} is already in use on {host}", asked)
            taken.add(asked)
            kafka = asked
        else:
            kafka = pick(before[i - 1].port if before else None)
        ports.append(NodePorts(i, kafka, 0))
    # Controller ports after every Kafka port is taken, so none collides with one.
    return [replace(p, controller_port=pick(before[p.node_id - 1].controller_port if before else None))
            for p in ports]


def last_ports(node_ids: Sequence[int], node_dir: Callable[[int], Path]) -> list[NodePorts] | None:
    """The ports of the last run, from the ``listeners`` of its server.properties (None: no last run)."""
    found = []
    for node_id in node_ids:
        try:
            ports = listener_ports((node_dir(node_id) / CONFIG_FILE).read_text())
        except OSError:
            return None
        if ports is None:
            return None
        found.append(replace(ports, node_id=node_id))
    return found


def require_free(host: str, node: NodePorts, ports: Sequence[NodePorts], data_dir: Path) -> None:
    """``node``'s ports are free to bind (a node of a running cluster must start on the ports the others know)."""
    for port, what in ((node.port, "Kafka"), (node.controller_port, "controller")):
        if not port_free(host, port, wait_s=PORT_WAIT_S):
            raise start_error(
                data_dir, f"port {port} is already in use on {host} ({what} port of node {node.node_id}, which the "
                f"running nodes know; stop the cluster to start it on new ports)", ports[0].port)
