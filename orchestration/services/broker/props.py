"""The embedded broker's properties: where a node keeps its files, which ports it listens on, its ``server.properties``.

Pure values and functions of them, no process: :mod:`orchestration.services.broker.jvm` runs what they
describe, :mod:`orchestration.services.broker.cluster` decides which.
"""

from __future__ import annotations

import base64
import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestration.services.broker_security import BrokerSecurity
from orchestration.services.tls import TlsFiles

DEFAULT_DATA_DIR = Path("kprio-data/broker")
DEFAULT_PORT = 9092
LOG_FILE = "broker.log"
STATE_FILE = "kprio-broker.json"
CONFIG_FILE = "server.properties"
LOG4J_FILE = "log4j2.properties"
LOG_DIRS = "kafka-logs"
LOCK_FILE = ".kprio-broker.lock"
TLS_DIR = "tls"
OFFSETS_PARTITIONS = 10
"""Partitions of ``__consumer_offsets`` (Kafka's default is 50: the first group call creates them all)."""

LOG4J2 = """\
# Written by kprio: the embedded broker logs to its output, which kprio appends to broker.log.
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
# The full config dump (three times 400 lines a start): server.properties says what was set.
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = warn
logger.request.name = kafka.request.logger
logger.request.level = warn
"""


@dataclass(frozen=True)
class NodePorts:
    """Where one node listens: its Kafka port (clients) and its controller port (the quorum)."""

    node_id: int
    port: int
    controller_port: int


def quorum_voters(ports: Sequence[NodePorts], host: str) -> str:
    """``controller.quorum.voters``: every node a voter at its controller port."""
    return ",".join(f"{p.node_id}@{host}:{p.controller_port}" for p in ports)


def cluster_defaults(nodes: int) -> dict[str, str]:
    """Broker settings of a local test cluster of ``nodes`` nodes (replicas as many as fit, up to 3)."""
    replicas = min(nodes, 3)
    isr = 2 if replicas >= 3 else 1
    settings = {
        "num.partitions": "1",
        "default.replication.factor": str(replicas),
        "min.insync.replicas": str(isr),
        "offsets.topic.replication.factor": str(replicas),
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": str(isr),
        "transaction.state.log.num.partitions": "10",
        "group.initial.rebalance.delay.ms": "0",
        # Log tasks start 30 s after boot and check retention every 5 min by default: tests would wait that long.
        "log.initial.task.delay.ms": "500",
        "log.retention.check.interval.ms": "1000",
        "log.segment.delete.delay.ms": "1000",
        "log.cleaner.backoff.ms": "500",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),  # of a 512 MB heap (default 128 MB)
        # A killed node is fenced, and can register again when restarted, only after the session timeout: 4 s, not 9.
        "broker.heartbeat.interval.ms": "500",
        "broker.session.timeout.ms": "4000",
    }
    return settings


@dataclass(frozen=True)
class ExtraListener:
    """A second client listener of a single node, on ``port``, advertised at ``advertised`` (a relay, a NAT or a
    proxy in front of the broker): clients bootstrapped at the advertised address send everything there."""

    name: str
    port: int
    advertised: int
    keystore: Path | None = None
    """Its own PKCS#12 keystore (the broker's password) on a TLS broker: tests serve another (expired) certificate."""


def server_properties(node: NodePorts, ports: Sequence[NodePorts], host: str, log_dirs: Path,
                      security: BrokerSecurity = BrokerSecurity(), tls: TlsFiles | None = None,
                      extra: ExtraListener | None = None) -> dict[str, str]:
    """The ``server.properties`` of one combined broker+controller node of the cluster ``ports``; every
    listener (the quorum's too) takes ``security``'s protocol (its settings name secrets, never hold them).

    >>> props = server_properties(NodePorts(1, 9092, 9093), [NodePorts(1, 9092, 9093)], "127.0.0.1", Path("/k"),
    ...                           extra=ExtraListener("RELAYED", 9094, 9095))
    >>> props["listeners"], props["advertised.listeners"]
    ('PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093,RELAYED://127.0.0.1:9094', 'PLAINTEXT://127.0.0.1:9092,RELAYED://127.0.0.1:9095')
    """
    name, protocol = ("PLAINTEXT", "PLAINTEXT") if not security.secured else (security.listener, security.protocol)
    more_listen = f",{extra.name}://{host}:{extra.port}" if extra else ""
    more_advertised = f",{extra.name}://{host}:{extra.advertised}" if extra else ""
    more_protocol = f",{extra.name}:{protocol}" if extra else ""
    secured = security.server_properties(tls) if tls is not None else {}
    if extra is not None:
        # The extra listener logs clients in as the client listener does (Kafka reads JAAS lines per listener).
        own, other = f"listener.name.{name.lower()}.", f"listener.name.{extra.name.lower()}."
        secured.update({other + k.removeprefix(own): v for k, v in secured.items() if k.startswith(own)})
        if extra.keystore is not None and security.tls:
            secured[other + "ssl.keystore.location"] = str(extra.keystore)
            secured.update({other + k: secured[k] for k in ("ssl.keystore.type", "ssl.keystore.password",
                                                            "ssl.key.password", "ssl.truststore.type",
                                                            "ssl.truststore.location") if k in secured})
    return {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": quorum_voters(ports, host),
        "listeners": f"{name}://{host}:{node.port},CONTROLLER://{host}:{node.controller_port}{more_listen}",
        "advertised.listeners": f"{name}://{host}:{node.port}{more_advertised}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": name,
        "listener.security.protocol.map": f"{name}:{protocol},CONTROLLER:{protocol}{more_protocol}",
        "log.dirs": str(log_dirs),
        **cluster_defaults(len(ports)),
        **secured,
    }


def new_cluster_id() -> str:
    """A random cluster id as Kafka writes them (a UUID in URL-safe base64, never starting with '-')."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (Kafka maps a group to its ``__consumer_offsets`` partition with it).

    >>> java_string_hash("kprio"), java_string_hash("")
    (102266259, 0)
    """
    units = text.encode("utf-16-be")  # Java hashes UTF-16 code units
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_groups(partitions: int = OFFSETS_PARTITIONS) -> list[str]:
    """One group id per ``__consumer_offsets`` partition, so asking for each reaches every group coordinator.

    >>> [abs(java_string_hash(g)) % 10 for g in coordinator_groups(10)]
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """
    found: dict[int, str] = {}
    for i in itertools.count():
        group = f"kprio-coordinator-{i}"
        found.setdefault(abs(java_string_hash(group)) % partitions, group)
        if len(found) == partitions:
            return [found[p] for p in range(partitions)]
    raise AssertionError("unreachable")


def listener_ports(properties: str) -> NodePorts | None:
    """The client and controller ports of a node's ``server.properties`` text, from its ``listeners`` (node id 0:
    the caller knows it); None when it has not exactly one client listener and a controller one.

    >>> listener_ports("listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\\n")
    NodePorts(node_id=0, port=9092, controller_port=9093)
    """
    listeners = dict(line.split("=", 1) for line in properties.splitlines() if line.startswith("listeners="))
    ports = {name: int(rest.rsplit(":", 1)[1]) for name, rest in
             (item.split("://", 1) for item in listeners.get("listeners", "").split(",") if "://" in item)}
    clients = [port for name, port in ports.items() if name != "CONTROLLER"]
    if len(clients) != 1 or "CONTROLLER" not in ports:
        return None
    return NodePorts(0, clients[0], ports["CONTROLLER"])
