"""Table maintenance as scheduled work: the output and dead-letter tables of every logical topic, in one call.

Dagster's ``tables_maintenance_job``, Airflow's ``kprio_maintain`` and ``kprio tables maintain`` all run
:func:`maintain_tables`; :mod:`spark_jobs.maintenance` does the work per table within ``drain.maintenance``.
Parquet output has no table to maintain: the report says so and nothing is touched.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kprio_core.config import KprioConfig
from kprio_core.errors import KprioError, MaintenanceFailed


@dataclass(frozen=True)
class MaintenanceReport:
    """What one maintenance did to every table it visited, with the figures before and after."""

    format: str
    versions: str | None = None
    """What the format's tables keep versions as (``log entries``, ``snapshots``); None: it keeps no table."""
    tables: tuple[Any, ...] = field(default_factory=tuple)
    """:class:`spark_jobs.maintenance.Maintained`, one per table."""
    seconds: float = 0.0

    def totals(self) -> dict[str, int]:
        """The figures summed over the tables (what Dagster plots run after run)."""
        out: dict[str, int] = {}
        for done in self.tables:
            for key, value in done.metadata().items():
                out[key] = out.get(key, 0) + value
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "seconds": round(self.seconds, 3), "totals": self.totals(),
                "tables": {done.table: done.metadata() for done in self.tables}}

    def lines(self) -> list[str]:
        """One line per table: files, bytes and versions before -> after, what was compacted and deleted.

        >>> MaintenanceReport("parquet").lines()
        ['drain.format is parquet: no table to maintain']
        """
        if self.versions is None:
            return [f"drain.format is {self.format}: no table to maintain"]
        if not self.tables:
            return ["no table yet: nothing published"]
        return [f"{d.table}: files {d.before.files} -> {d.after.files}, bytes {d.before.bytes} -> {d.after.bytes}, "
                f"{self.versions} {d.before.snapshots} -> {d.after.snapshots}; {d.compacted_runs} runs compacted, "
                f"{d.files_deleted} files deleted, {d.snapshots_expired} snapshots expired" for d in self.tables]


def maintain_tables(config: KprioConfig, topics: Iterable[str] | None = None) -> MaintenanceReport:
    """Maintain the tables of ``topics`` (default: all); :class:`~kprio_core.errors.MaintenanceFailed` names the topic
    and cause when one fails (those before it stay maintained; a rerun takes up where it left off)."""
    from spark_jobs.maintenance import maintain
    from spark_jobs.tables import output_of

    names = list(topics) if topics is not None else [t.name for t in config.topics]
    started = time.monotonic()
    done: list[Any] = []
    for name in names:
        try:
            done += maintain(config.drain, name)
        except KprioError:
            raise
        except Exception as err:  # delta-rs, pyiceberg and the catalog raise their own types
            first = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise MaintenanceFailed(f"maintaining the {config.drain.format.value} tables of {name!r} failed: {first}",
                                    where=config.drain.output_path) from err
    tables = output_of(config.drain)
    return MaintenanceReport(config.drain.format.value, tables.versions if tables.tables else None, tuple(done),
                             time.monotonic() - started)
