"""Benchmark: Parquet files, Delta Lake and Iceberg tables side by side, and what maintenance does for readers.

One command (``python benchmarks/lake_bench.py``) on the embedded broker (or the cluster in
KPRIO_BOOTSTRAP_SERVERS) and ``local[2]`` Spark, three parts, each format in turn on the same data:

1. **one batch**: ``--records`` records (default 1,000,000, ~200 B, 3 priorities x 4 partitions, as
   ``drain_bench.py`` fills them) drained by ``drain_batch`` as one batch and published in each
   format: the drain, the publish, and a reader's scan of the result (DuckDB ``count(*)`` and a sum);
2. **the loop over a backlog**: the same records drained by ``kprio drain --until-empty``'s loop
   (``drain_loop.drain``, the default planner, each format its own consumer groups and ledger, so
   each starts from offset 0): wall time to zero lag, records/s, batches, the files the output holds;
3. **a day of ``--follow`` batches, simulated by count**: ``--small-batches`` batches (default 2,000;
   a day at one batch per 2 s is ~43,000) of ``--small-records`` records each (default 30, spread
   over the 3 priorities: a file per priority and batch), staged as the executors stage them and
   published one by one into each format (no broker or Spark: the publishes' own cost); then the
   live files, bytes and versions (Delta's log entries, Iceberg's snapshots), a reader's scan time
   (DuckDB over the table; kprio's own reader, ``tables.read_rows``), the maintenance
   (``spark_jobs.maintenance.maintain``, its time and what it did) and the same figures after it.

Prints the figures (never a test: these machines are shared and noisy); ``--parts`` picks parts
(``1,2,3``), ``--formats`` the formats (``parquet,delta,iceberg``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from drain_bench import PARTITIONS, PRIORITIES, _load, broker_kind, fill  # noqa: E402

from kprio_core.config import (  # noqa: E402
    ENV_BOOTSTRAP,
    DrainSettings,
    KafkaSettings,
    KprioConfig,
    SparkSettings,
    TopicSettings,
)
from orchestration.services.broker import EmbeddedBroker  # noqa: E402

SPARK = SparkSettings(master="local[2]", conf={"spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
                                               "spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "4"})


def drain_settings(base: Path, output_format: str, **more: Any) -> dict[str, Any]:
    """The drain section of one format's run: roots and an Iceberg catalog of its own under ``base``."""
    return {"format": output_format, "output_path": str(base / "out"), "dead_letter_path": str(base / "dead"),
            "iceberg": {"catalog": {"type": "sql", "uri": f"sqlite:///{base / 'catalog.db'}"}}, **more}


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def scan_s(drain: DrainSettings, logical_topic: str, *, repeat: int = 3) -> tuple[int, float, float]:
    """A reader's scan: DuckDB ``count(*)`` and a sum over the table (median of ``repeat``, each on a connection
    of its own, as a new reader), and kprio's own reader (``tables.read_rows``, one column); (rows, both times)."""
    from spark_jobs import lake_readers, tables
    from spark_jobs.layout import OUTPUT

    con = lake_readers.duckdb_connection()
    query = 'SELECT count(*), sum("offset") FROM {table}'
    duck, rows = [], 0
    for _ in range(repeat):
        fresh = lake_readers.duckdb_connection() if duck else con
        [(rows, _)], seconds = timed(lambda c=fresh: lake_readers.duckdb_rows(drain, OUTPUT, logical_topic, query,
                                                                              connection=c))
        duck.append(seconds)
    arrow = [timed(lambda: tables.read_rows(drain, OUTPUT, logical_topic, columns=["offset"]))[1]
             for _ in range(repeat)]
    return rows, statistics.median(duck), statistics.median(arrow)


def table_figures(drain: DrainSettings, logical_topic: str) -> tuple[int, int, int]:
    """(files, bytes, versions) of the output as a reader meets it (Parquet: the files, no versions)."""
    from spark_jobs.tables import output_of

    f = output_of(drain).figures("output", logical_topic)
    return f.files, f.bytes, f.snapshots


# --- part 1 and 2: a batch of many records, the loop over a backlog ----------------------------------------------


def one_batch(spark, kafka: KafkaSettings, topic: TopicSettings, plan, formats: list[str], tmp: Path) -> list[list]:
    from kprio_core.model.drain_plan import DrainPlan, PlannedRange
    from kprio_core.model.offsets import OffsetRange
    from spark_jobs.drain import drain_batch
    from spark_jobs.tables import publish

    rows = []
    n = plan.records
    for output_format in formats:
        config = KprioConfig(kafka=kafka, topics=(topic,), spark=SPARK,
                             drain=drain_settings(tmp / "one" / output_format, output_format))
        first = plan.ranges[0]
        warm = DrainPlan(topic.name, "lag-aware", 100, None, {}, {}, (PlannedRange(
            first.priority, OffsetRange(first.range.topic, first.range.partition, 0, 100)),))
        publish(config.drain, drain_batch(spark, config, topic, "b-000000", 1, warm))  # workers and table warm
        result, drain_s = timed(lambda c=config: drain_batch(spark, c, topic, "b-000001", 1, plan))
        _, publish_s = timed(lambda c=config, r=result: publish(c.drain, r))
        count, duck_s, arrow_s = scan_s(config.drain, topic.name)
        files = table_figures(config.drain, topic.name)[0]
        assert count == n, (output_format, count)  # the batch replaced the warm-up's 100 records
        rows.append([output_format, f"{n:,}", f"{drain_s:.1f}", f"{publish_s:.2f}", f"{n / (drain_s + publish_s):,.0f}",
                     str(files), f"{duck_s * 1000:.0f}", f"{arrow_s * 1000:.0f}"])
    return rows


def the_loop(kafka: KafkaSettings, topic: TopicSettings, records: int, formats: list[str], tmp: Path) -> list[list]:
    import dagster as dg

    from kprio_core.config import parse_config
    from orchestration.dagster import drain_loop
    from orchestration.dagster.definitions import build_definitions

    rows = []
    warm = TopicSettings(name=f"{topic.name}-warm", priorities=PRIORITIES, partitions=PARTITIONS,
                         schema=dict(topic.schema_))
    fill(kafka, warm, 300)
    for output_format in ["warm-up", *formats]:
        base = tmp / "loop" / output_format
        base.mkdir(parents=True)
        raw = {"kafka": {"bootstrap_servers": kafka.bootstrap_servers, "timeout_s": kafka.timeout_s},
               "topics": [{**(warm if output_format == "warm-up" else topic).model_dump(mode="json", by_alias=True),
                           "group": f"bench-{output_format}"}],
               "spark": {"master": SPARK.master, "conf": dict(SPARK.conf)},
               "ledger": {"url": f"sqlite:///{base / 'ledger.db'}"},
               # The warm-up (Great Expectations' import, Dagster's first run) in Parquet, not measured.
               "drain": drain_settings(base, "parquet" if output_format == "warm-up" else output_format)}
        config = parse_config(raw, f"lake_bench {output_format}", env={})
        with dg.instance_for_test() as instance:
            report, seconds = timed(lambda c=config, i=instance: drain_loop.drain(build_definitions(c), i,
                                                                                  log_level="WARNING"))
        if not report.ok:
            raise SystemExit(f"lake_bench: the loop into {output_format} stopped: {report.stopped}")
        if output_format == "warm-up":
            continue
        drained = sum(report.records().values())
        assert drained == records, (output_format, drained)
        files, size, versions = table_figures(config.drain, topic.name)
        rows.append([output_format, f"{drained:,}", str(len({b.batch_id for b in report.batches})), f"{seconds:.1f}",
                     f"{drained / seconds:,.0f}", str(files), str(versions)])
    return rows


# --- part 3: a day of --follow batches ----------------------------------------------------------------------------


def staged_batch(root: Path, logical: str, n: int, records: int) -> Any:
    """Batch ``n`` of ``records`` records spread over the priorities, staged as the executors stage them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from kprio_core.model.offsets import OffsetRange
    from kprio_core.model.results import DrainResult, RangeStats
    from spark_jobs.layout import OUTPUT, RangeFile, relative_path, staging_dir

    batch_id = f"b-{n + 1:06d}"
    per = max(1, records // PRIORITIES)
    stats = []
    for priority in range(PRIORITIES):
        r = OffsetRange(f"{logical}-{priority}", 0, n * per, (n + 1) * per)
        rel = relative_path(logical, priority, RangeFile(r.topic, 0, r.start, r.end))
        path = Path(staging_dir(str(root), batch_id, 1)) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        offsets = list(range(r.start, r.end))
        # One batch every 2 s, as --follow commits them: a day's batches span a day of hours.
        stamp = 1_767_225_600_000 + n * 2_000
        pq.write_table(pa.table({
            "key": pa.array([f"k{o}".encode() for o in offsets], pa.binary()),
            "value": pa.array([b'{"i": 1, "amount": 0.5}'] * per, pa.binary()),
            "topic": [r.topic] * per, "partition": pa.array([0] * per, pa.int32()),
            "offset": pa.array(offsets, pa.int64()),
            "timestamp": pa.array([stamp + k for k in range(per)], pa.timestamp("ms", tz="UTC")),
            "priority": pa.array([priority] * per, pa.int32()), "batch_id": [batch_id] * per,
            "lane": pa.array([0] * per, pa.int32()), "i": pa.array(offsets, pa.int64()),
            "amount": pa.array([o * 0.5 for o in offsets], pa.float64())}), path)
        stats.append(RangeStats(priority, r, output=per, dead=0, distinct=per, first=r.start, last=r.end - 1,
                                files=(f"{OUTPUT}/{rel}",)))
    return DrainResult(batch_id, 1, logical, tuple(stats), staging="(lake_bench)", seconds=0.1)


def a_day(batches: int, records: int, formats: list[str], tmp: Path) -> list[list]:
    from spark_jobs import maintenance
    from spark_jobs.tables import publish

    logical = "day"
    rows = []
    for output_format in formats:
        base = tmp / "day" / output_format
        drain = DrainSettings.model_validate(drain_settings(base, output_format, maintenance={"retention_s": 0.0,
                                                                                              "keep_snapshots": 1}))
        publishes = []
        for n in range(batches):
            result = staged_batch(base / "out", logical, n, records)
            publishes.append(timed(lambda r=result: publish(drain, r))[1])
        files, size, versions = table_figures(drain, logical)
        count, duck_s, arrow_s = scan_s(drain, logical)
        tenth = max(1, len(publishes) // 10)  # a publish's cost as the table grows: the first and the last tenth
        rows.append([output_format, "before", f"{count:,}", str(files), f"{size / 2**20:.1f}", str(versions),
                     f"{statistics.mean(publishes[:tenth]) * 1000:.0f} / {statistics.mean(publishes[-tenth:]) * 1000:.0f}",
                     f"{duck_s * 1000:.0f}", f"{arrow_s * 1000:.0f}", ""])
        if output_format == "parquet":
            continue
        done, maintain_s = timed(lambda d=drain: maintenance.maintain(d, logical))
        files, size, versions = table_figures(drain, logical)
        after, duck_s, arrow_s = scan_s(drain, logical)
        assert after == count, (output_format, count, after)
        what = "; ".join(f"{d.compacted_runs} runs compacted, {d.files_deleted} files deleted, "
                         f"{d.snapshots_expired} snapshots expired" for d in done)
        rows.append([output_format, f"after ({maintain_s:.1f} s)", f"{after:,}", str(files), f"{size / 2**20:.1f}",
                     str(versions), "", f"{duck_s * 1000:.0f}", f"{arrow_s * 1000:.0f}", what])
    return rows


def show(title: str, header: list[str], rows: list[list]) -> None:
    from tabulate import tabulate

    print(f"\n{title}")
    print(tabulate(rows, headers=header, tablefmt="github", disable_numparse=True))


def main() -> None:
    import logging

    # pyiceberg warns of every column a staged file has no statistics for (the key and value bytes), per publish.
    logging.getLogger("pyiceberg.io.pyarrow").setLevel(logging.ERROR)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records of part 1's batch and part 2's "
                        "backlog (default 1,000,000)")
    parser.add_argument("--small-batches", type=int, default=2_000, help="part 3's batches (default 2,000)")
    parser.add_argument("--small-records", type=int, default=30, help="records per small batch (default 30)")
    parser.add_argument("--formats", default="parquet,delta,iceberg", help="output formats, in this order")
    parser.add_argument("--parts", default="1,2,3", help="which parts to run (default 1,2,3)")
    args = parser.parse_args()
    formats = [f.strip() for f in args.formats.split(",") if f.strip()]
    parts = {int(p) for p in args.parts.split(",") if p.strip()}
    print(f"{os.cpu_count()} cores; load average {_load()} at the start")
    with tempfile.TemporaryDirectory(prefix="kprio-lake-bench-") as name:
        tmp = Path(name)
        if parts & {1, 2}:
            broker = None
            bootstrap = os.environ.get(ENV_BOOTSTRAP)
            if not bootstrap:
                broker = EmbeddedBroker(tmp / "broker", port=None, start_timeout_s=120).start()
                bootstrap = broker.bootstrap
            try:
                print(f"broker: {'external ' + bootstrap if broker is None else broker_kind()}; Spark {SPARK.master}")
                kafka = KafkaSettings(bootstrap_servers=bootstrap, timeout_s=30)
                topic = TopicSettings(name=f"lake{int(time.time())}", priorities=PRIORITIES, partitions=PARTITIONS,
                                      schema={"i": "long", "amount": "double"})
                plan, fill_s = timed(lambda: fill(kafka, topic, args.records))
                print(f"filled {args.records:,} records in {fill_s:.1f} s ({PRIORITIES} priorities x {PARTITIONS} "
                      "partitions, ~200 B values)")
                from spark_jobs.session import build_session

                spark = build_session(SPARK, app_name="kprio-lake-bench")
                spark.sparkContext.setLogLevel("ERROR")
                try:
                    if 1 in parts:
                        show(f"1. one batch of {args.records:,} records, drained and published (ms: a reader's scan "
                             "after it, median of 3)",
                             ["format", "records", "drain s", "publish s", "records/s", "files", "DuckDB scan ms",
                              "kprio reader ms"], one_batch(spark, kafka, topic, plan, formats, tmp))
                    if 2 in parts:
                        show(f"2. the loop over a backlog of {args.records:,} records (kprio drain --until-empty, the "
                             "default planner)", ["format", "records", "batches", "wall s", "records/s", "files",
                                                  "versions"], the_loop(kafka, topic, args.records, formats, tmp))
                finally:
                    spark.stop()
            finally:
                if broker is not None:
                    broker.stop()
        if 3 in parts:
            show(f"3. a day of --follow batches simulated by count: {args.small_batches:,} batches of "
                 f"{args.small_records} records (a file per priority and batch), before and after maintenance "
                 "(scan ms: median of 3)",
                 ["format", "", "rows", "files", "MiB", "versions", "publish ms (first / last tenth)", "DuckDB scan ms",
                  "kprio reader ms", "maintenance did"],
                 a_day(args.small_batches, args.small_records, formats, tmp))
    print(f"\nload average {_load()} at the end")


if __name__ == "__main__":
    main()
