"""Benchmark: planning at scale, ``kprio plan`` and one tick's decisions over 192, 1,920 and 19,200 partitions.

Starts the embedded broker (or uses the cluster in KPRIO_BOOTSTRAP_SERVERS), then for each size
creates ``logical topics x 3 priorities x 64 partitions`` (``--sizes``: 1, 10 and 100 logical topics
by default; for 100, the 19,200 partitions, the embedded node gets a 2 GiB heap, and it holds a file
open per partition: about 19,500 of this machine's 20,000 per process), waits until every partition
has a leader, writes a few records into every partition (so every partition has a backlog and a
record size to sample; every write acknowledged), and measures:

- ``kprio plan --json`` as a new process (the process start, imports, config, Dagster instance,
  ledger and broker included): the faster of two runs;
- in one warm process, what one sensor tick decides for every logical topic
  (:func:`orchestration.runtime.tick.decide_all` over every topic within ``KafkaEdge.one_view``, as a tick
  does: the ledger view, the lag snapshot and the rules; nothing recorded): the median of three,
  with the broker requests it made (the lag snapshot's functions that send them, counted);
- the same tick with freshness objectives set (``--objectives``, ``slo.max_age_s``; default 2: 10 s, 1: 60 s,
  0: 3,600 s): the plan steered by deadlines, whose time marks come from Kafka's time index (one ListOffsets
  by timestamp per mark time, sent side by side: ``time_marks``).

The goal (the speed-of-the-loop issue): ``kprio plan`` and one tick over 1,920 partitions in
<= 1 s including the process, and cost growing no worse than linearly in partitions (the broker
requests batched: not one per partition or group). Not a test: it prints one table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kprio_core.config import ENV_BOOTSTRAP, KafkaSettings, KprioConfig  # noqa: E402
from kprio_core.kafka.reads import close_shared_group_offsets  # noqa: E402
from orchestration.services.broker import ENV_JVM_OPTIONS, EmbeddedBroker  # noqa: E402

PRIORITIES, PARTITIONS, RECORDS_PER_PARTITION = 3, 64, 3
SIZES = (1, 10, 100)
"""Logical topics per size: x 3 priorities x 64 partitions = 192, 1,920 and 19,200 partitions."""
REPO = Path(__file__).resolve().parents[1]


def make_topics(kafka: KafkaSettings, prefix: str, logical: int) -> list[dict]:
    """Create ``logical`` logical topics of 3 x 64 partitions with a few records in every partition."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    names = [f"{prefix}{i:03d}" for i in range(logical)]
    new = [NewTopic(f"{n}-{p}", PARTITIONS, 1) for n in names for p in range(PRIORITIES)]
    for chunk in range(0, len(new), 50):
        for future in admin.create_topics(new[chunk:chunk + 50], request_timeout=120).values():
            future.result(120)
    wanted = {t.topic for t in new}
    deadline = time.monotonic() + 600
    while True:  # every partition led (a large creation takes the single node a while to serve)
        topics = admin.list_topics(timeout=60).topics
        if all(name in topics and len(topics[name].partitions) == PARTITIONS
               and all(p.leader >= 0 for p in topics[name].partitions.values()) for name in wanted):
            break
        if time.monotonic() > deadline:
            raise RuntimeError("the created topics have no leaders after 600 s")
        time.sleep(1)
    failed: list[str] = []
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "linger.ms": 20})
    for topic in new:
        for q in range(PARTITIONS):
            for i in range(RECORDS_PER_PARTITION):
                producer.produce(topic.topic, json.dumps({"i": i}).encode(), partition=q,
                                 on_delivery=lambda err, _msg: err is not None and failed.append(str(err)))
        producer.poll(0)
    left = producer.flush(300)
    if left or failed:
        raise RuntimeError(f"{left} records not acknowledged, {len(failed)} failed ({failed[:1]})")
    return [{"name": n, "priorities": PRIORITIES, "partitions": PARTITIONS} for n in names]


def drop_topics(kafka: KafkaSettings, topics: list[dict]) -> None:
    """Delete the priority topics of ``topics``: the next size starts on a node without them (a single node
    holds a file open per partition, and 21,312 partitions would pass this machine's 20,000 per process)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    names = [f"{t['name']}-{p}" for t in topics for p in range(t["priorities"])]
    for chunk in range(0, len(names), 50):
        for future in admin.delete_topics(names[chunk:chunk + 50], request_timeout=120,
                                          operation_timeout=120).values():
            future.result(120)


def config_for(kafka: KafkaSettings, topics: list[dict], root: Path, objectives: dict[int, float] | None = None,
               name: str = "kprio.yaml") -> Path:
    config = KprioConfig.model_validate({
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers, "timeout_s": 60},
        "topics": topics, "ledger": {"url": f"sqlite:///{root / 'ledger.db'}"},
        "drain": {"output_path": str(root / "out"), "dead_letter_path": str(root / "dead"),
                  "replay_path": str(root / "replay")},
        "slo": {"max_age_s": objectives or {}},
    })
    path = root / name
    path.write_text(json.dumps(config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})))
    return path


class Calls:
    """Counts the broker requests a tick makes, by wrapping the functions of the lag snapshot that send them."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def wrap(self, owner: object, name: str) -> None:
        original = getattr(owner, name)

        def counted(*args, **kwargs):
            self.counts[name] = self.counts.get(name, 0) + 1
            return original(*args, **kwargs)

        setattr(owner, name, counted)


def in_process_tick(config_file: Path, home: Path) -> tuple[float, dict[str, int], int]:
    """Median seconds of three warm ticks' decisions over every topic; the broker calls of one; partitions."""
    import kprio_core.kafka.lag as lag
    from kprio_core.config import load_config
    from kprio_core.kafka import KafkaEdge
    from kprio_core.ledger import Ledger
    from orchestration.dagster.instance import open_instance
    from orchestration.dagster.runs import DagsterRuns
    from orchestration.runtime.tick import decide_all

    os.environ["DAGSTER_HOME"] = str(home)
    config = load_config(config_file, env={})
    calls = Calls()
    # Each of these sends one request (or, for the sampling, reads a few records of each topic).
    import kprio_core.kafka.edge as edge_module

    calls.wrap(edge_module, "cluster_metadata")  # a metadata request, counted where the edge or the snapshot asks
    calls.wrap(lag, "cluster_metadata")
    for name in ("log_starts", "high_watermarks", "stable_offsets", "topic_ids",
                 "sample_record_bytes", "time_marks"):
        calls.wrap(lag, name)
    import kprio_core.kafka.times as times

    calls.wrap(times, "list_offsets")  # one per time the objectives' marks are read at
    from kprio_core.kafka.reads import GroupOffsets

    calls.wrap(GroupOffsets, "fetch")
    times = []
    with KafkaEdge(config.kafka) as edge, Ledger(config.ledger.url) as ledger, open_instance(config) as instance:
        for i in range(4):
            calls.counts.clear()
            start = time.perf_counter()
            with edge.one_view():  # as a tick does: the cluster's metadata once
                decisions = decide_all(DagsterRuns(instance), edge, ledger, config, config.topics, now_s=time.time())
            if i:  # the first one warms the connections and caches
                times.append(time.perf_counter() - start)
            assert all(d.plan is not None for d in decisions), [d.summary() for d in decisions if d.plan is None][:3]
    return statistics.median(times), dict(calls.counts), sum(t.partitions * t.priorities for t in config.topics)


def plan_process(config_file: Path, home: Path) -> float:
    """The faster of two ``kprio plan --json`` processes, wall seconds."""
    walls = []
    for _ in range(2):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "orchestration.cli", "plan", "--config", str(config_file),
                               "--json"], cwd=REPO, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(REPO)}, check=False)
        walls.append(time.perf_counter() - start)
        assert done.returncode == 0, done.stderr[-2000:]
    return min(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)),
                        help="logical topics per size, each 3 x 64 partitions (default 1,10,100)")
    parser.add_argument("--json-file", help="also write the figures to this file (a list, one entry per size)")
    parser.add_argument("--objectives", default="2:10,1:60,0:3600",
                        help="slo.max_age_s of the tick with objectives, priority:seconds,... (default 2:10,1:60,0:3600)")
    args = parser.parse_args()
    objectives = {int(p): float(s) for p, s in (pair.split(":") for pair in args.objectives.split(","))}
    with tempfile.TemporaryDirectory(prefix="kprio-plan-bench-") as tmp:
        root = Path(tmp)
        broker = None
        bootstrap = os.environ.get(ENV_BOOTSTRAP)
        sizes = [int(s) for s in args.sizes.split(",")]
        if not bootstrap:
            if max(sizes) > 10:  # 19,200 partitions: Kafka's partition state wants more than the default 512 MiB heap
                os.environ.setdefault(ENV_JVM_OPTIONS, "-Xmx2g")
            broker = EmbeddedBroker(root / "broker", port=None, start_timeout_s=120).start()
            bootstrap = broker.bootstrap
        try:
            figures = run(KafkaSettings(bootstrap_servers=bootstrap), root, sizes, objectives)
            if args.json_file:
                Path(args.json_file).write_text(json.dumps(figures, indent=2))
        finally:
            if broker is not None:
                broker.stop()


def run(kafka: KafkaSettings, root: Path, sizes: list[int], objectives: dict[int, float]) -> list[dict]:
    """Measure each size, print the table; the figures, one dict per size."""
    from tabulate import tabulate

    rows, figures = [], []
    stamp = time.strftime("%H%M%S")
    for logical in sizes:
        where = root / f"size{logical}"
        (where / "home").mkdir(parents=True)
        started = time.perf_counter()
        topics = make_topics(kafka, f"scale{stamp}-{logical}-", logical)
        made = time.perf_counter() - started
        config_file = config_for(kafka, topics, where)
        tick_s, calls, partitions = in_process_tick(config_file, where / "home")
        steered = config_for(kafka, topics, where, objectives, name="kprio-objectives.yaml")
        objectives_s, objective_calls, _ = in_process_tick(steered, where / "home")
        close_shared_group_offsets()  # this process's group consumers hold connections (file descriptors) no more
        print(f"{partitions:,} partitions: topics made in {made:.1f} s; tick {tick_s:.3f} s; broker calls {calls}; "
              f"with objectives {objectives_s:.3f} s, {objective_calls}", flush=True)
        try:
            process_s: float | None = plan_process(config_file, where / "home")
        except AssertionError as failed:  # at 19,200 partitions a single node may run out of file descriptors
            process_s = None
            print(f"{partitions:,} partitions: kprio plan failed: {str(failed).strip().splitlines()[-1][:300]}",
                  flush=True)
        else:
            print(f"{partitions:,} partitions: kprio plan {process_s:.2f} s", flush=True)
        figures.append({"partitions": partitions, "logical_topics": logical, "plan_process_s": process_s,
                        "tick_s": tick_s, "broker_calls": calls, "tick_with_objectives_s": objectives_s})
        drop_topics(kafka, topics)
        rows.append([f"{partitions:,}", logical, "failed" if process_s is None else f"{process_s:.2f}",
                     f"{tick_s:.3f}", f"{tick_s / partitions * 1e6:.0f}",
                     ", ".join(f"{k} {v}" for k, v in sorted(calls.items())), f"{objectives_s:.3f}",
                     f"{(objectives_s - tick_s) * 1000:+.0f}"])
    print()
    print(tabulate(rows, headers=["partitions", "logical topics", "kprio plan s (process)", "one tick s (warm)",
                                  "tick us/partition", "broker calls of one tick", "one tick with objectives s",
                                  "objectives' cost ms"],
                   tablefmt="github", disable_numparse=True))
    print("\ngoal: kprio plan and one tick over 1,920 partitions <= 1 s including the process; no worse than linear")
    return figures


if __name__ == "__main__":
    main()
