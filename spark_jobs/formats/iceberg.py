"""``drain.format: iceberg``: one Apache Iceberg table per logical topic and root, one snapshot per batch and table.

Publish is :mod:`spark_jobs.iceberg_table`'s, finding and reading :mod:`spark_jobs.iceberg_catalog`'s; the upkeep
(:mod:`spark_jobs.maintenance`) is here. pyiceberg expires snapshots from the metadata only: the files only they
named are deleted here.

>>> import tempfile
>>> from kprio_core.config import DrainSettings
>>> root = tempfile.mkdtemp()
>>> tables = Iceberg(DrainSettings(format="iceberg", output_path=f"{root}/out", dead_letter_path=f"{root}/dead",
...                                iceberg={"catalog": {"type": "sql", "uri": f"sqlite:///{root}/catalog.db"}}))
>>> tables.name("dead-letters", "orders"), tables.figures("output", "orders"), tables.data_files("output", "orders")
('kprio.orders_dead_letters', None, [])
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from kprio_core.config import DrainSettings
from kprio_core.errors import OutputUnavailable
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import CheckReport, DrainResult
from spark_jobs import iceberg_catalog, iceberg_table
from spark_jobs import maintenance as upkeep
from spark_jobs.lake_readers import sql_literal
from spark_jobs.layout import OUTPUT, filesystem
from spark_jobs.maintenance import Figures, Maintained, TableFile
from spark_jobs.tables import CHECKS_KEY, TableOutput, check_metadata


@dataclass(frozen=True)
class Iceberg(TableOutput):
    """Iceberg tables (pyiceberg): the run's epoch in the batch's snapshot summary (``kprio.epoch``)."""

    drain: DrainSettings
    versions: ClassVar[str] = "snapshots"
    data_dir: ClassVar[str] = "data"  # <table>/data/priority=<p>
    duckdb_extensions: ClassVar[tuple[str, ...]] = ("avro", "iceberg")  # avro first: iceberg would fetch it
    version_key: ClassVar[str] = "snapshot_id"
    version_word: ClassVar[str] = "snapshot"
    history: ClassVar[str] = "table.snapshots()"

    def name(self, kind: str, logical_topic: str) -> str:
        return ".".join(iceberg_catalog.identifier(self.drain.iceberg, kind, logical_topic))

    def label(self, kind: str, logical_topic: str) -> str:
        return f"Iceberg table {self.name(kind, logical_topic)}"

    def held_epoch(self, result: DrainResult) -> int | None:
        """The newest epoch the output table's snapshots record for the batch."""
        table = iceberg_catalog.load(self.drain.iceberg, OUTPUT, result.logical_topic)
        return None if table is None else iceberg_table.held_epoch(table, result.batch_id)

    def commit(self, kind: str, result: DrainResult, ranges: list[OffsetRange] | None,
               incarnations: Mapping[str, int] | None, checks: CheckReport | None, fence: int) -> str | None:
        summary = {CHECKS_KEY: json.dumps(check_metadata(checks))} if checks is not None else {}
        done = iceberg_table.publish(self.drain.iceberg, result, root=self.root_of(kind), kind=kind, ranges=ranges,
                                     incarnations=incarnations, summary=summary, epoch=fence)
        return None if done is None or done.snapshot_id is None else str(done.snapshot_id)

    def read_rows(self, kind: str, logical_topic: str, *, batch_id: str | None = None,
                  columns: Iterable[str] | None = None) -> Any:
        return iceberg_catalog.read_table(self.drain.iceberg, self.root_of(kind), kind, logical_topic,
                                          batch_id=batch_id, columns=columns)

    def live_files(self, kind: str, logical_topic: str) -> tuple[Any, ...]:
        return iceberg_catalog.live_files(self.drain.iceberg, self.root_of(kind), kind, logical_topic)

    def publishes(self, kind: str, logical_topic: str) -> list[dict[str, Any]]:
        return iceberg_catalog.table_batches(self.drain.iceberg, self.root_of(kind), kind, logical_topic)

    def scan_sql(self, kind: str, logical_topic: str) -> str:
        """``iceberg_scan`` of the current metadata file (no table: :class:`~kprio_core.errors.OutputUnavailable`)."""
        table = iceberg_catalog.load(self.drain.iceberg, kind, logical_topic)
        if table is None:
            raise OutputUnavailable(f"no Iceberg table {self.name(kind, logical_topic)} in the catalog "
                                    f"{self.drain.iceberg.catalog_name!r} yet")
        return f"iceberg_scan({sql_literal(table.metadata_location)})"

    def data_files(self, kind: str, logical_topic: str) -> list[str]:
        table = iceberg_catalog.load(self.drain.iceberg, kind, logical_topic)
        return [] if table is None else [f.file_path for f in iceberg_catalog.live_data_files(table)]

    def headline(self, logical_topic: str, publishes: int, batches: int) -> str:
        catalog = self.drain.iceberg.catalog.get("uri", self.drain.iceberg.catalog_name).removeprefix("sqlite:///")
        return (f"{self.label(OUTPUT, logical_topic)} ({self.root_of(OUTPUT).rstrip('/')}/{logical_topic}, "
                f"catalog {catalog}): {publishes} snapshots for {batches} batches (each snapshot's summary names its "
                "batch, attempt, epoch and ranges)")

    def how_to_query(self, logical_topic: str) -> list[str]:
        """With pyiceberg and DuckDB."""
        uri = self.drain.iceberg.catalog.get("uri", "")
        return [f"query the table: python -c \"from pyiceberg.catalog.sql import SqlCatalog; print(SqlCatalog("
                f"'{self.drain.iceberg.catalog_name}', uri='{uri}').load_table('{self.name(OUTPUT, logical_topic)}')"
                ".scan().to_pandas().groupby('priority').size())\"",
                "  DuckDB (its iceberg extension): SELECT count(*) FROM iceberg_scan('<the table's "
                "metadata_location>'); kprio's connection: spark_jobs.lake_readers.duckdb_connection()"]

    def figures(self, kind: str, logical_topic: str) -> Figures | None:
        table = iceberg_catalog.load(self.drain.iceberg, kind, logical_topic)
        if table is None:
            return None
        files = iceberg_catalog.live_data_files(table)
        return Figures(len(files), sum(f.file_size_in_bytes for f in files), len(table.metadata.snapshots))

    def maintain(self, kind: str, logical_topic: str, now: float) -> Maintained | None:
        before = self.figures(kind, logical_topic)
        if before is None:
            return None
        fs, _ = filesystem(self.root_of(kind))
        compacted, retries = self._compact(kind, logical_topic, fs)
        expired, deleted = self._expire(kind, logical_topic, fs, now)
        return Maintained(self.name(kind, logical_topic), before, self.figures(kind, logical_topic), compacted, deleted,
                          expired, retries)

    def _compact(self, kind: str, logical_topic: str, fs: Any) -> tuple[int, int]:
        """Compact in an overwrite snapshot on the plan's, planned again if a publish landed; ``(runs, retries)``."""
        from pyiceberg.exceptions import CommitFailedException
        from pyiceberg.io.pyarrow import parquet_file_to_data_file

        settings = self.drain.maintenance
        for retries in range(upkeep.COMMIT_RETRIES):
            table = iceberg_catalog.load(self.drain.iceberg, kind, logical_topic)
            runs = upkeep.compaction_runs(_files(table), target_bytes=settings.target_file_mb << 20,
                                   min_files=settings.min_files)
            if not runs:
                return 0, retries
            tx = table.transaction()
            done = {upkeep.MAINTENANCE_KEY: f"compact {len(runs)} runs"}
            with tx.update_snapshot(snapshot_properties=done).overwrite() as o:
                for run in runs:
                    target = f"{iceberg_catalog._path(run[0].path).rpartition('/')[0]}/{upkeep.merged_name(run)}"
                    upkeep.write_merged(fs, [iceberg_catalog._path(f.path) for f in run], target)
                    o.append_data_file(parquet_file_to_data_file(table.io, tx.table_metadata,
                                                                 iceberg_catalog._uri(fs, target)))
                    for f in run:
                        o.delete_data_file(f.handle)
            try:
                tx.commit_transaction()
            except CommitFailedException:  # a publish landed meanwhile: plan again on its snapshot
                continue
            return len(runs), retries
        return 0, upkeep.COMMIT_RETRIES

    def _expire(self, kind: str, logical_topic: str, fs: Any, now: float) -> tuple[int, int]:
        """Expire snapshots older than the retention but the newest ``keep_snapshots``, delete files only they named
        (under the table's location); ``(snapshots expired, files deleted)``."""
        from pyiceberg.exceptions import CommitFailedException

        settings = self.drain.maintenance
        for _ in range(upkeep.COMMIT_RETRIES):
            table = iceberg_catalog.load(self.drain.iceberg, kind, logical_topic)
            snapshots = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)
            keep = {s.snapshot_id for s in snapshots[-settings.keep_snapshots:]} | {table.metadata.current_snapshot_id}
            cutoff_ms = (now - settings.retention_s) * 1000
            old = [s for s in snapshots if s.snapshot_id not in keep and s.timestamp_ms < cutoff_ms]
            if not old:
                return 0, 0
            candidates = _referenced(table, old)
            try:
                table.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in old]).commit()
            except CommitFailedException:
                continue
            table = iceberg_catalog.load(self.drain.iceberg, kind, logical_topic)
            prefix = table.metadata.location.rstrip("/") + "/"
            gone = 0
            for uri in sorted(candidates - _referenced(table, table.metadata.snapshots)):
                if uri.startswith(prefix):
                    try:
                        fs.delete_file(iceberg_catalog._path(uri))
                        gone += 1
                    except FileNotFoundError:
                        pass
            return len(old), gone
        return 0, 0


def _files(table: Any) -> list[TableFile]:
    out = []
    for data_file in iceberg_catalog.live_data_files(table):
        parsed = iceberg_catalog.parse_data_file(data_file.file_path)
        if parsed is None:
            continue
        priority, name, batch_id, attempt = parsed
        # An Iceberg file lies in one partition (priority, hour): only files of one partition share a file.
        out.append(TableFile(data_file.file_path, (priority, str(data_file.partition), name.incarnation), name.range,
                             batch_id, attempt, data_file.file_size_in_bytes, data_file))
    return out


def _referenced(table: Any, snapshots: Iterable[Any]) -> set[str]:
    """Every file the snapshots name: their manifest lists, manifests and data files."""
    out: set[str] = set()
    for snapshot in snapshots:
        out.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            out.add(manifest.manifest_path)
            out |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False)}
    return out
