"""Producing records in batches with confirmed delivery (demo data, tests, retention demos).

A :class:`Record` is ``(key, value, timestamp_ms, partition)``; ``partition=None``: the partitioner picks by key.

>>> as_bytes("a"), as_bytes(b"b"), as_bytes(None)
(b'a', b'b', None)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from kprio_core.config import KafkaSettings
from kprio_core.errors import BrokerUnreachable, KafkaOperationFailed
from kprio_core.kafka.client import Deadline, error_name, new_producer


class Record(NamedTuple):
    key: str | bytes | None
    value: str | bytes | None
    timestamp_ms: int | None = None
    partition: int | None = None


def as_bytes(data: str | bytes | None) -> bytes | None:
    return data.encode() if isinstance(data, str) else data


def produce(kafka: KafkaSettings, topic: str, records: Iterable[Record | tuple], *, linger_ms: int = 20) -> int:
    """Produce ``records`` to ``topic`` and wait for every ack; the number delivered, or raise on any failure."""
    deadline = Deadline(kafka.timeout_s, kafka.bootstrap_servers)
    producer = new_producer(
        kafka,
        linger_ms=linger_ms,
        message_timeout_ms=int(kafka.timeout_s * 1000),
    )
    failures: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    sent = send(producer, topic, records, on_delivery, deadline)
    remaining = producer.flush(deadline.left(f"flush to {topic}"))
    if remaining:
        raise BrokerUnreachable(kafka.bootstrap_servers, kafka.timeout_s,
                                f"{remaining} of {sent} records to {topic} were not acknowledged")
    if failures:
        raise KafkaOperationFailed(
            f"produce to {topic} on {kafka.bootstrap_servers}: {len(failures)} of {sent} records failed, "
            f"first: {failures[0].name()}: {failures[0].str()}"
        )
    return sent


def send(producer: Any, topic: str, records: Iterable[Record | tuple], on_delivery: Callable[[Any, Any], None],
         deadline: Deadline) -> int:
    """Hand ``records`` to ``producer`` (no flush), waiting for room when its queue is full; how many were sent."""
    from confluent_kafka import KafkaException

    sent = 0
    for item in records:
        rec = Record(*item)
        extra: dict[str, Any] = {}
        if rec.timestamp_ms is not None:
            extra["timestamp"] = rec.timestamp_ms
        if rec.partition is not None:
            extra["partition"] = rec.partition
        while True:
            try:
                producer.produce(topic, key=as_bytes(rec.key), value=as_bytes(rec.value),
                                 on_delivery=on_delivery, **extra)
                break
            except BufferError:
                # Local queue full: serve delivery reports to make room, within the deadline.
                producer.poll(min(0.5, deadline.left(f"produce to {topic}")))
            except KafkaException as exc:
                raise KafkaOperationFailed(f"produce to {topic} on {deadline.bootstrap} failed: "
                                           f"{error_name(exc)}") from None
        sent += 1
    return sent
