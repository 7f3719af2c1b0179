"""Partitions of kprio's assets: one dynamic partition per batch, one hourly partition per replay window.

Batch partitions are keyed by the ledger's batch id (``b-000042``): the sensor (or the manual
``plan_batch_job``) adds the key when it records the plan, so a backfill of chosen batch
partitions re-drains exactly those batches. Replay windows are UTC hours.

>>> replay_start(None, today=datetime(2026, 11, 21, 13, 7, tzinfo=UTC))
'2026-11-14-00:00'
>>> replay_start("2026-11-01", today=datetime(2026, 11, 21, tzinfo=UTC))
'2026-11-01-00:00'
>>> window_bounds_ms(dg.TimeWindow(datetime(2023, 11, 14, 22, tzinfo=UTC), datetime(2023, 11, 14, 23, tzinfo=UTC)))
(1699999200000, 1700002800000)
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg

from kprio_core.errors import ConfigError

BATCH_PARTITIONS_NAME = "kprio_batches"
HOUR_FORMAT = "%Y-%m-%d-%H:%M"
DEFAULT_REPLAY_DAYS = 7

batch_partitions = dg.DynamicPartitionsDefinition(name=BATCH_PARTITIONS_NAME)
"""One partition per ledger batch, keyed by its batch id."""


def replay_start(configured: str | None, *, today: datetime | None = None) -> str:
    """The first replay hour: the configured date/hour, or midnight UTC 7 days before ``today``."""
    if configured:
        for fmt in (HOUR_FORMAT, "%Y-%m-%d"):
            try:
                return datetime.strptime(configured, fmt).strftime(HOUR_FORMAT)
            except ValueError:
                continue
        raise ConfigError(f"drain.replay_start: {configured!r} is not 'YYYY-MM-DD' or 'YYYY-MM-DD-HH:00'")
    now = today or datetime.now(UTC)
    start = (now - timedelta(days=DEFAULT_REPLAY_DAYS)).replace(hour=0, minute=0, second=0, microsecond=0)
    return start.strftime(HOUR_FORMAT)


def replay_partitions(configured_start: str | None) -> dg.HourlyPartitionsDefinition:
    """Hourly UTC partitions of the time-window replay, from :func:`replay_start`."""
    return dg.HourlyPartitionsDefinition(start_date=replay_start(configured_start), timezone="UTC")


def window_bounds_ms(window: dg.TimeWindow) -> tuple[int, int]:
    """``[start, end)`` of a time window in epoch milliseconds (what offsets-for-times takes)."""
    return int(window.start.timestamp() * 1000), int(window.end.timestamp() * 1000)


def window_batch_id(partition_key: str) -> str:
    """The output id of a replay window: ``2026-11-14-05:00`` -> ``w-20261114T0500`` (path-safe).

    >>> window_batch_id("2026-11-14-05:00")
    'w-20261114T0500'
    """
    return "w-" + datetime.strptime(partition_key, HOUR_FORMAT).strftime("%Y%m%dT%H%M")
