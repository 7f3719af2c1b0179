"""The conservation invariant, checked from the outside: output files (or tables), dead letters and the broker.

Every record of ``[log start, committed)`` of every priority partition that a read_committed
consumer sees is exactly once in the output or exactly once in the dead letters, never both; no
other offset (an aborted record, a transaction marker) is there, and nothing beyond the committed
offset is visible. Read with pyarrow straight from the published files (never through kprio's own
readers), or, where the root holds a Delta table (``drain.format: delta``), the table's current version
read with ``deltalake`` itself (files a commit removed stay on disk for older versions, and files no
commit added are invisible: only the log says which count), and for an Iceberg table
(``drain.format: iceberg``) the files the current snapshot names, the table loaded from its catalog with
``pyiceberg``'s own ``load_catalog``; the records with a plain
confluent-kafka consumer, so a bug there cannot hide a loss.
A partition is read only when some of its offsets are in neither output (offsets that held no
record, or a loss): a topic without transactions or compaction costs no read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kprio_core.config import IcebergSettings, KprioConfig, TopicSettings
from kprio_core.kafka import KafkaEdge
from tests.fixtures.transactions import visible_offsets


def published_offsets(root: str, logical_topic: str, incarnations: Mapping[str, int] | None = None, *,
                      iceberg: tuple[IcebergSettings, str] | None = None) -> Counter:
    """(topic, partition, offset) of every published row under ``<root>/<logical topic>`` (staging excluded).

    Only files of each partition's ``incarnations`` (``topic[partition]``, 1 when absent) count: offsets of a recreated topic's
    earlier incarnation are another log's (``+i<n>`` in the file name, see spark_jobs.layout). ``iceberg``: the
    catalog settings and the kind (``output``, ``dead-letters``) of an Iceberg table's root.
    """
    import pyarrow.dataset as ds

    from spark_jobs.layout import RangeFile

    def current(p: Path) -> bool:
        name = RangeFile.parse(p.name)
        return name is None or name.incarnation == (incarnations or {}).get(f"{name.topic}[{name.partition}]", 1)

    base = Path(root) / logical_topic
    if iceberg is not None:
        return _iceberg_offsets(*iceberg, logical_topic, current)
    if (base / "_delta_log").is_dir():
        return _table_offsets(base, current)
    files = [p for p in base.rglob("*.parquet")
             if not any(part.startswith(("_", ".")) for part in p.parts) and current(p)]
    if not files:
        return Counter()
    table = ds.dataset([str(f) for f in files], format="parquet").to_table(columns=["topic", "partition", "offset"])
    cols = table.to_pydict()
    return Counter(zip(cols["topic"], cols["partition"], cols["offset"], strict=True))


def _table_offsets(base: Path, current) -> Counter:  # noqa: ANN001 - the file name filter above
    """(topic, partition, offset) of the rows of a Delta table's current version, of current incarnations only."""
    import pyarrow.dataset as ds
    from deltalake import DeltaTable

    from spark_jobs.delta_table import parse_published

    paths = DeltaTable(str(base)).get_add_actions(flatten=True).column("path").to_pylist()
    # A table's file is named <range name>.<batch>.<attempt>.parquet: its range name says the incarnation.
    named = {path: parse_published(Path(path).name) for path in paths}
    files = [str(base / path) for path, n in named.items() if current(Path(n[0].file_name if n else path))]
    if not files:
        return Counter()
    cols = ds.dataset(files, format="parquet").to_table(columns=["topic", "partition", "offset"]).to_pydict()
    return Counter(zip(cols["topic"], cols["partition"], cols["offset"], strict=True))


def iceberg_table(settings: IcebergSettings, kind: str, logical_topic: str):  # noqa: ANN201 - pyiceberg's Table
    """The Iceberg table of ``kind`` of a logical topic, loaded with pyiceberg's own catalog (None: none yet)."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    name = f"{logical_topic}_dead_letters" if kind == "dead-letters" else logical_topic
    try:
        return load_catalog(settings.catalog_name, **settings.catalog).load_table((settings.namespace, name))
    except (NoSuchTableError, NoSuchNamespaceError):
        return None


def iceberg_publishes(settings: IcebergSettings, kind: str, logical_topic: str) -> list[dict[str, str]]:
    """The summaries of the table's snapshots that publish a batch (``kprio.batch_id`` set), oldest first."""
    table = iceberg_table(settings, kind, logical_topic)
    if table is None:
        return []
    snapshots = sorted(table.metadata.snapshots, key=lambda s: s.sequence_number or 0)
    return [dict(s.summary.additional_properties) for s in snapshots
            if s.summary is not None and s.summary.additional_properties.get("kprio.batch_id")]


def _iceberg_offsets(settings: IcebergSettings, kind: str, logical_topic: str, current) -> Counter:  # noqa: ANN001
    """(topic, partition, offset) of the rows of an Iceberg table's current snapshot, of current incarnations only:
    the data files its scan plans (pyiceberg), read with pyarrow."""
    import pyarrow.dataset as ds

    from spark_jobs.delta_table import parse_published

    table = iceberg_table(settings, kind, logical_topic)
    if table is None or table.current_snapshot() is None:
        return Counter()
    paths = [task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()]
    named = {path: parse_published(Path(path).name) for path in paths}
    files = [path for path, n in named.items() if current(Path(n[0].file_name if n else path))]
    if not files:
        return Counter()
    cols = ds.dataset(files, format="parquet").to_table(columns=["topic", "partition", "offset"]).to_pydict()
    return Counter(zip(cols["topic"], cols["partition"], cols["offset"], strict=True))


@dataclass
class Conservation:
    """What the outputs hold against what the groups committed."""

    expected: int = 0
    missing: list[tuple[str, int, int]] = field(default_factory=list)
    doubled: list[tuple[str, int, int]] = field(default_factory=list)
    in_both: list[tuple[str, int, int]] = field(default_factory=list)
    beyond: list[tuple[str, int, int]] = field(default_factory=list)
    not_records: list[tuple[str, int, int]] = field(default_factory=list)
    """Offsets in an output that a read_committed consumer does not see (aborted records)."""
    output: int = 0
    dead_letters: int = 0

    @property
    def ok(self) -> bool:
        return not (self.missing or self.doubled or self.in_both or self.beyond or self.not_records)

    def __str__(self) -> str:
        return (f"{self.expected} expected, {self.output} in the output, {self.dead_letters} dead letters; "
                f"missing {self.missing[:5]} ({len(self.missing)}), doubled {self.doubled[:5]} ({len(self.doubled)}), "
                f"in both {self.in_both[:5]}, beyond the committed offset {self.beyond[:5]} ({len(self.beyond)}), "
                f"not a record {self.not_records[:5]} ({len(self.not_records)})")


def conservation(config: KprioConfig, topic: TopicSettings, edge: KafkaEdge,
                 incarnations: Mapping[str, int] | None = None) -> Conservation:
    """Check the invariant for ``topic`` on the output and dead-letter roots of ``config``, for the
    current incarnation of each partition (``incarnations`` by ``topic[partition]``, 1 when absent)."""
    iceberg = config.drain.format == "iceberg"
    out = published_offsets(config.drain.output_path, topic.name, incarnations,
                            iceberg=(config.drain.iceberg, "output") if iceberg else None)
    dead = published_offsets(config.drain.dead_letter_path, topic.name, incarnations,
                             iceberg=(config.drain.iceberg, "dead-letters") if iceberg else None)
    snapshot = edge.snapshot(topic, now_ms=0)
    result = Conservation(output=sum(out.values()), dead_letters=sum(dead.values()))
    committed = {(p.topic, p.partition): (p.log_start, p.committed or 0) for p in snapshot.partitions}
    for (t, q), (start, end) in committed.items():
        absent = [o for o in range(start, end) if not out.get((t, q, o)) and not dead.get((t, q, o))]
        records = set(visible_offsets(config.kafka, t, q, end=end)) if absent else None
        for offset in range(start, end):
            key = (t, q, offset)
            n_out, n_dead = out.get(key, 0), dead.get(key, 0)
            if records is not None and offset not in records:
                if n_out + n_dead:
                    result.not_records.append(key)
                continue
            result.expected += 1
            if n_out and n_dead:
                result.in_both.append(key)
            elif n_out + n_dead == 0:
                result.missing.append(key)
            elif n_out + n_dead > 1:
                result.doubled.append(key)
    for key in [*out, *dead]:
        t, q, offset = key
        if offset >= committed.get((t, q), (0, 0))[1]:
            result.beyond.append(key)
    return result


def lag(topic: TopicSettings, edge: KafkaEdge) -> dict[int, int]:
    """Backlog per priority (0 everywhere after a full drain)."""
    return edge.snapshot(topic, now_ms=0).backlog_by_priority()
