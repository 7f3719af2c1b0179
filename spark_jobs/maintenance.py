"""Scheduled upkeep of kprio's Delta and Iceberg tables: compaction, checkpoints, vacuum, snapshot expiry.

A table fed every couple of seconds (``kprio drain --follow``) gains a few small files per batch:
after a day, tens of thousands, and every reader slows. :func:`maintain` keeps a table healthy, per
table, in steps that each commit as a transaction of their own and never remove a row:

1. **compact**: a run of adjacent small files of one partition (the same priority, hour, Kafka
   partition and incarnation, their ranges following on) is rewritten as one file of about
   ``drain.maintenance.target_file_mb``, named by the range the run covers and the newest batch in it
   (:func:`compaction_runs` is kprio's rule; the run's rows are read and written with pyarrow). The
   commit replaces the run's files by the new one (Delta: removes and an add with ``dataChange``
   false; Iceberg: an overwrite snapshot with ``kprio.maintenance: compact`` in its summary, no batch)
   on the table state the plan read; a commit that lost the race to a batch's publish is planned
   again on the new state, so a publish in flight never waits and never loses a row. Not delta-rs'
   ``optimize.compact``: its files are named by delta-rs, and kprio's names are the evidence a publish
   replaces by (a re-drain removes the files of its ranges) and an adoption after a lost ledger reads;
2. **Delta**: the files no version within the retention needs vacuumed (``vacuum``), then a
   checkpoint (``create_checkpoint``) and the log entries older than the retention cleaned up
   (``cleanup_metadata``, the table's ``delta.logRetentionDuration`` set to it);
   **Iceberg**: the snapshots older than the retention expired, the newest
   ``drain.maintenance.keep_snapshots`` always kept (``table.maintenance.expire_snapshots``), then the
   data and manifest files only expired snapshots named deleted (pyiceberg expires snapshots from the
   metadata only).

A reader of the current state or of an older one within ``drain.maintenance.retention_s`` never
notices: compaction changes which files hold the rows, not the rows; what a vacuum or an expiry
deletes is older than the retention.

>>> import tempfile
>>> from kprio_core.config import DrainSettings
>>> root = tempfile.mkdtemp()
>>> maintain(DrainSettings(format="delta", output_path=f"{root}/o", dead_letter_path=f"{root}/d"), "orders")
[]
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kprio_core.config import DrainSettings, MaintenanceSettings, OutputFormat
from kprio_core.model.offsets import OffsetRange
from spark_jobs.delta_table import parse_published, published_name
from spark_jobs.layout import DEAD_LETTERS, OUTPUT, RANGE_KEY, RangeFile

MAINTENANCE_KEY = "kprio.maintenance"
"""Commit metadata (Delta) or snapshot summary (Iceberg) of a maintenance commit: what it did."""
COMMIT_RETRIES = 20


@dataclass(frozen=True)
class Figures:
    """A table's size as a reader meets it: live files, their bytes, and versions (Delta's log entries, Iceberg's
    snapshots)."""

    files: int
    bytes: int
    snapshots: int


@dataclass(frozen=True)
class Maintained:
    """What one maintenance of one table did, with the figures before and after."""

    table: str
    before: Figures
    after: Figures
    compacted_runs: int = 0
    files_deleted: int = 0
    snapshots_expired: int = 0
    retries: int = 0

    def metadata(self) -> dict[str, int]:
        """The run's numbers, flat, as Dagster metadata and ``kprio tables maintain --json`` show them.

        >>> Maintained("orders", Figures(40, 4000, 41), Figures(2, 3900, 3), 2).metadata()["files_after"]
        2
        """
        out = {f"{k}_before": v for k, v in vars(self.before).items()}
        out |= {f"{k}_after": v for k, v in vars(self.after).items()}
        return {**out, "compacted_runs": self.compacted_runs, "files_deleted": self.files_deleted,
                "snapshots_expired": self.snapshots_expired, "retries": self.retries}


@dataclass(frozen=True)
class TableFile:
    """A live file of a table as compaction sees it: where it is, its partition, range, batch and size."""

    path: str
    """As the table names it (Delta: relative to the table; Iceberg: a URI)."""
    partition: tuple
    """What must be equal for two files to share a file: the priority (Iceberg: the partition) ... the incarnation, last."""
    range: OffsetRange
    batch_id: str
    attempt: int
    size: int
    handle: Any = field(default=None, compare=False)
    """The table's own record of the file (Iceberg's ``DataFile``), for its removal."""


def batch_number(batch_id: str) -> int:
    """>>> batch_number("b-000042")
    42
    """
    return int(batch_id.removeprefix("b-")) if batch_id.removeprefix("b-").isdigit() else -1


def compaction_runs(files: Iterable[TableFile], *, target_bytes: int, min_files: int) -> list[list[TableFile]]:
    """Runs of adjacent small files to rewrite as one: within a partition, files in offset order whose ranges follow on
    (or are parts of one range), added while the run stays under ``target_bytes``; only runs of ``min_files`` or more.

    >>> R = lambda s, e: OffsetRange("o-0", 0, s, e)
    >>> f = lambda s, e, size=10, p=0: TableFile(f"{s}", (p,), R(s, e), f"b-{s:06d}", 1, size)
    >>> [[x.path for x in run] for run in compaction_runs([f(0, 5), f(5, 9), f(9, 12), f(20, 30), f(30, 31),
    ...                                                     f(31, 40), f(40, 41, 95)], target_bytes=100, min_files=3)]
    [['0', '5', '9'], ['20', '30', '31']]
    """
    groups: dict[tuple, list[TableFile]] = {}
    for f in files:
        groups.setdefault((f.partition, f.range.topic, f.range.partition), []).append(f)
    runs = []
    for group in groups.values():
        group.sort(key=lambda f: (f.range.start, f.range.end, f.path))
        run: list[TableFile] = []
        for f in group:
            follows = run and f.range.start <= max(x.range.end for x in run)
            if run and (not follows or sum(x.size for x in run) + f.size > target_bytes):
                if len(run) >= min_files:
                    runs.append(run)
                run = []
            if f.size < target_bytes:
                run.append(f)
        if len(run) >= min_files:
            runs.append(run)
    return runs


def merged_name(run: Sequence[TableFile]) -> str:
    """The file name of a run's rows: the range it covers, the newest batch in it, a tag of its own.

    >>> R = lambda s, e: OffsetRange("o-0", 0, s, e)
    >>> name = merged_name([TableFile("a", (0, 1), R(0, 5), "b-000001", 1, 1), TableFile("b", (0, 1), R(5, 9), "b-000003", 2, 1)])
    >>> name.split(".")[:3], parse_published(name)[0].range == R(0, 9)
    (['o-0+0+0000000000+0000000009', 'b-000003', '2'], True)
    """
    first = run[0].range
    newest = max(run, key=lambda f: batch_number(f.batch_id))
    covered = RangeFile(first.topic, first.partition, min(f.range.start for f in run), max(f.range.end for f in run),
                        None, run[0].partition[-1])
    return published_name(covered, newest.batch_id, newest.attempt, tag=uuid.uuid4().hex[:8])


def _write_merged(fs: Any, sources: list[str], target: str) -> int:
    """Write the rows of ``sources`` (Parquet files of kprio's) to ``target`` in offset order; the rows written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for path in sources:
        with fs.open_input_file(path) as f:
            tables.append(pq.read_table(f).replace_schema_metadata(None))
    merged = pa.concat_tables(tables, promote_options="default").sort_by([("partition", "ascending"),
                                                                         ("offset", "ascending")])
    name = parse_published(target.rsplit("/", 1)[1])
    if name is not None:
        merged = merged.replace_schema_metadata({RANGE_KEY.encode(): str(name[0].range).encode()})
    temporary = f"{target}.{uuid.uuid4().hex[:8]}.tmp"
    with fs.open_output_stream(temporary) as sink:
        pq.write_table(merged, sink, compression="zstd")
    fs.move(temporary, target)
    return merged.num_rows


def maintain(drain: DrainSettings, logical_topic: str, *, now: float | None = None) -> list[Maintained]:
    """Maintain the output and dead-letter tables of a logical topic (none for Parquet, or before a table exists)."""
    if drain.format is OutputFormat.PARQUET:
        return []
    now = time.time() if now is None else now
    out = []
    for kind, root in ((OUTPUT, drain.output_path), (DEAD_LETTERS, drain.dead_letter_path)):
        done = (_maintain_delta(root, logical_topic, drain.maintenance, now) if drain.format is OutputFormat.DELTA
                else _maintain_iceberg(drain, kind, root, logical_topic, now))
        if done is not None:
            out.append(done)
    return out


# --- Delta -------------------------------------------------------------------------------------------------------

def _delta_files(table: Any) -> list[TableFile]:
    from spark_jobs.layout import PRIORITY_DIR

    actions = table.get_add_actions(flatten=True)
    out = []
    for path, size in zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist(), strict=True):
        priority_dir, _, file_name = path.partition("/")
        parsed, match = parse_published(file_name), PRIORITY_DIR.match(priority_dir)
        if parsed is None or match is None:
            continue
        name, batch_id, attempt = parsed
        out.append(TableFile(path, (int(match.group(1)), name.incarnation), name.range, batch_id, attempt, size))
    return out


def _delta_figures(table: Any, fs: Any, base: str) -> Figures:
    import pyarrow.fs as pafs

    actions = table.get_add_actions(flatten=True)
    log = [f for f in fs.get_file_info(pafs.FileSelector(f"{base}/_delta_log", allow_not_found=True))
           if f.path.endswith(".json")]
    return Figures(actions.num_rows, sum(actions.column("size_bytes").to_pylist()), len(log))


def _maintain_delta(root: str, logical_topic: str, settings: MaintenanceSettings, now: float) -> Maintained | None:
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import AddAction, CommitProperties, RemoveAction

    from spark_jobs.delta_table import table_uri
    from spark_jobs.layout import filesystem

    uri = table_uri(root, logical_topic)
    if not DeltaTable.is_deltatable(uri):
        return None
    fs, base = filesystem(uri)
    before = _delta_figures(DeltaTable(uri), fs, base)
    compacted, retries = 0, 0
    for tries in range(COMMIT_RETRIES):
        table = DeltaTable(uri)
        runs = compaction_runs(_delta_files(table), target_bytes=settings.target_file_mb << 20,
                               min_files=settings.min_files)
        if not runs:
            break
        actions, now_ms = [], int(time.time() * 1000)
        for run in runs:
            priority_dir = run[0].path.partition("/")[0]
            rel = f"{priority_dir}/{merged_name(run)}"
            rows = _write_merged(fs, [f"{base}/{f.path}" for f in run], f"{base}/{rel}")
            info = fs.get_file_info(f"{base}/{rel}")
            actions.append(AddAction(rel, info.size, {"priority": priority_dir.split("=", 1)[1]}, now_ms, False,
                                     f'{{"numRecords": {rows}}}'))
            actions += [RemoveAction(path=f.path, data_change=False, deletion_timestamp=now_ms, size=f.size,
                                     partition_values={"priority": priority_dir.split("=", 1)[1]}) for f in run]
        try:
            table.create_write_transaction(actions, mode="append", schema=table.schema(), partition_by=["priority"],
                                           commit_properties=CommitProperties(
                                               custom_metadata={MAINTENANCE_KEY: f"compact {len(runs)} runs"},
                                               max_commit_retries=0))
        except CommitFailedError:  # a publish landed meanwhile: plan again on its version (the new files stay unread)
            retries += 1
            continue
        compacted = len(runs)
        break
    table = DeltaTable(uri)
    retention = f"interval {math.ceil(settings.retention_s)} seconds"
    wanted = {"delta.logRetentionDuration": retention, "delta.deletedFileRetentionDuration": retention}
    if any(table.metadata().configuration.get(k) != v for k, v in wanted.items()):
        table.alter.set_table_properties(wanted, commit_properties=CommitProperties(max_commit_retries=COMMIT_RETRIES))
        table = DeltaTable(uri)
    # The vacuum reads the removes in the log: before the cleanup takes the log entries that hold them.
    deleted = table.vacuum(retention_hours=math.ceil(settings.retention_s / 3600), dry_run=False,
                           enforce_retention_duration=False, commit_properties=CommitProperties(
                               max_commit_retries=COMMIT_RETRIES))
    table = DeltaTable(uri)
    table.create_checkpoint()
    table.cleanup_metadata()
    return Maintained(uri, before, _delta_figures(table, fs, base), compacted, len(deleted), 0, retries)


# --- Iceberg -----------------------------------------------------------------------------------------------------

def _iceberg_files(table: Any) -> list[TableFile]:
    from spark_jobs.iceberg_table import live_data_files, parse_data_file

    out = []
    for data_file in live_data_files(table):
        parsed = parse_data_file(data_file.file_path)
        if parsed is None:
            continue
        priority, name, batch_id, attempt = parsed
        # An Iceberg file lies in one partition (priority, hour): only files of one partition share a file.
        out.append(TableFile(data_file.file_path, (priority, str(data_file.partition), name.incarnation), name.range,
                             batch_id, attempt, data_file.file_size_in_bytes, data_file))
    return out


def _iceberg_figures(table: Any) -> Figures:
    from spark_jobs.iceberg_table import live_data_files

    files = live_data_files(table)
    return Figures(len(files), sum(f.file_size_in_bytes for f in files), len(table.metadata.snapshots))


def _referenced(table: Any, snapshots: Iterable[Any]) -> set[str]:
    """Every file the snapshots name: their manifest lists, manifests and data files."""
    out: set[str] = set()
    for snapshot in snapshots:
        out.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            out.add(manifest.manifest_path)
            out |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False)}
    return out


def _maintain_iceberg(drain: DrainSettings, kind: str, root: str, logical_topic: str, now: float) -> Maintained | None:
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    from spark_jobs import iceberg_table
    from spark_jobs.layout import filesystem

    settings = drain.maintenance
    table = iceberg_table.load(drain.iceberg, kind, logical_topic)
    if table is None:
        return None
    name = ".".join(iceberg_table.identifier(drain.iceberg, kind, logical_topic))
    fs, _ = filesystem(root)
    before = _iceberg_figures(table)
    compacted, retries = 0, 0
    for _ in range(COMMIT_RETRIES):
        table = iceberg_table.load(drain.iceberg, kind, logical_topic)
        runs = compaction_runs(_iceberg_files(table), target_bytes=settings.target_file_mb << 20,
                               min_files=settings.min_files)
        if not runs:
            break
        tx = table.transaction()
        with tx.update_snapshot(snapshot_properties={MAINTENANCE_KEY: f"compact {len(runs)} runs"}).overwrite() as o:
            for run in runs:
                target = f"{iceberg_table._path(run[0].path).rpartition('/')[0]}/{merged_name(run)}"
                _write_merged(fs, [iceberg_table._path(f.path) for f in run], target)
                o.append_data_file(parquet_file_to_data_file(table.io, tx.table_metadata,
                                                             iceberg_table._uri(fs, target)))
                for f in run:
                    o.delete_data_file(f.handle)
        try:
            tx.commit_transaction()
        except CommitFailedException:  # a publish landed meanwhile: plan again on its snapshot
            retries += 1
            continue
        compacted = len(runs)
        break
    expired, deleted = _expire(drain, kind, logical_topic, fs, now)
    table = iceberg_table.load(drain.iceberg, kind, logical_topic)
    return Maintained(name, before, _iceberg_figures(table), compacted, deleted, expired, retries)


def _expire(drain: DrainSettings, kind: str, logical_topic: str, fs: Any, now: float) -> tuple[int, int]:
    """Expire the snapshots older than the retention but the newest ``keep_snapshots``, then delete the files only
    they named (under the table's location only); ``(snapshots expired, files deleted)``."""
    from pyiceberg.exceptions import CommitFailedException

    from spark_jobs import iceberg_table

    settings = drain.maintenance
    for _ in range(COMMIT_RETRIES):
        table = iceberg_table.load(drain.iceberg, kind, logical_topic)
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
        table = iceberg_table.load(drain.iceberg, kind, logical_topic)
        still = _referenced(table, table.metadata.snapshots)
        prefix = table.metadata.location.rstrip("/") + "/"
        gone = 0
        for uri in sorted(candidates - still):
            if uri.startswith(prefix):
                try:
                    fs.delete_file(iceberg_table._path(uri))
                    gone += 1
                except FileNotFoundError:
                    pass
        return len(old), gone
    return 0, 0
