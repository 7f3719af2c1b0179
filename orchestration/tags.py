"""Run tags kprio reads and writes, and who launched a run of a batch.

Every run of a batch partition carries ``dagster/partition=<batch id>`` whatever launched it
(the sensor, a backfill, the asset page, a retry). The sensor adds which attempt the run is for
and why, and one tag per priority slot the batch takes, which the shipped ``dagster.yaml``
limits to ``planner.max_in_flight`` runs per value.

>>> slot_tags("orders", {2, 0})
{'kprio/slot-p0': 'orders', 'kprio/slot-p2': 'orders'}
>>> intent_of({"kprio/attempt": "2", "kprio/why": "retry"})
Intent(kind=<Launcher.SENSOR: 'sensor'>, attempt=2, why='retry')
>>> intent_of({"kprio/attempt": "2", "dagster/retry_number": "1"}).kind, intent_of({}).kind
(<Launcher.DAGSTER_RETRY: 'dagster-retry'>, <Launcher.OPERATOR: 'operator'>)
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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


class Launcher(str, enum.Enum):
    """Who asked for a run of a batch."""

    SENSOR = "sensor"
    """priority_lag_sensor (or ``kprio drain``): for a given attempt."""
    DAGSTER_RETRY = "dagster-retry"
    """Dagster's run-retry daemon, after a failed run."""
    OPERATOR = "operator"
    """A person: the asset page, the asset graph, the job page, a backfill, ``kprio retry``."""


@dataclass(frozen=True)
class Intent:
    """Who launched a run, and for which attempt and why when the sensor did."""

    kind: Launcher
    attempt: int | None = None
    why: str | None = None


def intent_of(tags: Mapping[str, str]) -> Intent:
    """The launcher of a run from its tags (a Dagster retry keeps its parent's kprio tags)."""
    attempt = int(tags[ATTEMPT_TAG]) if tags.get(ATTEMPT_TAG, "").isdigit() else None
    if RETRY_NUMBER_TAG in tags:
        return Intent(Launcher.DAGSTER_RETRY, attempt, tags.get(WHY_TAG))
    if attempt is not None:
        return Intent(Launcher.SENSOR, attempt, tags.get(WHY_TAG))
    return Intent(Launcher.OPERATOR)
