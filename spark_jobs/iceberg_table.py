"""A batch published into an Apache Iceberg table (``pyiceberg``): one snapshot per batch and table.

One table per logical topic and root, data and metadata under ``<root>/<logical>``, registered in the
``drain.iceberg`` catalog (SQLite by default) as ``<namespace>.<logical>`` and ``<namespace>.<logical>_dead_letters``;
partitioned by ``priority`` and the hour (or day) of ``timestamp`` (``drain.iceberg.time_partition``).

:func:`publish` works as :mod:`spark_jobs.delta_table`'s (same file names, plus ``.t<hour>`` when a file is split
across partitions; overlapped files replaced, their other rows kept; new columns added first) in one snapshot.
Statistics come from the footers (``parquet_file_to_data_file``; no field ids: the name mapping maps columns).
Batch id, attempt, lease epoch (the fencing token), ranges and checks go in the snapshot summary (``kprio.*``).

Fencing is on the state committed to: each try loads the table, reads the batch's recorded epoch (older
refused, same done) and commits requiring ``main`` still at the snapshot read. ``commit.retry.num-retries``
is 0, so pyiceberg never replays a lost commit on a newer state; it is loaded, checked and made again here.

The high water (``kprio.high-water``, updated by each publish: per partition and incarnation, an offset no
live file reaches beyond) spares reading every manifest: a publish whose ranges all start at or above it
(the common case) replaces nothing and merge-appends. A re-drain, or a table without it, scans live files.

>>> from kprio_core.config import IcebergSettings
>>> import tempfile
>>> root = tempfile.mkdtemp()
>>> settings = IcebergSettings(catalog={"type": "sql", "uri": f"sqlite:///{root}/catalog.db"})
>>> load(settings, "output", "orders") is None  # no table until a batch is published
True
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import DrainResult
from spark_jobs.delta_table import files_schema, published_name, staged_files
from spark_jobs.iceberg_catalog import (  # the table as kprio finds and reads it
    ATTEMPT_KEY,
    BATCH_KEY,
    EPOCH_KEY,
    RANGES_KEY,
    _path,
    _publishes,
    _uri,
    catalog,
    identifier,
    live_data_files,
    load,
    location,
    parse_data_file,
)
from spark_jobs.layout import RangeFile, filesystem
from spark_jobs.tables import refuse_if_stale

if TYPE_CHECKING:
    from kprio_core.config import IcebergSettings

COLUMNS_KEY = "kprio.columns_added"
"""Table property: the last schema change a batch brought (the batch, the attempt, the columns)."""
COMMIT_RETRIES = 20
"""Commits of other batches (or of the maintenance) may land in between: loaded, checked and made again."""
HIGH_WATER_KEY = "kprio.high-water"
"""Table property: per ``topic[partition]#incarnation``, an offset no live file reaches beyond (JSON)."""
TABLE_PROPERTIES = {
    "commit.retry.num-retries": "0",  # a commit on the state checked, or none (see the module docstring)
    # A publish that replaces nothing merge-appends: small manifests merged, so publishes and reads stay quick.
    "commit.manifest-merge.enabled": "true",
    "write.metadata.delete-after-commit.enabled": "true",  # the metadata files of older commits do not pile up
    "write.metadata.previous-versions-max": "50",
    "format-version": "2",
}
TIME_TAG = "t"
"""``.t<bucket>`` in a file's name: the hour (or day) since the epoch its records are in; ``.tn``: no timestamp."""


@dataclass(frozen=True)
class Published:
    """What one publish did to one table: its snapshot after the commit, the files added and removed."""

    table: str
    snapshot_id: int | None
    added: tuple[str, ...]
    removed: tuple[str, ...]
    already: bool = False
    """The table held this run's publish already: nothing was written."""


def held_epoch(table: Any, batch_id: str) -> int | None:
    """The newest epoch the table's snapshots record for the batch (None: none publishes it)."""
    epochs = [int(s.summary[EPOCH_KEY]) for s in _publishes(table) if s.summary[BATCH_KEY] == batch_id]
    return max(epochs, default=None)


def time_bucket(kind: str, micros: int | None) -> int | None:
    """The hour (or day) since the epoch of a timestamp in microseconds, as Iceberg's transforms count them.

    >>> time_bucket("hour", 3_600_000_000 * 5 + 1), time_bucket("day", 86_400_000_000 * 2), time_bucket("hour", None)
    (5, 2, None)
    """
    if micros is None:
        return None
    return micros // (3_600_000_000 if kind == "hour" else 86_400_000_000)


def _split_by_time(fs: Any, source: str, target: str, kind: str) -> list[str]:
    """Move ``source`` to ``target``, split into a ``.t<bucket>`` file per hour (day): one partition per data file."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    stem = target.removesuffix(".parquet")
    if fs.get_file_info(source).type != pafs.FileType.File:
        # Moved by this attempt's publish that died before its commit: its pieces are there already.
        selector = pafs.FileSelector(target.rsplit("/", 1)[0], allow_not_found=True)
        return sorted(f.path for f in fs.get_file_info(selector)
                      if f.path == target or f.path.startswith(f"{stem}.{TIME_TAG}"))
    fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
    with fs.open_input_file(source) as f:
        table = pq.read_table(f)
    buckets = [None] * table.num_rows
    if kind != "none" and "timestamp" in table.column_names:
        micros = pc.cast(pc.cast(table["timestamp"], pa.timestamp("us", tz="UTC")), pa.int64())
        buckets = [time_bucket(kind, m) for m in micros.to_pylist()]
    distinct = sorted(set(buckets), key=lambda b: (b is None, b or 0))
    if len(distinct) <= 1:
        fs.move(source, target)
        return [target]
    out = []
    column = pa.array(buckets, pa.int64())
    for bucket in distinct:
        mask = pc.is_null(column) if bucket is None else pc.equal(column, bucket)
        path = f"{stem}.{TIME_TAG}{'n' if bucket is None else bucket}.parquet"
        temporary = f"{path}.tmp"
        with fs.open_output_stream(temporary) as sink:
            pq.write_table(table.filter(mask), sink)
        fs.move(temporary, path)
        out.append(path)
    fs.delete_file(source)
    return out


def _create(settings: IcebergSettings, kind: str, logical_topic: str, root: str, schema: Any) -> Any:
    """Create the table (schema from the batch's files), or load the one another batch's publish created meanwhile."""
    from pyiceberg.table import TableProperties
    from pyiceberg.transforms import DayTransform, HourTransform

    cat = catalog(settings)
    try:
        cat.create_namespace_if_not_exists(settings.namespace)
    except Exception:  # noqa: BLE001 - another publish created it at the same moment (the catalog's own error)
        if settings.namespace not in {n[0] for n in cat.list_namespaces()}:
            raise
    try:
        with cat.create_table_transaction(identifier(settings, kind, logical_topic), schema=schema,
                                          location=location(root, logical_topic),
                                          properties=TABLE_PROPERTIES) as tx:
            with tx.update_spec() as spec:
                spec.add_identity("priority")
                if settings.time_partition.value != "none" and "timestamp" in schema.names:
                    transform = HourTransform() if settings.time_partition.value == "hour" else DayTransform()
                    spec.add_field("timestamp", transform, f"timestamp_{settings.time_partition.value}")
            # The staged files carry no field ids: readers map their columns by name (as for add_files).
            tx.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                                 tx.table_metadata.schema().name_mapping.model_dump_json()})
    except Exception:  # noqa: BLE001 - another batch's publish created the table first (two batches in flight)
        if load(settings, kind, logical_topic) is None:
            raise
    return cat.load_table(identifier(settings, kind, logical_topic))


def publish(settings: IcebergSettings, result: DrainResult, *, root: str, kind: str,
            ranges: Iterable[OffsetRange] | None = None, incarnations: Mapping[str, int] | None = None,
            summary: Mapping[str, str] | None = None, epoch: int | None = None) -> Published | None:
    """Publish the staged ``kind`` files of ``ranges`` (default: all without failure) in one snapshot.

    ``epoch`` (default: the attempt) is the fencing token. None when nothing was staged and nothing is replaced.
    """
    fence = result.attempt if epoch is None else epoch
    chosen = set(ranges) if ranges is not None else {s.range for s in result.ranges if s.failure is None}
    stats = [s for s in result.ranges if s.range in chosen]
    table = load(settings, kind, result.logical_topic)
    name = ".".join(identifier(settings, kind, result.logical_topic))
    if table is not None and (held := held_epoch(table, result.batch_id)) is not None and held >= fence:
        refuse_if_stale(held, fence, result, f"Iceberg table {name}")
        return Published(name, table.metadata.current_snapshot_id, (), (), already=True)
    fs, base = filesystem(root)
    table_dir = f"{base}/{result.logical_topic}/data"
    moved: list[str] = []
    for _, source, priority_dir, range_name in staged_files(base, result, stats, kind):
        published = published_name(range_name, result.batch_id, result.attempt, epoch=fence)
        moved += _split_by_time(fs, source, f"{table_dir}/{priority_dir}/{published}", settings.time_partition.value)
    if table is None and not moved:
        return None
    if table is None:
        table = _create(settings, kind, result.logical_topic, root, files_schema(fs, moved))
    properties = {BATCH_KEY: result.batch_id, ATTEMPT_KEY: str(result.attempt), EPOCH_KEY: str(fence),
                  RANGES_KEY: json.dumps([str(s.range) for s in stats]), **(summary or {})}
    return _commit(settings, kind, result, fs, moved, stats, incarnations or {}, properties, fence, name)


def _commit(settings: IcebergSettings, kind: str, result: DrainResult, fs: Any, moved: list[str],
            stats: list[Any], incarnations: Mapping[str, int], properties: dict[str, str], fence: int,
            name: str) -> Published | None:
    """Commit the moved files, the removes of what they replace and the rows kept of what they overlap.

    A commit that lost a race (another batch, the maintenance, a newer run) is retried on the table loaded again.
    """
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    uris = [_uri(fs, path) for path in moved]
    incoming = files_schema(fs, moved) if moved else None
    for tries in range(COMMIT_RETRIES):
        table = load(settings, kind, result.logical_topic)
        held = held_epoch(table, result.batch_id)
        if held is not None and held >= fence:
            refuse_if_stale(held, fence, result, f"Iceberg table {name}")
            return Published(name, table.metadata.current_snapshot_id, (), (), already=True)
        if incoming is not None and _evolve(table, incoming, result):
            continue  # the schema changed in a commit of its own: commit on the new state
        keys = {s.range: water_key(s.range, incarnations) for s in stats}
        water = high_water(table)
        if water is not None and all(r.start >= water.get(key, 0) for r, key in keys.items()):
            removes, kept = [], []  # nothing live reaches into the published ranges: nothing to replace
        else:
            removes, kept, water = _overlapping(table, fs, stats, set(uris), incarnations)
        if not uris and not removes:
            return None
        for r, key in keys.items():
            water[key] = max(water.get(key, 0), r.end)
        tx = table.transaction()
        tx.set_properties(**{HIGH_WATER_KEY: json.dumps(water, sort_keys=True)})
        update = tx.update_snapshot(snapshot_properties=properties)
        with (update.overwrite() if removes else update.merge_append()) as snapshot:
            for uri in [*uris, *kept]:
                snapshot.append_data_file(parquet_file_to_data_file(table.io, tx.table_metadata, uri))
            for data_file in removes:
                snapshot.delete_data_file(data_file)
        try:
            done = tx.commit_transaction()
        except CommitFailedException:
            if tries == COMMIT_RETRIES - 1:
                raise
            continue
        return Published(name, done.metadata.current_snapshot_id, tuple([*uris, *kept]),
                         tuple(f.file_path for f in removes))
    raise AssertionError("unreachable: the last try raises")


def water_key(r: OffsetRange, incarnations: Mapping[str, int]) -> str:
    """The key of a range's partition and incarnation in the table's high water.

    >>> water_key(OffsetRange("orders-2", 0, 0, 10), {"orders-2[0]": 3})
    'orders-2[0]#3'
    """
    return f"{r.topic}[{r.partition}]#{incarnations.get(f'{r.topic}[{r.partition}]', 1)}"


def high_water(table: Any) -> dict[str, int] | None:
    """The table's high water (:data:`HIGH_WATER_KEY`), None when it has none (a table older than it)."""
    text = table.metadata.properties.get(HIGH_WATER_KEY)
    return None if text is None else {k: int(v) for k, v in json.loads(text).items()}


def _overlapping(table: Any, fs: Any, stats: Iterable[Any], keep: set[str],
                 incarnations: Mapping[str, int]) -> tuple[list[Any], list[str], dict[str, int]]:
    """Live files overlapping a published range (same priority, incarnation), files of the rows they hold outside
    it (:func:`spark_jobs.keep_rows.keep_outside`), and the live files' high water."""
    import uuid

    from spark_jobs.keep_rows import keep_outside, outside

    published = [(s.priority, s.range) for s in stats]
    removes, kept, water = [], [], {}
    for data_file in live_data_files(table):
        if data_file.file_path in keep:
            continue
        parsed = parse_data_file(data_file.file_path)
        if parsed is None:
            continue
        priority, name, batch_id, attempt = parsed
        key = f"{name.topic}[{name.partition}]#{name.incarnation}"
        water[key] = max(water.get(key, 0), name.end)
        if name.incarnation != incarnations.get(f"{name.topic}[{name.partition}]", 1):
            continue  # another incarnation's offsets are another log's
        mine = [r for p, r in published if p == priority]
        if not any(name.range.overlaps(r) for r in mine):
            continue
        removes.append(data_file)
        pieces = outside(name.range, mine)
        if not pieces:
            continue
        source = _path(data_file.file_path)
        directory, _, file_name = source.rpartition("/")
        tags = [t for t in file_name.removesuffix(".parquet").split(".") if t.startswith(TIME_TAG) and t[1:].isdigit()
                or t == f"{TIME_TAG}n"]
        tag = uuid.uuid4().hex[:8]

        def target_of(piece: OffsetRange, name: RangeFile = name, batch_id: str = batch_id, attempt: int = attempt,
                      directory: str = directory, tags: list[str] = tags) -> str:
            piece_name = RangeFile(name.topic, name.partition, piece.start, piece.end, name.part, name.incarnation)
            stem = published_name(piece_name, batch_id, attempt, tag=tag).removesuffix(".parquet")
            return f"{directory}/{'.'.join([stem, *tags])}.parquet"

        kept += [_uri(fs, path) for _, path, _ in keep_outside(fs, source, pieces, target_of)]
    return removes, kept, water


def type_text(kind: Any) -> str:
    """An Arrow type in a line, as Iceberg sees it (string and large string alike, integers by width).

    >>> import pyarrow as pa
    >>> type_text(pa.large_list(pa.struct([("k", pa.large_string())]))), type_text(pa.timestamp("ms", tz="UTC"))
    ('list<struct<k: string>>', 'timestamptz')
    """
    import pyarrow as pa

    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return f"list<{type_text(kind.value_type)}>"
    if pa.types.is_struct(kind):
        return "struct<" + ", ".join(f"{f.name}: {type_text(f.type)}" for f in kind) + ">"
    if pa.types.is_map(kind):
        return f"map<{type_text(kind.key_type)}, {type_text(kind.item_type)}>"
    if pa.types.is_timestamp(kind):
        return "timestamptz" if kind.tz else "timestamp"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "string"
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return "binary"
    if pa.types.is_integer(kind):
        return "long" if kind.bit_width == 64 else "int"
    if pa.types.is_floating(kind):
        return "double" if kind.bit_width == 64 else "float"
    return str(kind)


def _evolve(table: Any, schema: Any, result: DrainResult) -> bool:
    """Add the columns the table lacks, nullable, in a commit of their own; True when it did.

    A column whose type changed raises ValueError naming it."""
    import pyarrow as pa

    current = {f.name: f for f in table.schema().as_arrow()}
    for field in schema:
        if field.name in current:
            theirs, mine = type_text(current[field.name].type), type_text(field.type)
            if theirs != mine and not (theirs == "long" and mine == "int"):
                raise ValueError(f"the batch's column {field.name!r} is {mine}, the Iceberg table "
                                 f"{'.'.join(table.name())} has it as {theirs}")
    new = [f.with_nullable(True) for f in schema if f.name not in current]
    if not new:
        return False
    tx = table.transaction()
    with tx.update_schema() as update:
        update.union_by_name(pa.schema(new))
    tx.set_properties(**{COLUMNS_KEY: f"{result.batch_id} attempt {result.attempt}: {', '.join(f.name for f in new)}"})
    tx.commit_transaction()
    return True


