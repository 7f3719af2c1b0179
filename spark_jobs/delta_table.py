"""A batch published into a Delta Lake table (``deltalake``, delta-rs): one commit per batch and table.

One Delta table per logical topic and root, ``<root>/<logical>/``, partitioned by ``priority``
(:mod:`spark_jobs.layout`). :func:`publish` moves an attempt's staged Parquet files into the table's
directory under names of their own (range, batch, attempt, lease epoch: a file the log names never
changes under a reader) and commits in one transaction:

- an ``add`` per file, with its partition value and row count;
- a ``remove`` per live file of the same priority and incarnation overlapping a published range (an
  earlier copy of the same offsets), and an ``add`` of the rows it holds outside them (:mod:`spark_jobs.keep_rows`);
- the batch id, attempt and ranges in the commit's metadata (``kprio.batch_id``, ...), plus the caller's;
- the application transaction ``kprio:<batch id>`` at version ``epoch``, the lease epoch (fencing token;
  Delta's ``txn`` action). The table refuses a lower epoch on the very version the commit is made on
  (delta-rs does not check transactions on its own retries, so it commits without them and re-reads on conflict).

New columns in a batch's files are first added to the table, nullable, in a commit of their own
(``kprio.columns_added``); a column whose type changed fails the publish, naming it.

Readers see the version before a commit or after: a batch whole or not at all, an offset once. Files no commit
added (a publish that died) are invisible; the retry moves its own. A publish at the epoch the table holds
changes nothing and says so; a later epoch replaces what an earlier one published, in one commit per table.

>>> import tempfile
>>> root = tempfile.mkdtemp()
>>> read_table(root, "orders").num_rows, table_batches(root, "orders")
(0, [])
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import DrainResult
from spark_jobs.layout import PRIORITY_DIR, RangeFile, filesystem, staging_dir
from spark_jobs.tables import refuse_if_stale

APP_PREFIX = "kprio:"
BATCH_KEY, ATTEMPT_KEY, RANGES_KEY = "kprio.batch_id", "kprio.attempt", "kprio.ranges"
"""Keys of a publish's commit metadata: the batch, its attempt and the ranges it published (``topic[p]@[s,e)``)."""
COLUMNS_KEY = "kprio.columns_added"
"""Commit metadata of a schema change: the batch whose files brought the new columns, and the columns."""
COMMIT_RETRIES = 20
"""Commits of other batches may land in between (two drivers, several batches in flight): retried by delta-rs."""


@dataclass(frozen=True)
class Published:
    """What one publish did to one table: its version after the commit, files added and removed."""

    table: str
    version: int
    added: tuple[str, ...]
    removed: tuple[str, ...]
    already: bool = False
    """The table held this attempt's transaction already: nothing was written."""


def table_uri(root: str, logical_topic: str) -> str:
    """The Delta table of ``logical_topic`` under ``root``: an absolute local path or a URI."""
    from spark_jobs.layout import absolute

    return f"{absolute(root).rstrip('/')}/{logical_topic}"


def app_id(batch_id: str) -> str:
    """The Delta application transaction id of a batch's publishes (its version is the attempt).

    >>> app_id("b-000042")
    'kprio:b-000042'
    """
    return f"{APP_PREFIX}{batch_id}"


def published_name(name: RangeFile, batch_id: str, attempt: int, *, epoch: int | None = None,
                   tag: str | None = None) -> str:
    """The file's name in the table: range name, batch, attempt, epoch (``tag``: rows an overlapping publish kept).

    >>> published_name(RangeFile("orders-2", 0, 0, 1500), "b-000042", 3, epoch=7)
    'orders-2+0+0000000000+0000001500.b-000042.3.e7.parquet'
    """
    more = (f".e{epoch}" if epoch is not None else "") + (f".k{tag}" if tag else "")
    return f"{name.file_name.removesuffix('.parquet')}.{batch_id}.{attempt}{more}.parquet"


_TAG = re.compile(r"^(e\d+|k[0-9a-f]+|t(\d+|n))$")
"""Tags after the attempt: the epoch, kept rows, an Iceberg file's hour or day (spark_jobs/iceberg_table.py)."""


def parse_published(file_name: str) -> tuple[RangeFile, str, int] | None:
    """``(range name, batch id, attempt)`` of a file :func:`published_name` named, else None.

    >>> parse_published("orders-2+0+0000000000+0000001500.part-1.b-000042.3.parquet")
    (RangeFile(topic='orders-2', partition=0, start=0, end=1500, part=1, incarnation=1), 'b-000042', 3)
    >>> parse_published("orders-2+0+0000000000+0000001500.b-000042.3.e7.k1f2e3d4c.parquet")[1:]
    ('b-000042', 3)
    >>> parse_published("orders-2+0+0000000000+0000001500.parquet") is None
    True
    """
    parts = file_name.removesuffix(".parquet").split(".")
    while len(parts) > 3 and _TAG.match(parts[-1]):
        parts.pop()
    if len(parts) < 3:
        return None
    *stem, batch_id, attempt = parts
    name = RangeFile.parse(".".join(stem) + ".parquet")
    if name is None or not attempt.isdigit() or not batch_id.startswith("b-"):
        return None
    return name, batch_id, int(attempt)


def publish(result: DrainResult, *, root: str, kind: str, ranges: Iterable[OffsetRange] | None = None,
            incarnations: Mapping[str, int] | None = None, metadata: Mapping[str, Any] | None = None,
            epoch: int | None = None) -> Published | None:
    """Publish the staged ``kind`` files (``output``/``dead-letters``) of ``ranges`` (default: all without failure).

    ``epoch`` (default: the attempt) is the transaction version the commit carries; the fence is checked on the
    version committed to (:func:`_commit`). None when nothing was staged and the table has nothing to replace.
    """
    from deltalake import DeltaTable, Schema
    from deltalake.transaction import CommitProperties, Transaction

    fence = result.attempt if epoch is None else epoch
    chosen = set(ranges) if ranges is not None else {s.range for s in result.ranges if s.failure is None}
    stats = [s for s in result.ranges if s.range in chosen]
    uri = table_uri(root, result.logical_topic)
    table = DeltaTable(uri) if DeltaTable.is_deltatable(uri) else None
    if table is not None and (held := table.transaction_version(app_id(result.batch_id))) is not None \
            and held >= fence:
        refuse_if_stale(held, fence, result, f"Delta table {uri}")
        return Published(uri, table.version(), (), (), already=True)
    fs, base = filesystem(root)
    moved = _move_staged(fs, base, result, stats, kind, epoch)
    if table is None and not moved:
        return None
    adds = [_add_action(fs, f"{base}/{result.logical_topic}/{target}", target, priority, info)
            for priority, target, info in moved]
    properties = CommitProperties(
        custom_metadata={BATCH_KEY: result.batch_id, ATTEMPT_KEY: result.attempt,
                         RANGES_KEY: [str(s.range) for s in stats], **(metadata or {})},
        max_commit_retries=0,  # a commit on the version the check read, or none: conflicts are read again here
        app_transactions=[Transaction(app_id(result.batch_id), fence)],
    )
    paths = [f"{base}/{result.logical_topic}/{target}" for _, target, _ in moved]
    schema = Schema.from_arrow(files_schema(fs, paths)) if paths else None
    if table is None:
        created = _create(uri, schema, adds, properties)
        if created is not None:
            return created
    return _commit(uri, result, adds, stats, incarnations or {}, properties, schema, fence)


def staged_files(base: str, result: DrainResult, stats: list,
                 kind: str) -> Iterator[tuple[Any, str, str, RangeFile]]:
    """The staged ``kind`` files of ``stats``: (its stats, staged path, priority directory, name) of each."""
    stage = f"{staging_dir(base, result.batch_id, result.attempt)}/{result.logical_topic}"
    prefix = f"{kind}/{result.logical_topic}/"
    for s in stats:
        for rel in (f[len(prefix):] for f in s.files if f.startswith(prefix)):
            priority_dir, _, file_name = rel.partition("/")
            name = RangeFile.parse(file_name)
            if name is not None:
                yield s, f"{stage}/{rel}", priority_dir, name


def _move_staged(fs: Any, base: str, result: DrainResult, stats: list, kind: str,
                 epoch: int | None) -> list[tuple[int, str, Any]]:
    """Move staged files into the table under published names: (priority, path in the table, file info) of each."""
    moved: list[tuple[int, str, Any]] = []
    for s, source, priority_dir, name in staged_files(base, result, stats, kind):
        target = f"{priority_dir}/{published_name(name, result.batch_id, result.attempt, epoch=epoch)}"
        _move(fs, source, f"{base}/{result.logical_topic}/{target}")
        moved.append((s.priority, target, fs.get_file_info(f"{base}/{result.logical_topic}/{target}")))
    return moved


def _create(uri: str, schema: Any, adds: list, properties: Any) -> Published | None:
    """The table created by this publish's commit; None when another batch's created it first (commit to it then)."""
    from deltalake import DeltaTable
    from deltalake.transaction import create_table_with_add_actions

    try:
        create_table_with_add_actions(uri, schema, adds, mode="error", partition_by=["priority"],
                                      commit_properties=properties)
        return Published(uri, DeltaTable(uri).version(), tuple(a.path for a in adds), ())
    except Exception:
        if not DeltaTable.is_deltatable(uri):
            raise
        return None


def _commit(uri: str, result: DrainResult, adds: list[Any], stats: list[Any], incarnations: Mapping[str, int],
            properties: Any, schema: Any, fence: int) -> Published | None:
    """Commit ``adds``, the removes of what they replace and the rows kept of what they overlap.

    Each try reads the table, checks the fence (:func:`~spark_jobs.tables.refuse_if_stale`) and commits on that
    version; a commit that lost a race is tried again on the table read again, check and removes made anew.
    """
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError

    fs, base = filesystem(uri)
    for tries in range(COMMIT_RETRIES):
        table = DeltaTable(uri)
        held = table.transaction_version(app_id(result.batch_id))
        if held is not None and held >= fence:
            refuse_if_stale(held, fence, result, f"Delta table {uri}")
            return Published(uri, table.version(), (), (), already=True)
        removes, kept = _overlapping(table, fs, base, stats, {a.path for a in adds}, incarnations)
        if not adds and not removes:
            return None
        if schema is not None and _evolve(table, schema, result):
            continue  # the table's schema changed: commit on its new version
        try:
            table.create_write_transaction([*adds, *kept, *removes], mode="append", schema=table.schema(),
                                           partition_by=["priority"], commit_properties=properties)
        except CommitFailedError:
            if tries == COMMIT_RETRIES - 1:
                raise
            continue
        table.update_incremental()
        return Published(uri, table.version(), tuple(a.path for a in [*adds, *kept]), tuple(r.path for r in removes))
    raise AssertionError("unreachable: the last try raises")


def _move(fs: Any, source: str, target: str) -> None:
    """Move a staged file into the table's directory (idempotent after a publish that died before its commit)."""
    import pyarrow.fs as pafs

    if fs.get_file_info(source).type != pafs.FileType.File and fs.get_file_info(target).type == pafs.FileType.File:
        return  # moved by this attempt's publish that died before its commit; no reader saw it
    fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
    fs.move(source, target)


def _add_action(fs: Any, path: str, rel: str, priority: int, info: Any) -> Any:
    import pyarrow.parquet as pq
    from deltalake.transaction import AddAction

    with fs.open_input_file(path) as f:
        rows = pq.read_metadata(f).num_rows
    return AddAction(rel, info.size, {"priority": str(priority)}, int(info.mtime.timestamp() * 1000), True,
                     json.dumps({"numRecords": rows}))


def files_schema(fs: Any, paths: list[str]) -> Any:
    """The Arrow schema of the files a publish adds (their Parquet schemas unified, metadata left out)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schemas = []
    for path in paths:
        with fs.open_input_file(path) as f:
            schemas.append(pq.read_schema(f).remove_metadata())
    return pa.unify_schemas(schemas)


def _delta_type(field: Any) -> Any:
    """A Delta field's type as JSON, nullability and metadata left out (they may differ between writers).

    >>> import pyarrow as pa
    >>> from deltalake import Field
    >>> a = Field.from_arrow(pa.field("h", pa.list_(pa.struct([pa.field("k", pa.string(), nullable=False)]))))
    >>> b = Field.from_arrow(pa.field("h", pa.large_list(pa.struct([("k", pa.large_string())]))))
    >>> _delta_type(a) == _delta_type(b), _type_text(a)
    (True, 'array<struct<k: string>>')
    """
    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: strip(v) for k, v in node.items() if k not in ("nullable", "containsNull",
                                                                          "valueContainsNull", "metadata")}
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    return strip(json.loads(field.to_json())["type"])


def _type_text(field: Any) -> str:
    """A Delta field's type in a line (``string``, ``array<struct<k: string>>``)."""
    def text(node: Any) -> str:
        if isinstance(node, str):
            return node
        kind = node.get("type")
        if kind == "array":
            return f"array<{text(node['elementType'])}>"
        if kind == "map":
            return f"map<{text(node['keyType'])}, {text(node['valueType'])}>"
        if kind == "struct":
            return "struct<" + ", ".join(f"{f['name']}: {text(f['type'])}" for f in node["fields"]) + ">"
        return str(kind)

    return text(_delta_type(field))


def _evolve(table: Any, schema: Any, result: DrainResult) -> bool:
    """Add the columns the table lacks, nullable, in a commit of their own; True when it did.

    A changed column type raises ValueError naming it: readers would disagree (rewrite or rename it first)."""
    from deltalake import Field

    current = {f.name: f for f in table.schema().fields}
    incoming = list(schema.fields)
    for field in incoming:
        if field.name in current and _delta_type(current[field.name]) != _delta_type(field):
            raise ValueError(f"the batch's column {field.name!r} is {_type_text(field)}, the Delta table "
                             f"{table.table_uri} has it as {_type_text(current[field.name])}")
    new = [Field(f.name, f.type, nullable=True) for f in incoming if f.name not in current]
    if not new:
        return False
    from deltalake.transaction import CommitProperties

    by = {COLUMNS_KEY: f"{result.batch_id} attempt {result.attempt}: {', '.join(f.name for f in new)}"}
    table.alter.add_columns(new, commit_properties=CommitProperties(custom_metadata=by,
                                                                    max_commit_retries=COMMIT_RETRIES))
    return True


def _overlapping(table: Any, fs: Any, base: str, stats: Iterable[Any], keep: set[str],
                 incarnations: Mapping[str, int]) -> tuple[list[Any], list[Any]]:
    """Removes of live files overlapping a published range (same priority, incarnation), and adds of the rows they
    hold outside it (:func:`spark_jobs.keep_rows.keep_outside`): a publish never removes a row outside its ranges."""
    import time
    import uuid

    from deltalake.transaction import RemoveAction

    from spark_jobs.keep_rows import keep_outside, outside

    published = [(s.priority, s.range) for s in stats]
    now_ms = int(time.time() * 1000)
    removes, kept = [], []
    for path, size in _live(table):
        if path in keep:
            continue
        priority_dir, _, file_name = path.partition("/")
        parsed, match = parse_published(file_name), PRIORITY_DIR.match(priority_dir)
        if parsed is None or match is None:
            continue
        (name, batch_id, attempt), priority = parsed, int(match.group(1))
        if name.incarnation != incarnations.get(f"{name.topic}[{name.partition}]", 1):
            continue  # another incarnation's offsets are another log's
        mine = [r for p, r in published if p == priority]
        if not any(name.range.overlaps(r) for r in mine):
            continue
        removes.append(RemoveAction(path=path, data_change=True, deletion_timestamp=now_ms, size=size,
                                    partition_values={"priority": str(priority)}))
        pieces = outside(name.range, mine)
        if pieces:
            tag = uuid.uuid4().hex[:8]
            table_dir = f"{base}/{priority_dir}"
            for piece, target, _ in keep_outside(fs, f"{base}/{path}", pieces, lambda piece: f"{table_dir}/" + (
                    published_name(RangeFile(name.topic, name.partition, piece.start, piece.end, name.part,
                                             name.incarnation), batch_id, attempt, tag=tag))):
                rel = f"{priority_dir}/{target.rsplit('/', 1)[1]}"
                kept.append(_add_action(fs, target, rel, priority, fs.get_file_info(target)))
    return removes, kept


def _live(table: Any) -> list[tuple[str, int]]:
    """``(path, size)`` of every file the table's current version adds."""
    actions = table.get_add_actions(flatten=True)
    return list(zip(actions.column("path").to_pylist(), actions.column("size_bytes").to_pylist(), strict=True))


def live_files(root: str, logical_topic: str) -> tuple[Any, ...]:
    """The current version's files as :class:`~spark_jobs.output.LiveFile` (path relative to the table), from names."""
    from deltalake import DeltaTable

    from spark_jobs.output import LiveFile

    uri = table_uri(root, logical_topic)
    if not DeltaTable.is_deltatable(uri):
        return ()
    out = []
    for path, _ in _live(DeltaTable(uri)):
        priority_dir, _, file_name = path.partition("/")
        parsed, match = parse_published(file_name), PRIORITY_DIR.match(priority_dir)
        if parsed is None or match is None:
            continue
        name, batch_id, attempt = parsed
        out.append(LiveFile(root, path, int(match.group(1)), name.topic, name.partition, name.start, name.end,
                            name.part, batch_id, attempt, name.incarnation))
    return tuple(sorted(out, key=lambda f: (f.topic, f.partition, f.start, f.end, f.part or 0, f.path)))


def table_batches(root: str, logical_topic: str) -> list[dict[str, Any]]:
    """The publishes the table's log records, oldest first: what an adoption reads after a lost ledger."""
    from deltalake import DeltaTable

    uri = table_uri(root, logical_topic)
    if not DeltaTable.is_deltatable(uri):
        return []
    out = []
    for entry in reversed(DeltaTable(uri).history()):
        if BATCH_KEY in entry:
            out.append({"batch_id": entry[BATCH_KEY], "attempt": int(entry[ATTEMPT_KEY]),
                        "ranges": list(entry.get(RANGES_KEY) or []), "version": int(entry["version"])})
    return out


def read_table(root: str, logical_topic: str, *, batch_id: str | None = None,
               columns: Iterable[str] | None = None, version: int | None = None) -> Any:
    """The rows of the table's current version (or ``version``) as a ``pyarrow.Table`` (empty: no table).

    Read with pyarrow's own dataset, not ``DeltaTable.to_pyarrow_dataset``: its scans call back into delta-rs
    from Arrow's threads, and the process may abort at exit (delta-rs issue 2184).
    """
    import pyarrow as pa
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    uri = table_uri(root, logical_topic)
    if not DeltaTable.is_deltatable(uri):
        return pa.table({})
    fs, base = filesystem(root)
    table = DeltaTable(uri, version=version)
    files = [f"{base}/{logical_topic}/{path}" for path, _ in _live(table)]
    if not files:
        return pa.table({})
    where = None if batch_id is None else ds.field("batch_id") == batch_id
    # The table's schema: a column added by a later batch reads as null in the files written before it.
    dataset = ds.dataset(files, schema=pa.schema(table.schema().to_arrow()), filesystem=fs, format="parquet")
    return dataset.to_table(columns=list(columns) if columns else None, filter=where)
