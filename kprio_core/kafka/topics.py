"""Priority topics on the cluster: verify they exist with the expected partitions, create missing ones.

>>> from kprio_core.config import TopicSettings
>>> t = TopicSettings(name="orders", priorities=2, partitions=3)
>>> partition_counts(t, {"orders-0": 3, "orders-1": 3, "other": 1}, bootstrap="b:9092")
{0: 3, 1: 3}
>>> partition_counts(t, {"orders-0": 3}, bootstrap="b:9092")
Traceback (most recent call last):
...
kprio_core.errors.TopicMissing: topic 'orders-1' does not exist on b:9092
>>> partition_counts(t, {"orders-0": 3, "orders-1": 2}, bootstrap="b:9092")
Traceback (most recent call last):
...
kprio_core.errors.PartitionCountMismatch: topic 'orders-1' has 2 partitions, the configuration expects 3
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from kprio_core.config import TopicSettings
from kprio_core.errors import BrokerUnreachable, PartitionCountMismatch, TopicMissing
from kprio_core.kafka.client import Deadline, cluster_metadata, kafka_failure
from kprio_core.priority import Priority


def topic_sizes(metadata: Any) -> dict[str, int]:
    """Partition count of every topic in a ClusterMetadata (topics with an error left out)."""
    return {name: len(t.partitions) for name, t in metadata.topics.items() if t.error is None}


def partition_counts(topic: TopicSettings, sizes: Mapping[str, int], *, bootstrap: str,
                     expected: int | None = None) -> dict[Priority, int]:
    """Partitions per priority; TopicMissing / PartitionCountMismatch when the cluster disagrees."""
    expected = topic.partitions if expected is None else expected
    counts: dict[Priority, int] = {}
    for priority, name in topic.priority_topics().items():
        if name not in sizes:
            raise TopicMissing(name, bootstrap)
        if expected is not None and sizes[name] != expected:
            raise PartitionCountMismatch(name, expected, sizes[name])
        counts[priority] = sizes[name]
    return counts


def verify_topics(admin: Any, topic: TopicSettings, deadline: Deadline) -> dict[Priority, int]:
    """Partitions per priority as the cluster reports them (one metadata call)."""
    return partition_counts(topic, topic_sizes(cluster_metadata(admin, deadline)), bootstrap=deadline.bootstrap)


def ensure_topics(admin: Any, topic: TopicSettings, partitions: int, deadline: Deadline,
                  config: Mapping[str, str] | None = None) -> dict[Priority, int]:
    """Create the missing priority topics with ``partitions`` each (and topic ``config``), then verify all.

    Existing topics are never altered: one with another partition count is an error.
    """
    from confluent_kafka.admin import NewTopic

    sizes = topic_sizes(cluster_metadata(admin, deadline))
    missing = [name for name in topic.priority_topics().values() if name not in sizes]
    if missing:
        # replication_factor -1 asks for the broker default (one on the embedded broker).
        futures = admin.create_topics(
            [NewTopic(name, partitions, -1, config=dict(config or {})) for name in missing],
            request_timeout=deadline.left("create topics"),
            operation_timeout=deadline.left("create topics"),
        )
        for name, future in futures.items():
            _created_or_exists(future, name, deadline)
        sizes = _wait_visible(admin, topic, deadline)
    return partition_counts(topic, sizes, bootstrap=deadline.bootstrap, expected=partitions)


def _created_or_exists(future: Any, name: str, deadline: Deadline) -> None:
    """Wait for one creation; a topic someone else created meanwhile counts as created."""
    import concurrent.futures

    from confluent_kafka import KafkaError, KafkaException

    what = f"create topic {name}"
    try:
        future.result(timeout=deadline.left(what))
    except concurrent.futures.TimeoutError:
        raise BrokerUnreachable(deadline.bootstrap, deadline.timeout_s, f"{what} did not finish in time") from None
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise kafka_failure(exc, what=what, bootstrap=deadline.bootstrap, timeout_s=deadline.timeout_s,
                                topic=name) from None


def _wait_visible(admin: Any, topic: TopicSettings, deadline: Deadline) -> dict[str, int]:
    """Wait until metadata lists every priority topic (creation is asynchronous on real clusters)."""
    names = set(topic.priority_topics().values())
    while True:
        sizes = topic_sizes(cluster_metadata(admin, deadline))
        if names <= set(sizes):
            return sizes
        # Poll interval between metadata calls, not a synchronisation sleep: the loop ends on
        # the condition or the deadline.
        time.sleep(min(0.05, deadline.left(f"waiting for topics {sorted(names - set(sizes))} to appear")))

