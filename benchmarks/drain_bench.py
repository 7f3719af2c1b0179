"""Benchmark: the Spark drain end to end against a plain confluent-kafka consume of the same ranges.

Fills 3 priorities x 4 partitions with ``--records`` records of ~200 bytes on the embedded
broker (or the cluster in KPRIO_BOOTSTRAP_SERVERS), then measures, on the same ranges:

- ``raw``: one Python process, one confluent-kafka consumer, every record's key, value,
  offset, timestamp and headers touched (what any Python reader must do at least);
- ``spark read``: the kprio-kafka data source alone (``count()`` of the ranges);
- ``spark read + handler``: the drain's rows (read, lanes, JSON handler) into Spark's no-op sink;
- ``spark drain``: ``drain_batch`` end to end (read, lanes, JSON handler, Parquet with observed
  per-range stats, publish); the difference to the line above is the Parquet write.

Peak resident memory is sampled (psutil) for the driver (this Python process), the driver JVM
and the executors' Python workers. Not a test: run ``python benchmarks/drain_bench.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kprio_core.broker import EmbeddedBroker  # noqa: E402
from kprio_core.config import ENV_BOOTSTRAP, KafkaSettings, KprioConfig, SparkSettings, TopicSettings  # noqa: E402
from kprio_core.offsets import OffsetRange  # noqa: E402
from kprio_core.plan import DrainPlan, PlannedRange  # noqa: E402

PRIORITIES, PARTITIONS, VALUE_BYTES = 3, 4, 200


class PeakMemory:
    """Samples RSS of this process, its JVM children and their Python workers every 0.1 s."""

    def __init__(self) -> None:
        self.peak = {"driver python": 0, "driver jvm": 0, "executor python workers": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        me = psutil.Process()
        now = {"driver python": me.memory_info().rss, "driver jvm": 0, "executor python workers": 0}
        for child in me.children(recursive=True):
            try:
                name = " ".join(child.cmdline()[:3])
                rss = child.memory_info().rss
            except psutil.Error:
                continue
            if "java" in name:
                now["driver jvm"] += rss
            elif "python" in name:
                now["executor python workers"] += rss
        for key, value in now.items():
            self.peak[key] = max(self.peak[key], value)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self._sample()

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def report(self) -> dict[str, float]:
        return {k: round(v / 2**20, 1) for k, v in self.peak.items()}


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


def raw_consume(kafka: KafkaSettings, plan: DrainPlan) -> tuple[int, int]:
    """One consumer reading every range in turn; returns (records, bytes)."""
    import confluent_kafka as ck

    records = size = 0
    consumer = ck.Consumer({**kafka.client_config(), "group.id": "bench-raw", "enable.auto.commit": False,
                            "fetch.max.bytes": 16 << 20, "max.partition.fetch.bytes": 4 << 20,
                            "queued.max.messages.kbytes": 16 << 10})
    try:
        for planned in plan.ranges:
            rng = planned.range
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
        consumer.close()
    return records, size


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records to drain (default 1,000,000)")
    parser.add_argument("--cores", type=int, default=2, help="local Spark cores (default 2)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kprio-bench-") as tmp:
        broker = None
        bootstrap = os.environ.get(ENV_BOOTSTRAP)
        if not bootstrap:
            broker = EmbeddedBroker(Path(tmp) / "broker", port=None, start_timeout_s=60).start()
            bootstrap = broker.bootstrap
        try:
            run(args, bootstrap, Path(tmp))
        finally:
            if broker is not None:
                broker.stop()


def run(args: argparse.Namespace, bootstrap: str, tmp: Path) -> None:
    kafka = KafkaSettings(bootstrap_servers=bootstrap, timeout_s=30)
    topic = TopicSettings(name=f"bench{int(time.time())}", priorities=PRIORITIES, partitions=PARTITIONS,
                          schema={"i": "long", "amount": "double"})
    plan, t_fill = timed(lambda: fill(kafka, topic, args.records))
    print(f"filled {args.records:,} records in {t_fill:.1f} s ({PRIORITIES} priorities x {PARTITIONS} partitions)")

    rss_before = psutil.Process().memory_info().rss
    (raw_records, raw_bytes), t_raw = timed(lambda: raw_consume(kafka, plan))
    raw_rss = (psutil.Process().memory_info().rss - rss_before) / 2**20
    assert raw_records == args.records, raw_records
    print(f"raw consume:  {raw_records:,} records, {raw_bytes / 2**20:.0f} MiB in {t_raw:.1f} s")

    from spark_jobs.datasource import read_ranges
    from spark_jobs.drain import drain_batch, drained_frame
    from spark_jobs.session import build_session

    settings = SparkSettings(master=f"local[{args.cores}]", conf={
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "4"})
    config = KprioConfig(kafka=kafka, topics=(topic,), spark=settings, drain={"output_path": str(tmp / "out")})
    with PeakMemory() as memory:
        spark = build_session(settings, app_name="kprio-bench")
        spark.sparkContext.setLogLevel("ERROR")
        try:
            warm = DrainPlan(topic.name, "lag-aware", 100, None, {}, {}, (PlannedRange(
                plan.ranges[0].priority, OffsetRange(plan.ranges[0].range.topic, plan.ranges[0].range.partition, 0, 100)),))
            drain_batch(spark, config, topic, "warmup", warm)  # JVM and Python workers started once
            read_count, t_read = timed(lambda: read_ranges(spark, config, plan.ranges).count())
            _, t_handler = timed(lambda: drained_frame(spark, config, topic, "bench", plan)
                                 .write.format("noop").mode("overwrite").save())
            result, t_drain = timed(lambda: drain_batch(spark, config, topic, "bench", plan))
        finally:
            spark.stop()
    assert read_count == args.records and result.records == args.records and result.errors == 0

    raw_rate, read_rate, drain_rate = args.records / t_raw, args.records / t_read, args.records / t_drain
    print(f"spark read:            {t_read:.1f} s  (kprio-kafka source alone, count())")
    print(f"spark read + handler:  {t_handler:.1f} s  (+ lanes + JSON handler, no-op sink)")
    print(f"spark drain:           {t_drain:.1f} s  (+ Parquet write with observed stats + publish)")
    print(f"where the time goes: read {t_read:.1f} s, lanes+handler ~{t_handler - t_read:.1f} s, "
          f"write+stats+publish ~{t_drain - t_handler:.1f} s")
    print()
    print(f"{'':26}{'records/s':>12}")
    print(f"{'raw confluent consume':26}{raw_rate:>12,.0f}")
    print(f"{'spark read only':26}{read_rate:>12,.0f}")
    print(f"{'spark read + handler':26}{args.records / t_handler:>12,.0f}")
    print(f"{'spark drain end to end':26}{drain_rate:>12,.0f}")
    print(f"drain / raw ratio: {drain_rate / raw_rate:.2f} (target >= 0.5 on {args.cores} cores)")
    print(f"peak RSS MiB: raw consume +{raw_rss:.0f}; spark {json.dumps(memory.report())}")


if __name__ == "__main__":
    main()
