"""Benchmark: the Spark drain end to end with each reader, against a plain confluent-kafka consume of the same ranges.

Fills 3 priorities x 4 partitions with ``--records`` records of ~200 bytes (default 1,000,000) on
the embedded broker (or the cluster in KPRIO_BOOTSTRAP_SERVERS), then measures in one run, on the
same ranges, as one batch:

- ``raw`` (the baseline every ratio is to): one confluent-kafka consumer per partition, all in
  parallel in their own processes (started before the clock), every record's key, value,
  timestamp and headers touched (what any Python reader must do at least); the faster of two runs.
  Also one consumer reading the partitions in turn, for reference;
- ``plain spark``: ``spark.read.format("kafka")`` of the ranges with Spark's defaults written as it
  comes with ``df.write.parquet``: Spark's own floor, no kprio (the faster of two);
- per reader (``--readers``, default ``python,native``: ``spark.reader``), in the same Spark session:
  ``drain_batch`` end to end (read, lanes, the JSON handler, valid/invalid split, staged Parquet,
  per-range counts), ``--runs`` times, each a new attempt: the first run and the median of the
  others; the GX ``checks`` of the drained ranges, ``publish`` and ``commit`` + one lag snapshot
  (medians), as the op runs them; ``end to end`` = drain + checks + publish + commit of one run
  (median of the warm runs): the ratio the target (>= 0.8 of the raw consume) is about; and a
  ``drain_batch`` of 1,000 records over every partition (median of 5): the fixed cost of a small
  urgent batch. Each reader's read alone (``count()`` of its source, nothing written) is timed too.
  Per output format (``--formats``, default ``parquet,delta``: ``drain.format``) the runs, checks,
  publish and end to end are measured again: a Delta publish is one commit of the batch's files,
  each run a new attempt of one batch that replaces the one before (as a re-drain does); the last
  lines compare each format's end to end with the first's.

The first table has wall time, records/s and the ratio to the raw consume; the second the CPU
seconds spent by the driver's Python, the JVM (driver and, in local mode, the executors), Python
workers (Spark's, and the raw consume's processes) and the embedded broker: the machine may be
shared, CPU time says what the work cost. Peak resident memory is sampled (psutil) per process
kind. Not a test: run ``python benchmarks/drain_bench.py``; it prints the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kprio_core.config import (  # noqa: E402
    ENV_BOOTSTRAP,
    KafkaSettings,
    KprioConfig,
    SparkReader,
    SparkSettings,
    TopicSettings,
)
from kprio_core.model.drain_plan import DrainPlan, PlannedRange  # noqa: E402
from kprio_core.model.offsets import OffsetRange  # noqa: E402
from orchestration.services.broker import EmbeddedBroker  # noqa: E402

PRIORITIES, PARTITIONS, VALUE_BYTES = 3, 4, 200


class Processes:
    """This process, its JVM and Python-worker descendants, and the broker: RSS peaks and CPU seconds."""

    KINDS = ("driver python", "jvm", "python workers", "broker")

    def __init__(self, broker_pid: int | None) -> None:
        self.broker = psutil.Process(broker_pid) if broker_pid else None
        self.peak = {"driver python": 0, "jvm": 0, "python workers": 0, "largest python worker": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _members(self) -> list[tuple[str, psutil.Process]]:
        me = psutil.Process()
        out = [("driver python", me)]
        for child in me.children(recursive=True):
            if self.broker is not None and child.pid == self.broker.pid:
                continue  # the embedded broker is this process's child too: counted on its own
            try:
                name = " ".join(child.cmdline()[:3])
            except psutil.Error:
                continue
            if "java" in name:
                out.append(("jvm", child))
            elif "python" in name:
                out.append(("python workers", child))
        if self.broker is not None:
            out.append(("broker", self.broker))
        return out

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far per kind (own time plus that of reaped children, e.g. finished workers)."""
        total = dict.fromkeys(self.KINDS, 0.0)
        for kind, proc in self._members():
            try:
                t = proc.cpu_times()
            except psutil.Error:
                continue
            total[kind] += t.user + t.system + t.children_user + t.children_system
        return total

    def _sample(self) -> None:
        now = {"driver python": 0, "jvm": 0, "python workers": 0, "largest python worker": 0}
        for kind, proc in self._members():
            if kind == "broker":
                continue
            try:
                rss = proc.memory_info().rss
            except psutil.Error:
                continue
            now[kind] += rss
            if kind == "python workers":
                now["largest python worker"] = max(now["largest python worker"], rss)
        for key, value in now.items():
            self.peak[key] = max(self.peak[key], value)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self._sample()

    def __enter__(self) -> Processes:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def peak_mib(self) -> dict[str, float]:
        return {k: round(v / 2**20) for k, v in self.peak.items()}


@dataclass
class Stage:
    name: str
    wall_s: float
    records: int
    cpu: dict[str, float]

    @property
    def rate(self) -> float:
        return self.records / self.wall_s


def measure(name: str, procs: Processes, records: int, fn):
    """Run ``fn`` once; its result and the Stage (wall time, CPU seconds per process kind)."""
    before = procs.cpu()
    start = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - start
    after = procs.cpu()
    return out, Stage(name, wall, records, {k: after[k] - before[k] for k in after})


def fill(kafka: KafkaSettings, topic: TopicSettings, records: int) -> DrainPlan:
    """Create the topics, produce ``records`` spread evenly, return the plan of all of them."""
    import confluent_kafka as ck

    from kprio_core.kafka.client import Deadline, new_admin
    from kprio_core.kafka.topics import ensure_topics

    ensure_topics(new_admin(kafka), topic, PARTITIONS, Deadline(kafka.timeout_s, kafka.bootstrap_servers))
    producer = ck.Producer({**kafka.client_config(), "linger.ms": 50, "batch.size": 1 << 20,
                            "queue.buffering.max.kbytes": 1 << 20, "compression.type": "none"})
    pad = "x" * (VALUE_BYTES - 60)
    counts: dict[tuple[str, int], int] = {}
    for i in range(records):
        name = topic.priority_topic(i % PRIORITIES)
        partition = (i // PRIORITIES) % PARTITIONS
        value = json.dumps({"i": i, "amount": i * 0.5, "pad": pad}).encode()
        while True:
            try:
                producer.produce(name, key=f"k{i % 5000}".encode(), value=value, partition=partition)
                break
            except BufferError:
                producer.poll(0.5)
        counts[(name, partition)] = counts.get((name, partition), 0) + 1
    if producer.flush(120):
        raise RuntimeError("records not acknowledged within 120 s")
    ranges = tuple(PlannedRange(topic.priority_of_topic(t), OffsetRange(t, p, 0, n))
                   for (t, p), n in sorted(counts.items()))
    quotas = {p: sum(r.range.count for r in ranges if r.priority == p) for p in range(PRIORITIES)}
    return DrainPlan(topic.name, "lag-aware", records, None, quotas, quotas, ranges)


RAW_CONSUMER = {"group.id": "bench-raw", "enable.auto.commit": False, "fetch.max.bytes": 16 << 20,
                "max.partition.fetch.bytes": 4 << 20, "queued.max.messages.kbytes": 16 << 10}


def consume_range(conf: dict, rng: OffsetRange, consumer=None) -> tuple[int, int]:
    """Read ``rng`` with a confluent-kafka consumer, touching every record's key, value, timestamp and
    headers (what any Python reader must do at least); returns (records, bytes)."""
    import confluent_kafka as ck

    own = consumer is None
    consumer = consumer or ck.Consumer(conf)
    records = size = 0
    try:
        consumer.assign([ck.TopicPartition(rng.topic, rng.partition, rng.start)])
        position = rng.start
        while position < rng.end:
            for msg in consumer.consume(min(10_000, rng.end - position), timeout=5):
                if msg.error():
                    raise RuntimeError(msg.error().str())
                key, value = msg.key(), msg.value()
                msg.timestamp()
                msg.headers()
                size += len(key or b"") + len(value or b"")
                position = msg.offset() + 1
                records += 1
    finally:
        if own:
            consumer.close()
    return records, size


def raw_consume(kafka: KafkaSettings, plan: DrainPlan) -> tuple[int, int]:
    """One consumer reading every range in turn; returns (records, bytes)."""
    import confluent_kafka as ck

    conf = {**kafka.client_config(), **RAW_CONSUMER}
    consumer = ck.Consumer(conf)
    try:
        totals = [consume_range(conf, p.range, consumer) for p in plan.ranges]
    finally:
        consumer.close()
    return sum(t[0] for t in totals), sum(t[1] for t in totals)


def _consume_one(args: tuple[dict, OffsetRange]) -> tuple[int, int]:
    return consume_range(*args)


def _started(barrier) -> None:
    import confluent_kafka  # noqa: F401 - the import is the warm-up

    barrier.wait()


class ParallelRaw:
    """One process per partition, each with its own consumer, all at once; the processes are started
    (and import confluent-kafka) before the clock runs, so only the reads are timed."""

    def __init__(self, kafka: KafkaSettings, plan: DrainPlan) -> None:
        import multiprocessing

        self.conf = {**kafka.client_config(), **RAW_CONSUMER}
        self.plan = plan
        # spawn, not fork: this process holds librdkafka threads (the producer) and later a JVM.
        context = multiprocessing.get_context("spawn")
        everyone = context.Barrier(len(plan.ranges) + 1)
        self.pool = context.Pool(len(plan.ranges), initializer=_started, initargs=(everyone,))
        everyone.wait(timeout=300)  # every process has started and imported confluent-kafka

    def __call__(self) -> tuple[int, int]:
        totals = self.pool.map(_consume_one, [(self.conf, p.range) for p in self.plan.ranges], chunksize=1)
        return sum(t[0] for t in totals), sum(t[1] for t in totals)

    def close(self) -> None:
        self.pool.close()
        self.pool.join()


def plain_spark_to_parquet(spark, kafka: KafkaSettings, plan: DrainPlan, path: str) -> None:
    """Spark's own kafka source with its defaults (one Spark partition per Kafka partition), written to
    Parquet as it comes: no kprio, no ordering, no handler."""
    from kprio_core.splits import spark_offsets_json

    starting, ending = spark_offsets_json([p.range for p in plan.ranges])
    assign = {t: sorted(int(p) for p in parts) for t, parts in json.loads(starting).items()}
    frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", kafka.bootstrap_servers)
             .option("assign", json.dumps(assign)).option("startingOffsets", starting)
             .option("endingOffsets", ending).option("includeHeaders", "true").load())
    frame.write.mode("overwrite").parquet(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records to drain (default 1,000,000)")
    parser.add_argument("--cores", type=int, default=2, help="local Spark cores (default 2)")
    parser.add_argument("--runs", type=int, default=3, help="drain_batch runs per reader in one session (default 3)")
    parser.add_argument("--readers", default="python,native", help="readers to drain with, in this order")
    parser.add_argument("--formats", default="parquet,delta", help="output formats (drain.format) to publish in "
                        "(iceberg too: benchmarks/lake_bench.py puts the three side by side)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kprio-bench-") as tmp:
        broker = None
        bootstrap = os.environ.get(ENV_BOOTSTRAP)
        if not bootstrap:
            broker = EmbeddedBroker(Path(tmp) / "broker", port=None, start_timeout_s=120).start()
            bootstrap = broker.bootstrap
        try:
            run(args, bootstrap, broker.status().pid if broker is not None else None, Path(tmp))
        finally:
            if broker is not None:
                broker.stop()


def broker_kind() -> str:
    """What EmbeddedBroker runs in this checkout (the benchmark's numbers depend on it)."""
    import orchestration.services.broker as module

    doc = (module.__doc__ or "").lower()
    return "Apache Kafka (KRaft, one node)" if "apache kafka" in doc else "noida-db (emulator)" \
        if "noida" in doc else "unknown"


def _load() -> str:
    """The 1/5/15-minute load averages: another job on the machine shows here (and in the broker's CPU)."""
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def run(args: argparse.Namespace, bootstrap: str, broker_pid: int | None, tmp: Path) -> None:
    kafka = KafkaSettings(bootstrap_servers=bootstrap, timeout_s=30)
    topic = TopicSettings(name=f"bench{int(time.time())}", priorities=PRIORITIES, partitions=PARTITIONS,
                          schema={"i": "long", "amount": "double"})
    readers = [r.strip() for r in args.readers.split(",") if r.strip()]
    print(f"broker: {'external ' + bootstrap if broker_pid is None else broker_kind()}; "
          f"{os.cpu_count()} cores; Spark local[{args.cores}]; load average {_load()} at the start")
    start = time.perf_counter()
    plan = fill(kafka, topic, args.records)
    print(f"filled {args.records:,} records in {time.perf_counter() - start:.1f} s "
          f"({PRIORITIES} priorities x {PARTITIONS} partitions, ~{VALUE_BYTES} B values)")
    n = args.records
    stages: list[Stage] = []

    from spark_jobs.drain import drain_batch, plan_splits
    from spark_jobs.session import build_session
    from spark_jobs.source import read_records

    settings = SparkSettings(master=f"local[{args.cores}]", conf={
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.driver.memory": "2g",
        "spark.sql.shuffle.partitions": "4"})
    with Processes(broker_pid) as procs:
        rss_before = psutil.Process().memory_info().rss
        parallel = ParallelRaw(kafka, plan)
        try:
            raws = []
            for _ in range(2):  # the faster of two: the stricter target
                (raw_records, raw_bytes), stage = measure(
                    f"raw confluent consume: {len(plan.ranges)} consumers in parallel, one per partition (processes)",
                    procs, n, parallel)
                assert raw_records == n, raw_records
                raws.append(stage)
        finally:
            parallel.close()
        raw = min(raws, key=lambda s: s.wall_s)
        stages.append(raw)
        (one_records, _), one = measure("raw confluent consume: one consumer, partitions in turn", procs, n,
                                        lambda: raw_consume(kafka, plan))
        assert one_records == n, one_records
        stages.append(one)
        raw_rss = (psutil.Process().memory_info().rss - rss_before) / 2**20
        spark = build_session(settings, app_name="kprio-bench")
        spark.sparkContext.setLogLevel("ERROR")
        try:
            plains = []
            for i in range(2):  # the faster of two, as the raw consume
                _, stage = measure('plain spark.read.format("kafka") -> df.write.parquet (no kprio)', procs, n,
                                   lambda: plain_spark_to_parquet(spark, kafka, plan, str(tmp / f"plain{i}")))
                written = spark.read.parquet(str(tmp / f"plain{i}")).count()
                assert written == n, written
                plains.append(stage)
            stages.append(min(plains, key=lambda s: s.wall_s))
            formats = [f.strip() for f in args.formats.split(",") if f.strip()]
            for reader in readers:
                for i, output_format in enumerate(formats):
                    stages += drain_reader(spark, reader, output_format, args, kafka, topic, plan, settings, tmp,
                                           procs, drain_batch, plan_splits, read_records, alone=i == 0)
        finally:
            spark.stop()
    report(stages, raw, args, raw_bytes, raw_rss, procs.peak_mib())


def drain_reader(spark, reader, output_format, args, kafka, topic, plan, settings, tmp, procs, drain_batch,
                 plan_splits, read_records, *, alone: bool) -> list[Stage]:
    """The stages of one reader and output format: drain_batch runs (the first, the median of the others),
    checks, publish, commit, end to end; with ``alone`` (its first format) also its source alone and a small
    batch; all in the session already running."""
    from spark_jobs.tables import publish

    n = args.records
    base = tmp / reader / output_format
    config = KprioConfig(kafka=kafka, topics=(topic,), spark=settings.model_copy(update={"reader": SparkReader(reader)}),
                         drain={"format": output_format, "output_path": str(base / "out"),
                                "dead_letter_path": str(base / "dead"),
                                "iceberg": {"catalog": {"type": "sql", "uri": f"sqlite:///{base / 'catalog.db'}"}}})
    first = plan.ranges[0]
    warm = DrainPlan(topic.name, "lag-aware", 100, None, {}, {}, (PlannedRange(
        first.priority, OffsetRange(first.range.topic, first.range.partition, 0, 100)),))
    publish(config.drain, drain_batch(spark, config, topic, "b-000000", 1, warm))  # workers started once
    out: list[Stage] = []
    tag = f"[{reader}, {output_format}]"
    if alone and reader == "python":
        count, stage = measure("[python] kprio-kafka source alone (records, count())", procs, n,
                               lambda: read_records(spark, config, plan_splits(config, plan)).count())
    elif alone:
        from spark_jobs.native import read_native

        count, stage = measure("[native] Spark's kafka source alone, kprio's options (count())", procs, n,
                               lambda: read_native(spark, config, plan.ranges).count())
    if alone:
        assert count == n, count
        out.append(stage)
    from kprio_core.kafka import KafkaEdge
    from orchestration.runtime.checks import check_batch

    drains, checks, publishes, commits, whole = [], [], [], [], []
    with KafkaEdge(kafka) as edge:
        for i in range(args.runs):
            # One batch drained again and again (attempts 1, 2, ...): each publish replaces the one before.
            result, drained = measure(f"{tag} drain_batch, run {i + 1}", procs, n,
                                      lambda: drain_batch(spark, config, topic, "b-000001", i + 1, plan))
            assert result.records == n and result.dead == 0 and not result.failed_ranges, result
            report_, checked = measure("checks", procs, n, lambda: check_batch(
                result.ranges, quality=config.quality, required_fields=topic.required_fields))
            assert report_.passed, report_.reason()
            _, published = measure("publish", procs, n, lambda: publish(config.drain, result, checks=report_))
            _, committed = measure("commit", procs, n, lambda: (
                edge.commit(topic, [r.range for r in plan.ranges]),
                edge.snapshot(topic, now_ms=int(time.time() * 1000))))
            steps = (drained, checked, published, committed)
            for series, step in zip((drains, checks, publishes, commits), steps, strict=True):
                series.append(step)
            whole.append(Stage(f"end to end, run {i + 1}", sum(x.wall_s for x in steps), n,
                               {k: sum(x.cpu[k] for x in steps) for k in drained.cpu}))
    warm_runs = slice(1, None) if len(drains) > 1 else slice(None)
    which = f"median of runs 2-{len(drains)}" if len(drains) > 1 else "one run"
    end_to_end = _median(whole[warm_runs])
    out += [_renamed(drains[0], f"{tag} drain_batch, first run"),
            _renamed(_median(drains[warm_runs]), f"{tag} drain_batch ({which})"),
            _renamed(_median(checks), f"{tag} checks: GX on the per-range stats (median)"),
            _renamed(_median(publishes), f"{tag} publish (median)"),
            _renamed(_median(commits), f"{tag} commit + lag snapshot (median)"),
            _renamed(end_to_end, f"{tag} END TO END: drain + checks + publish + commit ({which})")]
    if not alone:
        return out
    small_plan = DrainPlan(topic.name, "lag-aware", 1000, None, {}, {}, tuple(
        PlannedRange(r.priority, OffsetRange(r.range.topic, r.range.partition, 0, 1000 // len(plan.ranges)))
        for r in plan.ranges))
    smalls = []
    for i in range(5):
        result, stage = measure("small", procs, small_plan.records,
                                lambda: drain_batch(spark, config, topic, "b-000002", i + 1, small_plan))
        assert result.records == small_plan.records and not result.failed_ranges, result
        smalls.append(stage)
    return [*out, _renamed(_median(smalls), f"{tag} drain_batch of {small_plan.records:,} records (median of 5)")]


def _median(stages: list[Stage]) -> Stage:
    return sorted(stages, key=lambda s: s.wall_s)[len(stages) // 2]


def _renamed(stage: Stage, name: str) -> Stage:
    return Stage(name, stage.wall_s, stage.records, stage.cpu)


def report(stages: list[Stage], raw: Stage, args: argparse.Namespace, raw_bytes: int, raw_rss: float,
           peak: dict[str, float]) -> None:
    from tabulate import tabulate

    print(f"load average {_load()} at the end; raw consume read {raw_bytes / 2**20:.0f} MiB of keys and values "
          f"(+{raw_rss:.0f} MiB RSS)")
    print()
    rows = [[s.name, f"{s.wall_s:.2f}", f"{s.rate:,.0f}", f"{s.rate / raw.rate:.2f}"] for s in stages]
    print(tabulate(rows, headers=["stage", "wall s", "records/s", "ratio to raw consume"], tablefmt="github",
                   disable_numparse=True))
    print()
    kinds = Processes.KINDS
    rows = [[s.name, *(f"{s.cpu[k]:.1f}" for k in kinds), f"{sum(s.cpu.values()):.1f}"] for s in stages]
    print(tabulate(rows, headers=["stage (CPU seconds)", *kinds, "total"], tablefmt="github", disable_numparse=True))
    print()
    ends = [s for s in stages if "END TO END" in s.name]
    for s in ends:
        print(f"{s.name.split(']')[0]}] end to end / raw: {s.rate / raw.rate:.2f} (target >= 0.8 on {args.cores} cores); "
              f"CPU seconds per 1M records {sum(s.cpu.values()) * 1e6 / args.records:.1f}")
    if len(ends) > 1:
        best = max(ends, key=lambda s: s.rate)
        print(f"faster end to end: {best.name.split(']')[0][1:]} ({best.rate:,.0f} records/s)")
    by_reader: dict[str, list[Stage]] = {}
    for s in ends:
        by_reader.setdefault(s.name[1:].split(",")[0], []).append(s)
    for reader, same in by_reader.items():
        for s in same[1:]:  # each other format against the first (the goal: Delta within 10% of Parquet)
            fmt, ref = s.name.split("]")[0].split(", ")[1], same[0].name.split("]")[0].split(", ")[1]
            print(f"[{reader}] {fmt} end to end / {ref} end to end: {s.rate / same[0].rate:.2f} "
                  f"({s.rate:,.0f} vs {same[0].rate:,.0f} records/s; goal >= 0.90)")
    print()
    print(tabulate([[kind, f"{mib:,.0f}"] for kind, mib in peak.items()], headers=["process kind", "peak RSS MiB"],
                   tablefmt="github", disable_numparse=True))


if __name__ == "__main__":
    main()
