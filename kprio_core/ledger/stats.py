"""Drain stats of a batch: their shape, and the records and bytes they hold per priority topic.

``mark_drained`` takes a dict with a ``ranges`` list, one entry per drained range with at least
``topic``, ``records`` and ``bytes`` (more keys are kept as they are). 29 records of 200 B plus
one of 200 B from orders-2 make 6000 B over 30 records:

>>> topic_totals({"ranges": [
...     {"topic": "orders-2", "partition": 0, "start": 0, "end": 29, "records": 29, "bytes": 5800},
...     {"topic": "orders-2", "partition": 1, "start": 7, "end": 8, "records": 1, "bytes": 200},
... ]}, where="b-000001")
{'orders-2': (30, 6000)}
>>> topic_totals({"ranges": [{"topic": "orders-2", "records": -1, "bytes": 0}]}, where="b-000001")
Traceback (most recent call last):
...
kprio_core.errors.DrainStatsInvalid: drain stats of b-000001: ranges[0].records must be an integer >= 0, got -1
"""

from __future__ import annotations

from collections.abc import Mapping

from kprio_core.errors import DrainStatsInvalid


def topic_totals(stats: Mapping, *, where: str) -> dict[str, tuple[int, int]]:
    """(records, bytes) per priority topic; a stats dict without ``ranges`` gives {}."""
    if not isinstance(stats, Mapping):
        raise DrainStatsInvalid(f"drain stats of {where}: expected a dict, got {type(stats).__name__}")
    entries = stats.get("ranges", [])
    if not isinstance(entries, list):
        raise DrainStatsInvalid(f"drain stats of {where}: 'ranges' must be a list, got {type(entries).__name__}")
    totals: dict[str, tuple[int, int]] = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise DrainStatsInvalid(f"drain stats of {where}: ranges[{i}] must be a dict, got {type(entry).__name__}")
        topic = entry.get("topic")
        if not isinstance(topic, str) or not topic:
            raise DrainStatsInvalid(f"drain stats of {where}: ranges[{i}].topic must be a topic name, got {topic!r}")
        records, size = (_count(entry, key, i, where) for key in ("records", "bytes"))
        old_records, old_bytes = totals.get(topic, (0, 0))
        totals[topic] = (old_records + records, old_bytes + size)
    return totals


def _count(entry: Mapping, key: str, i: int, where: str) -> int:
    value = entry.get(key)
    # bool is an int subclass; True records is a bug upstream, not a count.
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise DrainStatsInvalid(f"drain stats of {where}: ranges[{i}].{key} must be an integer >= 0, got {value!r}")
    return value
