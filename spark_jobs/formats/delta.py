"""``drain.format: delta``: one Delta Lake table per logical topic and root, one commit per batch and table.

Publish and reads are :mod:`spark_jobs.delta_table`'s; the upkeep (:mod:`spark_jobs.maintenance`) is here.

>>> import tempfile
>>> from kprio_core.config import DrainSettings
>>> root = tempfile.mkdtemp()
>>> tables = Delta(DrainSettings(format="delta", output_path=f"{root}/out", dead_letter_path=f"{root}/dead"))
>>> tables.scan_sql("output", "it's") == f"delta_scan('{root}/out/it''s')"
True
>>> tables.figures("output", "orders"), tables.publishes("output", "orders"), tables.data_files("output", "orders")
(None, [], [])
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from kprio_core.config import DrainSettings
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import CheckReport, DrainResult
from spark_jobs import delta_table
from spark_jobs import maintenance as upkeep
from spark_jobs.lake_readers import sql_literal
from spark_jobs.layout import OUTPUT, PRIORITY_DIR, filesystem
from spark_jobs.maintenance import Figures, Maintained, TableFile
from spark_jobs.tables import CHECKS_KEY, TableOutput, check_metadata


@dataclass(frozen=True)
class Delta(TableOutput):
    """Delta tables (delta-rs): the run's epoch is the version of the batch's transaction ``kprio:<batch id>``."""

    drain: DrainSettings
    versions: ClassVar[str] = "log entries"
    duckdb_extensions: ClassVar[tuple[str, ...]] = ("delta",)
    history: ClassVar[str] = "DeltaTable(path).history()"

    def uri(self, kind: str, logical_topic: str) -> str:
        return delta_table.table_uri(self.root_of(kind), logical_topic)

    def label(self, kind: str, logical_topic: str) -> str:
        return f"Delta table {self.uri(kind, logical_topic)}"

    def held_epoch(self, result: DrainResult) -> int | None:
        """The version of the batch's transaction in the output table."""
        from deltalake import DeltaTable

        uri = self.uri(OUTPUT, result.logical_topic)
        return DeltaTable(uri).transaction_version(delta_table.app_id(result.batch_id)) \
            if DeltaTable.is_deltatable(uri) else None

    def commit(self, kind: str, result: DrainResult, ranges: list[OffsetRange] | None,
               incarnations: Mapping[str, int] | None, checks: CheckReport | None, fence: int) -> int | None:
        done = delta_table.publish(result, root=self.root_of(kind), kind=kind, ranges=ranges, incarnations=incarnations,
                                   metadata={CHECKS_KEY: check_metadata(checks)} if checks is not None else {},
                                   epoch=fence)
        return None if done is None else done.version

    def read_rows(self, kind: str, logical_topic: str, *, batch_id: str | None = None,
                  columns: Iterable[str] | None = None) -> Any:
        return delta_table.read_table(self.root_of(kind), logical_topic, batch_id=batch_id, columns=columns)

    def live_files(self, kind: str, logical_topic: str) -> tuple[Any, ...]:
        return delta_table.live_files(self.root_of(kind), logical_topic)

    def publishes(self, kind: str, logical_topic: str) -> list[dict[str, Any]]:
        return delta_table.table_batches(self.root_of(kind), logical_topic)

    def scan_sql(self, kind: str, logical_topic: str) -> str:
        return f"delta_scan({sql_literal(self.uri(kind, logical_topic))})"

    def data_files(self, kind: str, logical_topic: str) -> list[str]:
        from deltalake import DeltaTable

        uri = self.uri(kind, logical_topic)
        return list(DeltaTable(uri).file_uris()) if DeltaTable.is_deltatable(uri) else []

    def headline(self, logical_topic: str, publishes: int, batches: int) -> str:
        return (f"{self.label(OUTPUT, logical_topic)}: {publishes} commits for {batches} batches (each "
                "commit's metadata names its batch, attempt and ranges; a retried batch replaces its rows in a commit "
                "more)")

    def how_to_query(self, logical_topic: str) -> list[str]:
        """With pandas, polars, deltalake, and Spark with the Delta jars."""
        table = self.uri(OUTPUT, logical_topic)
        return [f"query the table: python -c \"from deltalake import DeltaTable; "
                f"print(DeltaTable('{table}').to_pandas().groupby('priority').size())\"",
                f"  polars: pl.read_delta('{table}'); its log: DeltaTable('{table}').history()",
                f"  Spark with the Delta jars (io.delta:delta-spark): spark.read.format('delta').load('{table}')"]

    def figures(self, kind: str, logical_topic: str) -> Figures | None:
        import pyarrow.fs as pafs
        from deltalake import DeltaTable

        uri = self.uri(kind, logical_topic)
        if not DeltaTable.is_deltatable(uri):
            return None
        actions = DeltaTable(uri).get_add_actions(flatten=True)
        fs, base = filesystem(uri)
        log = [f for f in fs.get_file_info(pafs.FileSelector(f"{base}/_delta_log", allow_not_found=True))
               if f.path.endswith(".json")]
        return Figures(actions.num_rows, sum(actions.column("size_bytes").to_pylist()), len(log))

    def maintain(self, kind: str, logical_topic: str, now: float) -> Maintained | None:
        before = self.figures(kind, logical_topic)
        if before is None:
            return None
        uri = self.uri(kind, logical_topic)
        compacted, retries = _compact(uri, self.drain.maintenance)
        deleted = _vacuum(uri, self.drain.maintenance.retention_s)
        return Maintained(uri, before, self.figures(kind, logical_topic), compacted, deleted, 0, retries)


def _files(table: Any) -> list[TableFile]:
    actions = table.get_add_actions(flatten=True)
    out = []
    for path, size in zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist(), strict=True):
        priority_dir, _, file_name = path.partition("/")
        parsed, match = delta_table.parse_published(file_name), PRIORITY_DIR.match(priority_dir)
        if parsed is None or match is None:
            continue
        name, batch_id, attempt = parsed
        out.append(TableFile(path, (int(match.group(1)), name.incarnation), name.range, batch_id, attempt, size))
    return out


def _compact(uri: str, settings: Any) -> tuple[int, int]:
    """Compact on the version the plan read, planning again if a publish landed; ``(runs compacted, retries)``."""
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import AddAction, CommitProperties, RemoveAction

    fs, base = filesystem(uri)
    for retries in range(upkeep.COMMIT_RETRIES):
        table = DeltaTable(uri)
        runs = upkeep.compaction_runs(_files(table), target_bytes=settings.target_file_mb << 20,
                                      min_files=settings.min_files)
        if not runs:
            return 0, retries
        actions, now_ms = [], int(time.time() * 1000)
        for run in runs:
            priority_dir = run[0].path.partition("/")[0]
            rel = f"{priority_dir}/{upkeep.merged_name(run)}"
            rows = upkeep.write_merged(fs, [f"{base}/{f.path}" for f in run], f"{base}/{rel}")
            info = fs.get_file_info(f"{base}/{rel}")
            actions.append(AddAction(rel, info.size, {"priority": priority_dir.split("=", 1)[1]}, now_ms, False,
                                     f'{{"numRecords": {rows}}}'))
            actions += [RemoveAction(path=f.path, data_change=False, deletion_timestamp=now_ms, size=f.size,
                                     partition_values={"priority": priority_dir.split("=", 1)[1]}) for f in run]
        try:
            table.create_write_transaction(actions, mode="append", schema=table.schema(), partition_by=["priority"],
                                           commit_properties=CommitProperties(
                                               custom_metadata={upkeep.MAINTENANCE_KEY: f"compact {len(runs)} runs"},
                                               max_commit_retries=0))
        except CommitFailedError:  # a publish landed meanwhile: plan again on its version (the new files stay unread)
            continue
        return len(runs), retries
    return 0, upkeep.COMMIT_RETRIES


def _vacuum(uri: str, retention_s: float) -> int:
    """The files no version within the retention needs vacuumed, a checkpoint, the older log cleaned; files deleted."""
    from deltalake import DeltaTable
    from deltalake.transaction import CommitProperties

    table = DeltaTable(uri)
    retention = f"interval {math.ceil(retention_s)} seconds"
    wanted = {"delta.logRetentionDuration": retention, "delta.deletedFileRetentionDuration": retention}
    if any(table.metadata().configuration.get(k) != v for k, v in wanted.items()):
        table.alter.set_table_properties(wanted, commit_properties=CommitProperties(
            max_commit_retries=upkeep.COMMIT_RETRIES))
        table = DeltaTable(uri)
    # The vacuum reads the removes in the log: before the cleanup takes the log entries that hold them.
    deleted = table.vacuum(retention_hours=math.ceil(retention_s / 3600), dry_run=False,
                           enforce_retention_duration=False, commit_properties=CommitProperties(
                               max_commit_retries=upkeep.COMMIT_RETRIES))
    table = DeltaTable(uri)
    table.create_checkpoint()
    table.cleanup_metadata()
    return len(deleted)
