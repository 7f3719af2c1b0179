"""What the demo's report shows of the output as published: its decoded columns and one DuckDB query over it.

>>> DUCKDB_QUERY.format(table="read_parquet('out/**/*.parquet')").split(" FROM ")[1]
"read_parquet('out/**/*.parquet') GROUP BY priority ORDER BY priority DESC"
"""

from __future__ import annotations

from kprio_core.config import DrainSettings

DUCKDB_QUERY = ('SELECT priority, count(*) AS records, min("timestamp") AS first, max("timestamp") AS last '
                "FROM {table} GROUP BY priority ORDER BY priority DESC")
"""The query over the published output the report shows (``{table}``: DuckDB's reader of the format)."""


def output_columns(drain: DrainSettings, logical_topic: str) -> list[tuple[str, str]]:
    """The decoded columns of the published output and their Arrow types (the drain's own columns left out)."""
    from spark_jobs.columns import RESERVED
    from spark_jobs.layout import OUTPUT
    from spark_jobs.tables import read_rows

    schema = read_rows(drain, OUTPUT, logical_topic).schema
    return [(f.name, str(f.type)) for f in schema if f.name not in RESERVED and f.name != "priority"]


def duckdb_report(drain: DrainSettings, logical_topic: str) -> tuple[str, list[tuple]]:
    """:data:`DUCKDB_QUERY` over the published output, as shown (the table's reader in it) and its rows."""
    from spark_jobs.lake_readers import duckdb_connection
    from spark_jobs.layout import OUTPUT
    from spark_jobs.tables import output_of

    tables = output_of(drain)
    query = DUCKDB_QUERY.format(table=tables.scan_sql(OUTPUT, logical_topic))
    return query, [tuple(r) for r in duckdb_connection(extensions=tables.duckdb_extensions).sql(query).fetchall()]
