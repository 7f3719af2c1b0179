"""The demo's workload: keyed JSON orders in waves over three priorities.

A large low-priority backlog is there before draining starts, a steady middle priority
arrives in equal waves during the first batches, and a late burst of high priority arrives
once draining is under way (after ``burst_after`` batches). 1,000 records split 60/25/15:

>>> w = demo_workload(1000)
>>> [(x.priority, x.records, x.after_batch) for x in w.waves]
[(0, 600, 0), (1, 63, 0), (1, 63, 1), (1, 62, 2), (1, 62, 3), (2, 150, 2)]
>>> w.records_by_priority(), w.total
({2: 150, 1: 250, 0: 600}, 1000)
>>> [x.priority for x in w.due(2)]
[1, 2]
>>> demo_record_budget(1000)
125

Each record is ``(key, value, timestamp_ms)``: the key is the customer, so one customer's
orders land on one partition and keep their order:

>>> key, value, ts = order_records(w.waves[-1], base_ts_ms=1_700_000_000_000)[0]
>>> key, json.loads(value)["order_id"], json.loads(value)["tier"], ts
('c-0088', 'o-0000850', 'express', 1700000000000)
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass

from kprio_core.priority import Priority

PRIORITIES = 3
"""The demo's logical topic has three priorities: 0 standard backlog, 1 steady, 2 express burst."""

TIERS: dict[Priority, str] = {0: "economy", 1: "standard", 2: "express"}
SHARES: dict[Priority, float] = {0: 0.60, 1: 0.25, 2: 0.15}
"""Fraction of the records of each priority (the low backlog is the bulk)."""

ORDER_SCHEMA: dict[str, str] = {
    "order_id": "string",
    "customer": "string",
    "sku": "string",
    "quantity": "long",
    "amount": "double",
    "tier": "string",
    "created_ms": "long",
}
"""Fields of an order value, with the kprio schema types the drain decodes them to."""
REQUIRED_FIELDS = ("order_id", "customer", "amount")

CUSTOMERS = 400
SKUS = 60


@dataclass(frozen=True, slots=True)
class Wave:
    """``records`` orders of ``priority``, produced once ``after_batch`` batches are done (0: up front)."""

    priority: Priority
    records: int
    after_batch: int
    first_index: int
    """Number of the wave's first order across the whole workload (order ids never repeat)."""


@dataclass(frozen=True)
class Workload:
    """Waves in production order."""

    waves: tuple[Wave, ...]

    @property
    def total(self) -> int:
        return sum(w.records for w in self.waves)

    @property
    def last_after_batch(self) -> int:
        """The number of batches after which the last wave arrives."""
        return max((w.after_batch for w in self.waves), default=0)

    def records_by_priority(self) -> dict[Priority, int]:
        """Records per priority, most urgent first."""
        out = dict.fromkeys(range(PRIORITIES - 1, -1, -1), 0)
        for w in self.waves:
            out[w.priority] += w.records
        return out

    def due(self, batches_done: int) -> tuple[Wave, ...]:
        """The waves to produce once exactly ``batches_done`` batches are done."""
        return tuple(w for w in self.waves if w.after_batch == batches_done)


def _split(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` near-equal pieces, larger ones first (63, 63, 62, 62)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def demo_workload(records: int, *, steady_waves: int = 4, burst_after: int = 2) -> Workload:
    """The demo's waves for ``records`` orders (at least one per wave)."""
    if steady_waves < 1 or burst_after < 1:
        raise ValueError(f"need steady_waves >= 1 and burst_after >= 1, got {steady_waves} and {burst_after}")
    if records < steady_waves + 2:
        raise ValueError(f"the demo needs at least {steady_waves + 2} records, got {records}")
    high = max(1, round(records * SHARES[2]))
    middle = max(steady_waves, round(records * SHARES[1]))
    low = records - high - middle
    planned = [(0, low, 0)]
    planned += [(1, n, i) for i, n in enumerate(_split(middle, steady_waves))]
    planned.append((2, high, burst_after))
    waves, index = [], 0
    for priority, n, after in planned:
        waves.append(Wave(priority, n, after, index))
        index += n
    return Workload(tuple(waves))


def demo_record_budget(records: int, batches: int = 8) -> int:
    """A record budget that drains ``records`` in about ``batches`` full batches (at least 10 per batch)."""
    return max(10, math.ceil(records / batches))


def order_records(wave: Wave, *, base_ts_ms: int, seed: int = 7) -> list[tuple[str, str, int]]:
    """The wave's orders as ``(customer key, JSON value, timestamp_ms)``, deterministic for a seed.

    Timestamps are ``base_ts_ms`` plus one millisecond per order of the wave.
    """
    rnd = random.Random(f"{seed}-{wave.priority}-{wave.first_index}")
    out = []
    for i in range(wave.records):
        n = wave.first_index + i
        customer = f"c-{rnd.randrange(CUSTOMERS):04d}"
        quantity = rnd.randint(1, 5)
        unit = rnd.randrange(199, 9999) / 100
        ts = base_ts_ms + i
        value = {
            "order_id": f"o-{n:07d}",
            "customer": customer,
            "sku": f"sku-{rnd.randrange(SKUS):03d}",
            "quantity": quantity,
            "amount": round(quantity * unit, 2),
            "tier": TIERS[wave.priority],
            "created_ms": ts,
        }
        out.append((customer, json.dumps(value, separators=(",", ":")), ts))
    return out
