"""Building confluent-kafka clients from KafkaSettings, bounding every call, and mapping errors.

An edge operation's calls (metadata + offsets + group fetch) share one :class:`Deadline` of
``KafkaSettings.timeout_s``, so the whole operation ends within it.

>>> d = Deadline(10.0, "127.0.0.1:9092", started=100.0, clock=lambda: 104.0)
>>> d.remaining()
6.0
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Callable
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
# librdkafka's logs go where the application's go, never to stderr by themselves: a CLI's failure is one line.
LOGGER.addHandler(logging.NullHandler())

ClientConfig = dict[str, Any]


def client_config(kafka: KafkaSettings, **overrides: Any) -> ClientConfig:
    """librdkafka settings of any client (Spark readers too), secrets revealed (never log); ``a_b=`` sets ``a.b``."""
    extra = {name.replace("_", "."): value for name, value in overrides.items()}
    conf = kafka.client_config()
    conf.update(extra)
    return conf


def _with_logger(conf: ClientConfig) -> ClientConfig:
    # librdkafka prints connection failures to stderr otherwise; the CLI promises one clean line.
    return {**conf, "logger": LOGGER}


def _build(client_class: Callable[[ClientConfig], Any], conf: ClientConfig) -> Any:
    """Build a client (a refused setting is a ConfigError naming it) whose error callback, a SecurityWatch kept as
    ``kprio_security``, raises a refused login or TLS handshake out of the ``poll``/``consume``/``flush`` serving it."""
    from confluent_kafka import KafkaException

    from kprio_core.kafka.security import SecurityWatch

    watch = SecurityWatch(conf)
    try:
        client = client_class({**_with_logger(conf), "error_cb": watch})
    except (KafkaException, ValueError, TypeError) as err:
        raise refused_settings(conf, err) from None
    with contextlib.suppress(AttributeError):  # the admin client takes attributes; consumers and producers don't
        client.kprio_security = watch
    return client


def refused_settings(conf: ClientConfig, err: BaseException) -> ConfigError:
    """The ConfigError of client settings ``conf`` librdkafka refused to build a client with (``err``)."""
    from kprio_core.config.files import settings_problem

    # A missing file or secret in kprio's words (librdkafka's are OpenSSL's: "BIO lib"); else librdkafka's
    # message, which names the setting and never echoes the value, so no secret leaks.
    problem = settings_problem(conf)
    if problem is not None:
        return ConfigError(problem, setting="kafka.client")
    detail = err.args[0].str() if err.args and hasattr(err.args[0], "str") else str(err)
    return ConfigError(f"kafka.client: librdkafka refused the client settings: {detail}", setting="kafka.client")


def refusal(conf: ClientConfig, timeout_s: float) -> KprioError | None:
    """The security failure (or protocol mismatch) an admin client of ``conf`` meets asking metadata within
    ``timeout_s``, else None; for clients that cannot serve their events while they wait (the python reader)."""
    from confluent_kafka.admin import AdminClient

    from kprio_core.errors import KafkaSecurityFailed

    admin_conf = {k: v for k, v in conf.items() if str(k).lower() not in _CONSUMER_ONLY}
    try:
        admin = _build(AdminClient, admin_conf)
        cluster_metadata(admin, Deadline(timeout_s, str(conf.get("bootstrap.servers", "?")), client=admin))
    except (KafkaSecurityFailed, ConfigError) as err:
        return err
    except KprioError:
        return None
    return None


_CONSUMER_ONLY = ("group.id", "isolation.level", "enable.auto.commit", "enable.auto.offset.store",
                  "auto.offset.reset", "enable.partition.eof", "fetch.min.bytes", "fetch.wait.max.ms",
                  "fetch.max.bytes", "max.partition.fetch.bytes", "queued.min.messages", "queued.max.messages.kbytes",
                  "session.timeout.ms", "max.poll.interval.ms", "check.crcs", "client.rack")


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


WAIT_SLICE_S = 0.25
"""Longest :class:`Deadline` wait before serving its client's events (a refused login is an event, not an answer)."""


SHORTEST_CALL_S = 0.005
"""Less time left than this is none: librdkafka's timeouts are whole milliseconds, and a ListOffsets request given a
timeout that rounds to 0 ms crashes the process (confluent-kafka 2.16: ``AdminClient.list_offsets(...,
request_timeout=0.0009)``, a segmentation fault or a double free within seconds of such calls), as a deadline all
but spent would give it; no broker answers within a few milliseconds anyway."""

SILENT_S = 1.0
"""How long a client waits for a first answer before its broker's listener is asked what it speaks."""


@dataclass
class Deadline:
    """The time left for one edge operation, BrokerUnreachable once spent; with ``client``, waits are sliced to serve
    its events: a security failure raises at once, and a timeout names the last one, not an unreachable broker."""

    timeout_s: float
    bootstrap: str
    started: float = field(default_factory=time.monotonic)
    clock: Callable[[], float] = time.monotonic
    client: Any = None

    def remaining(self) -> float:
        return self.timeout_s - (self.clock() - self.started)

    def left(self, what: str) -> float:
        """Seconds left for the next call, or BrokerUnreachable naming ``what`` when none are (less than
        :data:`SHORTEST_CALL_S`).

        >>> Deadline(10.0, "b:9092", started=0.0, clock=lambda: 4.0).left("list offsets")
        6.0
        >>> Deadline(10.0, "b:9092", started=0.0, clock=lambda: 9.9991).left("list offsets")
        Traceback (most recent call last):
        ...
        kprio_core.errors.BrokerUnreachable: no Kafka broker answered at b:9092 within 10 s: list offsets did not finish in time
        """
        left = self.remaining()
        if left < SHORTEST_CALL_S:
            raise self.ran_out(what)
        return left

    def ran_out(self, what: str, detail: str = "") -> KprioError:
        """Why ``what`` did not finish in time: the client's last security failure, else no broker answered."""
        from kprio_core.kafka.security import watched_failure

        failure = watched_failure(self.client)
        if failure is not None:
            return failure
        return BrokerUnreachable(self.bootstrap, self.timeout_s, f"{what}: {detail}" if detail else
                                 f"{what} did not finish in time")

    def slice(self, what: str, previous: float = 0.0) -> float:
        """The next wait: all the time left, or with a client twice the ``previous`` slice (so a call that restarts
        per slice, as metadata does, still gets the time a slow cluster needs)."""
        left = self.left(what)
        return left if self.client is None else min(left, max(WAIT_SLICE_S, 2 * previous))

    def serve(self, what: str, detail: str = "") -> None:
        """After a slice ran out: serve the client's events (a security failure raises), or raise if time is spent."""
        if self.client is None or self.remaining() <= 0:
            raise self.ran_out(what, detail)
        self.client.poll(0)
        from kprio_core.kafka.security import SecurityWatch

        watch = getattr(self.client, "kprio_security", None)
        if isinstance(watch, SecurityWatch) and self.timeout_s - self.remaining() >= SILENT_S:
            # Still silent: a listener of another protocol only closes connections (librdkafka retries), so ask it.
            mismatch = watch.mismatch(timeout_s=self.remaining())  # within this operation's deadline
            if mismatch is not None:
                watch.failed(mismatch)

    def result(self, future: concurrent.futures.Future, what: str, *, topic: str | None = None) -> Any:
        """The future's result within the time left, errors mapped (TopicMissing for a ``topic`` the cluster lacks)."""
        from confluent_kafka import KafkaException

        while True:
            try:
                return future.result(timeout=self.slice(what))
            except concurrent.futures.TimeoutError:
                self.serve(what)
            except KafkaException as exc:
                raise kafka_failure(exc, what=what, bootstrap=self.bootstrap, timeout_s=self.timeout_s,
                                    topic=topic) from None


_AUTH = {"TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
         "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "DELEGATION_TOKEN_AUTHORIZATION_FAILED"}
_AUTHENTICATION = {"SASL_AUTHENTICATION_FAILED", "_AUTHENTICATION"}
_MISSING = {"UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC_ID", "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "_NOENT"}
_UNREACHABLE = {"_TRANSPORT", "_TIMED_OUT", "_ALL_BROKERS_DOWN", "_RESOLVE", "REQUEST_TIMED_OUT",
                "_MSG_TIMED_OUT", "NETWORK_EXCEPTION", "LEADER_NOT_AVAILABLE", "NOT_COORDINATOR",
                "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS", "NOT_LEADER_FOR_PARTITION",
                "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH"}
"""No broker serves the request now (down, unreachable, or its partition's leader moving): transient, retried by
itself once the cluster answers again (a leader still moving when the deadline runs out is no fault of the batch)."""


def error_name(error: Any) -> str:
    """The symbolic name of a KafkaError (or of the KafkaError inside a KafkaException)."""
    inner = error.args[0] if getattr(error, "args", None) and hasattr(error.args[0], "name") else error
    return inner.name() if hasattr(inner, "name") else type(error).__name__


def _retriable(error: Any) -> bool:
    """Whether the client says a retry may succeed (coordinator moving, timed-out transaction ending, few ISR).

    >>> from confluent_kafka import KafkaError
    >>> concurrent = KafkaError(KafkaError.CONCURRENT_TRANSACTIONS, retriable=True)
    >>> _retriable(concurrent), _retriable(KafkaError(KafkaError._FENCED))
    (True, False)
    """
    inner = error.args[0] if getattr(error, "args", None) and hasattr(error.args[0], "retriable") else error
    return bool(getattr(inner, "retriable", lambda: False)())


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
    >>> moving = kafka_failure(KafkaError(KafkaError.FENCED_LEADER_EPOCH), what="list offsets of orders-2",
    ...                        bootstrap="b:9092", timeout_s=5)
    >>> type(moving).__name__, moving.transient
    ('BrokerUnreachable', True)
    """
    from kprio_core.kafka.security import ClientIdentity, security_failure

    name = error_name(error)
    if name in _AUTHENTICATION:
        # A request's "not authenticated"; TLS failures come as client events (SecurityWatch), never request errors.
        return security_failure(name, _error_text(error), ClientIdentity(bootstrap)) or AuthorizationFailed(
            f"{what} on {bootstrap}: not authenticated ({name})")
    if name in _AUTH:
        return AuthorizationFailed(f"{what} on {bootstrap}: not authorized ({name})")
    if name in _MISSING and topic is not None:
        return TopicMissing(topic, bootstrap)
    if name in _UNREACHABLE or _retriable(error):
        return BrokerUnreachable(bootstrap, timeout_s, f"{what}: {_error_text(error)}")
    return KafkaOperationFailed(f"{what} on {bootstrap} failed: {name}: {_error_text(error)}")


def check_error(error: Any, *, what: str, bootstrap: str, timeout_s: float, topic: str | None = None) -> None:
    """Raise the typed error for a per-partition ``TopicPartition.error``, if any."""
    if error is not None:
        raise kafka_failure(error, what=what, bootstrap=bootstrap, timeout_s=timeout_s, topic=topic)


def cluster_metadata(admin: Any, deadline: Deadline) -> Any:
    """Topic metadata of the whole cluster; BrokerUnreachable (or the security failure, see :class:`Deadline`)."""
    from confluent_kafka import KafkaException

    from kprio_core.kafka.security import SecurityWatch

    what, waited = "fetch metadata", 0.0
    while True:
        try:
            waited = deadline.slice(what, waited)
            metadata = admin.list_topics(timeout=waited)
        except KafkaException as exc:
            if error_name(exc) not in ("_TRANSPORT", "_TIMED_OUT") or deadline.client is None:
                raise kafka_failure(exc, what=what, bootstrap=deadline.bootstrap,
                                    timeout_s=deadline.timeout_s) from None
            deadline.serve(what, _error_text(exc))
            continue
        watch = getattr(admin, "kprio_security", None)
        if isinstance(watch, SecurityWatch):
            watch.clear()
        return metadata
