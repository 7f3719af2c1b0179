"""The tags kprio puts on every run it orders, whichever orchestrator carries the run out.

The applier (:mod:`orchestration.runtime.tick`) tags each run with the logical topic, the attempt and why, and
one tag per priority slot the batch takes (the shipped ``dagster.yaml`` limits each to ``planner.max_in_flight``).

>>> slot_tags("orders", {2, 0})
{'kprio/slot-p0': 'orders', 'kprio/slot-p2': 'orders'}
>>> sorted(slot_priorities({"kprio/slot-p0": "orders", "kprio/slot-p2": "orders", "kprio/why": "new"}))
[0, 2]
>>> lane_tag({2, 0}, priorities=3), lane_tag({1, 0}, priorities=3)
({'kprio/lane': 'urgent'}, {'kprio/lane': 'bulk'})
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

TOPIC_TAG = "kprio/logical_topic"
ATTEMPT_TAG = "kprio/attempt"
WHY_TAG = "kprio/why"
SLOT_TAG_PREFIX = "kprio/slot-p"
RUNNER_TAG = "kprio/runner"
"""The process working on a run (a lease owner string): its launching driver, then the warm worker executing it,
so a run left STARTED by a dead process is known dead at once (the tick fails it and resumes its batch)."""
LANE_TAG = "kprio/lane"
"""``urgent`` when the batch drains its topic's most urgent priority, else ``bulk``: its warm workers' lane."""


def slot_tags(logical_topic: str, priorities: Iterable[int]) -> dict[str, str]:
    """One tag per priority slot a batch takes: ``kprio/slot-p<n>=<logical topic>``."""
    return {f"{SLOT_TAG_PREFIX}{p}": logical_topic for p in sorted(priorities)}


def slot_priorities(tags: Mapping[str, str]) -> frozenset[int]:
    """The priorities whose slots a run's batch takes, from its slot tags."""
    return frozenset(int(k[len(SLOT_TAG_PREFIX):]) for k in tags if k.startswith(SLOT_TAG_PREFIX))


def lane_tag(batch_priorities: Iterable[int], priorities: int) -> dict[str, str]:
    """The lane tag of a batch draining ``batch_priorities`` of a logical topic with ``priorities`` levels."""
    return {LANE_TAG: "urgent" if priorities - 1 in set(batch_priorities) else "bulk"}
