"""Priority topics on the cluster: compare them with the configuration, create the missing ones.

The comparison is pure (a ``{topic name: TopicShape}`` map of one metadata call) and returns every mismatch, each
in one line that says what and where.

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
>>> for m in topic_mismatches(t.model_copy(update={"replication_factor": 3}), {"orders-1": TopicShape(2, 1)}):
...     print(m.describe())
orders-0: missing (priority 0 of logical topic 'orders')
orders-1: 2 partitions, the configuration expects 3 (topics[orders].partitions)
orders-1: replication factor 1, the configuration expects 3 (topics[orders].replication_factor)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from kprio_core.config import TopicSettings
from kprio_core.errors import BrokerUnreachable, PartitionCountMismatch, TopicMissing
from kprio_core.kafka.client import Deadline, cluster_metadata, kafka_failure
from kprio_core.model.priority import Priority


class TopicShape(NamedTuple):
    """What the cluster reports about one topic: partitions and replicas (of partition 0)."""

    partitions: int
    replicas: int


@dataclass(frozen=True)
class TopicMismatch:
    """One way a priority topic differs from the configuration."""

    topic: str
    logical: str
    priority: Priority
    kind: Literal["missing", "partitions", "replication"]
    expected: int | None = None
    actual: int | None = None

    def describe(self) -> str:
        if self.kind == "missing":
            return f"{self.topic}: missing (priority {self.priority} of logical topic '{self.logical}')"
        what = "partitions" if self.kind == "partitions" else "replication factor"
        setting = "partitions" if self.kind == "partitions" else "replication_factor"
        actual = f"{self.actual} partitions" if self.kind == "partitions" else f"{what} {self.actual}"
        return f"{self.topic}: {actual}, the configuration expects {self.expected} (topics[{self.logical}].{setting})"


def topic_shapes(metadata: Any) -> dict[str, TopicShape]:
    """Partitions and replicas of every topic in a ClusterMetadata (topics with an error left out)."""
    shapes = {}
    for name, t in metadata.topics.items():
        if t.error is None:
            first = t.partitions.get(0)
            shapes[name] = TopicShape(len(t.partitions), len(first.replicas) if first is not None else 0)
    return shapes


def topic_sizes(metadata: Any) -> dict[str, int]:
    """Partition count of every topic in a ClusterMetadata (topics with an error left out)."""
    return {name: shape.partitions for name, shape in topic_shapes(metadata).items()}


def topic_mismatches(topic: TopicSettings, shapes: Mapping[str, TopicShape | int], *,
                     expected: int | None = None) -> list[TopicMismatch]:
    """Every difference between ``topic``'s priority topics and the cluster, in priority order: partitions compared
    if ``expected`` or ``topic.partitions`` is set, replicas if ``topic.replication_factor`` is (``shapes`` may map
    names to bare counts)."""
    expected = topic.partitions if expected is None else expected
    found: list[TopicMismatch] = []
    for priority, name in topic.priority_topics().items():
        shape = shapes.get(name)
        if shape is None:
            found.append(TopicMismatch(name, topic.name, priority, "missing"))
            continue
        partitions, replicas = (shape, None) if isinstance(shape, int) else shape
        if expected is not None and partitions != expected:
            found.append(TopicMismatch(name, topic.name, priority, "partitions", expected, partitions))
        if topic.replication_factor is not None and replicas is not None and replicas != topic.replication_factor:
            found.append(TopicMismatch(name, topic.name, priority, "replication", topic.replication_factor, replicas))
    return found


def partition_counts(topic: TopicSettings, sizes: Mapping[str, int], *, bootstrap: str,
                     expected: int | None = None) -> dict[Priority, int]:
    """Partitions per priority; TopicMissing / PartitionCountMismatch (the first) when the cluster disagrees."""
    for mismatch in topic_mismatches(topic, sizes, expected=expected):
        if mismatch.kind == "missing":
            raise TopicMissing(mismatch.topic, bootstrap)
        if mismatch.kind == "partitions":
            raise PartitionCountMismatch(mismatch.topic, mismatch.expected or 0, mismatch.actual or 0)
    return {priority: sizes[name] for priority, name in topic.priority_topics().items()}


def verify_topics(admin: Any, topic: TopicSettings, deadline: Deadline) -> dict[Priority, int]:
    """Partitions per priority as the cluster reports them (one metadata call)."""
    return partition_counts(topic, topic_sizes(cluster_metadata(admin, deadline)), bootstrap=deadline.bootstrap)


def snapshot_counts(topic: TopicSettings, sizes: Mapping[str, int], *, bootstrap: str,
                    deleted_ok: Iterable[str] = ()) -> tuple[dict[Priority, int], tuple[str, ...]]:
    """Partitions per present priority, and the priority topics missing that kprio drained before.

    Unlike :func:`partition_counts`, added partitions are picked up and a deleted topic kprio drained
    (``deleted_ok``) is held while the others drain on; a topic never seen missing, or too few partitions, is an error.

    >>> t = TopicSettings(name="orders", priorities=2, partitions=2)
    >>> snapshot_counts(t, {"orders-0": 3}, bootstrap="b:9092", deleted_ok={"orders-1"})
    ({0: 3}, ('orders-1',))
    """
    deleted_ok = set(deleted_ok)
    gone = []
    for m in topic_mismatches(topic, sizes):
        if m.kind == "missing" and m.topic in deleted_ok:
            gone.append(m.topic)
        elif m.kind == "missing":
            raise TopicMissing(m.topic, bootstrap)
        elif m.kind == "partitions" and (m.actual or 0) < (m.expected or 0):
            raise PartitionCountMismatch(m.topic, m.expected or 0, m.actual or 0)
    counts = {p: sizes[name] for p, name in topic.priority_topics().items() if name in sizes}
    return counts, tuple(gone)


def topic_ids(admin: Any, names: Iterable[str], deadline: Deadline) -> dict[str, str | None]:
    """The Kafka topic id of each topic (one DescribeTopics call); None where the cluster has no such topic or
    reports no id; BrokerUnreachable (or the security failure) when it could not be asked in time."""
    from confluent_kafka import KafkaException, TopicCollection

    names = sorted(set(names))
    if not names:
        return {}
    what = "describe topics"
    try:
        futures = admin.describe_topics(TopicCollection(names), request_timeout=deadline.left(what))
    except (KafkaException, NotImplementedError, AttributeError):
        return {name: None for name in names}  # a client or cluster without DescribeTopics: no ids
    ids: dict[str, str | None] = {}
    for name, future in futures.items():
        try:
            found = getattr(deadline.result(future, what, topic=name), "topic_id", None)
        except TopicMissing:
            found = None  # deleted: no log of this name now (a batch in flight there holds its partitions)
        # Any other failure (no broker answered, the call ran out of time) raises: a topic is "deleted" only when
        # the cluster says it does not have it, never because it could not be asked.
        text = None if found is None else str(found)
        # Kafka's zero UUID ("AAAAAAAAAAAAAAAAAAAAAA") means the cluster has no topic ids.
        ids[name] = None if text is None or text.strip("A=") == "" else text
    return ids


def find_mismatches(admin: Any, topics: Iterable[TopicSettings], deadline: Deadline) -> list[TopicMismatch]:
    """Every mismatch of every logical topic against the cluster (one metadata call)."""
    shapes = topic_shapes(cluster_metadata(admin, deadline))
    return [m for topic in topics for m in topic_mismatches(topic, shapes)]


def create_missing(admin: Any, topic: TopicSettings, partitions: int, deadline: Deadline, *,
                   replication_factor: int | None = None, config: Mapping[str, str] | None = None) -> list[str]:
    """Create the priority topics the cluster lacks, never altering others; the names this call created."""
    from confluent_kafka.admin import NewTopic

    sizes = topic_sizes(cluster_metadata(admin, deadline))
    missing = [name for name in topic.priority_topics().values() if name not in sizes]
    if not missing:
        return []
    # replication_factor -1 asks for the broker default (one on the embedded broker).
    futures = admin.create_topics(
        [NewTopic(name, partitions, replication_factor or -1, config=dict(config or {})) for name in missing],
        request_timeout=deadline.left("create topics"),
        operation_timeout=deadline.left("create topics"),
    )
    created = [name for name, future in futures.items() if _created(future, name, deadline)]
    _wait_visible(admin, topic, deadline)
    return sorted(created)


def ensure_topics(admin: Any, topic: TopicSettings, partitions: int, deadline: Deadline,
                  config: Mapping[str, str] | None = None, *, replication_factor: int | None = None
                  ) -> dict[Priority, int]:
    """Create the missing priority topics (``partitions`` each, ``config``), verify all: another count is an error."""
    create_missing(admin, topic, partitions, deadline, replication_factor=replication_factor, config=config)
    sizes = topic_sizes(cluster_metadata(admin, deadline))
    return partition_counts(topic, sizes, bootstrap=deadline.bootstrap, expected=partitions)


def _created(future: Any, name: str, deadline: Deadline) -> bool:
    """Wait for one creation: True when we created it, False when someone else did meanwhile."""
    import concurrent.futures

    from confluent_kafka import KafkaError, KafkaException

    what = f"create topic {name}"
    try:
        future.result(timeout=deadline.left(what))
        return True
    except concurrent.futures.TimeoutError:
        raise BrokerUnreachable(deadline.bootstrap, deadline.timeout_s, f"{what} did not finish in time") from None
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        raise kafka_failure(exc, what=what, bootstrap=deadline.bootstrap, timeout_s=deadline.timeout_s,
                            topic=name) from None


def _wait_visible(admin: Any, topic: TopicSettings, deadline: Deadline) -> None:
    """Wait until metadata lists every priority topic (creation is asynchronous on real clusters)."""
    from tenacity import Retrying, retry_if_result, wait_fixed

    names = set(topic.priority_topics().values())

    def absent() -> set[str]:
        return names - set(topic_sizes(cluster_metadata(admin, deadline)))

    # Each attempt is one metadata call; the deadline ends the retries (cluster_metadata raises once it is spent).
    Retrying(retry=retry_if_result(bool), wait=wait_fixed(0.05), reraise=True)(absent)
