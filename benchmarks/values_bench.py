"""Value decoding: Avro in the registry's wire format beside JSON, the same orders, the drain's own decoders.

Run: ``python benchmarks/values_bench.py [--records 200000] [--batch 10000] [--repeats 3]``. A script, not a timed
test: timings depend on the machine. Target (issue 43): Avro's decode within 20 % of JSON's on the same records.

The records are the demo's orders (7 fields: 3 strings, an int, an amount, an enum-like tier, a timestamp), as
JSON (``kprio demo``) and as Avro written by confluent-kafka's AvroSerializer through the schema registry (``kprio
demo --values avro``: decimal amount, enum tier, timestamp-millis). Each is decoded in Arrow batches of ``--batch``
records, as a drain task hands them to the handler: JSON by :func:`spark_jobs.handlers.decode_values` (Arrow's
vectorised JSON reader), Avro by :class:`kprio_core.values.avro.AvroDecoder` (each field read across the batch with
numpy straight into Arrow, :mod:`kprio_core.values.avro_vector`), its writer schema already fetched (a drain fetches
each id once per executor). ``--fastavro`` times its former path instead: fastavro per record, then one Arrow array
per column (what a record the vector path doubts, or a schema it does not cover, still takes). The registry
is the embedded Apicurio Registry started here, or ``KPRIO_SCHEMA_REGISTRY_URL``. Timings are CPU seconds of this
process (on a busy shared machine wall time also counts other processes) and the median of ``--repeats``.
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

from kprio_core.values.avro import AvroDecoder, merged_columns, reader_schemas, value_subject  # noqa: E402
from kprio_core.values.registry import RegistryEndpoint, SchemaRegistry  # noqa: E402
from orchestration.demo.avro_values import AvroOrders  # noqa: E402
from orchestration.demo.workload import ORDER_SCHEMA, Wave, order_records  # noqa: E402
from spark_jobs.handlers import decode_values  # noqa: E402

TOPIC = "bench-orders-0"


def cpu_s(call, repeats: int) -> float:
    """Median CPU seconds of ``call`` (after one warm-up)."""
    call()
    times = []
    for _ in range(repeats):
        c0 = time.process_time()
        call()
        times.append(time.process_time() - c0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=10_000, help="records per Arrow batch (spark.arrow_batch_records)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fastavro", action="store_true", help="time the fastavro path (no vector path)")
    args = parser.parse_args()
    url = os.environ.get("KPRIO_SCHEMA_REGISTRY_URL")
    registry = None
    if not url:
        from orchestration.services.registry import EmbeddedRegistry

        registry = EmbeddedRegistry(tempfile.mkdtemp(prefix="kprio-values-bench-"), port=None, start_timeout_s=120)
        url = registry.start().url
    try:
        run(args, url)
    finally:
        if registry is not None:
            registry.stop()


def run(args: argparse.Namespace, url: str) -> None:
    import pyarrow as pa

    orders = order_records(Wave(0, args.records, 0, 0), base_ts_ms=1_700_000_000_000)
    json_values = [value.encode() for _, value, _ in orders]
    encode = AvroOrders(url).encode
    avro_values = [encode(TOPIC, value) for _, value, _ in orders]

    def batches(values: list[bytes]) -> list[pa.Array]:
        return [pa.array(values[i:i + args.batch], type=pa.binary()) for i in range(0, len(values), args.batch)]

    json_batches, avro_batches = batches(json_values), batches(avro_values)
    registry = SchemaRegistry(RegistryEndpoint(url))
    readers = reader_schemas(registry, {TOPIC: value_subject(TOPIC)})
    columns = merged_columns(readers)

    def decode_json() -> None:
        for b in json_batches:
            decode_values(b, ORDER_SCHEMA)

    def decode_avro() -> None:
        decoder = AvroDecoder(registry, readers, columns)  # a task's decoder; the registry client's cache is warm
        if args.fastavro:
            decoder.readers[TOPIC].vector = None
        for b in avro_batches:
            cols, errors = decoder.decode(b, TOPIC)
            assert errors.null_count == len(b)

    json_s, avro_s = cpu_s(decode_json, args.repeats), cpu_s(decode_avro, args.repeats)
    n = args.records
    rows = [["json (decode_values: Arrow's JSON reader)", f"{sum(map(len, json_values)) / n:.0f}", f"{json_s:.2f}",
             f"{n / json_s:,.0f}", "1.00"],
            [f"avro (AvroDecoder: {'fastavro + Arrow' if args.fastavro else 'numpy vector path'})", f"{sum(map(len, avro_values)) / n:.0f}", f"{avro_s:.2f}",
             f"{n / avro_s:,.0f}", f"{json_s / avro_s:.2f}"]]
    print(f"{n:,} demo orders, Arrow batches of {args.batch:,}, median of {args.repeats} (CPU seconds); "
          f"registry {url}; Avro columns: {', '.join(f'{c} {k}' for c, k in columns)}")
    print(tabulate(rows, headers=["decoder", "bytes/record", "CPU s", "records/s", "speed vs json"],
                   tablefmt="github", disable_numparse=True))
    verdict = "meets" if avro_s <= json_s * 1.25 else "misses"
    print(f"avro / json time: {avro_s / json_s:.2f} ({verdict} the target: Avro within 20 % of JSON's speed)")


if __name__ == "__main__":
    main()
