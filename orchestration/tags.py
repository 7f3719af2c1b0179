"""Run tags kprio reads and writes, and who launched a run of a batch (as :mod:`kprio_core.lifecycle.run` names it).

Every run of a batch partition carries ``dagster/partition=<batch id>`` whatever launched it
(the sensor, a backfill, the asset page, a retry). The sensor adds which attempt the run is for
and why, and one tag per priority slot the batch takes, which the shipped ``dagster.yaml``
limits to ``planner.max_in_flight`` runs per value.

>>> slot_tags("orders", {2, 0})
{'kprio/slot-p0': 'orders', 'kprio/slot-p2': 'orders'}
>>> intent_of({"kprio/attempt": "2", "kprio/why": "retry"})
Intent(kind=<Launcher.SENSOR: 'sensor'>, attempt=2, why=<LaunchReason.RETRY: 'retry'>)
>>> intent_of({"kprio/attempt": "2", "dagster/retry_number": "1"}).kind, intent_of({}).kind
(<Launcher.DAGSTER_RETRY: 'dagster-retry'>, <Launcher.OPERATOR: 'operator'>)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kprio_core.lifecycle.run import Intent, LaunchReason, Launcher

PARTITION_TAG = "dagster/partition"
RUN_KEY_TAG = "dagster/run_key"
"""The tag Dagster stores a run's run key under (the daemon dedupes run keys with it)."""
RETRY_NUMBER_TAG = "dagster/retry_number"
"""Set by Dagster's run-retry daemon on the runs it launches."""
BACKFILL_TAG = "dagster/backfill"
SENSOR_NAME_TAG = "dagster/sensor_name"
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


def intent_of(tags: Mapping[str, str]) -> Intent:
    """The launcher of a run from its tags (a Dagster retry keeps its parent's kprio tags)."""
    attempt = int(tags[ATTEMPT_TAG]) if tags.get(ATTEMPT_TAG, "").isdigit() else None
    why = LaunchReason.parse(tags.get(WHY_TAG))
    if RETRY_NUMBER_TAG in tags:
        return Intent(Launcher.DAGSTER_RETRY, attempt, why)
    if attempt is not None:
        return Intent(Launcher.SENSOR, attempt, why)
    return Intent(Launcher.OPERATOR)
