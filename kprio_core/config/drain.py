"""The ``drain`` section: the handler, the output format and roots, Iceberg's catalog, the tables' upkeep, replays."""

from __future__ import annotations

import os
import posixpath
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from kprio_core.config.base import Section, SettingError, a_path, a_url
from kprio_core.errors import HandlerError
from kprio_core.extras import OUTPUT_FORMATS, missing

OUTPUT_SCHEMES = ("file", "s3", "s3a", "gs", "hdfs", "abfs", "abfss", "wasbs")
"""The URL schemes of an output root: the file systems Hadoop (Spark's writers) and Arrow (kprio's) both reach."""


class OnOffsetOutOfRange(StrEnum):
    """What kprio does when a committed offset no longer points into the log (``kprio_core.log_changes``): ``hold``
    for ``kprio reset``, or reset to the log's ``earliest`` / ``latest`` by itself (recorded)."""

    HOLD = "hold"
    EARLIEST = "earliest"
    LATEST = "latest"


OutputFormat = StrEnum("OutputFormat", {name.upper(): name for name in OUTPUT_FORMATS})  # type: ignore[misc]
OutputFormat.__doc__ = """How a batch's checked rows land (``drain.format``): ``parquet`` files (the default), one ``delta``
or ``iceberg`` table per logical topic and root; one module each behind ``spark_jobs.tables.Output``."""


class TimePartition(StrEnum):
    """How an Iceberg table's files are split by the record timestamp, beside ``priority``: readers prune by it."""

    HOUR = "hour"
    DAY = "day"
    NONE = "none"


ICEBERG_SECRET_WORDS = ("password", "secret", "token", "credential", "session", "private", "key-id", "access-key")
"""Catalog properties whose name holds one of these carry a credential: only from the environment, as
pyiceberg's own ``PYICEBERG_CATALOG__<NAME>__<PROPERTY>`` variables (``.`` and ``-`` written ``_``)."""


def iceberg_secret_property(name: str) -> bool:
    """Whether a pyiceberg catalog property carries a credential (kprio never takes it from the file).

    >>> [iceberg_secret_property(k) for k in ("s3.secret-access-key", "credential", "token", "uri", "s3.endpoint")]
    [True, True, True, False, False]
    """
    return any(word in name.lower() for word in ICEBERG_SECRET_WORDS)


ICEBERG_CATALOG_TYPES = ("rest", "hive", "glue", "dynamodb", "sql", "in-memory", "bigquery")
"""pyiceberg's catalog types (its ``CatalogType``, checked by a test): ``drain.iceberg.catalog.type`` is one of them."""


class IcebergSettings(Section):
    """The Iceberg catalog and tables of ``drain.format: iceberg`` (spark_jobs/iceberg_table.py)."""

    catalog_name: str = Field("kprio", min_length=1, description="Name of the pyiceberg catalog; its secrets come from "
                              "PYICEBERG_CATALOG__<NAME>__<PROPERTY> in the environment (pyiceberg's own variables).")
    catalog: dict[str, str] = Field(
        default_factory=lambda: {"type": "sql", "uri": "sqlite:///./kprio-data/iceberg-catalog.db"},
        description="pyiceberg catalog properties (type: sql, rest, glue, ...; uri, warehouse, s3.*); the default is a "
        "SQL catalog on SQLite in the kprio data directory. No secret here: a password in the uri or a property "
        "naming a password, secret, token or credential is refused, naming the variable to use.")
    namespace: str = Field("kprio", min_length=1, description="Namespace of the tables: <namespace>.<logical topic> "
                           "(the output) and <namespace>.<logical topic>_dead_letters.")
    time_partition: TimePartition = Field(
        TimePartition.HOUR, description="Partition the tables by priority and by the hour (or day) of the record "
        "timestamp, so a reader prunes; 'none': by priority only.")

    @field_validator("catalog")
    @classmethod
    def _no_secret_in_the_file(cls, value: dict[str, str]) -> dict[str, str]:
        """No credential (it would sit in kprio.yaml and Dagster's config page); a URL held to
        :func:`~kprio_core.config.base.a_url`, a ``warehouse`` path to :func:`~kprio_core.config.base.a_path`, a
        ``type`` one of :data:`ICEBERG_CATALOG_TYPES`.

        >>> IcebergSettings(catalog={"type": "sql", "uri": "postgresql+psycopg://kprio:hunter2@db/cat"})
        Traceback (most recent call last):
        ...
        pydantic_core._pydantic_core.ValidationError: 1 validation error for IcebergSettings
        catalog
          Value error, holds a password in uri: remove it and set PYICEBERG_CATALOG__<NAME>__URI in the environment ...
        """
        for name, text in value.items():
            variable = f"PYICEBERG_CATALOG__<NAME>__{name.upper().replace('.', '_').replace('-', '_')}"
            if iceberg_secret_property(name):
                raise ValueError(f"{name} is a secret: set it in the environment as {variable}, never in the file")
            if "://" in text and urlsplit(text).password:
                raise ValueError(f"holds a password in {name}: remove it and set {variable} in the environment (the "
                                 "whole value, password included)")
            try:
                if "://" in text:
                    a_url(text, secrets=f"set {variable} in the environment (the whole value) instead")
                elif name == "warehouse":
                    a_path(text)
            except ValueError as err:
                raise SettingError(str(err), key=name) from None
        kind = value.get("type")
        if kind is not None and kind not in ICEBERG_CATALOG_TYPES and "py-catalog-impl" not in value:
            raise SettingError(f"{kind!r} is no catalog type of pyiceberg's: {', '.join(ICEBERG_CATALOG_TYPES)} (or "
                               "name a class of one's own as py-catalog-impl)", key="type")
        return value


class MaintenanceSettings(Section):
    """Scheduled upkeep of Delta and Iceberg tables (``kprio tables maintain``, Dagster's schedule, Airflow's DAG)."""

    schedule: str = Field("17 * * * *", description="Cron schedule of the maintenance job (Dagster) and DAG (Airflow).")
    target_file_mb: int = Field(128, ge=1, description="Compaction merges a partition's small files into files of "
                                "about this size (MiB of Parquet).")
    min_files: int = Field(4, ge=2, description="Compact a run of adjacent files only when it has at least this many.")
    retention_s: float = Field(
        7 * 24 * 3600.0, ge=0, description="Files and snapshots a reader of an older version may still need are kept "
        "this long: Delta's vacuum and log cleanup, Iceberg's snapshot expiry (the newest snapshots always stay).")
    keep_snapshots: int = Field(10, ge=1, description="Iceberg: snapshots always kept, however old.")

    @field_validator("schedule")
    @classmethod
    def _a_cron_schedule(cls, value: str) -> str:
        """Five cron fields or an alias (``@hourly``), checked here: else it would fail only when the definitions load.

        >>> MaintenanceSettings(schedule="@daily").schedule, MaintenanceSettings(schedule="*/5 * * * 1-5").schedule
        ('@daily', '*/5 * * * 1-5')
        """
        from croniter import croniter

        aliases = ("@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@annually", "@midnight")
        if value.strip() in aliases:
            return value
        if len(value.split()) != 5 or not croniter.is_valid(value):
            raise ValueError(f"{value!r} is not a cron schedule: write five fields, minute hour day month weekday "
                             "(like '17 * * * *'), or @hourly, @daily, @weekly")
        return value


class DrainSettings(Section):
    """What the drain does with records."""

    handler: str = Field("spark_jobs.handlers:decode_json", description="module:function applied per lane.")
    allow_data_loss: bool = Field(False, description="Record gaps lost to retention instead of failing.")
    on_offset_out_of_range: OnOffsetOutOfRange = Field(
        OnOffsetOutOfRange.HOLD, description="A committed offset beyond the log's end, or a recreated topic: 'hold' "
        "the partition for kprio reset, or reset it to the log's 'earliest' / 'latest' offset by itself (recorded)."
    )
    format: OutputFormat = Field(
        OutputFormat.PARQUET, description="How batches land: 'parquet' files moved into place one by one, or one "
        "'delta' Lake table per logical topic and root with one atomic commit per batch, or one 'iceberg' table per "
        "logical topic and root with one snapshot per batch (docs/operations.md, Output formats)."
    )
    iceberg: IcebergSettings = Field(default_factory=IcebergSettings, description="drain.format iceberg: the catalog "
                                     "and the tables' partitioning.")
    maintenance: MaintenanceSettings = Field(default_factory=MaintenanceSettings, description="Compaction and "
                                             "retention of Delta and Iceberg tables (docs/operations.md, Maintenance).")
    output_path: str = Field("./kprio-data/output", description="Root of the output (local, s3://, gs://, hdfs://); the output, dead-letter and "
                             "replay roots may not be one directory or lie inside each other.")
    dead_letter_path: str = Field(
        "./kprio-data/dead-letters", description="Root of the dead-letter output: invalid records with their raw "
        "bytes and error, same layout as the output."
    )
    replay_path: str = Field("./kprio-data/replay", description="Root of time-window replay output.")
    replay_start: str = Field(
        "2026-01-01",
        description="First hour of the hourly replay partitions (UTC, 'YYYY-MM-DD' or 'YYYY-MM-DD-HH:00'); fixed, so "
        "the definitions do not change from day to day.",
    )

    @field_validator("output_path", "dead_letter_path", "replay_path")
    @classmethod
    def _a_path(cls, value: str) -> str:
        scheme, sep, _ = value.partition("://")
        if sep and scheme.lower() not in OUTPUT_SCHEMES:
            raise ValueError(f"{scheme}:// is no file system Spark and Arrow write to: a local path, or "
                             f"{', '.join(s + '://' for s in OUTPUT_SCHEMES)}")
        return a_path(value)

    @field_validator("format")
    @classmethod
    def _format_installed(cls, value: OutputFormat) -> OutputFormat:
        """A format whose library is not installed fails at load, naming the extra that brings it."""
        why = missing(OUTPUT_FORMATS[value.value].part, value.value)
        if why:
            raise ValueError(why)
        return value

    @field_validator("handler")
    @classmethod
    def _handler_loads(cls, value: str) -> str:
        """The handler imports and takes ``(frames, context)``: a wrong name fails at load, not in a Spark task."""
        from kprio_core.handler_spec import resolve_handler

        try:
            resolve_handler(value)
        except HandlerError as err:
            raise ValueError(err.what) from None
        return value

    @field_validator("replay_start")
    @classmethod
    def _replay_start_parses(cls, value: str) -> str:
        parse_replay_start(value)
        return value

    @model_validator(mode="after")
    def _roots_apart(self) -> DrainSettings:
        """Output, dead letters and replays each have a root of their own (their staging names would collide)."""
        roots = {"drain.output_path": self.output_path, "drain.dead_letter_path": self.dead_letter_path,
                 "drain.replay_path": self.replay_path}
        names = list(roots)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                why = roots_overlap(roots[a], roots[b])
                if why:
                    raise ValueError(f"{a} ({roots[a]!r}) and {b} ({roots[b]!r}) {why}: give each its own directory")
        return self

REPLAY_HOUR_FORMAT = "%Y-%m-%d-%H:%M"


def parse_replay_start(text: str) -> datetime:
    """``drain.replay_start`` as a UTC hour: 'YYYY-MM-DD' (its first hour) or 'YYYY-MM-DD-HH:00'.

    >>> parse_replay_start("2026-11-14-05:00"), parse_replay_start("2026-11-01").hour
    (datetime.datetime(2026, 11, 14, 5, 0, tzinfo=datetime.timezone.utc), 0)
    >>> parse_replay_start("yesterday")
    Traceback (most recent call last):
    ...
    ValueError: 'yesterday' is not a UTC hour: write 'YYYY-MM-DD' or 'YYYY-MM-DD-HH:00'
    """
    for fmt in (REPLAY_HOUR_FORMAT, "%Y-%m-%d"):
        try:
            hour = datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
        if hour.minute == 0:
            return hour
    raise ValueError(f"{text!r} is not a UTC hour: write 'YYYY-MM-DD' or 'YYYY-MM-DD-HH:00'")


def roots_overlap(a: str, b: str) -> str | None:
    """How two output roots overlap (the same, or one inside the other), or None; local paths compared absolute.

    >>> roots_overlap("./kprio-data/output", "kprio-data/output/")
    'are the same directory'
    >>> roots_overlap("s3://bucket/out", "s3://bucket/out/dead")
    'overlap: the second is inside the first'
    >>> roots_overlap("./kprio-data/output", "./kprio-data/output-dead") is None
    True
    >>> roots_overlap("s3://one/out", "s3://two/out") is None
    True
    """
    x, y = _root_parts(a), _root_parts(b)
    if x == y:
        return "are the same directory"
    if y[: len(x)] == x:
        return "overlap: the second is inside the first"
    if x[: len(y)] == y:
        return "overlap: the first is inside the second"
    return None


def _root_parts(root: str) -> tuple[str, ...]:
    scheme, sep, rest = root.partition("://")
    if not sep:
        local = os.path.expanduser(root)
        try:
            local = os.path.abspath(local)
        except FileNotFoundError:
            # No working directory (a Spark Connect worker whose session dir was removed): compare as written,
            # still exact between two relative roots.
            local = os.path.normpath(local)
        return ("file", *Path(local).parts)
    return (scheme.lower(), *[part for part in posixpath.normpath("/" + rest).split("/") if part])
