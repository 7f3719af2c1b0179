"""Other engines over the tables kprio writes: DuckDB, and Spark from the files a table's current state names.

DuckDB reads all three formats: Parquet files with ``read_parquet``, a Delta table with its
``delta`` extension (``delta_scan``), an Iceberg table with its ``iceberg`` extension
(``iceberg_scan`` of the metadata file the catalog names as current). The extensions come as PyPI
packages built for exactly the pinned DuckDB (``duckdb-extension-delta``, ``-iceberg``, ``-avro``:
the Iceberg manifests are Avro files) and are installed from those local files into kprio's cache
(``$KPRIO_CACHE_DIR/duckdb``); DuckDB's automatic install from its extension server is turned off,
so a machine without access to it reads the tables all the same.

Spark reads a table's current state from the data files it names: a Delta table's log (what
``deltalake`` lists, :func:`delta_data_files`), an Iceberg table's current snapshot
(:func:`iceberg_data_files`), with ``spark.read.parquet`` in the session it already has. Delta
Lake's own Spark reader needs its jars and session extension, static settings of a session of its
own (on a cluster: ``io.delta:delta-spark`` for the cluster's Spark, docs/operations.md); Iceberg's
Spark runtime has no build for Spark 4.2 yet (its 4.1 runtime fails there on Spark's changed
catalog classes).

>>> import tempfile
>>> from kprio_core.config import DrainSettings
>>> root = tempfile.mkdtemp()
>>> drain = DrainSettings(format="delta", output_path=f"{root}/out", dead_letter_path=f"{root}/dead")
>>> scan_sql(drain, "output", "orders") == f"delta_scan('{root}/out/orders')"
True
>>> scan_sql(drain, "output", "it's")
"delta_scan('...it''s')"
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from kprio_core.config import DrainSettings, OutputFormat
from kprio_core.errors import OutputUnavailable
from kprio_core.jar_cache import cache_dir

if TYPE_CHECKING:
    import duckdb

EXTENSIONS = ("avro", "delta", "iceberg")
"""DuckDB extensions loaded, in this order: the iceberg extension would otherwise fetch avro from the network."""

def duckdb_connection(extension_dir: str | Path | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with the ``avro``, ``delta`` and ``iceberg`` extensions loaded from their PyPI
    packages (installed into ``extension_dir``, default ``$KPRIO_CACHE_DIR/duckdb``), none fetched from the network."""
    import duckdb
    from duckdb_extensions import import_extension

    where = Path(extension_dir) if extension_dir is not None else cache_dir() / "duckdb"
    where.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                                 "extension_directory": str(where)})
    for name in EXTENSIONS:
        import_extension(name, con=con)
        con.sql(f"LOAD {name}")
    return con


def _literal(text: str) -> str:
    """A SQL string literal.

    >>> _literal("it's")
    "'it''s'"
    """
    return "'" + text.replace("'", "''") + "'"


def scan_sql(drain: DrainSettings, kind: str, logical_topic: str) -> str:
    """DuckDB's table function over the published rows of ``kind`` (``output``, ``dead-letters``) of a topic, in
    ``drain.format``: ``read_parquet`` over the Parquet files (staging and other incarnations' leftovers are not
    under ``priority=*``), ``delta_scan`` of the Delta table, ``iceberg_scan`` of the Iceberg table's current
    metadata file. :class:`~kprio_core.errors.OutputUnavailable` when nothing is published yet (no table)."""
    from spark_jobs.layout import absolute
    from spark_jobs.tables import roots

    root = absolute(roots(drain)[kind]).rstrip("/")
    if drain.format is OutputFormat.DELTA:
        return f"delta_scan({_literal(f'{root}/{logical_topic}')})"
    if drain.format is OutputFormat.ICEBERG:
        from spark_jobs import iceberg_table

        table = iceberg_table.load(drain.iceberg, kind, logical_topic)
        if table is None:
            name = ".".join(iceberg_table.identifier(drain.iceberg, kind, logical_topic))
            raise OutputUnavailable(f"no Iceberg table {name} in the catalog {drain.iceberg.catalog_name!r} yet")
        return f"iceberg_scan({_literal(table.metadata_location)})"
    return (f"read_parquet({_literal(f'{root}/{logical_topic}/priority=*/*.parquet')}, hive_partitioning = false, "
            "union_by_name = true)")


def delta_data_files(drain: DrainSettings, kind: str, logical_topic: str) -> list[str]:
    """The data files (URIs) of the Delta table's current version: what an engine without a Delta reader reads the
    table's rows from (none: no table)."""
    from deltalake import DeltaTable

    from spark_jobs.delta_table import table_uri
    from spark_jobs.tables import roots

    uri = table_uri(roots(drain)[kind], logical_topic)
    return list(DeltaTable(uri).file_uris()) if DeltaTable.is_deltatable(uri) else []


def iceberg_data_files(drain: DrainSettings, kind: str, logical_topic: str) -> list[str]:
    """The data files (URIs) of the Iceberg table's current snapshot: what an engine without an Iceberg reader
    reads the table's rows from (none: no table or no snapshot)."""
    from spark_jobs import iceberg_table

    table = iceberg_table.load(drain.iceberg, kind, logical_topic)
    return [] if table is None else [f.file_path for f in iceberg_table.live_data_files(table)]


def duckdb_rows(drain: DrainSettings, kind: str, logical_topic: str, sql: str, *,
                connection: Any = None) -> list[tuple]:
    """Run ``sql`` with ``{table}`` standing for :func:`scan_sql`; its rows."""
    con = connection if connection is not None else duckdb_connection()
    return con.sql(sql.format(table=scan_sql(drain, kind, logical_topic))).fetchall()
