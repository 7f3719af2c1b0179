"""The demo's workload: keyed JSON orders in waves over three priorities, optionally with poison records.

A large low-priority backlog is there up front, a steady middle priority arrives in equal waves during the first
batches, and a late high-priority burst after ``burst_after`` batches. 1,000 records split 60/25/15:

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

``poison`` malformed records (each of :data:`POISON_KINDS` in turn) go into the low-priority backlog, evenly
spaced and spread over the partitions, so no range holds more than a few of them:

>>> w = demo_workload(1000, poison=5)
>>> w.waves[0].records, w.waves[0].poison, w.waves[0].size, w.total, w.poison
(600, 5, 605, 1005, 5)
>>> recs = wave_records(w.waves[0], base_ts_ms=0, partitions=4)
>>> [(i, r.key, r.partition) for i, r in enumerate(recs) if r.partition is not None]
[(100, 'poison-0', 0), (201, 'poison-1', 1), (302, 'poison-2', 2), (403, 'poison-3', 3), (504, 'poison-4', 0)]
>>> [poison_value(k, 600)[:12] for k in range(5)]
[b'not json: or', b'\\xff\\xfe order #60', b'["o-0000600"', b'{"order_id":', b'{"order_id":']
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass

from kprio_core.kafka.produce import Record
from kprio_core.model.priority import Priority

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
POISON_PRIORITY: Priority = 0
"""Poison records go to the least urgent priority: they must never delay the most urgent one."""
POISON_KINDS = ("not JSON", "not UTF-8", "a JSON list", "a wrong type", "a missing required field")


@dataclass(frozen=True, slots=True)
class Wave:
    """``records`` orders of ``priority``, produced once ``after_batch`` batches are done (0: up front)."""

    priority: Priority
    records: int
    after_batch: int
    first_index: int
    """Number of the wave's first order across the whole workload (order ids never repeat)."""
    poison: int = 0
    """Malformed records produced among the wave's orders (they go to the dead letters)."""

    @property
    def size(self) -> int:
        """Records the wave produces: its orders and its poison."""
        return self.records + self.poison


@dataclass(frozen=True)
class Workload:
    """Waves in production order."""

    waves: tuple[Wave, ...]

    @property
    def total(self) -> int:
        """Records produced in all, poison included."""
        return sum(w.size for w in self.waves)

    @property
    def poison(self) -> int:
        return sum(w.poison for w in self.waves)

    def records_by_priority(self) -> dict[Priority, int]:
        """Records produced per priority (poison included), most urgent first."""
        out = dict.fromkeys(range(PRIORITIES - 1, -1, -1), 0)
        for w in self.waves:
            out[w.priority] += w.size
        return out

    def due(self, batches_done: int) -> tuple[Wave, ...]:
        """The waves to produce once exactly ``batches_done`` batches are done."""
        return tuple(w for w in self.waves if w.after_batch == batches_done)


def _split(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` near-equal pieces, larger ones first (63, 63, 62, 62)."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def demo_workload(records: int, *, steady_waves: int = 4, burst_after: int = 2, poison: int = 0) -> Workload:
    """The demo's waves for ``records`` orders (at least one per wave), ``poison`` bad records in the backlog."""
    if steady_waves < 1 or burst_after < 1:
        raise ValueError(f"need steady_waves >= 1 and burst_after >= 1, got {steady_waves} and {burst_after}")
    if poison < 0:
        raise ValueError(f"poison records cannot be negative, got {poison}")
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
        bad = poison if (priority, after) == (POISON_PRIORITY, 0) else 0
        waves.append(Wave(priority, n, after, index, bad))
        index += n
    return Workload(tuple(waves))


def demo_record_budget(records: int, batches: int = 8) -> int:
    """A record budget that drains ``records`` in about ``batches`` full batches (at least 10 per batch)."""
    return max(10, math.ceil(records / batches))


def order_records(wave: Wave, *, base_ts_ms: int, seed: int = 7) -> list[tuple[str, str, int]]:
    """The wave's orders as ``(customer key, JSON value, timestamp_ms)``, deterministic per seed, 1 ms apart."""
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


def poison_value(kind: int, n: int) -> bytes:
    """A malformed order value of kind ``kind % 5`` (see POISON_KINDS), unique by ``n``; each breaks the schema its
    own way, so the dead letters show every error of the JSON handler and required fields."""
    order = f"o-{n:07d}"
    return [
        f"not json: order #{n}".encode(),
        b"\xff\xfe order #" + str(n).encode(),
        json.dumps([order, "c-0000", 1]).encode(),
        json.dumps({"order_id": order, "customer": "c-0000", "amount": "twelve"}, separators=(",", ":")).encode(),
        json.dumps({"order_id": order, "customer": "c-0000"}, separators=(",", ":")).encode(),
    ][kind % len(POISON_KINDS)]


def wave_records(wave: Wave, *, base_ts_ms: int, partitions: int, seed: int = 7) -> list[Record]:
    """What a wave produces: its orders (partitioned by key) with its poison evenly spaced among them; poison ``k``
    (key ``poison-<k>``) goes to partition ``k % partitions``, not by key, to spread them."""
    good = [Record(*r) for r in order_records(wave, base_ts_ms=base_ts_ms, seed=seed)]
    if not wave.poison:
        return good
    step = wave.records // (wave.poison + 1) or 1
    out: list[Record] = []
    k = 0
    for i, record in enumerate(good):
        if k < wave.poison and i == step * (k + 1):
            out.append(Record(f"poison-{k}", poison_value(k, wave.first_index + i), base_ts_ms + i, k % partitions))
            k += 1
        out.append(record)
    while k < wave.poison:  # fewer orders than poison: the rest at the end
        out.append(Record(f"poison-{k}", poison_value(k, wave.first_index + wave.records + k),
                          base_ts_ms + wave.records + k, k % partitions))
        k += 1
    return out
