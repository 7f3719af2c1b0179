"""What a drain left on disk, read back with pyarrow, and the checks every drain test makes on it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Set

import pyarrow.parquet as pq

from kprio_core.model.results import DrainResult, RangeStats
from spark_jobs.layout import staging_dir

ROOT_KINDS = ("output", "dead-letters")


def staged_rows(result: DrainResult, roots: Mapping[str, str], *, failed: bool = False) -> dict[str, list[dict]]:
    """Rows of every staged file the stats list, per root kind (ranges that failed only when asked)."""
    rows: dict[str, list[dict]] = {kind: [] for kind in ROOT_KINDS}
    for stats in result.ranges:
        if stats.failure is not None and not failed:
            continue
        for rel in stats.files:
            kind, _, path = rel.partition("/")
            table = pq.read_table(f"{staging_dir(roots[kind], result.batch_id, result.attempt)}/{path}")
            rows[kind] += table.to_pylist()
    return rows


def file_metadata(path: str) -> dict[str, str]:
    meta = pq.read_metadata(path).metadata or {}
    return {k.decode(): v.decode() for k, v in meta.items() if k.startswith(b"kprio.")}


def assert_stats_match(stats: RangeStats, output: list[dict], dead: list[dict]) -> None:
    """The range's stats say exactly what its rows on disk hold."""
    inside = [r for r in output + dead if stats.range.start <= r["offset"] < stats.range.end
              and (r["topic"], r["partition"]) == stats.range.topic_partition]
    offsets = sorted(r["offset"] for r in inside)
    assert stats.output == sum(1 for r in output if r in inside), stats
    assert stats.dead == sum(1 for r in dead if r in inside), stats
    assert stats.distinct == len(set(offsets)), stats
    assert (stats.first, stats.last) == ((offsets[0], offsets[-1]) if offsets else (None, None)), stats
    assert stats.bytes == sum(len(r["key"] or b"") + len(r["value"] or b"") for r in inside), stats
    assert stats.invalid_in_output == 0 and stats.outside == 0, stats


def assert_conserved(result: DrainResult, rows: Mapping[str, list[dict]],
                     records: Set[tuple[str, int, int]] | None = None) -> None:
    """Every record of every successful range exactly once in the output or the dead letters, never both.

    ``records``: the (topic, partition, offset) that hold a record, as an independent consumer sees
    them (transaction markers, aborted and compacted offsets hold none). None: every offset holds
    one, so no range may count an offset without a record.
    """
    seen = Counter((r["topic"], r["partition"], r["offset"]) for kind in ROOT_KINDS for r in rows[kind])
    assert all(n == 1 for n in seen.values()), [k for k, n in seen.items() if n > 1][:5]
    want = {(s.range.topic, s.range.partition, o) for s in result.ranges if s.failure is None
            for o in range(s.range.start, s.range.end) if not any(g.start <= o < g.end for g in s.lost)}
    if records is None:
        assert [s.no_record for s in result.ranges if s.failure is None] == \
            [0] * len([s for s in result.ranges if s.failure is None]), "offsets without a record"
    else:
        want &= set(records)
        for s in result.ranges:
            if s.failure is None:
                holding = sum(1 for o in range(s.range.start, s.range.end)
                              if (s.range.topic, s.range.partition, o) in records
                              and not any(g.start <= o < g.end for g in s.lost))
                assert s.no_record == s.range.count - holding - sum(g.count for g in s.lost), s
    assert set(seen) == want
    assert all(r["error"] is None for r in rows["output"])
    assert all(r["error"] for r in rows["dead-letters"])
    for s in result.ranges:
        if s.failure is None:
            assert s.complete, s
            assert_stats_match(s, [r for r in rows["output"]], [r for r in rows["dead-letters"]])



def read_output(spark, root: str, logical_topic: str, batch_id: str | None = None,  # noqa: ANN001 - a SparkSession
                schema: Mapping[str, str] | None = None):  # noqa: ANN201 - a DataFrame
    """The published Parquet output rows of a topic (or of one batch) read by Spark, decoded fields typed by
    ``schema``."""
    from spark_jobs.columns import drain_struct

    return _read(spark, root, logical_topic, batch_id, drain_struct(schema or {}))


def read_dead_letters(spark, root: str, logical_topic: str, batch_id: str | None = None):  # noqa: ANN001, ANN201
    """The published Parquet dead letters of a topic (or of one batch) read by Spark, with their ``error``."""
    from spark_jobs.columns import dead_letter_struct

    return _read(spark, root, logical_topic, batch_id, dead_letter_struct())


def _read(spark, root: str, logical_topic: str, batch_id: str | None, struct):  # noqa: ANN001, ANN202
    from pyspark.sql import functions as F

    from spark_jobs.layout import absolute

    topic_root = f"{absolute(root).rstrip('/')}/{logical_topic}"
    # ``priority`` is in the files and in the directory names: typed by the schema either way.
    df = spark.read.schema(struct).option("basePath", topic_root).parquet(topic_root)
    return df if batch_id is None else df.where(F.col("batch_id") == batch_id)
