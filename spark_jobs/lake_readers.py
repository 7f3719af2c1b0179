"""Other engines over the output kprio writes: DuckDB, and Spark from the files the output's current state names.

DuckDB reads every format (:meth:`spark_jobs.tables.Output.scan_sql`: ``read_parquet``, ``delta_scan``,
``iceberg_scan``). Its extensions come from PyPI packages built for the pinned DuckDB (``duckdb-extension-delta``,
``-iceberg``, ``-avro``: Iceberg manifests are Avro), installed into ``$KPRIO_CACHE_DIR/duckdb``; automatic
install is off, so a machine without access to DuckDB's extension server reads the tables all the same.

Spark reads a table's current state from the data files it names (:meth:`~spark_jobs.tables.Output.data_files`)
with ``spark.read.parquet`` in its session: Delta's own Spark reader needs jars and static session settings
(on a cluster: docs/operations.md), and Iceberg's Spark runtime has no build for Spark 4.2 yet.

>>> sql_literal("it's")
"'it''s'"
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kprio_core.config import DrainSettings
from kprio_core.jar_cache import cache_dir

if TYPE_CHECKING:
    import duckdb

EXTENSIONS = ("avro", "delta", "iceberg")
"""DuckDB extensions loaded by default, in this order: the iceberg extension would otherwise fetch avro online."""


def duckdb_connection(extension_dir: str | Path | None = None,
                      extensions: Iterable[str] = EXTENSIONS) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with ``extensions`` from their PyPI packages, none fetched from the network."""
    import duckdb

    where = Path(extension_dir) if extension_dir is not None else cache_dir() / "duckdb"
    where.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                                 "extension_directory": str(where)})
    for name in extensions:
        from duckdb_extensions import import_extension

        import_extension(name, con=con)
        con.sql(f"LOAD {name}")
    return con


def sql_literal(text: str) -> str:
    """A SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def duckdb_rows(drain: DrainSettings, kind: str, logical_topic: str, sql: str, *,
                connection: Any = None) -> list[tuple]:
    """Run ``sql`` with ``{table}`` standing for the format's scan of the published rows of ``kind``; its rows."""
    from spark_jobs.tables import output_of

    out = output_of(drain)
    con = connection if connection is not None else duckdb_connection(extensions=out.duckdb_extensions)
    return con.sql(sql.format(table=out.scan_sql(kind, logical_topic))).fetchall()
