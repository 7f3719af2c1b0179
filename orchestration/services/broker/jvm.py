"""The JVM of an embedded broker node: which Java and jars run it, its command, its storage format, its log.

Java is found as for every JVM of kprio's (:func:`kprio_core.java.find_java`).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kprio_core.errors import KprioError
from kprio_core.java import find_java, java_build
from orchestration.services.broker.props import CONFIG_FILE, LOG4J_FILE, LOG_FILE, NodePorts
from orchestration.services.process import log_tail

MAIN_CLASS = "kafka.Kafka"
STORAGE_TOOL = "kafka.tools.StorageTool"

JVM_OPTIONS = ("-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError",
               "-Djava.awt.headless=true")
"""Small heap, serial GC, C1 only: a test broker's load fits, and it starts in half the time on two busy cores (C2
threads compete with Kafka's start) with clients as fast. ``KPRIO_BROKER_JVM_OPTS="-XX:TieredStopAtLevel=4"``
brings C2 back."""
ENV_JVM_OPTIONS = "KPRIO_BROKER_JVM_OPTS"


class BrokerProcessError(KprioError):
    """The embedded broker could not be started, reached or stopped."""

    code = "embedded_broker"


def start_error(data_dir: Path, reason: str, port: int | None = None) -> BrokerProcessError:
    """Why a start of the embedded broker in ``data_dir`` (on ``port``) failed, in one line."""
    where = f" on port {port}" if port is not None else ""
    return BrokerProcessError(f"cannot start the embedded broker in {data_dir}{where}: {reason}")


def java_binary() -> str:
    """The ``java`` to run Kafka with (:func:`kprio_core.java.find_java`); a clear error when there is none."""
    found = find_java()
    if found is None:
        raise BrokerProcessError("Java is not installed (no java on PATH, no $JAVA_HOME/bin/java): "
                                 "install a JRE 17 or later (scripts/setup.sh installs openjdk-17-jre-headless)")
    return found


@dataclass(frozen=True)
class KafkaRuntime:
    """How to run Kafka's classes: the java binary, the ``-cp`` of Kafka's jars, and their class-data archive (AppCDS,
    halving a JVM's start), made by the first node run without one: it dumps its classes at exit after SIGTERM to a
    file of its own, which the reaping stop moves into place. A JVM that cannot use it (another JDK) starts without."""

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
        build = java_build(java) or f"{Path(java).resolve()}|0"
        key = hashlib.sha256(f"{build}|{classpath}".encode()).hexdigest()[:16]
        return cls(java, classpath, set_dir(KAFKA_BROKER) / "class-data" / f"kafka-{key}.jsa")


def node_command(runtime: KafkaRuntime, folder: Path, dump_to: Path | None) -> list[str]:
    """The command of the node whose files are in ``folder`` (``dump_to``: where it writes its class-data archive)."""
    return [runtime.java, *JVM_OPTIONS, *runtime.class_data_options(dump_to),
            *os.environ.get(ENV_JVM_OPTIONS, "").split(), f"-Dlog4j2.configurationFile={folder / LOG4J_FILE}",
            "-cp", runtime.classpath, MAIN_CLASS,
            str(folder / CONFIG_FILE)]


def format_storage(nodes: Sequence[NodePorts], folders: Mapping[int, Path], runtime: KafkaRuntime, cluster_id: str,
                   env: Mapping[str, str], timeout_s: float) -> list[str]:
    """``StorageTool format`` of each node's log dir, in parallel, output appended to its log; failures per node."""
    running = []
    for node in nodes:
        folder = folders[node.node_id]
        # C1 only: the tool runs for a second, compiling it further would cost more than it saves.
        cmd = [runtime.java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
               *runtime.class_data_options(None),
               f"-Dlog4j2.configurationFile={folder / LOG4J_FILE}", "-cp", runtime.classpath, STORAGE_TOOL,
               "format", "-t", cluster_id, "-c", str(folder / CONFIG_FILE), "--ignore-formatted"]
        running.append((node, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL, text=True, cwd=folder, env=dict(env))))
    failures = []
    for node, proc in running:
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
            failures.append(f"node {node.node_id}: format did not finish within {timeout_s:g} s")
            continue
        with open(folders[node.node_id] / LOG_FILE, "a") as log:
            log.write(out)
        if proc.returncode != 0:
            lines = [line.strip() for line in out.splitlines() if line.strip()]
            failures.append(f"node {node.node_id}: {' | '.join(lines[-3:]) or 'no output'}")
    return failures


def adopt_class_data(dump: Path, *, keep: bool) -> None:
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
