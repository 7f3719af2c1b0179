"""Building confluent-kafka clients from KafkaSettings, bounding every call, and mapping errors.

Every client call of the Kafka edge runs under one :class:`Deadline` taken from
``KafkaSettings.timeout_s``, so a whole edge operation (metadata + offsets + group fetch) ends
within that time even when each call on its own could wait that long.

>>> d = Deadline(10.0, "127.0.0.1:9092", started=100.0, clock=lambda: 104.0)
>>> d.remaining()
6.0
>>> client_config_for("127.0.0.1:9092", {"security.protocol": "SSL"}, {"group.id": "g"})["group.id"]
'g'
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kprio_core.config import KafkaSettings
from kprio_core.errors import (
    AuthorizationFailed,
    BrokerUnreachable,
    ConfigError,
    KafkaOperationFailed,
    KprioError,
    TopicMissing,
)

LOGGER = logging.getLogger("kprio.kafka")

ClientConfig = dict[str, Any]


def client_config_for(bootstrap: str, client: Mapping[str, Any], overrides: Mapping[str, Any]) -> ClientConfig:
    """Plain librdkafka settings: bootstrap, the user's settings, then ``overrides``."""
    conf: ClientConfig = {"bootstrap.servers": bootstrap}
    conf.update(client)
    conf.update(overrides)
    return conf


def client_config(kafka: KafkaSettings, **overrides: Any) -> ClientConfig:
    """librdkafka settings for any client (Spark readers use this too); secrets revealed, never log it.

    ``overrides`` use underscores for dots: ``client_config(k, group_id="g")`` sets ``group.id``.
    """
    extra = {name.replace("_", "."): value for name, value in overrides.items()}
    conf = kafka.client_config()
    conf.update(extra)
    return conf


def _with_logger(conf: ClientConfig) -> ClientConfig:
    # librdkafka prints connection failures straight to stderr otherwise; the CLI promises one
    # clean line, so its logs go to Python logging instead.
    return {**conf, "logger": LOGGER}


def _build(client_class: Callable[[ClientConfig], Any], conf: ClientConfig) -> Any:
    """Build a client; a setting librdkafka refuses is a configuration error naming the setting."""
    from confluent_kafka import KafkaException

    try:
        return client_class(_with_logger(conf))
    except (KafkaException, ValueError, TypeError) as err:
        # librdkafka's message names the setting ("No such configuration property: ...") and
        # never echoes the value, so secrets cannot leak through it.
        detail = err.args[0].str() if err.args and hasattr(err.args[0], "str") else str(err)
        raise ConfigError(f"kafka.client: librdkafka refused the client settings: {detail}") from None


def new_admin(kafka: KafkaSettings) -> Any:
    from confluent_kafka.admin import AdminClient

    return _build(AdminClient, client_config(kafka))


def new_consumer(kafka: KafkaSettings, group_id: str, **overrides: Any) -> Any:
    """A consumer that never commits on its own and never subscribes (kprio assigns partitions)."""
    from confluent_kafka import Consumer

    conf = client_config(kafka, **overrides)
    conf.setdefault("isolation.level", kafka.isolation_level.value)
    conf.update({"group.id": group_id, "enable.auto.commit": False, "enable.auto.offset.store": False})
    return _build(Consumer, conf)


def new_producer(kafka: KafkaSettings, **overrides: Any) -> Any:
    from confluent_kafka import Producer

    return _build(Producer, client_config(kafka, **overrides))


@dataclass
class Deadline:
    """The time left for one edge operation; raises BrokerUnreachable once it is spent."""

    timeout_s: float
    bootstrap: str
    started: float = field(default_factory=time.monotonic)
    clock: Callable[[], float] = time.monotonic

    def remaining(self) -> float:
        return self.timeout_s - (self.clock() - self.started)

    def left(self, what: str) -> float:
        """Seconds left for the next call, or BrokerUnreachable naming ``what`` when none are."""
        left = self.remaining()
        if left <= 0:
            raise BrokerUnreachable(self.bootstrap, self.timeout_s, f"{what} did not finish in time")
        return left

    def result(self, future: concurrent.futures.Future, what: str) -> Any:
        """The future's result within the time left; Kafka errors mapped to kprio's errors."""
        from confluent_kafka import KafkaException

        try:
            return future.result(timeout=self.left(what))
        except concurrent.futures.TimeoutError:
            raise BrokerUnreachable(self.bootstrap, self.timeout_s, f"{what} did not finish in time") from None
        except KafkaException as exc:
            raise kafka_failure(exc, what=what, bootstrap=self.bootstrap, timeout_s=self.timeout_s) from None


_AUTH = {"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
         "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "DELEGATION_TOKEN_AUTHORIZATION_FAILED",
         "SASL_AUTHENTICATION_FAILED", "_AUTHENTICATION"}
_MISSING = {"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "_NOENT"}
_UNREACHABLE = {"_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN", "_RESOLVE", "REQUEST_TIMED_OUT",
                "_MSG_TIMED_OUT", "NETWORK_EXCEPTION", "LEADER_NOT_AVAILABLE", "NOT_COORDINATOR",
                "COORDINATOR_NOT_AVAILABLE"}


def error_name(error: Any) -> str:
    """The symbolic name of a KafkaError (or of the KafkaError inside a KafkaException)."""
    inner = error.args[0] if getattr(error, "args", None) and hasattr(error.args[0], "name") else error
    return inner.name() if hasattr(inner, "name") else type(error).__name__


def _error_text(error: Any) -> str:
    inner = error.args[0] if getattr(error, "args", None) and hasattr(error.args[0], "str") else error
    return inner.str() if hasattr(inner, "str") else str(error)


def kafka_failure(error: Any, *, what: str, bootstrap: str, timeout_s: float, topic: str | None = None) -> KprioError:
    """kprio's typed error for a KafkaError/KafkaException raised while doing ``what``.

    >>> from confluent_kafka import KafkaError
    >>> e = kafka_failure(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), what="list offsets of orders-2",
    ...                   bootstrap="b:9092", timeout_s=5)
    >>> type(e).__name__, str(e)
    ('AuthorizationFailed', 'list offsets of orders-2 on b:9092: not authorized (TOPIC_AUTHORIZATION_FAILED)')
    """
    name = error_name(error)
    if name in _AUTH:
        return AuthorizationFailed(f"{what} on {bootstrap}: not authorized ({name})")
    if name in _MISSING and topic is not None:
        return TopicMissing(topic, bootstrap)
    if name in _UNREACHABLE:
        return BrokerUnreachable(bootstrap, timeout_s, f"{what}: {_error_text(error)}")
    return KafkaOperationFailed(f"{what} on {bootstrap} failed: {name}: {_error_text(error)}")


def check_error(error: Any, *, what: str, bootstrap: str, timeout_s: float, topic: str | None = None) -> None:
    """Raise the typed error for a per-partition ``TopicPartition.error``, if any."""
    if error is not None:
        raise kafka_failure(error, what=what, bootstrap=bootstrap, timeout_s=timeout_s, topic=topic)


def cluster_metadata(admin: Any, deadline: Deadline) -> Any:
    """Topic metadata of the whole cluster; BrokerUnreachable when no broker answers in time."""
    from confluent_kafka import KafkaException

    try:
        return admin.list_topics(timeout=deadline.left("fetch metadata"))
    except KafkaException as exc:
        raise kafka_failure(exc, what="fetch metadata", bootstrap=deadline.bootstrap,
                            timeout_s=deadline.timeout_s) from None
