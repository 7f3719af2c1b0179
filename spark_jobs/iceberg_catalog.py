"""An Apache Iceberg table of kprio as it is found and read: its catalog, its name, its live files and publishes.

The writing side (one snapshot per batch, fenced by the lease epoch) is :mod:`spark_jobs.iceberg_table`, which
re-exports these for its callers.

>>> from kprio_core.config import IcebergSettings
>>> identifier(IcebergSettings(), "dead-letters", "orders")
('kprio', 'orders_dead_letters')
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from spark_jobs.delta_table import parse_published
from spark_jobs.layout import DEAD_LETTERS, PRIORITY_DIR, RangeFile, absolute

if TYPE_CHECKING:
    from kprio_core.config import IcebergSettings

BATCH_KEY, ATTEMPT_KEY, EPOCH_KEY, RANGES_KEY = "kprio.batch_id", "kprio.attempt", "kprio.epoch", "kprio.ranges"
"""Keys of a publish's snapshot summary: the batch, its attempt, the run's lease epoch, the ranges (JSON list)."""
CATALOG_INIT_TRIES = 3
_CATALOGS: dict[tuple, Any] = {}
_CATALOGS_LOCK = threading.Lock()


def catalog(settings: IcebergSettings) -> Any:
    """The pyiceberg catalog of ``settings``, one per process (secrets: ``PYICEBERG_CATALOG__<NAME>__<PROPERTY>``)."""
    from pyiceberg.catalog import load_catalog

    key = (settings.catalog_name, tuple(sorted(settings.catalog.items())), os.getcwd())
    with _CATALOGS_LOCK:
        if key not in _CATALOGS:
            properties = dict(settings.catalog)
            uri = properties.get("uri", "")
            if uri.startswith("sqlite:///"):  # a relative SQLite file lives where kprio runs; its directory first
                path = os.path.abspath(uri.removeprefix("sqlite:///"))
                os.makedirs(os.path.dirname(path), exist_ok=True)
                properties["uri"] = f"sqlite:///{path}"
            properties.setdefault("warehouse", f"file://{os.path.abspath('kprio-data/iceberg')}")
            for tries in range(CATALOG_INIT_TRIES):
                try:
                    _CATALOGS[key] = load_catalog(settings.catalog_name, **properties)
                    break
                except Exception as err:  # noqa: BLE001 - SQLAlchemy's, typed by its text below
                    # Two processes' first use of a SQL catalog: one's CREATE TABLE fails; loaded again, it works.
                    if "already exists" not in str(err) or tries == CATALOG_INIT_TRIES - 1:
                        raise
        return _CATALOGS[key]


def identifier(settings: IcebergSettings, kind: str, logical_topic: str) -> tuple[str, str]:
    """The table of ``kind`` (``output``, ``dead-letters``) of a logical topic in the catalog.

    >>> from kprio_core.config import IcebergSettings
    >>> identifier(IcebergSettings(), "dead-letters", "orders")
    ('kprio', 'orders_dead_letters')
    """
    return settings.namespace, f"{logical_topic}_dead_letters" if kind == DEAD_LETTERS else logical_topic


def location(root: str, logical_topic: str) -> str:
    """Where the table's files live: ``<root>/<logical>``, a local path as a ``file://`` URI."""
    base = absolute(root).rstrip("/")
    return f"{base if '://' in base else 'file://' + base}/{logical_topic}"


def load(settings: IcebergSettings, kind: str, logical_topic: str) -> Any:
    """The table, or None when the catalog has none."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    try:
        return catalog(settings).load_table(identifier(settings, kind, logical_topic))
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def _publishes(table: Any) -> list[Any]:
    """The table's snapshots that publish a batch, oldest first."""
    return [s for s in sorted(table.metadata.snapshots, key=lambda s: s.sequence_number or 0)
            if s.summary is not None and s.summary[BATCH_KEY]]


def _uri(fs: Any, path: str) -> str:
    """A path of kprio's filesystem as the table names its files (``file://`` for a local one)."""
    return f"file://{path}" if fs.type_name == "local" else f"{fs.type_name}://{path}"


def _path(uri: str) -> str:
    """The path inside kprio's filesystem of a file the table names."""
    return uri.split("://", 1)[1] if uri.startswith("file://") else uri.split("://", 1)[-1]


def live_data_files(table: Any) -> list[Any]:
    """The data files (pyiceberg ``DataFile``) of the table's current snapshot."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    return [entry.data_file for manifest in snapshot.manifests(table.io)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True)]


def parse_data_file(uri: str) -> tuple[int, RangeFile, str, int] | None:
    """``(priority, range name, batch id, attempt)`` of a data file kprio named, else None.

    >>> parse_data_file("file:///o/orders/data/priority=2/orders-2+0+0000000000+0000001500.b-000042.3.e7.t491.parquet")
    (2, RangeFile(topic='orders-2', partition=0, start=0, end=1500, part=None, incarnation=1), 'b-000042', 3)
    """
    directory, _, file_name = uri.rpartition("/")
    match = PRIORITY_DIR.match(directory.rpartition("/")[2])
    parsed = parse_published(file_name)
    if match is None or parsed is None:
        return None
    return (int(match.group(1)), *parsed)


def live_files(settings: IcebergSettings, root: str, kind: str, logical_topic: str) -> tuple[Any, ...]:
    """The current snapshot's files as :class:`~spark_jobs.output.LiveFile` (path relative to ``data``), from names."""
    from spark_jobs.output import LiveFile

    table = load(settings, kind, logical_topic)
    if table is None:
        return ()
    out = []
    for data_file in live_data_files(table):
        parsed = parse_data_file(data_file.file_path)
        if parsed is None:
            continue
        priority, name, batch_id, attempt = parsed
        rel = "/".join(data_file.file_path.rsplit("/", 2)[-2:])
        out.append(LiveFile(root, rel, priority, name.topic, name.partition, name.start, name.end, name.part,
                            batch_id, attempt, name.incarnation))
    return tuple(sorted(out, key=lambda f: (f.topic, f.partition, f.start, f.end, f.part or 0, f.path)))


def table_batches(settings: IcebergSettings, root: str, kind: str, logical_topic: str) -> list[dict[str, Any]]:
    """The publishes the table's snapshots record, oldest first: what an adoption reads after a lost ledger."""
    del root
    table = load(settings, kind, logical_topic)
    if table is None:
        return []
    return [{"batch_id": s.summary[BATCH_KEY], "attempt": int(s.summary[ATTEMPT_KEY]),
             "epoch": int(s.summary[EPOCH_KEY]), "ranges": json.loads(s.summary[RANGES_KEY] or "[]"),
             "snapshot_id": s.snapshot_id} for s in _publishes(table)]


def read_table(settings: IcebergSettings, root: str, kind: str, logical_topic: str, *, batch_id: str | None = None,
               columns: Iterable[str] | None = None, snapshot_id: int | None = None) -> Any:
    """The rows of the current snapshot (or ``snapshot_id``) as a ``pyarrow.Table`` (empty: no table)."""
    import pyarrow as pa
    from pyiceberg.expressions import AlwaysTrue, EqualTo

    del root
    table = load(settings, kind, logical_topic)
    if table is None or table.current_snapshot() is None:
        return pa.table({})
    where = AlwaysTrue() if batch_id is None else EqualTo("batch_id", batch_id)
    scan = table.scan(row_filter=where, selected_fields=tuple(columns) if columns else ("*",), snapshot_id=snapshot_id)
    return scan.to_arrow()
