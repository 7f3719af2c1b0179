"""The process's ledger transactions, and a way to stop the process between them.

Every ledger transaction of this process passes :data:`TRANSACTIONS`, any number at once, from any thread. A
fault point that stops the process (``KPRIO_PAUSE_AT``) stops inside ``closed()``: inside a SQLite transaction it
would hold the write lock and stall every other process, which is not what a pause models.

>>> gate = TransactionGate()
>>> with gate.transaction(), gate.transaction():
...     gate.open_transactions
2
>>> with gate.closed():
...     gate.open_transactions
0
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class TransactionGate:
    """Shared by transactions, closed (exclusively) by a pause; see the module docstring."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._open = 0
        self._closed = False

    @property
    def open_transactions(self) -> int:
        return self._open

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Around one transaction: waits while the gate is closed."""
        with self._changed:
            self._changed.wait_for(lambda: not self._closed)
            self._open += 1
        try:
            yield
        finally:
            with self._changed:
                self._open -= 1
                self._changed.notify_all()

    @contextmanager
    def closed(self, at_most_s: float = 60.0) -> Iterator[None]:
        """No transaction open inside it (waits up to ``at_most_s``, then goes on anyway). Never call it inside a
        transaction of the same thread (it would wait for itself)."""
        with self._changed:
            self._changed.wait_for(lambda: not self._closed)
            self._closed = True
            deadline = time.monotonic() + at_most_s
            self._changed.wait_for(lambda: self._open == 0, timeout=max(0.0, deadline - time.monotonic()))
        try:
            yield
        finally:
            with self._changed:
                self._closed = False
                self._changed.notify_all()


TRANSACTIONS = TransactionGate()
"""This process's ledger transactions (every :class:`~kprio_core.ledger.Ledger` passes it)."""
