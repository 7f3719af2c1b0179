"""Partitions of kprio's assets: one dynamic partition per batch, one hourly partition per replay window.

A batch partition is keyed by the ledger's batch id (``b-000042``), added when the ledger records the batch
(sensor, ``plan_batch_job``, a split), so a backfill of chosen partitions re-drains exactly those batches. Replay
windows are UTC hours from ``drain.replay_start`` (a fixed date, so the definitions do not change day to day)
through the hour running now, which replays what has arrived so far.

>>> replay_start("2026-11-01"), replay_start("2026-11-14-05:00")
('2026-11-01-00:00', '2026-11-14-05:00')
>>> window_bounds_ms(dg.TimeWindow(datetime(2023, 11, 14, 22, tzinfo=UTC), datetime(2023, 11, 14, 23, tzinfo=UTC)))
(1699999200000, 1700002800000)
>>> window_batch_id("2026-11-14-05:00")
'w-20261114T0500'
"""

from __future__ import annotations

from datetime import UTC, datetime  # noqa: F401 - UTC: the doctest's

import dagster as dg

from kprio_core.config import REPLAY_HOUR_FORMAT, parse_replay_start
from kprio_core.errors import ConfigError

BATCH_PARTITIONS_NAME = "kprio_batches"
HOUR_FORMAT = REPLAY_HOUR_FORMAT

batch_partitions = dg.DynamicPartitionsDefinition(name=BATCH_PARTITIONS_NAME)
"""One partition per ledger batch, keyed by its batch id."""


def replay_start(configured: str) -> str:
    """The first replay hour, from ``drain.replay_start`` ('YYYY-MM-DD' or 'YYYY-MM-DD-HH:00', checked at load)."""
    try:
        return parse_replay_start(configured).strftime(HOUR_FORMAT)
    except ValueError as err:
        raise ConfigError(str(err), where="drain.replay_start") from None


def replay_partitions(configured_start: str) -> dg.HourlyPartitionsDefinition:
    """Hourly UTC partitions from ``drain.replay_start`` through the hour running now (``end_offset=1``)."""
    return dg.HourlyPartitionsDefinition(start_date=replay_start(configured_start), timezone="UTC", end_offset=1)


def window_bounds_ms(window: dg.TimeWindow) -> tuple[int, int]:
    """``[start, end)`` of a time window in epoch milliseconds (what offsets-for-times takes)."""
    return int(window.start.timestamp() * 1000), int(window.end.timestamp() * 1000)


def window_batch_id(partition_key: str) -> str:
    """The output id of a replay window: ``2026-11-14-05:00`` -> ``w-20261114T0500`` (path-safe)."""
    return "w-" + datetime.strptime(partition_key, HOUR_FORMAT).strftime("%Y%m%dT%H%M")
