"""The parts of kprio not every user needs, the extra of the package that brings each, and the output formats.

The base install drains JSON into Parquet under Dagster; a setting needing a missing part fails at load, an option
when used, naming the ``pip install`` (:func:`missing`). Parts are found without importing them.

>>> missing(Part("delta", ("kprio_no_such_module",)), "delta")
"delta needs kprio_no_such_module, which is not installed: pip install 'kprio[delta]'"
>>> missing(Part("plot", ("json",)), "--plot") is None
True
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from kprio_core.errors import KprioError


@dataclass(frozen=True)
class Part:
    """A part: the extra that brings it (``pip install 'kprio[<extra>]'``) and the top-level modules it imports."""

    extra: str
    modules: tuple[str, ...]


DELTA = Part("delta", ("deltalake",))
ICEBERG = Part("iceberg", ("pyiceberg",))
REGISTRY = Part("registry", ("httpx", "fastavro", "grpc_tools"))
"""Values and keys in a schema registry's wire format (jsonschema and protobuf come with the base's libraries)."""
LINEAGE = Part("observe", ("openlineage",))
METRICS = Part("observe", ("prometheus_client",))
REPORT = Part("report", ("matplotlib", "duckdb"))
"""The demo's backlog plot and its DuckDB query over the output."""
PLOT = Part("report", ("matplotlib",))
"""``kprio simulate --plot``."""


@dataclass(frozen=True)
class OutputPart:
    """An output format: its implementation (``module:class`` of :class:`spark_jobs.tables.Output`) and its part."""

    implementation: str
    part: Part | None = None


OUTPUT_FORMATS = {
    "parquet": OutputPart("spark_jobs.formats.parquet:Parquet"),
    "delta": OutputPart("spark_jobs.formats.delta:Delta", DELTA),
    "iceberg": OutputPart("spark_jobs.formats.iceberg:Iceberg", ICEBERG),
}
"""``drain.format`` -> its implementation: a new format is one module and one line here (docs/architecture.md)."""


class ExtraMissing(KprioError):
    """An option asks for a part of kprio that is not installed: the extra that brings it."""

    code = "extra_missing"


def installed(module: str) -> bool:
    """Whether a top-level module can be imported here (a finder that refuses it says no, as an absent one does)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing(part: Part | None, what: str) -> str | None:
    """Why ``what`` cannot work here (the first module of ``part`` not installed, and the install), or None."""
    absent = [m for m in (part.modules if part else ()) if not installed(m)]
    if part is None or not absent:
        return None
    return f"{what} needs {absent[0]}, which is not installed: pip install 'kprio[{part.extra}]'"


def require(part: Part | None, what: str, where: str | None = None) -> None:
    """Raise :class:`ExtraMissing` naming ``where`` (an option, else the command) when ``part`` is not installed."""
    why = missing(part, what)
    if why:
        raise ExtraMissing(why, where=where)
