"""A broker outage ``kprio drain`` rides out is two lines of its own: one when it starts, one when it ends.

librdkafka logs every failed connection attempt (``FAIL``: 33 lines while one node of three was down for 25 s), which
:mod:`orchestration.cli.logs` keeps off the terminal. Instead :class:`OutageLines` probes the cluster every
``interval_s``: it is whole while every broker listed when the drain started is listed and accepts connections.
:data:`MISSES` probes that find it otherwise print one line (quoting librdkafka's last ``FAIL``, told by its fields,
not its text); the first that finds it whole again prints another.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from kprio_core.config import KafkaSettings

FAILURE_FACILITIES = frozenset({"FAIL"})
"""librdkafka's log facility of a broker connection that failed or was lost."""
MISSES = 2
"""Probes in a row that must find the cluster not whole before the outage is reported (a blip is not one)."""

Probe = Callable[[], frozenset[tuple[str, int]] | None]
"""The brokers the cluster lists that accept connections (host, port), or None when none answers."""


def is_connection_failure(record: logging.LogRecord) -> bool:
    """Whether ``record`` is librdkafka's (``"%s [%s] %s" % (facility, client, message)``) about a failed connection.

    >>> rec = logging.LogRecord("kprio.kafka", logging.ERROR, "", 0, "%s [%s] %s", ("FAIL", "rdkafka#consumer-1", "x"),
    ...                         None)
    >>> is_connection_failure(rec), is_connection_failure(logging.LogRecord("kprio", 40, "", 0, "FAIL", None, None))
    (True, False)
    """
    return isinstance(record.args, tuple) and len(record.args) == 3 and record.args[0] in FAILURE_FACILITIES


class OutageLines(logging.Handler):
    """Prints the start and the end of an outage (see the module docstring) with ``write``; :meth:`start` the probes.

    Probes at 0, 5, 10 and 15 s: one broker of two, none, none, both again.

    >>> answers = iter([{("b", 1), ("c", 2)}, {("b", 1)}, None, None, {("b", 1), ("c", 2)}])
    >>> lines = []
    >>> watch = OutageLines("b:1", lambda: frozenset(next(answers) or ()) or None, lines.append,
    ...                     clock=iter(range(0, 100, 5)).__next__)
    >>> for _ in range(4):
    ...     watch.check()
    >>> [line.split(" (")[0] for line in lines]
    ['kprio drain: the Kafka cluster at b:1 does not answer as it did',
     'kprio drain: the Kafka cluster at b:1 answers again']
    >>> lines[1]
    'kprio drain: the Kafka cluster at b:1 answers again (after 15 s)'
    """

    def __init__(self, bootstrap: str, probe: Probe, write: Callable[[str], None], *, interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(logging.ERROR)
        self.bootstrap, self.probe, self.write, self.interval_s, self.clock = bootstrap, probe, write, interval_s, clock
        self.expected = probe() or frozenset()
        """The brokers of the healthy cluster: those that answered when the drain started."""
        self._missed: list[float] = []
        self._down_since: float | None = None
        self._last_failure = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if is_connection_failure(record):
            self._last_failure = " ".join(str(record.args[2]).split())  # type: ignore[index]

    def check(self) -> None:
        """One probe: count a miss, or report the outage, or its end."""
        answering = self.probe()
        if answering is not None and answering >= self.expected:
            self._missed.clear()
            if self._down_since is not None:
                self.write(f"kprio drain: the Kafka cluster at {self.bootstrap} answers again "
                           f"(after {self.clock() - self._down_since:.0f} s)")
                self._down_since = None
            return
        self._missed.append(self.clock())
        if self._down_since is None and len(self._missed) >= MISSES:
            self._down_since = self._missed[0]
            found = f"{len(answering)} of {len(self.expected)} brokers" if answering else "no broker"
            said = f": {self._last_failure}" if self._last_failure else ""
            self.write(f"kprio drain: the Kafka cluster at {self.bootstrap} does not answer as it did (since "
                       f"{datetime.now().strftime('%H:%M:%S')}, {found}){said}; the drain waits for it")

    def start(self) -> OutageLines:
        def run() -> None:
            while not self._stop.wait(self.interval_s):
                self.check()

        self._thread = threading.Thread(target=run, name="kprio-outage", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        super().close()


def cluster_probe(kafka: KafkaSettings, timeout_s: float = 1.0) -> Probe:
    """A :data:`Probe` of the cluster ``kafka`` names, on an admin client of its own."""
    from confluent_kafka import KafkaException

    from kprio_core.kafka.client import new_admin
    from orchestration.services.process import port_open

    admin: Any = new_admin(kafka)

    def probe() -> frozenset[tuple[str, int]] | None:
        try:
            brokers = admin.list_topics(timeout=timeout_s).brokers.values()
        except KafkaException:
            return None
        return frozenset((b.host, b.port) for b in brokers if port_open(b.host, b.port, timeout_s))

    return probe


@contextmanager
def outage_lines(kafka: KafkaSettings, write: Callable[[str], None]) -> Iterator[OutageLines]:
    """Within the block, an outage of the cluster is two lines printed with ``write``."""
    probe = cluster_probe(kafka)
    handler = OutageLines(kafka.bootstrap_servers, probe, write)
    logger = logging.getLogger("kprio.kafka")
    logger.addHandler(handler)
    try:
        yield handler.start()
    finally:
        logger.removeHandler(handler)
        handler.close()
