"""The embedded Kafka broker: Apache Kafka itself (KRaft), run from its Maven Central jars in a data dir.

Each node is one detached JVM (``java -cp <jars> kafka.Kafka server.properties``), a combined broker and controller
of a static quorum (``controller.quorum.voters``), so ``StorageTool format`` needs no ``--standalone``. Jars come
from kprio's jar cache (:mod:`orchestration.services.jars`). One node by default; :class:`EmbeddedCluster`
(``nodes=3``) is a local cluster for failover tests (three replicas, ``min.insync.replicas=2`` unless told).

A data dir of one node holds::

    server.properties   written by kprio at every start (ports may change between runs)
    log4j2.properties   Kafka's logging, all of it to the JVM's output, which is broker.log
    broker.log
    kafka-logs/         log.dirs, formatted on the first start only: topics and offsets survive restarts
    kprio-broker.json   while a node runs: node ids, ports and pids, for status/stop from another process

A cluster has the first four under ``node-<id>/`` per node and one state file at the top; a secured broker
(:mod:`orchestration.services.broker_security`) also has ``tls/`` (:mod:`orchestration.services.tls`) and
``kprio-security.json`` (how it was started, for a restart and ``kprio broker status``). A state file whose
processes are all dead is stale: removed, never blocking a start. A pid counts only while it is the JVM of this
data dir's ``server.properties`` started at the recorded time, so a reused pid is never taken for the broker.

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

from orchestration.services.broker.cluster import EmbeddedBroker, EmbeddedCluster
from orchestration.services.broker.jvm import ENV_JVM_OPTIONS, BrokerProcessError
from orchestration.services.broker.probes import answers_metadata, live_brokers
from orchestration.services.broker.props import (
    CONFIG_FILE,
    DEFAULT_DATA_DIR,
    DEFAULT_PORT,
    STATE_FILE,
    ExtraListener,
    NodePorts,
    cluster_defaults,
    quorum_voters,
)
from orchestration.services.broker.state import BrokerStatus, NodeStatus
from orchestration.services.broker_security import BrokerSecurity, Security

__all__ = [
    "CONFIG_FILE", "DEFAULT_DATA_DIR", "DEFAULT_PORT", "ENV_JVM_OPTIONS", "STATE_FILE", "BrokerProcessError",
    "BrokerSecurity", "BrokerStatus", "EmbeddedBroker", "EmbeddedCluster", "ExtraListener", "NodePorts", "NodeStatus",
    "Security", "answers_metadata", "cluster_defaults", "live_brokers", "quorum_voters",
]
