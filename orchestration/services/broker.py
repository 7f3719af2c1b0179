"""The embedded Kafka broker: Apache Kafka itself (KRaft), run from its Maven Central jars in a data dir.

Each node is one JVM, ``java -cp <jars> kafka.Kafka server.properties``, started detached; every
node is a combined broker and controller (``process.roles=broker,controller``) of a static quorum
(``controller.quorum.voters``), so ``StorageTool format`` needs no ``--standalone``. The jars come
from kprio's jar cache (:mod:`orchestration.services.jars`, filled by ``scripts/setup.sh``). One
node by default; :class:`EmbeddedCluster` (``nodes=3``) is a local three-node cluster for failover
tests, whose topics get three replicas and ``min.insync.replicas=2`` unless they say otherwise.

A data dir of one node holds::

    server.properties   written by kprio at every start (ports may change between runs)
    log4j2.properties   Kafka's logging, all of it to the JVM's output, which is broker.log
    broker.log
    kafka-logs/         log.dirs, formatted on the first start only: topics and offsets survive restarts
    kprio-broker.json   while a node runs: node ids, ports and pids, for status/stop from another process

A cluster has the first four under ``node-<id>/`` per node and one state file at the top. A
secured broker (``security``, :mod:`orchestration.services.broker_security`) also has, at the top,
``tls/`` (its CA, the nodes' and a client's keystores, :mod:`orchestration.services.tls`) and
``kprio-security.json`` (how it was started, so a restart and ``kprio broker status`` know). A
state file none of whose processes is alive (a killed broker) is stale: it is removed and never
blocks a start. A pid counts only while its process is the JVM of this data dir's
``server.properties`` started at the recorded time, so a reused pid is never taken for the broker.

>>> b = EmbeddedBroker("/tmp/kprio-doc-broker", port=19092)
>>> b.bootstrap, b.status().running
('127.0.0.1:19092', False)
>>> EmbeddedCluster("/tmp/kprio-doc-cluster", port=19092).bootstrap
'127.0.0.1:19092,127.0.0.1:19093,127.0.0.1:19094'
>>> quorum_voters([NodePorts(1, 19092, 19192), NodePorts(2, 19093, 19193)], "127.0.0.1")
'1@127.0.0.1:19192,2@127.0.0.1:19193'
>>> cluster_defaults(3)["min.insync.replicas"], cluster_defaults(1)["min.insync.replicas"]
('2', '1')
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import psutil
from filelock import FileLock, Timeout

from kprio_core.errors import KprioError
from orchestration.services.broker_security import (
    KEYSTORE_VARIABLE,
    PASSWORD_VARIABLE,
    SCRAM,
    SCRAM_ITERATIONS,
    USER,
    BrokerSecurity,
    Security,
)
from orchestration.services.process import free_port, live_process, log_tail, spawn_detached, stop_process, wait_for
from orchestration.services.tls import TlsFiles, keystore_names, make_files, opens

__all__ = [
    "DEFAULT_DATA_DIR", "DEFAULT_PORT", "BrokerProcessError", "BrokerSecurity", "BrokerStatus", "EmbeddedBroker",
    "EmbeddedCluster", "ExtraListener", "NodePorts", "NodeStatus", "Security", "answers_metadata", "live_brokers",
    "wait_for",
]

DEFAULT_DATA_DIR = Path("kprio-data/broker")
DEFAULT_PORT = 9092
LOG_FILE = "broker.log"
STATE_FILE = "kprio-broker.json"
CONFIG_FILE = "server.properties"
LOG4J_FILE = "log4j2.properties"
LOG_DIRS = "kafka-logs"
LOCK_FILE = ".kprio-broker.lock"
TLS_DIR = "tls"
MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"

JVM_OPTIONS = ("-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError",
               "-Djava.awt.headless=true")
"""A small heap, the serial collector and the C1 compiler only: a test broker's load fits in them,
and it starts in half the time on two busy cores (C2 compiler threads compete with Kafka's start)
while clients still measured as fast against it (1M records of 100 B produced and consumed).
``KPRIO_BROKER_JVM_OPTS="-XX:TieredStopAtLevel=4"`` brings C2 back."""
OFFSETS_PARTITIONS = 10
"""Partitions of ``__consumer_offsets`` (Kafka's default is 50: the first group call creates them all)."""
ENV_JVM_OPTIONS = "KPRIO_BROKER_JVM_OPTS"
PORT_WAIT_S = 2.0
"""How long a port asked for may stay busy before a start says it is in use."""
"""Extra JVM options for the embedded nodes, after kprio's own (a later ``-Xmx`` wins)."""

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


class BrokerProcessError(KprioError):
    """The embedded broker could not be started, reached or stopped."""

    code = "embedded_broker"


def answers_metadata(bootstrap: str, timeout_s: float, client: Mapping[str, str] | None = None) -> bool:
    """True when a Kafka broker at ``bootstrap`` answers a metadata request within ``timeout_s`` (``client``:
    the security settings to ask with)."""
    return live_brokers(bootstrap, timeout_s, client) is not None


def live_brokers(bootstrap: str, timeout_s: float, client: Mapping[str, str] | None = None) -> set[int] | None:
    """Ids of the brokers the cluster at ``bootstrap`` lists in its metadata (registered and unfenced);
    None when none answers within ``timeout_s``."""
    return _listed_brokers(_probe_admin(bootstrap, client), timeout_s)


def _listed_brokers(admin: object, timeout_s: float) -> set[int] | None:
    from confluent_kafka import KafkaException

    try:
        return set(admin.list_topics(timeout=timeout_s).brokers)  # type: ignore[attr-defined]
    except KafkaException:
        return None


def _probe_admin(bootstrap: str, client: Mapping[str, str] | None = None) -> object:
    from confluent_kafka.admin import AdminClient

    # Short reconnect backoff: librdkafka's default grows to 10 s after refused connects, longer
    # than a broker takes to come up.
    return AdminClient({**(client or {}), "bootstrap.servers": bootstrap, "reconnect.backoff.ms": 50,
                        "reconnect.backoff.max.ms": 200, "logger": logging.getLogger("kprio.broker")})


@dataclass(frozen=True)
class NodePorts:
    """Where one node listens: its Kafka port (clients) and its controller port (the quorum)."""

    node_id: int
    port: int
    controller_port: int


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
        # Background log tasks start 30 s after boot and check retention every 5 min by default:
        # tests of retention and compaction would wait that long.
        "log.initial.task.delay.ms": "500",
        "log.retention.check.interval.ms": "1000",
        "log.segment.delete.delay.ms": "1000",
        "log.cleaner.backoff.ms": "500",
        "log.cleaner.dedupe.buffer.size": str(16 * 1024 * 1024),  # of a 512 MB heap (default 128 MB)
        # A killed node is fenced (its leaderships moved to the others) after the session timeout,
        # and a node restarted after a kill can register only then: 4 s instead of 9.
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
        **(security.server_properties(tls) if tls is not None else {}),
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


def java_binary() -> str:
    """The ``java`` to run Kafka with: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise BrokerProcessError("Java is not installed (no java on PATH, no $JAVA_HOME/bin/java): "
                                 "install a JRE 17 or later (scripts/setup.sh installs openjdk-17-jre-headless)")
    return found


@dataclass(frozen=True)
class KafkaRuntime:
    """How to run Kafka's classes: the java binary, the ``-cp`` of Kafka's jars, and the class-data
    archive of Kafka's classes for that pair (AppCDS: a JVM that maps it starts in about half the time).

    The archive is made once, by the first node that runs without one: it dumps the classes it
    loaded when it exits after SIGTERM (``-XX:ArchiveClassesAtExit``) to a file of its own, which
    the stop that reaped it moves into place. A JVM that cannot use an archive (another JDK build)
    says so in its log and starts without it.
    """

    java: str
    classpath: str
    archive: Path

    def class_data_options(self, dump_to: Path | None) -> list[str]:
        if self.archive.is_file():
            return [f"-XX:SharedArchiveFile={self.archive}"]
        return [f"-XX:ArchiveClassesAtExit={dump_to}"] if dump_to is not None else []

    @classmethod
    def find(cls) -> KafkaRuntime:
        """Java and Kafka's jars from kprio's jar cache (Maven resolves them on first use)."""
        from kprio_core.jar_cache import set_dir
        from orchestration.services.jars import KAFKA_BROKER, JarsUnavailable, resolve

        java = java_binary()
        try:
            jars = resolve(KAFKA_BROKER)
        except JarsUnavailable as err:
            raise BrokerProcessError(f"Apache Kafka's jars are not available: {err}") from None
        folders = {jar.parent for jar in jars}
        # One folder: its wildcard keeps the command line (and ps) short.
        classpath = f"{folders.pop()}/*" if len(folders) == 1 else os.pathsep.join(str(j) for j in jars)
        real = Path(java).resolve()
        try:
            built = real.stat().st_mtime_ns
        except OSError:
            built = 0
        key = hashlib.sha256(f"{real}|{built}|{classpath}".encode()).hexdigest()[:16]
        return cls(java, classpath, set_dir(KAFKA_BROKER) / "class-data" / f"kafka-{key}.jsa")


def port_free(host: str, port: int, wait_s: float = 0.0) -> bool:
    """True when a server could bind ``host:port`` (as Java binds: with SO_REUSEADDR), now or within ``wait_s``.

    A process just killed holds its ports for a moment after its pid is gone (its sockets close
    after it exits): a restart right after a kill waits that moment out.
    """

    def bindable() -> bool:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
                return True
            except OSError:
                return False

    return bindable() or (wait_s > 0 and wait_for(bindable, wait_s, interval_s=0.02))


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
    """What runs in a data dir: the pid and Kafka port when a broker is up (those of node 1 in a
    cluster, whose every node is in ``nodes``)."""

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


class EmbeddedBroker:
    """Apache Kafka on ``port`` (None or 0: a free one) persisting to ``data_dir``; ``nodes`` combined
    nodes (None: as many as the data dir already has, else one), node ``i`` on ``port + i - 1``."""

    def __init__(self, data_dir: str | os.PathLike = DEFAULT_DATA_DIR, port: int | None = None, *,
                 nodes: int | None = None, host: str = "127.0.0.1", start_timeout_s: float = 30.0,
                 stop_timeout_s: float = 10.0, security: BrokerSecurity | None = None,
                 env: Mapping[str, str] | None = None, extra_listener: ExtraListener | None = None) -> None:
        self.data_dir = Path(data_dir).absolute()
        self.extra_listener = extra_listener
        """A second client listener (a single node only): see :class:`ExtraListener`."""
        # None: as the data dir was last started, else plaintext.
        self.security = security or BrokerSecurity.recorded(self.data_dir) or BrokerSecurity()
        self._env = os.environ if env is None else env
        """Where the secrets come from (KPRIO_KAFKA_SASL_PASSWORD, KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD)."""
        self.host = host
        self.port = port or None
        self.nodes = nodes or self._nodes_on_disk() or 1
        if self.nodes < 1:
            raise BrokerProcessError(f"an embedded cluster needs at least one node, not {self.nodes}")
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._ports: list[NodePorts] | None = None
        self._spawned: dict[int, tuple[psutil.Popen, int]] = {}  # by this start: process, its log offset

    # -- where things are -------------------------------------------------------------------------

    @property
    def node_ids(self) -> list[int]:
        return list(range(1, self.nodes + 1))

    def node_dir(self, node_id: int) -> Path:
        return self.data_dir if self.nodes == 1 else self.data_dir / f"node-{node_id}"

    def node_log(self, node_id: int) -> Path:
        return self.node_dir(node_id) / LOG_FILE

    @property
    def log_path(self) -> Path:
        """The log of node 1 (the only node of a single broker)."""
        return self.node_log(1)

    @property
    def state_path(self) -> Path:
        return self.data_dir / STATE_FILE

    @property
    def tls(self) -> TlsFiles:
        """The CA, keystores of a secured broker (made by its first start with TLS)."""
        return TlsFiles(self.data_dir / TLS_DIR)

    def client_settings(self) -> dict[str, str]:
        """The ``kafka.client`` settings a kprio client of this broker needs (no secret: those are named by
        ``self.security.secret_variables()``)."""
        return self.security.client_settings(self.tls)

    @property
    def bootstrap(self) -> str:
        """``host:port`` of every node, comma separated (a client finds the cluster from any of them)."""
        ports = self._ports or self._ports_of(self._read_state())
        if ports:
            return ",".join(f"{self.host}:{p.port}" for p in ports)
        if self.port is not None:
            return ",".join(f"{self.host}:{self.port + i}" for i in range(self.nodes))
        raise BrokerProcessError(f"embedded broker in {self.data_dir} has no port yet: start it first")

    def _nodes_on_disk(self) -> int | None:
        state = self._read_state()
        if state:
            return len(state)
        found = [d for d in self.data_dir.glob("node-*") if (d / CONFIG_FILE).is_file()]
        return len(found) or None

    # -- state file -------------------------------------------------------------------------------

    def _read_state(self) -> list[NodeState]:
        try:
            doc = json.loads(self.state_path.read_text())
            return [NodeState(**node) for node in doc["nodes"]]
        except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, KeyError, TypeError, ValueError):
            return []  # no state (a data dir under a file has none either: a start there says why)

    def _write_state(self, nodes: Sequence[NodeState]) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"host": self.host, "nodes": [asdict(n) for n in nodes]}, indent=1))
        tmp.replace(self.state_path)

    @staticmethod
    def _ports_of(state: Sequence[NodeState]) -> list[NodePorts]:
        return [n.ports for n in sorted(state, key=lambda n: n.node_id)]

    def _process(self, node: NodeState | None) -> psutil.Process | None:
        """The node's JVM, when it still runs (a reused pid is some other process)."""
        if node is None or node.pid is None:
            return None
        return live_process(node.pid, command_has=str(self.node_dir(node.node_id) / CONFIG_FILE),
                            created_at=node.created_at)

    def _alive(self, state: Sequence[NodeState]) -> dict[int, psutil.Process]:
        found = {n.node_id: self._process(n) for n in state}
        return {node_id: proc for node_id, proc in found.items() if proc is not None}

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One start or stop at a time per data dir, across processes."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        wait_s = self.start_timeout_s + self.stop_timeout_s
        try:
            lock = FileLock(str(self.data_dir / LOCK_FILE), timeout=wait_s).acquire()
        except Timeout:
            raise BrokerProcessError(f"another process has been starting or stopping the embedded broker in "
                                     f"{self.data_dir} for over {wait_s:g} s (lock {LOCK_FILE})") from None
        with lock:
            yield

    # -- status -----------------------------------------------------------------------------------

    def status(self) -> BrokerStatus:
        """Running when a recorded node's JVM is alive; every node's ports and pid in ``nodes``."""
        state = {n.node_id: n for n in self._read_state()}
        nodes = []
        for node_id in self.node_ids:
            entry = state.get(node_id)
            running = self._process(entry) is not None
            nodes.append(NodeStatus(
                node_id=node_id, running=running, host=self.host,
                port=entry.port if entry else None, controller_port=entry.controller_port if entry else None,
                pid=entry.pid if entry else None, log=self.node_log(node_id)))
        up = [n for n in nodes if n.running]
        if not up:
            return BrokerStatus(data_dir=self.data_dir, running=False, host=self.host, log=self.log_path,
                                nodes=tuple(nodes), security=self.security, client=self.client_settings())
        first = up[0]
        return BrokerStatus(data_dir=self.data_dir, running=True, pid=first.pid, port=first.port, host=self.host,
                            log=first.log, nodes=tuple(nodes), security=self.security, client=self.client_settings())

    # -- start ------------------------------------------------------------------------------------

    def start(self) -> EmbeddedBroker:
        """Start every node that is not running, detached, and wait until the cluster lists all of
        them; a running broker is reused. Topics and offsets of earlier runs are kept."""
        with self._locked():
            self._check_layout()
            state = self._read_state()
            alive = self._alive(state)
            if not alive:
                self.state_path.unlink(missing_ok=True)  # stale: its processes are gone
                state = []
            if state and self.port is not None and state[0].port != self.port:
                raise BrokerProcessError(
                    f"an embedded broker already runs in {self.data_dir} on port {state[0].port}, "
                    f"not {self.port}: stop it first (kprio broker stop --data-dir {self.data_dir})")
            self._check_security(running=bool(alive))
            ports = self._plan_ports(state, alive)
            self._ports = ports
            self.port = ports[0].port
            missing = [p for p in ports if p.node_id not in alive]
            if missing:
                self._launch(ports, missing, state)
            self._wait_ready(ports, {p.node_id for p in missing})
            if self.security.sasl:
                self._scram_user(ports)
        return self

    def _check_security(self, *, running: bool) -> None:
        """The secrets the security needs are set, the running broker (if any) has the same security, and
        the TLS files exist and open with the keystore password (made on the first start with TLS)."""
        recorded = BrokerSecurity.recorded(self.data_dir) or BrokerSecurity()
        if running and recorded != self.security:
            raise BrokerProcessError(
                f"an embedded broker already runs in {self.data_dir} with security {recorded.describe()}, not "
                f"{self.security.describe()}: stop it first (kprio broker stop --data-dir {self.data_dir})")
        missing = self.security.missing(self._env)
        if missing:
            raise BrokerProcessError(
                f"kprio broker --security {self.security.mode.value} needs {' and '.join(missing)} in the "
                "environment: the broker and kprio's clients read the secrets there, and nothing ever writes them")
        if self.security.tls:
            password = self._env[KEYSTORE_VARIABLE]
            if not self.tls.complete():
                make_files(self.tls, [self.host], password)  # it names the host it listens on, no other
            elif not opens(self.tls.broker, password):
                raise BrokerProcessError(
                    f"the keystores in {self.tls.folder} were made with another {KEYSTORE_VARIABLE}: set that one, "
                    f"or remove {self.tls.folder} to make new ones")
            elif self.host not in keystore_names(self.tls.broker, password):
                raise BrokerProcessError(f"the broker's certificate in {self.tls.folder} does not name {self.host}: "
                                         f"remove {self.tls.folder} to make new ones")
        if not running:
            self.security.save(self.data_dir)

    def _jvm_env(self) -> dict[str, str]:
        """The nodes' environment: this process's, with the secrets of the security (from ``env``)."""
        return {**os.environ, **{name: self._env[name] for name in self.security.required_variables()}}

    def _probe_client(self, mechanism: str = "PLAIN") -> dict[str, str]:
        """The settings the broker's own probes connect with (PLAIN: SCRAM's user exists only once it runs)."""
        return self.security.client_config(self.tls, self._env, mechanism=mechanism)

    def _scram_user(self, ports: Sequence[NodePorts]) -> None:
        """Create (or update) user kprio's SCRAM credential with the password of KPRIO_KAFKA_SASL_PASSWORD,
        through the admin API as kprio over PLAIN, and wait until a SCRAM login works."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        bootstrap = ",".join(f"{self.host}:{p.port}" for p in ports)
        admin = _probe_admin(bootstrap, self._probe_client())
        upsert = UserScramCredentialUpsertion(USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
                                              self._env[PASSWORD_VARIABLE].encode())
        try:
            for future in admin.alter_user_scram_credentials([upsert], request_timeout=self.start_timeout_s).values():
                future.result(self.start_timeout_s)
        except KafkaException as err:
            raise self._error(f"could not create user {USER}'s {SCRAM} credential: {err.args[0].str()}",
                              ports[0].port) from None
        scram = _probe_admin(bootstrap, self._probe_client(SCRAM))
        if not wait_for(lambda: _listed_brokers(scram, timeout_s=1.0) is not None, self.start_timeout_s,
                        interval_s=0.1):
            raise self._error(f"a {SCRAM} login as {USER} did not succeed within {self.start_timeout_s:g} s "
                              "after its credential was created", ports[0].port)

    def _check_layout(self) -> None:
        on_disk = self._nodes_on_disk()
        if on_disk is not None and on_disk != self.nodes:
            raise BrokerProcessError(
                f"{self.data_dir} holds an embedded Kafka of {on_disk} node(s), not {self.nodes}: "
                f"use --nodes {on_disk} or another data dir")

    def _plan_ports(self, state: list[NodeState], alive: Mapping[int, psutil.Process]) -> list[NodePorts]:
        """The ports of every node: the recorded ones while any node runs (the quorum knows them),
        else ``port + i`` when a port was asked for, else the last run's ports when free (a restart
        keeps its bootstrap), else free ones."""
        recorded = {n.node_id: n for n in state}
        if alive:
            ports = [recorded[i].ports for i in self.node_ids]
            for p in ports:
                if p.node_id not in alive:
                    self._require_free(p, ports)
            return ports
        taken: set[int] = set()

        def pick(wanted: int | None) -> int:
            free = wanted is not None and wanted not in taken and port_free(self.host, wanted, wait_s=PORT_WAIT_S)
            port = wanted if free else None
            while port is None or port in taken:
                port = free_port(self.host)
            taken.add(port)
            return port

        last = self._ports or self._last_ports()
        ports = []
        for i in self.node_ids:
            if self.port is not None:
                asked = self.port + i - 1
                if not port_free(self.host, asked, wait_s=PORT_WAIT_S):
                    raise self._error(f"port {asked} is already in use on {self.host}", asked)
                taken.add(asked)
                kafka = asked
            else:
                kafka = pick(last[i - 1].port if last else None)
            ports.append(NodePorts(i, kafka, 0))
        # Controller ports after every Kafka port is taken, so none collides with one.
        return [replace(p, controller_port=pick(last[p.node_id - 1].controller_port if last else None))
                for p in ports]

    def _last_ports(self) -> list[NodePorts] | None:
        """The ports of the last run, from the ``listeners`` of its server.properties (None: no last run)."""
        found = []
        for node_id in self.node_ids:
            try:
                text = (self.node_dir(node_id) / CONFIG_FILE).read_text()
            except OSError:
                return None
            listeners = dict(line.split("=", 1) for line in text.splitlines() if line.startswith("listeners="))
            ports = {name: int(rest.rsplit(":", 1)[1]) for name, rest in
                     (item.split("://", 1) for item in listeners.get("listeners", "").split(",") if "://" in item)}
            clients = [port for name, port in ports.items() if name != "CONTROLLER"]
            if len(clients) != 1 or "CONTROLLER" not in ports:
                return None
            found.append(NodePorts(node_id, clients[0], ports["CONTROLLER"]))
        return found

    def _require_free(self, node: NodePorts, ports: Sequence[NodePorts]) -> None:
        for port, what in ((node.port, "Kafka"), (node.controller_port, "controller")):
            if not port_free(self.host, port, wait_s=PORT_WAIT_S):
                raise self._error(
                    f"port {port} is already in use on {self.host} ({what} port of node {node.node_id}, which the "
                    f"running nodes know; stop the cluster to start it on new ports)", ports[0].port)

    def _error(self, reason: str, port: int | None = None) -> BrokerProcessError:
        where = f" on port {port}" if port is not None else ""
        return BrokerProcessError(f"cannot start the embedded broker in {self.data_dir}{where}: {reason}")

    def _launch(self, ports: list[NodePorts], missing: list[NodePorts], state: list[NodeState]) -> None:
        """Write the configs, format the new nodes' storage, and spawn the missing nodes."""
        try:
            runtime = KafkaRuntime.find()
        except BrokerProcessError as err:
            raise self._error(str(err), ports[0].port) from None
        for node in missing:
            folder = self.node_dir(node.node_id)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / LOG4J_FILE).write_text(LOG4J2)
            props = server_properties(node, ports, self.host, folder / LOG_DIRS, self.security, self.tls,
                                      self.extra_listener if self.nodes == 1 else None)
            (folder / CONFIG_FILE).write_text(
                "# Written by kprio at every start of the embedded broker; edits are overwritten.\n"
                + "".join(f"{key}={value}\n" for key, value in props.items()))
        self._format([n for n in missing if not self._formatted(n.node_id)], runtime, ports[0].port)
        records = {n.node_id: n for n in state}
        for node in missing:
            folder = self.node_dir(node.node_id)
            dump_to = None
            if not runtime.archive.is_file():
                runtime.archive.parent.mkdir(parents=True, exist_ok=True)
                dump_to = runtime.archive.with_name(f"{runtime.archive.name}.{uuid.uuid4().hex[:8]}.tmp")
            cmd = [runtime.java, *JVM_OPTIONS, *runtime.class_data_options(dump_to),
                   *os.environ.get(ENV_JVM_OPTIONS, "").split(),
                   f"-Dlog4j2.configurationFile={folder / LOG4J_FILE}", "-cp", runtime.classpath, MAIN_CLASS,
                   str(folder / CONFIG_FILE)]
            process, log_from = spawn_detached(cmd, folder / LOG_FILE, cwd=folder, env=self._jvm_env())
            self._spawned[node.node_id] = (process, log_from)
            records[node.node_id] = NodeState(node.node_id, node.port, node.controller_port, process.pid,
                                              process.create_time(), str(dump_to) if dump_to else None)
            # Recorded at once, so a failed start below (or another process) can find and stop it.
            self._write_state([records.get(p.node_id) or NodeState(p.node_id, p.port, p.controller_port)
                               for p in ports])

    def _formatted(self, node_id: int) -> bool:
        return (self.node_dir(node_id) / LOG_DIRS / "meta.properties").is_file()

    def _cluster_id(self) -> str:
        """The id the formatted nodes share (every node of a cluster must have the same), else a new one."""
        for node_id in self.node_ids:
            meta = self.node_dir(node_id) / LOG_DIRS / "meta.properties"
            if meta.is_file():
                for line in meta.read_text().splitlines():
                    if line.startswith("cluster.id="):
                        return line.split("=", 1)[1].strip()
        return new_cluster_id()

    def _format(self, nodes: list[NodePorts], runtime: KafkaRuntime, port: int) -> None:
        """``StorageTool format`` of each node's log dir (first start only), the nodes in parallel."""
        if not nodes:
            return
        cluster_id = self._cluster_id()
        running = []
        for node in nodes:
            folder = self.node_dir(node.node_id)
            # C1 only: the tool runs for a second, compiling it further would cost more than it saves.
            cmd = [runtime.java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                   *runtime.class_data_options(None),
                   f"-Dlog4j2.configurationFile={folder / LOG4J_FILE}", "-cp", runtime.classpath, STORAGE_TOOL,
                   "format", "-t", cluster_id, "-c", str(folder / CONFIG_FILE), "--ignore-formatted"]
            running.append((node, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                   stdin=subprocess.DEVNULL, text=True, cwd=folder,
                                                   env=self._jvm_env())))
        failures = []
        for node, proc in running:
            try:
                out, _ = proc.communicate(timeout=self.start_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
                failures.append(f"node {node.node_id}: format did not finish within {self.start_timeout_s:g} s")
                continue
            with open(self.node_log(node.node_id), "a") as log:
                log.write(out)
            if proc.returncode != 0:
                lines = [line.strip() for line in out.splitlines() if line.strip()]
                failures.append(f"node {node.node_id}: {' | '.join(lines[-3:]) or 'no output'}")
        if failures:
            raise self._error(f"Kafka's StorageTool could not format the log dir: {'; '.join(failures)}", port)

    def _wait_ready(self, ports: list[NodePorts], started: set[int]) -> None:
        """Wait until the cluster lists every node as a broker; a node that exits or a timeout stops
        the nodes this start spawned and raises with the reason from their logs."""
        bootstrap = ",".join(f"{self.host}:{p.port}" for p in ports)
        spawned = {node_id: self._spawned.pop(node_id) for node_id in started if node_id in self._spawned}
        client = self._probe_client()
        admin = _probe_admin(bootstrap, client)
        # A client sees a restarted node's stale registration until the controller fences it, so
        # each new node must answer on its own port too: it accepts requests only once unfenced. A
        # probe that knows one address gets its first answer from that node; later ones need not be.
        own = {node_id: _probe_admin(f"{self.host}:{ports[node_id - 1].port}", client) for node_id in started}
        answered: set[int] = set()
        wanted = set(self.node_ids)

        def exited() -> list[int]:
            return [node_id for node_id, (proc, _) in spawned.items() if proc.poll() is not None]

        def ready() -> bool:
            if exited():
                return True
            answered.update(node_id for node_id in started - answered
                            if _listed_brokers(own[node_id], timeout_s=1.0) is not None)
            if answered != started:
                return False
            brokers = _listed_brokers(admin, timeout_s=1.0)
            return brokers is not None and wanted <= brokers

        started_at = time.monotonic()
        up = wait_for(ready, self.start_timeout_s, interval_s=0.1)
        dead = exited()
        if up and not dead:
            left = self.start_timeout_s - (time.monotonic() - started_at)
            if self._coordinators_ready(admin, max(left, 5.0)):
                return
            up = False
        self._abandon(spawned)
        if dead:
            node_id = dead[0]
            proc, log_from = spawned[node_id]
            reason = failure_reason(self.node_log(node_id), log_from)
            if "Address already in use" in reason:
                reason = f"a port of node {node_id} is already in use: {reason}"
            raise self._error(f"node {node_id} exited with code {proc.returncode} while starting at "
                              f"{self.host}:{ports[node_id - 1].port}: {reason}", ports[0].port)
        logs = "; ".join(f"node {node_id}: {failure_reason(self.node_log(node_id), log_from)}"
                         for node_id, (_, log_from) in spawned.items())
        raise self._error(f"the cluster at {bootstrap} did not list all {len(wanted)} node(s) and their group "
                          f"coordinators within {self.start_timeout_s:g} s (log {self.log_path}): {logs}",
                          ports[0].port)

    @staticmethod
    def _coordinators_ready(admin: Any, timeout_s: float) -> bool:
        """Wait until every group coordinator answers (``__consumer_offsets`` created and loaded).

        librdkafka's admin ListConsumerGroupOffsets crashes the process on NOT_COORDINATOR (it
        hands the error to a consumer group the admin client does not have: librdkafka issue
        5040), which a broker answers while it creates or loads that topic, so no client may see
        a broker before that is over. DescribeGroups to one group per partition reaches each.
        """
        from confluent_kafka import KafkaException

        pending = set(coordinator_groups())

        def loaded() -> bool:
            futures = admin.describe_consumer_groups(sorted(pending), request_timeout=5)
            for group, future in futures.items():
                try:
                    future.result()
                except KafkaException as err:
                    if err.args[0].name() != "GROUP_ID_NOT_FOUND":
                        continue
                pending.discard(group)
            return not pending

        return wait_for(loaded, timeout_s, interval_s=0.1)

    def _abandon(self, spawned: Mapping[int, tuple[psutil.Popen, int]]) -> None:
        """Stop the nodes a failed start spawned, and forget them (the state file goes when none is left)."""
        state = self._read_state()
        self._stop([n for n in state if n.node_id in spawned], keep_class_data=False)
        rest = [n for n in state if n.node_id not in spawned]
        if self._alive(rest):
            self._write_state([replace(n, pid=None, created_at=None, class_dump=None) if n.node_id in spawned else n
                               for n in state])
        else:
            self.state_path.unlink(missing_ok=True)

    # -- stop, kill, restart ----------------------------------------------------------------------

    def stop(self) -> bool:
        """Stop every node (SIGTERM to all at once, SIGKILL after the deadline); True when one was running.

        The data stays in the data dir for the next start. The clients this process keeps open
        (the consumers that read group offsets) are closed first: they would retry the stopped
        broker, and log it, until the process exits.
        """
        from kprio_core.kafka.reads import close_shared_group_offsets

        close_shared_group_offsets()
        if not self._read_state():
            return False  # nothing recorded runs here: a stop writes nothing (no lock file, no data dir)
        with self._locked():
            stopped = self._stop(self._read_state())
            self.state_path.unlink(missing_ok=True)
        return stopped

    def stop_node(self, node_id: int) -> bool:
        """Stop one node cleanly (SIGTERM); the others keep running. True when it was running."""
        with self._locked():
            return self._stop([n for n in self._read_state() if n.node_id == node_id])

    def kill_node(self, node_id: int) -> int:
        """SIGKILL one node, as a crash would, and wait until it is gone; returns its pid.

        The state file keeps its ports, so :meth:`restart_node` (or :meth:`start`) brings it back there.
        """
        entry = next((n for n in self._read_state() if n.node_id == node_id), None)
        proc = self._process(entry)
        if proc is None:
            raise BrokerProcessError(f"node {node_id} of the embedded broker in {self.data_dir} is not running")
        proc.send_signal(signal.SIGKILL)
        _, alive = psutil.wait_procs([proc], timeout=self.stop_timeout_s)
        if alive:
            raise BrokerProcessError(f"node {node_id} (pid {proc.pid}) outlived SIGKILL for {self.stop_timeout_s:g} s")
        return proc.pid

    def restart_node(self, node_id: int) -> EmbeddedBroker:
        """Start ``node_id`` again on its ports (stopping it first if it runs) and wait until the
        cluster lists it."""
        self.stop_node(node_id)
        return self.start()

    def _stop(self, nodes: Sequence[NodeState], *, keep_class_data: bool = True) -> bool:
        """SIGTERM the live ones of ``nodes`` at once, SIGKILL what outlives the deadline; True when one ran.

        All at once: a node stopped alone first asks the quorum to move its leaderships, which the
        last nodes of a cluster stopped one by one could wait on for minutes.
        """
        alive = {n.node_id: (n, proc) for n in nodes if (proc := self._process(n)) is not None}
        for _, proc in alive.values():
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.terminate()
        _, late = psutil.wait_procs([proc for _, proc in alive.values()], timeout=self.stop_timeout_s)
        stuck = []
        for node_id, (_, proc) in alive.items():
            if proc in late:
                try:
                    stop_process(proc, self.stop_timeout_s)  # SIGKILL and reap
                except TimeoutError as err:
                    stuck.append(f"node {node_id}: {err}")
        for node, proc in alive.values():
            if node.class_dump:
                # Only a JVM that exited on SIGTERM wrote its whole archive; any other dump is dropped.
                _adopt_class_data(Path(node.class_dump), keep=keep_class_data and proc not in late)
        if stuck:
            raise BrokerProcessError(f"embedded broker in {self.data_dir} could not be stopped: {'; '.join(stuck)}")
        return bool(alive)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class EmbeddedCluster(EmbeddedBroker):
    """A local Kafka cluster of ``nodes`` (3 by default) combined broker+controller nodes, each under
    ``data_dir/node-<id>``: replication 3 and ``min.insync.replicas=2`` by default, for failover tests."""

    def __init__(self, data_dir: str | os.PathLike = DEFAULT_DATA_DIR, port: int | None = None, *,
                 nodes: int = 3, host: str = "127.0.0.1", start_timeout_s: float = 90.0,
                 stop_timeout_s: float = 20.0, security: BrokerSecurity | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        super().__init__(data_dir, port, nodes=nodes, host=host, start_timeout_s=start_timeout_s,
                         stop_timeout_s=stop_timeout_s, security=security, env=env)


def _adopt_class_data(dump: Path, *, keep: bool) -> None:
    """Move a class-data archive a JVM wrote at exit to its final name (the first one wins)."""
    final = dump.with_name(dump.name.split(".jsa.", 1)[0] + ".jsa")
    try:
        if keep and dump.is_file() and dump.stat().st_size > 0 and not final.exists():
            dump.replace(final)
    except OSError:
        pass
    dump.unlink(missing_ok=True)


_ERRORISH = ("ERROR", "FATAL", "Caused by:", "Exception:", "Error:")


def failure_reason(log: Path, start: int = 0) -> str:
    """Why a node failed, from its log since byte ``start``: all of a short one (the JVM did not get
    as far as Kafka), else its error lines, else its last lines."""
    short = log_tail(log, start, lines=9)
    if short.count(" | ") < 8:
        return short
    errors = log_tail(log, start, lines=4, skip=lambda line: not any(mark in line for mark in _ERRORISH))
    return errors if errors not in ("(empty log)", "(no log)") else log_tail(log, start)
