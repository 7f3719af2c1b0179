"""The embedded broker and cluster: start, status, stop, kill and restart of its nodes, one start or stop at a time.

A start plans the ports (:mod:`~orchestration.services.broker.props`), writes each node's files, formats and
spawns its JVM (:mod:`~orchestration.services.broker.jvm`), records it (:mod:`~orchestration.services.broker.state`)
and waits until the cluster lists every node and answers for every group coordinator.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import psutil

from orchestration.services.broker.jvm import (
    BrokerProcessError,
    KafkaRuntime,
    adopt_class_data,
    failure_reason,
    format_storage,
    node_command,
    start_error,
)
from orchestration.services.broker.ports import last_ports, plan_ports
from orchestration.services.broker.probes import coordinators_ready, listed_brokers, probe_admin
from orchestration.services.broker.props import (
    CONFIG_FILE,
    DEFAULT_DATA_DIR,
    LOCK_FILE,
    LOG4J2,
    LOG4J_FILE,
    LOG_DIRS,
    LOG_FILE,
    STATE_FILE,
    TLS_DIR,
    ExtraListener,
    NodePorts,
    new_cluster_id,
    server_properties,
)
from orchestration.services.broker.state import (
    BrokerStatus,
    NodeState,
    NodeStatus,
    node_process,
    ports_of,
    read_nodes,
    write_nodes,
)
from orchestration.services.broker_security import (
    KEYSTORE_VARIABLE,
    PASSWORD_VARIABLE,
    SCRAM,
    SCRAM_ITERATIONS,
    USER,
    BrokerSecurity,
)
from orchestration.services.process import StateFile, data_dir_lock, spawn_detached, stop_process, wait_for
from orchestration.services.tls import TlsFiles, keystore_names, make_files, opens


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
        """The ``kafka.client`` settings a kprio client needs; secrets only named (``security.secret_variables()``)."""
        return self.security.client_settings(self.tls)

    @property
    def bootstrap(self) -> str:
        """``host:port`` of every node, comma separated (a client finds the cluster from any of them)."""
        ports = self._ports or ports_of(self._read_state())
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
        return read_nodes(StateFile(self.state_path))  # a data dir under a file has none either: a start says why

    def _write_state(self, nodes: Sequence[NodeState]) -> None:
        write_nodes(StateFile(self.state_path), self.host, nodes)

    def _process(self, node: NodeState | None) -> psutil.Process | None:
        """The node's JVM, when it still runs (a reused pid is some other process)."""
        return node_process(node, self.node_dir(node.node_id) / CONFIG_FILE) if node is not None else None

    def _alive(self, state: Sequence[NodeState]) -> dict[int, psutil.Process]:
        found = {n.node_id: self._process(n) for n in state}
        return {node_id: proc for node_id, proc in found.items() if proc is not None}

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        """One start or stop at a time per data dir, across processes."""
        return data_dir_lock(self.data_dir, LOCK_FILE, self.start_timeout_s + self.stop_timeout_s, BrokerProcessError,
                             "embedded broker")

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
        """Start the nodes not running, detached; wait until the cluster lists all (a running one reused, data kept)."""
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
        """Upsert user kprio's SCRAM credential (KPRIO_KAFKA_SASL_PASSWORD) over PLAIN; wait for a SCRAM login."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

        bootstrap = ",".join(f"{self.host}:{p.port}" for p in ports)
        admin = probe_admin(bootstrap, self._probe_client())
        upsert = UserScramCredentialUpsertion(USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
                                              self._env[PASSWORD_VARIABLE].encode())
        try:
            for future in admin.alter_user_scram_credentials([upsert], request_timeout=self.start_timeout_s).values():
                future.result(self.start_timeout_s)
        except KafkaException as err:
            raise self._error(f"could not create user {USER}'s {SCRAM} credential: {err.args[0].str()}",
                              ports[0].port) from None
        scram = probe_admin(bootstrap, self._probe_client(SCRAM))
        if not wait_for(lambda: listed_brokers(scram, timeout_s=1.0) is not None, self.start_timeout_s,
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
        """The ports of every node (:func:`~orchestration.services.broker.ports.plan_ports`)."""
        return plan_ports(self.host, self.port, self.node_ids, state, alive,
                          lambda: self._ports or last_ports(self.node_ids, self.node_dir), self.data_dir)

    def _error(self, reason: str, port: int | None = None) -> BrokerProcessError:
        return start_error(self.data_dir, reason, port)

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
            process, log_from = spawn_detached(node_command(runtime, folder, dump_to), folder / LOG_FILE, cwd=folder,
                                               env=self._jvm_env())
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
        failures = format_storage(nodes, {n.node_id: self.node_dir(n.node_id) for n in nodes}, runtime,
                                  self._cluster_id(), self._jvm_env(), self.start_timeout_s)
        if failures:
            raise self._error(f"Kafka's StorageTool could not format the log dir: {'; '.join(failures)}", port)

    def _wait_ready(self, ports: list[NodePorts], started: set[int]) -> None:
        """Wait until the cluster lists every node as a broker; a node that exits or a timeout stops
        the nodes this start spawned and raises with the reason from their logs."""
        bootstrap = ",".join(f"{self.host}:{p.port}" for p in ports)
        spawned = {node_id: self._spawned.pop(node_id) for node_id in started if node_id in self._spawned}
        client = self._probe_client()
        admin = probe_admin(bootstrap, client)
        # A client sees a restarted node's stale registration until the controller fences it, so each new node
        # must also answer a probe that knows only its address (it serves requests only once unfenced).
        own = {node_id: probe_admin(f"{self.host}:{ports[node_id - 1].port}", client) for node_id in started}
        answered: set[int] = set()
        wanted = set(self.node_ids)

        def exited() -> list[int]:
            return [node_id for node_id, (proc, _) in spawned.items() if proc.poll() is not None]

        def ready() -> bool:
            if exited():
                return True
            answered.update(node_id for node_id in started - answered
                            if listed_brokers(own[node_id], timeout_s=1.0) is not None)
            if answered != started:
                return False
            brokers = listed_brokers(admin, timeout_s=1.0)
            return brokers is not None and wanted <= brokers

        started_at = time.monotonic()
        up = wait_for(ready, self.start_timeout_s, interval_s=0.1)
        dead = exited()
        if up and not dead:
            left = self.start_timeout_s - (time.monotonic() - started_at)
            if coordinators_ready(admin, max(left, 5.0)):
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
        """Stop every node (SIGTERM to all at once, SIGKILL after the deadline), data kept, closing this process's
        group-offset consumers first (they would retry the stopped broker, and log it); True when one was running."""
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
        """SIGKILL one node, as a crash would, and wait until it is gone; its pid. The state file keeps its ports, so
        :meth:`restart_node` (or :meth:`start`) brings it back there."""
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
        """Start ``node_id`` again on its ports (stopped first if running); wait until the cluster lists it."""
        self.stop_node(node_id)
        return self.start()

    def _stop(self, nodes: Sequence[NodeState], *, keep_class_data: bool = True) -> bool:
        """SIGTERM the live ones of ``nodes`` at once (a node stopped alone first moves its leaderships, which the last
        could wait on for minutes), SIGKILL what outlives the deadline; True when one ran."""
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
                adopt_class_data(Path(node.class_dump), keep=keep_class_data and proc not in late)
        if stuck:
            raise BrokerProcessError(f"embedded broker in {self.data_dir} could not be stopped: {'; '.join(stuck)}")
        return bool(alive)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class EmbeddedCluster(EmbeddedBroker):
    """A local cluster of ``nodes`` (default 3) combined nodes under ``data_dir/node-<id>``, for failover tests."""

    def __init__(self, data_dir: str | os.PathLike = DEFAULT_DATA_DIR, port: int | None = None, *,
                 nodes: int = 3, host: str = "127.0.0.1", start_timeout_s: float = 90.0,
                 stop_timeout_s: float = 20.0, security: BrokerSecurity | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        super().__init__(data_dir, port, nodes=nodes, host=host, start_timeout_s=start_timeout_s,
                         stop_timeout_s=stop_timeout_s, security=security, env=env)
