"""``drain.format: parquet``: files moved into place one by one, named by their ranges (:mod:`spark_jobs.output`).

>>> import tempfile
>>> from kprio_core.config import DrainSettings
>>> root = tempfile.mkdtemp()
>>> files = Parquet(DrainSettings(output_path=f"{root}/out", dead_letter_path=f"{root}/dead"))
>>> files.scan_sql("output", "it's") == f"read_parquet('{root}/out/it''s/priority=*/*.parquet', " \\
...     "hive_partitioning = false, union_by_name = true)"
True
>>> files.read_rows("output", "orders").num_rows, files.maintain("output", "orders", 0.0)
(0, None)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from kprio_core.config import DrainSettings
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import CheckReport, DrainResult
from spark_jobs import output
from spark_jobs.lake_readers import sql_literal
from spark_jobs.layout import absolute, filesystem
from spark_jobs.maintenance import Figures
from spark_jobs.tables import Publication, roots


@dataclass(frozen=True)
class Parquet:
    """Files named by the ranges they hold: no table, no log; who wrote a file is in its footer."""

    drain: DrainSettings
    tables: ClassVar[bool] = False
    versions: ClassVar[str] = ""
    data_dir: ClassVar[str] = ""
    duckdb_extensions: ClassVar[tuple[str, ...]] = ()

    def publish(self, result: DrainResult, *, ranges: Iterable[OffsetRange] | None = None,
                incarnations: Mapping[str, int] | None = None, checks: CheckReport | None = None,
                epoch: int | None = None) -> Publication:
        # Idempotent by construction (:mod:`spark_jobs.output`): a stale run's late publish leaves each record once.
        output.publish(result, output_root=self.drain.output_path, dead_letter_root=self.drain.dead_letter_path,
                       ranges=ranges, incarnations=incarnations)
        return Publication()

    def read_rows(self, kind: str, logical_topic: str, *, batch_id: str | None = None,
                  columns: Iterable[str] | None = None) -> Any:
        return output.read_table(roots(self.drain)[kind], logical_topic, batch_id=batch_id,
                                 columns=list(columns) if columns else None)

    def live_files(self, kind: str, logical_topic: str) -> tuple[output.LiveFile, ...]:
        return output.live_files(roots(self.drain)[kind], logical_topic)

    def publishes(self, kind: str, logical_topic: str) -> list[dict[str, Any]]:
        return []

    def figures(self, kind: str, logical_topic: str) -> Figures:
        """The files and their bytes; no versions."""
        fs, _ = filesystem(roots(self.drain)[kind])
        files = self.live_files(kind, logical_topic)
        return Figures(len(files), sum(fs.get_file_info(f.path).size for f in files), 0)

    def maintain(self, kind: str, logical_topic: str, now: float) -> None:
        return None

    def scan_sql(self, kind: str, logical_topic: str) -> str:
        """``read_parquet`` over the files (staging and other incarnations' leftovers are not under ``priority=*``)."""
        root = absolute(roots(self.drain)[kind]).rstrip("/")
        return (f"read_parquet({sql_literal(f'{root}/{logical_topic}/priority=*/*.parquet')}, "
                "hive_partitioning = false, union_by_name = true)")

    def data_files(self, kind: str, logical_topic: str) -> list[str]:
        fs, _ = filesystem(roots(self.drain)[kind])
        scheme = "" if fs.type_name == "local" else f"{fs.type_name}://"
        return [f"{scheme}{f.path}" for f in self.live_files(kind, logical_topic)]

    def describe(self, logical_topic: str, publishes: list[dict[str, Any]]) -> list[str]:
        return []

    def how_to_query(self, logical_topic: str) -> list[str]:
        return []
