"""The drain of Avro values beside JSON values: the same orders, one ``drain_batch`` each, end to end on Spark.

Run: ``python benchmarks/values_drain_bench.py [--records 300000] [--runs 3] [--cores 2]``. A script, not a timed
test: timings depend on the machine. Target (issue 43): the drain of Avro values within 20 % of JSON's speed. On
2026-11-27 (200,000 records, the shared 2-core machine, quiet): before the vector path
(:mod:`kprio_core.values.avro_vector`) JSON 0.75 s, Avro 1.32 s (0.57 of JSON's speed); after it JSON 0.85 s, Avro
0.78 s (1.08). Five pairs under load: docs/benchmarks.md, "Avro values beside JSON".

Starts the embedded broker and the embedded schema registry (or uses ``KPRIO_BOOTSTRAP_SERVERS`` and
``KPRIO_SCHEMA_REGISTRY_URL``), fills two logical topics of 3 priorities x 2 partitions with the same demo orders,
one as JSON (``value_format: json`` with the order's schema), one as Avro written by confluent-kafka's
AvroSerializer (``value_format: avro``: decimal amount, enum tier, timestamp-millis created), then drains each
whole as one batch with the python reader into Parquet, ``--runs`` times (each a new attempt): the median wall
time of the runs after the first. :mod:`benchmarks.values_bench` times the decoders alone.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tabulate import tabulate  # noqa: E402

from kprio_core.config import ENV_BOOTSTRAP, KafkaSettings, KprioConfig, SparkSettings, TopicSettings  # noqa: E402
from kprio_core.model.drain_plan import DrainPlan, PlannedRange  # noqa: E402
from kprio_core.model.offsets import OffsetRange  # noqa: E402
from orchestration.demo.workload import ORDER_SCHEMA, Wave, order_records  # noqa: E402

PRIORITIES, PARTITIONS = 3, 2


def fill(kafka: KafkaSettings, topic: TopicSettings, values: list[bytes]) -> DrainPlan:
    """Create the topics, produce ``values`` spread evenly; the plan of all of them."""
    import confluent_kafka as ck

    from kprio_core.kafka.client import Deadline, new_admin
    from kprio_core.kafka.topics import ensure_topics

    ensure_topics(new_admin(kafka), topic, PARTITIONS, Deadline(kafka.timeout_s, kafka.bootstrap_servers))
    producer = ck.Producer({**kafka.client_config(), "linger.ms": 50, "batch.size": 1 << 20,
                            "queue.buffering.max.kbytes": 1 << 20})
    counts: dict[tuple[str, int], int] = {}
    for i, value in enumerate(values):
        name, partition = topic.priority_topic(i % PRIORITIES), (i // PRIORITIES) % PARTITIONS
        while True:
            try:
                producer.produce(name, key=f"k{i % 5000}".encode(), value=value, partition=partition)
                break
            except BufferError:
                producer.poll(0.5)
        counts[(name, partition)] = counts.get((name, partition), 0) + 1
    if producer.flush(120):
        raise RuntimeError("records not acknowledged within 120 s")
    ranges = tuple(PlannedRange(topic.priority_of_topic(t), OffsetRange(t, p, 0, n)) for (t, p), n in
                   sorted(counts.items()))
    quotas = {p: sum(r.range.count for r in ranges if r.priority == p) for p in range(PRIORITIES)}
    return DrainPlan(topic.name, "lag-aware", len(values), None, quotas, quotas, ranges)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    from orchestration.services.broker import EmbeddedBroker
    from orchestration.services.registry import EmbeddedRegistry

    with tempfile.TemporaryDirectory(prefix="kprio-values-drain-") as tmp:
        bootstrap, url = os.environ.get(ENV_BOOTSTRAP), os.environ.get("KPRIO_SCHEMA_REGISTRY_URL")
        broker = None if bootstrap else EmbeddedBroker(Path(tmp) / "broker", port=None, start_timeout_s=120)
        registry = None if url else EmbeddedRegistry(Path(tmp) / "registry", port=None, start_timeout_s=120)
        try:
            bootstrap = bootstrap or broker.start().bootstrap
            url = url or registry.start().url
            run(args, bootstrap, url, Path(tmp))
        finally:
            if registry is not None:
                registry.stop()
            if broker is not None:
                broker.stop()


def run(args: argparse.Namespace, bootstrap: str, url: str, tmp: Path) -> None:
    from orchestration.demo.avro_values import AvroOrders
    from spark_jobs.drain import drain_batch
    from spark_jobs.session import build_session

    kafka = KafkaSettings(bootstrap_servers=bootstrap, timeout_s=30)
    stamp = int(time.time())
    orders = order_records(Wave(0, args.records, 0, 0), base_ts_ms=1_700_000_000_000)
    json_topic = TopicSettings(name=f"vbench-json-{stamp}", priorities=PRIORITIES, partitions=PARTITIONS,
                               schema=dict(ORDER_SCHEMA))
    avro_topic = TopicSettings(name=f"vbench-avro-{stamp}", priorities=PRIORITIES, partitions=PARTITIONS,
                               value_format="avro")
    encode = AvroOrders(url).encode
    json_values = [value.encode() for _, value, _ in orders]
    # One subject per priority topic (TopicNameStrategy): each order is encoded for the topic it goes to.
    avro_values = [encode(avro_topic.priority_topic(i % PRIORITIES), value) for i, (_, value, _) in enumerate(orders)]
    plans = {"json": fill(kafka, json_topic, json_values), "avro": fill(kafka, avro_topic, avro_values)}
    settings = SparkSettings(master=f"local[{args.cores}]", conf={
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false", "spark.driver.memory": "2g"})
    spark = build_session(settings)
    rows, seconds = [], {}
    try:
        for kind, topic in (("json", json_topic), ("avro", avro_topic)):
            config = KprioConfig(kafka=kafka, topics=(topic,), spark=settings, schema_registry={"url": url},
                                 drain={"output_path": str(tmp / kind / "out"),
                                        "dead_letter_path": str(tmp / kind / "dead")})
            walls = []
            for attempt in range(1, args.runs + 1):
                start = time.perf_counter()
                result = drain_batch(spark, config, topic, "b-000001", attempt, plans[kind])
                walls.append(time.perf_counter() - start)
                assert sum(s.output for s in result.ranges) == args.records, result
            seconds[kind] = statistics.median(walls[1:]) if len(walls) > 1 else walls[0]
            rows.append([kind, f"{sum(map(len, json_values if kind == 'json' else avro_values)) / args.records:.0f}",
                         f"{walls[0]:.2f}", f"{seconds[kind]:.2f}", f"{args.records / seconds[kind]:,.0f}"])
    finally:
        spark.stop()
    print(f"{args.records:,} demo orders, {PRIORITIES} priorities x {PARTITIONS} partitions, one batch, python reader, "
          f"parquet, Spark local[{args.cores}]; load average {'/'.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(tabulate(rows, headers=["values", "bytes/record", "first run s", "median s", "records/s"],
                   tablefmt="github", disable_numparse=True))
    ratio = seconds["json"] / seconds["avro"]
    print(f"avro drain speed / json drain speed: {ratio:.2f} ({'meets' if ratio >= 0.8 else 'misses'} the target 0.8)")


if __name__ == "__main__":
    main()
