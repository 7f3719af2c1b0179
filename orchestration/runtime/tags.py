"""The tags kprio puts on every run it orders, whichever orchestrator carries the run out.

The applier (:mod:`orchestration.runtime.tick`) tags each run it launches with the logical topic,
which attempt the run is for and why, and one tag per priority slot the batch takes, which the
shipped ``dagster.yaml`` limits to ``planner.max_in_flight`` runs per value. A run a kprio process
executes itself carries that process as its runner.

>>> slot_tags("orders", {2, 0})
{'kprio/slot-p0': 'orders', 'kprio/slot-p2': 'orders'}
"""

from __future__ import annotations

from collections.abc import Iterable

TOPIC_TAG = "kprio/logical_topic"
ATTEMPT_TAG = "kprio/attempt"
WHY_TAG = "kprio/why"
SLOT_TAG_PREFIX = "kprio/slot-p"
RUNNER_TAG = "kprio/runner"
"""On runs a kprio process executes itself (``kprio drain``, ``kprio retry``): that process, as a
lease owner string, so a run left STARTED by a killed process is known dead (no run monitoring
watches an in-process run)."""


def slot_tags(logical_topic: str, priorities: Iterable[int]) -> dict[str, str]:
    """One tag per priority slot a batch takes: ``kprio/slot-p<n>=<logical topic>``."""
    return {f"{SLOT_TAG_PREFIX}{p}": logical_topic for p in sorted(priorities)}
