"""The batch ledger: one store and its repositories, so two batches never take the same offsets.

A plan of 29 records of orders-2[0] is batch b-000001; a second plan asking for offset 28 again
conflicts; once the first fails it holds partition 0 from offset 0 on, while partition 1 drains:

>>> from kprio_core.model.offsets import OffsetRange
>>> from kprio_core.model.drain_plan import DrainPlan, PlannedRange
>>> def plan(partition, start, end):
...     r = PlannedRange(2, OffsetRange("orders-2", partition, start, end), est_bytes=200 * (end - start))
...     return DrainPlan("orders", "lag-aware", 50, None, {2: 29, 1: 14, 0: 7}, {2: 29}, (r,))
>>> ledger = Ledger("sqlite://")
>>> b = ledger.batches.record_plan(plan(0, 0, 29))
>>> b.batch_id, b.state.value, b.attempts
('b-000001', 'planned', 1)
>>> ledger.batches.record_plan(plan(0, 28, 40))
Traceback (most recent call last):
...
kprio_core.errors.RangeConflict: plan of 'orders': orders-2[0]@[28,40) overlaps orders-2[0]@[0,29) held by batch b-000001 (planned)
>>> ledger.moves.mark_failed(b.batch_id, "drain failed: broker restarted", retry_at=None).holds
True
>>> [str(h) for h in ledger.batches.holds("orders")]
['orders-2[0] held from offset 0 by failed batch b-000001 (attempt 1): drain failed: broker restarted']
>>> ledger.batches.record_plan(plan(1, 0, 29)).batch_id
'b-000002'
>>> ledger.attempts.retry(b.batch_id, reason="automatic retry 2 of 3").attempts
2
>>> ledger.close()
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kprio_core.ledger.attempts import Attempts
from kprio_core.ledger.batches import Batches
from kprio_core.ledger.beliefs import Beliefs
from kprio_core.ledger.engine import DEFAULT_BUSY_TIMEOUT_S
from kprio_core.ledger.launches import Launches
from kprio_core.ledger.leases import Leases
from kprio_core.ledger.moves import Moves
from kprio_core.ledger.samples import Samples
from kprio_core.ledger.store import Store

if TYPE_CHECKING:
    from kprio_core.config import LedgerSettings


class Ledger(Store):
    """The ledger at ``url`` (:class:`Store`: its engine, clock and identity) with a repository per part, all on
    its one engine: ``batches``, ``moves``, ``attempts``, ``leases``, ``launches``, ``beliefs``, ``samples``."""

    def __init__(self, url: str, *, clock: Callable[[], datetime] | None = None,
                 busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
        super().__init__(url, clock=clock, busy_timeout_s=busy_timeout_s)
        self.batches, self.moves, self.attempts, self.leases = Batches(self), Moves(self), Attempts(self), Leases(self)
        self.launches, self.beliefs, self.samples = Launches(self), Beliefs(self), Samples(self)

    @classmethod
    def from_settings(cls, s: LedgerSettings, **kwargs: Any) -> Ledger:
        """The ledger at ``s.url`` (``ledger.url`` of kprio.yaml)."""
        return cls(s.url, **kwargs)
