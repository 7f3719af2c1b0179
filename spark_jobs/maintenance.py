"""Scheduled upkeep of kprio's Delta and Iceberg tables: compaction, checkpoints, vacuum, snapshot expiry.

A table fed every few seconds gains small files per batch, tens of thousands a day, and readers slow.
:func:`maintain` keeps each table healthy in steps that each commit on their own and never remove a row:

1. **compact**: a run of adjacent small files of one partition (same priority, hour, Kafka partition and
   incarnation, ranges following on; :func:`compaction_runs`) is rewritten as one file of about
   ``drain.maintenance.target_file_mb``, named by the range covered and the newest batch in it. The commit
   replaces the run's files (Delta: removes and an add, ``dataChange`` false; Iceberg: an overwrite snapshot,
   ``kprio.maintenance: compact``) on the state the plan read; one that lost a race to a publish is planned
   again, so a publish never waits nor loses a row. Not delta-rs' ``optimize.compact``: kprio's file names
   are what a publish replaces by and what an adoption after a lost ledger reads;
2. what no version within ``drain.maintenance.retention_s`` needs is removed, as the format does it
   (:meth:`spark_jobs.tables.Output.maintain`): Delta vacuums, checkpoints and cleans its log
   (:mod:`spark_jobs.formats.delta`); Iceberg expires old snapshots (the newest
   ``drain.maintenance.keep_snapshots`` kept) and deletes files only they named (:mod:`spark_jobs.formats.iceberg`).

Readers of the current state, or of one within the retention, never notice: compaction changes which files
hold the rows, not the rows; vacuum and expiry delete only what is older than the retention.

>>> import tempfile
>>> from kprio_core.config import DrainSettings
>>> root = tempfile.mkdtemp()
>>> maintain(DrainSettings(format="delta", output_path=f"{root}/o", dead_letter_path=f"{root}/d"), "orders")
[]
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kprio_core.config import DrainSettings
from kprio_core.errors import MaintenanceFailed, PathUnusable
from kprio_core.model.offsets import OffsetRange
from spark_jobs.delta_table import parse_published, published_name
from spark_jobs.layout import OUTPUT, RANGE_KEY, RangeFile

MAINTENANCE_KEY = "kprio.maintenance"
"""Commit metadata (Delta) or snapshot summary (Iceberg) of a maintenance commit: what it did."""
COMMIT_RETRIES = 20


@dataclass(frozen=True)
class Figures:
    """A table's size as a reader meets it: live files, bytes, versions (Delta's log entries, Iceberg's snapshots)."""

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
    """What two files must share to be merged: the priority (Iceberg: the partition) ... the incarnation, last."""
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
    """Runs of adjacent small files to rewrite as one: within a partition, in offset order, ranges following on,
    while under ``target_bytes``; only runs of ``min_files`` or more.

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


def write_merged(fs: Any, sources: list[str], target: str) -> int:
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
    """Maintain a logical topic's output and dead-letter tables (none for Parquet, or before a table exists).

    A root that is a file, or a topic directory with files but no table of the format, fails in one line."""
    from spark_jobs.tables import output_of, roots

    out = output_of(drain)
    if not out.tables:
        return []
    now = time.time() if now is None else now
    done = []
    for kind, root in roots(drain).items():
        maintained = out.maintain(kind, logical_topic, now)
        if maintained is None:
            _no_table(drain, kind, root, logical_topic)
        else:
            done.append(maintained)
    return done


def _no_table(drain: DrainSettings, kind: str, root: str, logical_topic: str) -> None:
    """Nothing published there yet, or one line saying what is there instead of a table."""
    import pyarrow.fs as pafs

    from spark_jobs.layout import filesystem

    fs, base = filesystem(root)
    if fs.get_file_info(base).type == pafs.FileType.File:
        raise PathUnusable(f"cannot maintain the tables under {root!r}: it is a file, not a directory",
                           setting="drain.output_path" if kind == OUTPUT else "drain.dead_letter_path")
    inside = fs.get_file_info(pafs.FileSelector(f"{base}/{logical_topic}", recursive=True, allow_not_found=True))
    if any(i.type == pafs.FileType.File for i in inside):
        raise MaintenanceFailed(f"{base}/{logical_topic} holds files but no {drain.format.value} table: it was written "
                                "in another drain.format", setting="drain.format")
