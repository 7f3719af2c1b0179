"""Dagster's own run tags kprio reads, and who launched a run of a batch (as :mod:`kprio_core.lifecycle.run` names it).

Every run of a batch partition carries ``dagster/partition=<batch id>`` whatever launched it; kprio's own tags are
in :mod:`orchestration.runtime.tags`.

>>> intent_of({"kprio/attempt": "2", "kprio/why": "retry"})
Intent(kind=<Launcher.SENSOR: 'sensor'>, attempt=2, why=<LaunchReason.RETRY: 'retry'>)
>>> intent_of({"kprio/attempt": "2", "dagster/retry_number": "1"}).kind, intent_of({}).kind
(<Launcher.ORCHESTRATOR_RETRY: 'orchestrator-retry'>, <Launcher.OPERATOR: 'operator'>)
"""

from __future__ import annotations

from collections.abc import Mapping

from kprio_core.lifecycle.run import Intent, Launcher, LaunchReason
from orchestration.runtime.tags import ATTEMPT_TAG, WHY_TAG

PARTITION_TAG = "dagster/partition"
RUN_KEY_TAG = "dagster/run_key"
"""The tag Dagster stores a run's run key under (the daemon dedupes run keys with it)."""
RETRY_NUMBER_TAG = "dagster/retry_number"
"""Set by Dagster's run-retry daemon on the runs it launches."""
MAX_RETRIES_TAG = "dagster/max_retries"
"""How often Dagster's retry daemon re-executes a failed run; ``"0"`` on ``kprio drain``'s runs (its tick retries)."""
SENSOR_NAME_TAG = "dagster/sensor_name"


def intent_of(tags: Mapping[str, str]) -> Intent:
    """The launcher of a run from its tags (a Dagster retry keeps its parent's kprio tags)."""
    attempt = int(tags[ATTEMPT_TAG]) if tags.get(ATTEMPT_TAG, "").isdigit() else None
    why = LaunchReason.parse(tags.get(WHY_TAG))
    if RETRY_NUMBER_TAG in tags:
        return Intent(Launcher.ORCHESTRATOR_RETRY, attempt, why)
    if attempt is not None:
        return Intent(Launcher.SENSOR, attempt, why)
    return Intent(Launcher.OPERATOR)
