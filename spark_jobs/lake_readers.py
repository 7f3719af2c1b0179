"""Other engines over the output kprio writes: DuckDB, and Spark from the files the output's current state names.

DuckDB reads every format (:meth:`spark_jobs.tables.Output.scan_sql`): Parquet files with ``read_parquet``,
a Delta table with its ``delta`` extension (``delta_scan``), an Iceberg table with its ``iceberg``
extension (``iceberg_scan`` of the metadata file the catalog names as current). The extensions come as
PyPI packages built for exactly the pinned DuckDB (``duckdb-extension-delta``, ``-iceberg``, ``-avro``:
the Iceberg manifests are Avro files) and are installed from those local files into kprio's cache
(``$KPRIO_CACHE_DIR/duckdb``); DuckDB's automatic install from its extension server is turned off,
so a machine without access to it reads the tables all the same.

Spark reads a table's current state from the data files it names (:meth:`~spark_jobs.tables.Output.data_files`:
a Delta table's log, an Iceberg table's current snapshot) with ``spark.read.parquet`` in the session it
already has. Delta Lake's own Spark reader needs its jars and session extension, static settings of a
session of its own (on a cluster: ``io.delta:delta-spark`` for the cluster's Spark, docs/operations.md);
Iceberg's Spark runtime has no build for Spark 4.2 yet (its 4.1 runtime fails there on Spark's changed
catalog classes).

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
    """An in-memory DuckDB connection with ``extensions`` loaded from their PyPI packages (installed into
    ``extension_dir``, default ``$KPRIO_CACHE_DIR/duckdb``), none fetched from the network."""
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
