"""Benchmark: how long an urgent record waits for its commit while a bulk backlog drains (issue 10).

One command, from a fresh clone: ``python benchmarks/latency_bench.py``. Not a test: it prints
tables (``--json``: one JSON document instead). What it does, per mode:

1. starts the embedded broker (its own data dir; stopped in ``finally``), creates a logical topic
   of 3 priorities x 4 partitions and produces the backlog: ``--bulk-p0`` (200,000) priority-0 and
   ``--bulk-p1`` (20,000) priority-1 records of ~200 B, each carrying its produce time (in the JSON
   value and as the record timestamp);
2. starts the drainer:

   - ``follow``: ``kprio drain --follow`` as a subprocess (one warm local Spark session,
     ``spark.master: local[2]``), on a Dagster home with the shipped ``dagster.yaml``;
   - ``daemon``: the real Dagster daemon as a user deploys it: ``dagster dev`` through
     ``tests/fixtures/dagster_dev.py`` (``KprioDeployment``: ``kprio instance init``'s ``dagster.yaml``, kprio's
     run launcher, the default local Spark); the sensor starts stopped (``sensor.default_status``) and is turned
     on once the home's warm workers are warm, as a user turns it on in the UI;
   - ``daemon-default``: the same with Dagster's DefaultRunLauncher (the ``run_launcher`` block deleted): every
     run a new process with its own Spark;

3. polls the priority groups' committed offsets with one ``KafkaEdge`` every ``--poll-s`` (0.1 s);
   a record counts as committed at the first poll whose committed offset of its partition is past
   its offset (produce -> committed latency per record);
4. once the first commit is seen, produces priority-2 records at ``--rate`` (5/s) for ``--urgent-s``
   (60 s), one partition after the other, then waits for zero lag on every priority;
5. produces ``--small-batches`` (3) times 1,000 records on the idle drainer and waits for their
   commit (the fixed cost of a small batch as the drainer really pays it: tick wait included);
6. ``follow`` only: produces a chunk and sends SIGTERM while a batch is in flight: the process must
   exit 0 and say which batch it finished (checked against the ledger).

Then it reads the ledger (batches, their priorities, planned/drained/checked/committed times) and
the Dagster instance (each run's events: queued, dequeued, process started, step started, the
``drained_batch`` / ``committed_offsets`` materializations and their step timings ``drain_s``,
``check_s``, ``publish_s``, ``commit_s``) and attributes every urgent record's wait to the steps.

The fixed cost of a 1,000-record batch, split by step, comes from a probe: a new Python process
(this script with ``--probe``) that imports kprio, opens the instance, starts its Spark session
(local, and over the daemon's warm Spark Connect server), then times, batch after batch, the
sensor's tick (``orchestration.dagster.sensors.tick``: the plan) and the run (``drain_job`` in process, the
loop's own ``execute``) with the steps from the run's materialization metadata. Its first batch is
the cold cost of a process; the median of the others is the warm cost.

Throughput: ``benchmarks/drain_bench.py``'s raw consume of the same ranges (confluent-kafka consumers
touching every record, one per partition in parallel processes: the reference; one consumer reading
the partitions in turn: context; the faster of two runs each) against the bulk drain rate of the
``follow`` run, planning, checks and commit included.

Peak RSS and CPU seconds (both sampled with psutil every 0.5 s) per process kind.

Quick runs: ``--bulk-p0 20000 --bulk-p1 2000 --urgent-s 15 --mode follow``. Configuration
experiments: ``--set planner.target_batch_s=1 --set sensor.interval_s=1`` (applied to every mode).
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kprio_core.config import KafkaSettings, TopicSettings  # noqa: E402

PRIORITIES, PARTITIONS, VALUE_BYTES = 3, 4, 200
URGENT = PRIORITIES - 1
SCHEMA = {"i": "long", "amount": "double", "produced_ms": "long"}
SMALL_BATCH = 1_000
TARGETS = {
    "follow": (1.0, 2.0),
    "daemon": (3.0, 5.0),
    "daemon-default": (3.0, 5.0),
    "warm fixed cost": 1.5,
    "cold first batch": 10.0,
    "drain / raw": 0.8,
}
"""Targets: urgent p50 / p95 per mode (s; the warm-runs issue's), warm and cold batch cost (s), throughput ratio."""
SPARK_CONF = {"spark.ui.enabled": "false", "spark.default.parallelism": "2", "spark.sql.shuffle.partitions": "4",
              "spark.driver.memory": "1g"}
"""The Spark settings of both modes (those of tests/fixtures/dagster_dev.py's deployment)."""


def say(message: str) -> None:
    """Progress on stderr (stdout is the tables or the JSON)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile (nearest rank) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


# -- producing ---------------------------------------------------------------------------------------


class Produced:
    """Produce time (epoch s, the record timestamp) of every delivered record, by (topic, partition, offset)."""

    def __init__(self) -> None:
        self.times: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
            return
        with self._lock:
            self.times[(msg.topic(), msg.partition())][msg.offset()] = msg.timestamp()[1] / 1000.0

    def ends(self, topics: list[str]) -> dict[tuple[str, int], int]:
        """One past the last delivered offset of each partition of ``topics``."""
        with self._lock:
            return {key: max(offsets) + 1 for key, offsets in self.times.items() if key[0] in topics and offsets}


def _producer(kafka: KafkaSettings, linger_ms: int):
    import confluent_kafka as ck

    return ck.Producer({**kafka.client_config(), "linger.ms": linger_ms, "batch.size": 1 << 20,
                        "queue.buffering.max.kbytes": 1 << 20, "compression.type": "none"})


def _value(i: int, now_ms: int) -> bytes:
    head = json.dumps({"i": i, "amount": i * 0.5, "produced_ms": now_ms, "pad": ""})
    return json.dumps({"i": i, "amount": i * 0.5, "produced_ms": now_ms,
                       "pad": "x" * max(0, VALUE_BYTES - len(head))}).encode()


def _send(producer: Any, topic: str, partition: int, key: str, i: int, produced: Produced) -> None:
    while True:
        now_ms = int(time.time() * 1000)
        try:
            producer.produce(topic, key=key.encode(), value=_value(i, now_ms), partition=partition,
                             timestamp=now_ms, on_delivery=produced.on_delivery)
            return
        except BufferError:
            producer.poll(0.2)


def produce_bulk(kafka: KafkaSettings, topic: TopicSettings, counts: dict[int, int], produced: Produced) -> int:
    """``counts[p]`` records on priority ``p``, round robin over the partitions; all acknowledged."""
    producer = _producer(kafka, linger_ms=50)
    total = 0
    for p, n in counts.items():
        name = topic.priority_topic(p)
        for j in range(n):
            _send(producer, name, j % PARTITIONS, f"k{total % 5000}", total, produced)
            total += 1
            if total % 10_000 == 0:
                producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("bulk records not acknowledged within 120 s")
    if produced.errors:
        raise RuntimeError(f"{len(produced.errors)} records failed: {produced.errors[0]}")
    return total


def produce_urgent(kafka: KafkaSettings, topic: TopicSettings, rate: float, seconds: float, produced: Produced,
                   stop: threading.Event, window: dict[str, float]) -> None:
    """Priority-2 records at ``rate`` per second for ``seconds``, each sent at its time (linger 0)."""
    producer = _producer(kafka, linger_ms=0)
    name = topic.priority_topic(URGENT)
    count = int(round(rate * seconds))
    start = time.monotonic()
    window["start"] = time.time()
    for k in range(count):
        delay = start + k / rate - time.monotonic()
        if delay > 0 and stop.wait(delay):
            break
        _send(producer, name, k % PARTITIONS, f"u{k}", 10_000_000 + k, produced)
        producer.poll(0)
    producer.flush(30)
    window["end"] = time.time()


def create_topic(kafka: KafkaSettings, name: str) -> TopicSettings:
    from kprio_core.kafka import KafkaEdge

    topic = TopicSettings(name=name, priorities=PRIORITIES, partitions=PARTITIONS, schema=SCHEMA)
    with KafkaEdge(kafka) as edge:
        edge.ensure_topics(topic, PARTITIONS, config={"retention.ms": "-1"})
    return topic


# -- watching the committed offsets -----------------------------------------------------------------


class CommitPoller:
    """The priority groups' committed offsets, every ``interval_s``, with one KafkaEdge, time-stamped."""

    def __init__(self, kafka: KafkaSettings, topic: TopicSettings, interval_s: float) -> None:
        self.kafka, self.topic, self.interval_s = kafka, topic, interval_s
        self.samples: list[tuple[float, dict[tuple[str, int], int]]] = []
        self.call_s: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commit-poller", daemon=True)

    def _run(self) -> None:
        from kprio_core.kafka import KafkaEdge

        with KafkaEdge(self.kafka) as edge:
            next_at = time.monotonic()
            while not self._stop.is_set():
                t0 = time.time()
                try:
                    offsets = edge.committed(self.topic)
                except Exception:  # noqa: BLE001 - a slow broker answer is one lost sample
                    self.errors += 1
                else:
                    t1 = time.time()
                    self.call_s.append(t1 - t0)
                    self.samples.append(((t0 + t1) / 2, {k: v or 0 for k, v in offsets.items()}))
                next_at = max(next_at + self.interval_s, time.monotonic())
                self._stop.wait(max(0.0, next_at - time.monotonic()))

    def start(self) -> CommitPoller:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def latest(self) -> dict[tuple[str, int], int]:
        return self.samples[-1][1] if self.samples else {}

    def wait(self, condition, timeout_s: float, what: str) -> float | None:
        """Wait until ``condition(offsets)`` holds on a sample; its time, or None on timeout."""
        deadline = time.monotonic() + timeout_s
        seen = 0
        while time.monotonic() < deadline:
            samples = self.samples[seen:]
            seen += len(samples)
            for t, offsets in samples:
                if condition(offsets):
                    return t
            time.sleep(self.interval_s / 2)
        say(f"timed out after {timeout_s:.0f} s waiting for {what}")
        return None


class CommitTimeline:
    """When each partition's committed offset passed each offset (from the poller's samples)."""

    def __init__(self, samples: list[tuple[float, dict[tuple[str, int], int]]]) -> None:
        self.series: dict[tuple[str, int], tuple[list[float], list[int]]] = {}
        for t, offsets in samples:
            for key, value in offsets.items():
                times, values = self.series.setdefault(key, ([], []))
                if values and value <= values[-1]:
                    continue  # committed offsets never move back; keep the first time each value was seen
                times.append(t)
                values.append(value)

    def committed_at(self, key: tuple[str, int], offset: int) -> float | None:
        """First sample time whose committed offset is past ``offset``."""
        times, values = self.series.get(key, ([], []))
        i = bisect.bisect_right(values, offset)
        return times[i] if i < len(values) else None

    def reached(self, ends: dict[tuple[str, int], int]) -> float | None:
        """First time every partition of ``ends`` had committed its end."""
        latest = 0.0
        for key, end in ends.items():
            if end <= 0:
                continue
            t = self.committed_at(key, end - 1)
            if t is None:
                return None
            latest = max(latest, t)
        return latest or None


# -- process sampling ---------------------------------------------------------------------------------


class Sampler:
    """Peak RSS per process kind and CPU seconds per kind, sampled every 0.5 s (psutil)."""

    def __init__(self, members) -> None:
        self.members = members  # () -> list[(kind, psutil.Process)]
        self.peak: dict[str, int] = defaultdict(int)
        self.largest: dict[str, int] = defaultdict(int)
        self.cpu_first: dict[int, float] = {}
        self.cpu_last: dict[int, tuple[str, float]] = {}
        self.kinds: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def _run(self) -> None:
        first = True
        while True:
            now: dict[str, int] = defaultdict(int)
            for kind, proc in self.members():
                kind = self.kinds.setdefault(proc.pid, kind) if kind != "other" else self.kinds.get(proc.pid, kind)
                try:
                    with proc.oneshot():
                        rss = proc.memory_info().rss
                        t = proc.cpu_times()
                except psutil.Error:
                    continue
                now[kind] += rss
                self.largest[kind] = max(self.largest[kind], rss)
                cpu = t.user + t.system
                if first:
                    self.cpu_first[proc.pid] = cpu
                self.cpu_last[proc.pid] = (kind, cpu)
            for kind, rss in now.items():
                self.peak[kind] = max(self.peak[kind], rss)
            first = False
            if self._stop.wait(0.5):
                return

    def start(self) -> Sampler:
        self.machine = (time.time(), _busy())
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        t0, busy0 = self.machine
        self.machine_span = (time.time() - t0, _busy() - busy0)

    def table(self) -> list[dict[str, Any]]:
        cpu: dict[str, float] = defaultdict(float)
        count: dict[str, int] = defaultdict(int)
        for pid, (kind, last) in self.cpu_last.items():
            cpu[kind] += last - self.cpu_first.get(pid, 0.0)
            count[kind] += 1
        rows = [{"kind": kind, "processes": count[kind], "peak_rss_mib": round(self.peak[kind] / 2**20),
                 "largest_mib": round(self.largest[kind] / 2**20), "cpu_s": round(cpu[kind], 1)}
                for kind in sorted(self.peak, key=lambda k: -self.peak[k])]
        wall, busy = getattr(self, "machine_span", (0.0, 0.0))
        rows.append({"kind": f"everything else on the machine (of {busy:.0f} CPU s busy in {wall:.0f} s)",
                     "processes": None, "peak_rss_mib": None, "largest_mib": None,
                     "cpu_s": round(max(0.0, busy - sum(cpu.values())), 1)})
        return rows


def _busy() -> float:
    """CPU seconds the whole machine spent busy so far (all cores)."""
    t = psutil.cpu_times()
    return t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) + getattr(t, "steal", 0)


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:
        return ""


def _tree(pid: int | None) -> list[psutil.Process]:
    if pid is None:
        return []
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def spark_kind(cmd: str, where: str) -> str | None:
    if "java" in cmd.split(" ")[0] or "org.apache.spark" in cmd:
        return f"{where} JVM"
    if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
        return f"{where} python workers"
    return None


# -- configuration --------------------------------------------------------------------------------------


def parse_sets(sets: list[str]) -> dict[str, dict[str, Any]]:
    """``["planner.target_batch_s=1"]`` -> ``{"planner": {"target_batch_s": 1}}`` (values read as YAML)."""
    out: dict[str, dict[str, Any]] = defaultdict(dict)
    for item in sets:
        key, _, value = item.partition("=")
        section, _, name = key.partition(".")
        if not name or not _:
            raise SystemExit(f"--set {item!r}: expected section.key=value")
        out[section][name] = yaml.safe_load(value)
    return dict(out)


def kprio_config(root: Path, bootstrap: str, topics: list[TopicSettings], sets: dict, *,
                 remote_port: int | None) -> dict:
    """kprio.yaml of a mode: product defaults except the paths, Spark (local[2] or the Connect server), --set."""
    config: dict[str, Any] = {
        "kafka": {"bootstrap_servers": bootstrap, "timeout_s": 20},
        "topics": [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in topics],
        "ledger": {"url": f"sqlite:///{root / 'ledger.db'}"},
        "drain": {"output_path": str(root / "output"), "dead_letter_path": str(root / "dead-letters"),
                  "replay_path": str(root / "replay")},
        "spark": {"master": "local[2]", "conf": dict(SPARK_CONF)},
    }
    if remote_port is not None:
        config["spark"].update(remote=f"sc://127.0.0.1:{remote_port}", connect_port=remote_port,
                               connect_dir=str(root / "spark-connect"))
    for section, values in sets.items():
        config[section] = {**config.get(section, {}), **values}
    return config


def effective(config: dict) -> dict[str, Any]:
    """The settings that shape latency, as the product reads them (defaults filled in)."""
    from kprio_core.config import KprioConfig

    cfg = KprioConfig.model_validate(config)
    return {"sensor.interval_s": cfg.sensor.interval_s, "planner.record_budget": cfg.planner.record_budget,
            "planner.target_batch_s": cfg.planner.target_batch_s, "planner.max_in_flight": cfg.planner.max_in_flight,
            "planner.min_share": cfg.planner.min_share, "spark": cfg.spark.remote or cfg.spark.master}


def env_for(root: Path, config_file: Path) -> dict[str, str]:
    return {**os.environ, "DAGSTER_HOME": str(root / "dagster_home"), "KPRIO_CONFIG": str(config_file),
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}


# -- the ledger and the Dagster instance after a run -------------------------------------------------------


def batch_rows(ledger_url: str, home: Path, topic: TopicSettings, timeline: CommitTimeline) -> list[dict]:
    """Every batch of ``topic``: ledger states and times, its run's events and step timings, when its commit was seen."""
    import dagster as dg
    from dagster import DagsterEventType as E

    from kprio_core.ledger import Ledger

    rows: dict[str, dict] = {}
    with Ledger(ledger_url) as ledger:
        for batch in ledger.batches.find(topic.name):
            by_p = batch.plan.records_by_priority()
            rows[batch.batch_id] = {
                "batch_id": batch.batch_id, "state": batch.state.value, "attempts": batch.attempts,
                "records": {p: n for p, n in by_p.items() if n},
                "ranges": [(r.range.topic, r.range.partition, r.range.start, r.range.end) for r in batch.plan.ranges
                           if r.range.count],
                "budget": batch.plan.record_budget,
                "ledger": {},
            }
        for event in ledger.batches.events(logical_topic=topic.name):
            row = rows.get(event.batch_id)
            if row is not None:
                row["ledger"].setdefault(event.to_state.value, event.at.timestamp())
    instance = dg.DagsterInstance.from_config(str(home))
    try:
        for row in rows.values():
            records = instance.get_run_records(filters=dg.RunsFilter(tags={"dagster/partition": row["batch_id"]}))
            row["runs"] = len(records)
            marks: dict[str, float] = {}
            steps: dict[str, float] = {}
            for record in sorted(records, key=lambda r: r.create_timestamp):
                logs = instance.all_logs(record.dagster_run.run_id)
                run_marks = {"created": record.create_timestamp.timestamp()}
                for entry in logs:
                    ev = entry.dagster_event
                    if ev is None:
                        continue
                    name = {E.RUN_ENQUEUED: "enqueued", E.RUN_DEQUEUED: "dequeued", E.RUN_STARTING: "starting",
                            E.RUN_START: "started", E.STEP_START: "step_start", E.RUN_SUCCESS: "ended",
                            E.RUN_FAILURE: "ended"}.get(ev.event_type)
                    if ev.event_type is E.ASSET_MATERIALIZATION:
                        mat = ev.event_specific_data.materialization
                        if mat.partition != row["batch_id"]:
                            continue
                        name = "drained" if mat.asset_key.path[-1] == "drained_batch" else "committed"
                        for key, value in mat.metadata.items():
                            if key.endswith("_s") and key[:-2] in ("drain", "check", "publish", "commit"):
                                steps[key[:-2]] = float(value.value)
                    if name is not None:
                        run_marks.setdefault(name, entry.timestamp)
                if "committed" in run_marks or not marks:
                    marks = run_marks  # the run that committed the batch (a retry's, when there was one)
            row["run"] = marks
            row["steps"] = steps
    finally:
        instance.dispose()
    for row in rows.values():
        seen = [timeline.committed_at((t, p), end - 1) for t, p, _, end in row["ranges"]]
        row["seen"] = max(seen) if seen and all(s is not None for s in seen) else None
    return sorted(rows.values(), key=lambda r: r["batch_id"])


def batch_of(rows: list[dict]):
    """(topic, partition, offset) -> the committed batch holding it."""
    index: dict[tuple[str, int], list[tuple[int, int, dict]]] = defaultdict(list)
    for row in rows:
        if row["state"] != "committed":
            continue
        for t, p, start, end in row["ranges"]:
            index[(t, p)].append((start, end, row))
    for spans in index.values():
        spans.sort(key=lambda s: s[0])

    def find(key: tuple[str, int], offset: int) -> dict | None:
        spans = index.get(key, [])
        i = bisect.bisect_right([s[0] for s in spans], offset) - 1
        if i >= 0 and spans[i][0] <= offset < spans[i][1]:
            return spans[i][2]
        return None

    return find


BREAKDOWN = (
    ("wait to be planned", "planned"),
    ("planned -> run created (tick end, submit)", "created"),
    ("run queue (created -> dequeued)", "dequeued"),
    ("run start (daemon: process spawn + imports) -> RUN_START", "started"),
    ("run setup (RUN_START -> step start)", "step_start"),
    ("drain", "drain"),
    ("checks (GX)", "check"),
    ("publish", "publish"),
    ("other in the op (take, lease, ledger, events)", "op_other"),
    ("commit", "commit"),
    ("commit seen by the poller", "seen"),
)


def breakdown(produced_t: float, row: dict, seen: float) -> dict[str, float]:
    """Where one record's produce -> committed time went, step by step (sums to the latency)."""
    run, steps, ledger = row.get("run", {}), row.get("steps", {}), row["ledger"]
    points = [("planned", ledger.get("planned")), ("created", run.get("created")),
              ("dequeued", run.get("dequeued") or run.get("starting")), ("started", run.get("started")),
              ("step_start", run.get("step_start")), ("committed", run.get("committed"))]
    out: dict[str, float] = {}
    last = produced_t
    for name, t in points:
        if t is None:
            out[name] = 0.0
            continue
        t = max(t, last)
        out[name] = t - last
        last = t
    in_op = out.pop("committed")  # step start -> committed materialization: the steps and the rest
    for name in ("drain", "check", "publish", "commit"):
        out[name] = min(steps.get(name, 0.0), max(0.0, in_op))
        in_op -= out[name]
    out["op_other"] = max(0.0, in_op)
    out["seen"] = max(0.0, seen - last)
    return out


# -- one mode ---------------------------------------------------------------------------------------------


@dataclass
class ModeResult:
    mode: str
    settings: dict[str, Any]
    started: float
    ready: float | None = None
    first_commit: float | None = None
    window: dict[str, float] = field(default_factory=dict)
    zero_lag: dict[int, float | None] = field(default_factory=dict)
    latency: dict[str, dict[str, Any]] = field(default_factory=dict)
    batches: list[dict] = field(default_factory=list)
    small: list[dict] = field(default_factory=list)
    stop: dict[str, Any] = field(default_factory=dict)
    processes: list[dict] = field(default_factory=list)
    ticks: dict[str, Any] = field(default_factory=dict)
    urgent_breakdown: dict[str, float] = field(default_factory=dict)
    bulk: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, Any] = field(default_factory=dict)
    poll: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    sensor_on: float | None = None
    """When the sensor was turned on (daemon modes), its first tick after that, and the first commit since."""
    first_tick: float | None = None


class Bench:
    """Everything shared by the modes: the broker, the options, the temp root."""

    def __init__(self, args: argparse.Namespace, tmp: Path, bootstrap: str, broker_pid: int | None) -> None:
        self.args, self.tmp, self.bootstrap, self.broker_pid = args, tmp, bootstrap, broker_pid
        self.kafka = KafkaSettings(bootstrap_servers=bootstrap, timeout_s=20)
        self.sets = parse_sets(args.set)
        self.stamp = time.strftime("%H%M%S")
        self.raw: dict[str, Any] = {}
        self.probes: dict[str, dict] = {}

    # -- backlog, raw consume ------------------------------------------------------------------

    def backlog(self, mode: str) -> tuple[TopicSettings, Produced]:
        topic = create_topic(self.kafka, f"lat-{mode}-{self.stamp}")
        produced = Produced()
        start = time.time()
        n = produce_bulk(self.kafka, topic, {0: self.args.bulk_p0, 1: self.args.bulk_p1}, produced)
        say(f"{mode}: produced {n:,} bulk records on {topic.name} in {time.time() - start:.1f} s")
        return topic, produced

    def raw_consume(self, topic: TopicSettings, produced: Produced) -> None:
        """drain_bench.py's method on the backlog's ranges: one consumer, every record touched; faster of two."""
        if self.raw:
            return
        spec = importlib.util.spec_from_file_location("drain_bench", REPO / "benchmarks" / "drain_bench.py")
        drain_bench = importlib.util.module_from_spec(spec)
        sys.modules["drain_bench"] = drain_bench  # its dataclasses look their module up
        spec.loader.exec_module(drain_bench)
        from kprio_core.model.drain_plan import DrainPlan, PlannedRange
        from kprio_core.model.offsets import OffsetRange

        ends = produced.ends([topic.priority_topic(p) for p in range(PRIORITIES)])
        ranges = tuple(PlannedRange(topic.priority_of_topic(t), OffsetRange(t, p, 0, end))
                       for (t, p), end in sorted(ends.items()))
        plan = DrainPlan(topic.name, "lag-aware", sum(ends.values()), None, {}, {}, ranges)
        walls, parallel_walls = [], []
        parallel = drain_bench.ParallelRaw(self.kafka, plan)  # one consumer per partition, processes started first
        try:
            for _ in range(2):
                start = time.perf_counter()
                records, size = drain_bench.raw_consume(self.kafka, plan)
                walls.append(time.perf_counter() - start)
                assert records == plan.records, (records, plan.records)
                start = time.perf_counter()
                records, _ = parallel()
                parallel_walls.append(time.perf_counter() - start)
                assert records == plan.records, (records, plan.records)
        finally:
            parallel.pool.terminate()
        # The reference is the parallel consume (the speed-of-the-loop issue's); one consumer in turn is context.
        self.raw = {"records": plan.records, "bytes": size, "wall_s": min(parallel_walls),
                    "rate": plan.records / min(parallel_walls), "consumers": len(plan.ranges),
                    "one_consumer_wall_s": min(walls), "one_consumer_rate": plan.records / min(walls)}
        say(f"raw consume: {plan.records:,} records in {min(parallel_walls):.2f} s ({self.raw['rate']:,.0f}/s) by "
            f"{len(plan.ranges)} consumers in parallel, {min(walls):.2f} s ({self.raw['one_consumer_rate']:,.0f}/s) "
            "by one reading the partitions in turn")

    # -- the run of one mode ---------------------------------------------------------------------

    def run_mode(self, mode: str) -> ModeResult:
        args = self.args
        root = self.tmp / mode
        root.mkdir(parents=True)
        topic, produced = self.backlog(mode)
        self.raw_consume(topic, produced)
        bulk_topics = [topic.priority_topic(p) for p in (0, 1)]
        poller = CommitPoller(self.kafka, topic, args.poll_s)
        if mode == "follow":
            drainer = FollowDrainer(self, root, topic)
        else:
            drainer = DaemonDrainer(self, root, topic, launcher="default" if mode == "daemon-default" else "warm")
        result = ModeResult(mode, effective(drainer.config), started=time.time())
        sampler = Sampler(drainer.members).start()
        stop_urgent = threading.Event()
        try:
            poller.start()
            drainer.prepare(result)
            result.started = time.time()
            drainer.start()
            result.ready = drainer.ready
            result.started = drainer.started or result.started
            say(f"{mode}: drainer up after {time.time() - result.started:.1f} s; waiting for the first commit")
            result.first_commit = poller.wait(lambda o: any(v > 0 for v in o.values()), args.timeout_s,
                                              "the first commit")
            if result.first_commit is None:
                raise RuntimeError(f"{mode}: no commit within {args.timeout_s:.0f} s\n{drainer.log_tail()}")
            say(f"{mode}: first commit {result.first_commit - result.started:.1f} s after the start; "
                f"urgent records at {args.rate:g}/s for {args.urgent_s:g} s")
            urgent = threading.Thread(target=produce_urgent, name="urgent", daemon=True, args=(
                self.kafka, topic, args.rate, args.urgent_s, produced, stop_urgent, result.window))
            urgent.start()
            urgent.join()
            ends = produced.ends([topic.priority_topic(p) for p in range(PRIORITIES)])
            done = poller.wait(lambda o: all(o.get(k, 0) >= e for k, e in ends.items()), args.timeout_s,
                               "zero lag")
            say(f"{mode}: zero lag {fmt(done and done - result.started, 1)} s after the start")
            result.small = self.small_batches(mode, topic, poller)
            drainer.after_drain(result)
        finally:
            stop_urgent.set()
            try:
                drainer.stop(result)
            finally:
                poller.stop()
                sampler.stop()
        result.processes = sampler.table()
        self.analyse(result, topic, produced, poller, drainer, bulk_topics)
        return result

    def small_batches(self, mode: str, topic: TopicSettings, poller: CommitPoller) -> list[dict]:
        """``--small-batches`` times: 1,000 records on the idle drainer, produce -> all committed."""
        out = []
        per = SMALL_BATCH // PRIORITIES
        counts = {p: per + (1 if p < SMALL_BATCH - per * PRIORITIES else 0) for p in range(PRIORITIES)}
        for _ in range(self.args.small_batches):
            time.sleep(self.args.small_gap_s)
            produced = Produced()
            start = time.time()
            produce_bulk(self.kafka, topic, counts, produced)
            ends = produced.ends([topic.priority_topic(p) for p in range(PRIORITIES)])
            seen = poller.wait(lambda o: all(o.get(k, 0) >= e for k, e in ends.items()), 300, "a small batch")
            out.append({"produced": start, "seen": seen, "latency_s": None if seen is None else seen - start,
                        "ends": {f"{t}[{p}]": e for (t, p), e in ends.items()}})
            say(f"{mode}: {SMALL_BATCH:,} records committed {fmt(out[-1]['latency_s'])} s after produce")
        return out

    # -- analysis -------------------------------------------------------------------------------

    def analyse(self, result: ModeResult, topic: TopicSettings, produced: Produced, poller: CommitPoller,
                drainer, bulk_topics: list[str]) -> None:
        timeline = CommitTimeline(poller.samples)
        result.poll = {"samples": len(poller.samples), "errors": poller.errors,
                       "median_call_s": round(median(poller.call_s) or 0, 4)}
        result.batches = batch_rows(drainer.ledger_url, drainer.home, topic, timeline)
        find = batch_of(result.batches)
        small_start = min((s["produced"] for s in result.small), default=float("inf"))
        # Zero lag per priority: the backlog and urgent records only (the small batches come after).
        for p in range(PRIORITIES):
            name = topic.priority_topic(p)
            ends = {}
            for key, offsets in produced.times.items():
                if key[0] == name:
                    ends[key] = max(offsets) + 1
            t = timeline.reached(ends)
            result.zero_lag[p] = None if t is None else t - result.started
        bulk_done = max((v for p, v in result.zero_lag.items() if p < URGENT and v is not None), default=None)
        bulk_done_at = None if bulk_done is None else result.started + bulk_done
        parts: dict[str, list[float]] = defaultdict(list)
        components: dict[str, list[float]] = defaultdict(list)
        for p in range(PRIORITIES):
            name = topic.priority_topic(p)
            lat_all, lat_during, missing = [], [], 0
            for key, offsets in produced.times.items():
                if key[0] != name:
                    continue
                for offset, t_prod in offsets.items():
                    if t_prod >= small_start:
                        continue
                    seen = timeline.committed_at(key, offset)
                    if seen is None:
                        missing += 1
                        continue
                    lat = seen - t_prod
                    lat_all.append(lat)
                    if bulk_done_at is None or t_prod < bulk_done_at:
                        lat_during.append(lat)
                    if p == URGENT:
                        row = find(key, offset)
                        if row is not None:
                            for comp, value in breakdown(t_prod, row, seen).items():
                                components[comp].append(value)
                            parts["total"].append(lat)
            result.latency[f"p{p}"] = self._lat(lat_all, missing)
            if p == URGENT:
                result.latency[f"p{p} during bulk"] = self._lat(lat_during, 0)
        result.urgent_breakdown = {comp: statistics.mean(v) for comp, v in components.items()}
        if parts["total"]:
            result.urgent_breakdown["total (mean latency)"] = statistics.mean(parts["total"])
        # The main phase: batches holding backlog or urgent records (not the small batches, not the SIGTERM chunk).
        ends = {key: max(offsets) + 1 for key, offsets in produced.times.items() if offsets}
        main = [r for r in result.batches if any(start < ends.get((t, p), 0) for t, p, start, _ in r["ranges"])]
        self._bulk(result, main, bulk_topics, ends, timeline)
        self._steps(result, main)

    @staticmethod
    def _lat(values: list[float], missing: int) -> dict[str, Any]:
        return {"n": len(values), "p50": pct(values, 0.5), "p95": pct(values, 0.95),
                "max": max(values) if values else None, "not_committed": missing}

    def _bulk(self, result: ModeResult, main: list[dict], bulk_topics: list[str], ends: dict[tuple[str, int], int],
              timeline: CommitTimeline) -> None:
        rows = [r for r in main if r["state"] == "committed"]

        def backlog(row: dict) -> int:
            return sum(max(0, min(end, ends.get((t, p), 0)) - start) for t, p, start, end in row["ranges"]
                       if t in bulk_topics)

        bulk_rows = [r for r in rows if backlog(r)]
        bulk_records = sum(backlog(r) for r in bulk_rows)
        first_plan = min((r["ledger"].get("planned", 1e30) for r in rows), default=None)
        last_seen = max((r["seen"] or 0 for r in bulk_rows), default=None)
        span = (last_seen - first_plan) if first_plan and last_seen else None
        w0, w1 = result.window.get("start"), result.window.get("end")
        in_window = 0
        if w0 and w1:
            for key, (times, values) in timeline.series.items():
                if key[0] not in bulk_topics:
                    continue
                before = values[bisect.bisect_right(times, w0) - 1] if bisect.bisect_right(times, w0) else 0
                after = values[bisect.bisect_right(times, w1) - 1] if bisect.bisect_right(times, w1) else 0
                in_window += after - before
        # How many batches were in flight at once (planned -> committed overlaps, from the ledger).
        spans = sorted((r["ledger"]["planned"], r["ledger"].get("committed", r["ledger"]["planned"]))
                       for r in rows if "planned" in r["ledger"])
        edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
        level = most = 0
        for _, d in edges:
            level += d
            most = max(most, level)
        ordered = sorted(bulk_rows, key=lambda r: r["ledger"].get("planned", 0))
        warm_records = sum(backlog(r) for r in ordered[1:])
        warm_span = (last_seen - ordered[0]["seen"]) if len(ordered) > 1 and ordered[0]["seen"] and last_seen else None
        result.bulk = {
            "first_plan_s": first_plan - result.started if first_plan else None,
            "warm_records": warm_records, "warm_span_s": warm_span,
            "warm_rate": warm_records / warm_span if warm_span else None,
            "bulk_records": bulk_records, "span_s": span,
            "rate": bulk_records / span if span else None,
            "in_urgent_window": in_window, "window_s": (w1 - w0) if w0 and w1 else None,
            "rate_in_window": in_window / (w1 - w0) if w0 and w1 and w1 > w0 else None,
            "batches": len(rows),
            "batches_by_priority": {p: sum(1 for r in rows if r["records"].get(p)) for p in range(PRIORITIES)},
            "urgent_only_batches": sum(1 for r in rows if set(r["records"]) == {URGENT}),
            "mixed_urgent_batches": sum(1 for r in rows if URGENT in r["records"] and len(r["records"]) > 1),
            "max_in_flight_at_once": most,
            "not_committed": sum(1 for r in main if r["state"] != "committed"),
            "records_per_batch_median": median([sum(r["records"].values()) for r in rows]),
            "bulk_batch_records_median": median([sum(r["records"].values()) for r in bulk_rows]),
        }

    def _steps(self, result: ModeResult, main: list[dict]) -> None:
        """Median seconds per step over the committed batches of the main phase (the first one apart: it is cold)."""
        rows = [r for r in main if r["state"] == "committed" and r.get("run")]
        rows.sort(key=lambda r: r["ledger"].get("planned", 0))
        out = {}
        keys = ("queue", "launch", "setup", "drain", "check", "publish", "commit", "op_other", "run", "batch")
        per: dict[str, list[float]] = defaultdict(list)
        first: dict[str, float] = {}
        for i, row in enumerate(rows):
            run, steps, ledger = row["run"], row["steps"], row["ledger"]
            vals = {}
            start = run.get("dequeued") or run.get("starting") or run.get("created")
            if run.get("created") and start:
                vals["queue"] = start - run["created"]
            if start and run.get("started"):
                vals["launch"] = run["started"] - start
            if run.get("started") and run.get("step_start"):
                vals["setup"] = run["step_start"] - run["started"]
            for k in ("drain", "check", "publish", "commit"):
                if k in steps:
                    vals[k] = steps[k]
            if run.get("step_start") and run.get("committed"):
                vals["op_other"] = (run["committed"] - run["step_start"]
                                    - sum(steps.get(k, 0) for k in ("drain", "check", "publish", "commit")))
            if run.get("created") and run.get("ended"):
                vals["run"] = run["ended"] - run["created"]
            if ledger.get("planned") and row.get("seen"):
                vals["batch"] = row["seen"] - ledger["planned"]
            for k, v in vals.items():
                if i == 0:
                    first[k] = v
                else:
                    per[k].append(v)
        # Plan (the tick): between a batch's run end and the next batch's plan in the follow loop.
        gaps = []
        for a, b in zip(rows, rows[1:]):
            if a["run"].get("ended") and b["ledger"].get("planned"):
                gaps.append(b["ledger"]["planned"] - a["run"]["ended"])
        out = {k: {"first": first.get(k), "median": median(per[k])} for k in keys}
        out["gap"] = {"first": None, "median": median(gaps)}
        out["records"] = {"first": sum(rows[0]["records"].values()) if rows else None,
                          "median": median([sum(r["records"].values()) for r in rows[1:]])}
        result.steps = out

    # -- the probe (fixed cost, cold and warm) --------------------------------------------------

    def probe(self, kind: str, remote_port: int | None) -> dict:
        """A new process drains ``--probe-batches`` batches of 1,000 records; its timings per step."""
        root = self.tmp / f"probe-{kind}"
        root.mkdir(parents=True)
        topic = create_topic(self.kafka, f"lat-probe-{kind}-{self.stamp}")
        n = self.args.probe_batches * SMALL_BATCH
        per = n // PRIORITIES
        produce_bulk(self.kafka, topic, {p: per + (n - per * PRIORITIES if p == 0 else 0) for p in range(PRIORITIES)},
                     Produced())
        sets = {k: dict(v) for k, v in self.sets.items()}
        sets.setdefault("planner", {})["record_budget"] = SMALL_BATCH
        config = kprio_config(root, self.bootstrap, [topic], sets, remote_port=remote_port)
        config_file = root / "kprio.yaml"
        config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        out = root / "probe.json"
        env = env_for(root, config_file)
        subprocess.run([sys.executable, "-m", "orchestration.cli", "instance", "init", "--home",
                        str(root / "dagster_home"), "--config", str(config_file), "--force"],
                       cwd=REPO, env=env, check=True, capture_output=True, timeout=300)
        say(f"probe {kind}: {self.args.probe_batches} batches of {SMALL_BATCH:,} records in a new process")
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--probe", str(config_file),
                               "--probe-batches", str(self.args.probe_batches), "--probe-out", str(out)],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0 or not out.exists():
            say(f"probe {kind} failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
            return {"error": (done.stderr or done.stdout)[-2000:]}
        data = json.loads(out.read_text())
        self.probes[kind] = data
        return data


# -- the drainers ---------------------------------------------------------------------------------------------


class FollowDrainer:
    """``kprio drain --follow`` in a subprocess, on a home with the shipped dagster.yaml."""

    def __init__(self, bench: Bench, root: Path, topic: TopicSettings) -> None:
        self.bench, self.root, self.topic = bench, root, topic
        self.config = kprio_config(root, bench.bootstrap, [topic], bench.sets, remote_port=None)
        self.config_file = root / "kprio.yaml"
        self.config_file.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self.home = root / "dagster_home"
        self.ledger_url = self.config["ledger"]["url"]
        self.env = env_for(root, self.config_file)
        self.proc: subprocess.Popen | None = None
        self.ready: float | None = None
        self.started: float | None = None
        """None: the drain's start is the process's (a daemon's is when its sensor is turned on)."""
        self.lines: list[tuple[float, str]] = []
        self.stderr_path = root / "drain.stderr"

    def prepare(self, result: ModeResult) -> None:
        subprocess.run([sys.executable, "-m", "orchestration.cli", "instance", "init", "--home", str(self.home),
                        "--config", str(self.config_file), "--force"],
                       cwd=REPO, env=self.env, check=True, capture_output=True, timeout=300)

    def start(self) -> None:
        self._err = open(self.stderr_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchestration.cli", "drain", "--follow", "--config", str(self.config_file)],
            cwd=REPO, env=self.env, stdout=subprocess.PIPE, stderr=self._err, text=True, start_new_session=True)
        self._reader = threading.Thread(target=self._read, name="follow-stdout", daemon=True)
        self._reader.start()
        self.ready = time.time()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.time(), line.rstrip("\n")))

    def members(self) -> list[tuple[str, psutil.Process]]:
        out = []
        if self.proc is not None:
            for proc in _tree(self.proc.pid):
                cmd = _cmdline(proc)
                forked = "multiprocessing.forkserver" in cmd  # the fork server and the workers it forked
                kind = spark_kind(cmd, "local Spark") or ("kprio drain --follow" if proc.pid == self.proc.pid
                                                          else "kprio warm workers" if forked else "other")
                out.append((kind, proc))
        return [*out, *_common_members(self.bench)]

    def log_tail(self) -> str:
        text = self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""
        return "\n".join([*(line for _, line in self.lines[-10:]), *text.splitlines()[-20:]])

    def after_drain(self, result: ModeResult) -> None:
        """SIGTERM while a batch is in flight: exit 0, and the line names a batch the ledger has committed."""
        from kprio_core.ledger import Ledger

        bench = self.bench
        produce_bulk(bench.kafka, self.topic, {0: bench.args.sigterm_records}, Produced())
        in_flight = None
        deadline = time.monotonic() + 60
        with Ledger(self.ledger_url) as ledger:
            while time.monotonic() < deadline and in_flight is None:
                batches = ledger.batches.in_flight(self.topic.name)
                in_flight = batches[0].batch_id if batches else None
                time.sleep(0.05)
        sent = time.time()
        self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            rc = None
        self._reader.join(5)
        self._err.flush()
        err = [line for line in self.stderr_path.read_text(errors="replace").splitlines() if "SIGTERM" in line]
        last = self.lines[-1][1] if self.lines else ""
        finished = None
        if "after finishing " in last:
            finished = last.split("after finishing ", 1)[1].split(" ", 1)[0]
        state = None
        if finished:
            with Ledger(self.ledger_url) as ledger:
                state = ledger.batches.get(finished).state.value
        result.stop = {"signal_during_batch": in_flight, "exit_code": rc, "exit_s": time.time() - sent,
                       "stderr": err[:2], "last_line": last, "finished": finished, "finished_state": state,
                       "ok": rc == 0 and finished is not None and state == "committed"}
        say(f"follow: SIGTERM during {in_flight}: exit {rc} after {result.stop['exit_s']:.1f} s; {last!r}")

    def stop(self, result: ModeResult) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)
        if self.proc is not None:
            # Whatever survives of the process group (the local JVM and its workers) goes with it.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        if getattr(self, "_err", None):
            self._err.close()


class DaemonDrainer:
    """The real Dagster daemon: ``dagster dev`` on a KprioDeployment as a user deploys it (``kprio instance init``,
    the default local Spark), kprio's run launcher (``warm``) or Dagster's default one (``default``)."""

    def __init__(self, bench: Bench, root: Path, topic: TopicSettings, launcher: str = "warm") -> None:
        from tests.fixtures.dagster_dev import KprioDeployment

        self.bench, self.root, self.topic = bench, root, topic
        sets = {**bench.sets, "sensor": {**bench.sets.get("sensor", {}), "default_status": "stopped"}}
        self.config = kprio_config(root, bench.bootstrap, [topic], sets, remote_port=None)
        self.deployment = KprioDeployment(root, self.config, launcher=launcher)
        self.home = self.deployment.home
        self.ledger_url = self.config["ledger"]["url"]
        self.launcher = launcher
        self.ready: float | None = None
        self.started: float | None = None

    def prepare(self, result: ModeResult) -> None:
        self.deployment.write_config()
        self.result = result

    def start(self) -> None:
        """``dagster dev`` up, the workers warm (kprio's launcher: started with the code location), then the sensor
        turned on: the mode's clock starts there."""
        from tests.fixtures.dagster_dev import wait_until

        began = time.time()
        self.deployment.start()
        self.ready = time.time()
        if self.launcher == "warm":
            count = int(self.config.get("workers", {}).get("count", 2))
            wait_until(lambda: self.deployment.workers_warm() >= count, 300, interval_s=0.2,
                       what="the home's warm workers")
            self.result.notes.append(f"dagster dev up after {self.ready - began:.1f} s, the workers warm "
                                     f"{time.time() - began:.1f} s after its start")
            say(self.result.notes[-1])
        self.started = time.time()
        self.deployment.sensor_running(True)
        self.result.sensor_on = self.started

    def members(self) -> list[tuple[str, psutil.Process]]:
        out = []
        proc = self.deployment.proc
        seen: set[int] = set()
        for p in _tree(proc.pid if proc is not None else None) + self._pool():
            if p.pid in seen:
                continue
            seen.add(p.pid)
            cmd = _cmdline(p)
            if "dagster_webserver" in cmd or "dagster-webserver" in cmd:
                kind = "dagster webserver"
            elif "dagster._daemon" in cmd or "dagster-daemon" in cmd:
                kind = "dagster daemon"
            elif "api grpc" in cmd or "code-server" in cmd:
                kind = "dagster code servers"
            elif "workers.server" in cmd:
                kind = "kprio worker pool"
            elif "multiprocessing.forkserver" in cmd:
                kind = "kprio warm workers"
            elif "api execute_run" in cmd or "spawn_main" in cmd:
                kind = "run processes"
            elif proc is not None and p.pid == proc.pid:
                kind = "dagster dev"
            else:
                kind = spark_kind(cmd, "local Spark") or "other"
            out.append((kind, p))
        return [*out, *_common_members(self.bench)]

    def _pool(self) -> list[psutil.Process]:
        """The worker pool's processes (a session of their own, outside dagster dev's tree)."""
        found = []
        for p in psutil.process_iter(["cmdline"]):
            cmd = " ".join(p.info["cmdline"] or [])
            if "orchestration.dagster.workers.server" in cmd and str(self.home) in cmd:
                found += _tree(p.pid)
        return found

    def log_tail(self) -> str:
        return self.deployment.log_tail(40)

    def after_drain(self, result: ModeResult) -> None:
        result.ticks = self.sensor_ticks(result)

    def sensor_ticks(self, result: ModeResult) -> dict[str, Any]:
        """The sensor's ticks while it drained: interval between ticks, evaluation time, launched or skipped."""
        query = ('{ sensorOrError(sensorSelector: {repositoryLocationName: "kprio", repositoryName: '
                 '"__repository__", sensorName: "priority_lag_sensor"}) { ... on Sensor { sensorState { '
                 'ticks(limit: 2000) { timestamp endTimestamp status runIds skipReason } } } } }')
        try:
            data = self.deployment.graphql(query)
            ticks = data["sensorOrError"]["sensorState"]["ticks"]
        except Exception as err:  # noqa: BLE001 - the ticks are a detail of the report
            return {"error": str(err)}
        ticks = sorted((t for t in ticks if t["timestamp"] >= result.started), key=lambda t: t["timestamp"])
        if ticks:
            result.first_tick = ticks[0]["timestamp"]
        starts = [t["timestamp"] for t in ticks]
        gaps = [b - a for a, b in zip(starts, starts[1:])]
        evals = [t["endTimestamp"] - t["timestamp"] for t in ticks if t.get("endTimestamp")]
        launched = [t for t in ticks if t["runIds"]]
        skipped = [t for t in ticks if t["status"] == "SKIPPED"]
        reasons: dict[str, int] = defaultdict(int)
        for t in skipped:
            reason = (t["skipReason"] or "").split(";")[0]
            reasons[reason.split(" (")[0][:60]] += 1
        return {"ticks": len(ticks), "interval_median_s": median(gaps), "interval_p95_s": pct(gaps, 0.95),
                "eval_median_s": median(evals), "eval_max_s": max(evals) if evals else None,
                "launched": len(launched), "skipped": len(skipped),
                "skip_reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])[:4])}

    def stop(self, result: ModeResult) -> None:
        self.deployment.stop()


def _common_members(bench: Bench) -> list[tuple[str, psutil.Process]]:
    out = [("benchmark (producers, poller)", psutil.Process())]
    if bench.broker_pid is not None:
        with contextlib.suppress(psutil.Error):
            out.append(("broker", psutil.Process(bench.broker_pid)))
    return out


# -- the probe process ------------------------------------------------------------------------------------------


def probe_main(args: argparse.Namespace) -> None:
    """In a new process: import, instance, Spark, then tick + run per batch; timings to ``--probe-out``."""
    born = psutil.Process().create_time()
    marks: dict[str, float] = {"interpreter start": time.time() - born}
    t = time.perf_counter()

    def mark(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        marks[name] = now - t
        t = now

    import dagster as dg

    mark("import dagster")
    import pyspark  # noqa: F401

    from kprio_core.config import load_config
    from kprio_core.ledger import Ledger
    from orchestration.dagster.definitions import build_definitions
    from orchestration.dagster.drain_loop import execute
    from orchestration.dagster.instance import open_instance
    from orchestration.dagster.sensors import tick
    from orchestration.dagster.workers.pool import workers_for

    mark("import kprio, pyspark")
    config = load_config(args.probe)
    defs = build_definitions(config)
    instance = open_instance(config)
    mark("definitions + instance")
    batches = []
    with contextlib.ExitStack() as stack:
        ledger = stack.enter_context(Ledger(config.ledger.url))
        pool = stack.enter_context(workers_for(config.spark, config.workers))
        pool.ready(300)
        mark("warm workers")
        kafka = defs.resources["kafka"]
        edge = kafka.edge
        cfg = defs.resources["kprio"].config(kafka)
        for _ in range(args.probe_batches):
            t0 = time.perf_counter()
            turn = tick(instance, edge, ledger, cfg)
            if turn.partitions:
                instance.add_dynamic_partitions("kprio_batches", list(turn.partitions))
            plan_s = time.perf_counter() - t0
            if not turn.requests:
                break
            request = turn.requests[0]
            t1 = time.perf_counter()
            outcome = execute(defs, instance, request, "WARNING", config=cfg, workers=pool)
            run_s = time.perf_counter() - t1
            steps: dict[str, float] = {}
            for entry in instance.all_logs(outcome.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
                for key, value in entry.dagster_event.event_specific_data.materialization.metadata.items():
                    if key in ("drain_s", "check_s", "publish_s", "commit_s"):
                        steps[key[:-2]] = float(value.value)
            batch = ledger.batches.get(request.partition_key)
            batches.append({"batch_id": batch.batch_id, "state": batch.state.value, "records": batch.plan.records,
                            "ranges": sum(1 for r in batch.plan.ranges if r.range.count),
                            "plan_s": plan_s, "run_s": run_s, "steps": steps,
                            "run_other_s": run_s - sum(steps.values())})
            if len(batches) == 1:
                marks["first batch committed (since interpreter start)"] = time.time() - born
    instance.dispose()
    peak = psutil.Process().memory_info().rss
    Path(args.probe_out).write_text(json.dumps({"marks": marks, "batches": batches,
                                                "driver_rss_mib": round(peak / 2**20)}))


def probe_rows(probe: dict) -> dict[str, dict[str, float | None]]:
    """Per step: the cold first batch (with the process start before it) and the median of the warm ones."""
    marks, batches = probe.get("marks", {}), probe.get("batches", [])
    if not batches:
        return {}
    first, warm = batches[0], batches[1:]
    rows: dict[str, dict[str, float | None]] = {}
    for name in ("interpreter start", "import dagster", "import kprio, pyspark", "definitions + instance",
                 "warm workers"):
        rows[name] = {"cold": marks.get(name), "warm": None}
    rows["plan (sensor tick)"] = {"cold": first["plan_s"], "warm": median([b["plan_s"] for b in warm])}
    for step in ("drain", "check", "publish", "commit"):
        rows[step] = {"cold": first["steps"].get(step), "warm": median([b["steps"].get(step, 0) for b in warm])}
    rows["run overhead (Dagster, take, lease, ledger)"] = {
        "cold": first["run_other_s"], "warm": median([b["run_other_s"] for b in warm])}
    warm_total = median([b["plan_s"] + b["run_s"] for b in warm])
    cold_total = sum(v["cold"] or 0 for v in rows.values())
    rows["total"] = {"cold": cold_total, "warm": warm_total}
    return rows


# -- report ----------------------------------------------------------------------------------------------------


def report(bench: Bench, results: dict[str, ModeResult], machine: dict) -> dict[str, Any]:
    """The tables (printed unless --json) and the JSON document."""
    from tabulate import tabulate

    args = bench.args
    doc: dict[str, Any] = {"options": vars(args), "machine": machine, "raw_consume": bench.raw, "modes": {},
                           "probes": bench.probes}
    out: list[str] = []

    def table(rows, headers, title):
        out.append(f"\n{title}\n")
        out.append(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))

    out.append(f"latency benchmark: {args.bulk_p0:,} p0 + {args.bulk_p1:,} p1 bulk records (~{VALUE_BYTES} B), "
               f"p2 at {args.rate:g}/s for {args.urgent_s:g} s; {PRIORITIES} priorities x {PARTITIONS} partitions; "
               f"{machine['cpus']} CPUs, load average before {machine['load_before']}, after {machine.get('load_after')}")
    for mode, r in results.items():
        lat = r.latency
        rows = []
        for key in (f"p{URGENT}", f"p{URGENT} during bulk", "p1", "p0"):
            if key not in lat:
                continue
            p = int(key[1])
            lag = r.zero_lag.get(p) if " " not in key else None
            rows.append([key, f"{lat[key]['n']:,}", fmt(lat[key]["p50"]), fmt(lat[key]["p95"]), fmt(lat[key]["max"]),
                         str(r.bulk["batches_by_priority"].get(p, 0)) if " " not in key else "",
                         fmt(lag, 1), str(lat[key]["not_committed"] or "")])
        table(rows, ["priority", "records", "p50 s", "p95 s", "max s", "batches", "zero lag after start s",
                     "not committed"],
              f"== {mode}: produce -> committed latency ({', '.join(f'{k}={v}' for k, v in r.settings.items())})")
        b = r.bulk
        facts = [
            ["drainer start -> ready (follow: process spawned; daemon: code location loaded)",
             f"{fmt(r.ready and r.ready - r.started, 1)} s"],
            ["drainer start -> first batch planned (first tick)", f"{fmt(r.bulk.get('first_plan_s'), 1)} s"],
            ["drainer start -> first commit", f"{fmt(r.first_commit and r.first_commit - r.started, 1)} s"],
            ["batches committed (p2 only / p2 with bulk)",
             f"{b['batches']} ({b['urgent_only_batches']} / {b['mixed_urgent_batches']}); "
             f"not committed: {b['not_committed']}"],
            ["most batches in flight at once", str(b["max_in_flight_at_once"])],
            ["records per batch (median; first batch)",
             f"{fmt(b['records_per_batch_median'], 0)}; {fmt(r.steps.get('records', {}).get('first'), 0)}"],
            ["bulk throughput (p0+p1, first plan -> last bulk commit)",
             f"{fmt(b['rate'], 0)} records/s over {fmt(b['span_s'], 1)} s"],
            ["bulk throughput after the first batch (its commit -> last bulk commit)",
             f"{fmt(b['warm_rate'], 0)} records/s ({b['warm_records']:,} records in {fmt(b['warm_span_s'], 1)} s)"],
            ["bulk throughput during the urgent window",
             f"{fmt(b['rate_in_window'], 0)} records/s ({b['in_urgent_window']:,} records in "
             f"{fmt(b['window_s'], 1)} s)"],
            [f"idle batch of {SMALL_BATCH:,} records, produce -> committed (each)",
             ", ".join(fmt(s["latency_s"]) for s in r.small) + " s"],
            ["commit poll (median call, samples, errors)",
             f"{r.poll.get('median_call_s')} s, {r.poll.get('samples')}, {r.poll.get('errors')}"],
        ]
        if r.stop:
            s = r.stop
            facts.append(["SIGTERM during a batch", f"{'ok' if s['ok'] else 'NOT OK'}: signal during "
                          f"{s['signal_during_batch']}, exit {s['exit_code']} after {s['exit_s']:.1f} s, "
                          f"{s['last_line']!r} (ledger: {s['finished_state']})"])
        if r.ticks and "error" not in r.ticks:
            t = r.ticks
            facts.append(["sensor ticks (interval median / p95, evaluation median / max)",
                          f"{fmt(t['interval_median_s'])} / {fmt(t['interval_p95_s'])} s, "
                          f"{fmt(t['eval_median_s'])} / {fmt(t['eval_max_s'])} s; {t['ticks']} ticks, "
                          f"{t['launched']} launched, {t['skipped']} skipped {t['skip_reasons']}"])
        table(facts, ["", ""], f"-- {mode}: batches and throughput")
        st = r.steps
        names = [("queue", "run queue (created -> dequeued)"), ("launch", "run process start (-> RUN_START)"),
                 ("setup", "run setup (RUN_START -> step start)"), ("drain", "drain_s"), ("check", "check_s"),
                 ("publish", "publish_s"), ("commit", "commit_s"), ("op_other", "rest of the op"),
                 ("run", "run created -> ended"), ("gap", "between runs (tick, in the follow loop)"),
                 ("batch", "batch planned -> commit seen")]
        table([[label, fmt(st.get(k, {}).get("first")), fmt(st.get(k, {}).get("median"))] for k, label in names],
              ["step", "first batch s", "median of the others s"], f"-- {mode}: seconds per step of a batch")
        table([[p["kind"], str(p["processes"] or ""), fmt(p["peak_rss_mib"], 0), fmt(p["largest_mib"], 0),
                fmt(p["cpu_s"], 1)] for p in r.processes], ["process kind", "processes", "peak RSS MiB (sum)", "largest MiB",
                                       "CPU s (sampled)"], f"-- {mode}: processes")
        doc["modes"][mode] = {k: v for k, v in r.__dict__.items() if k != "batches"}
        doc["modes"][mode]["batches"] = [{k: v for k, v in row.items() if k != "ranges"} for row in r.batches]

    if len(results) and any(r.urgent_breakdown for r in results.values()):
        labels = dict((key, label) for label, key in BREAKDOWN)
        keys = [key for _, key in BREAKDOWN] + ["total (mean latency)"]
        rows = [[labels.get(k, k), *(fmt(r.urgent_breakdown.get(k)) for r in results.values())] for k in keys]
        table(rows, ["where an urgent record's time goes (mean s)", *results], "== urgent (p2) latency by step")

    probe_tables = {kind: probe_rows(p) for kind, p in bench.probes.items() if "error" not in p}
    if probe_tables:
        names = list(next(iter(probe_tables.values())))
        rows = []
        for name in names:
            row = [name]
            for kind, t in probe_tables.items():
                row += [fmt(t.get(name, {}).get("cold")), fmt(t.get(name, {}).get("warm"))]
            rows.append(row)
        headers = ["step"] + [f"{k} {w}" for k in probe_tables for w in ("cold s", "warm s")]
        recs = {k: p["batches"][0]["records"] for k, p in bench.probes.items() if p.get("batches")}
        table(rows, headers, f"== fixed cost of a batch of {SMALL_BATCH:,} records ({recs}), new process: "
                             "cold = first batch, warm = median of the next ones")

    summary = summary_rows(bench, results, probe_tables)
    table(summary, ["figure", "target", "measured", "met"], "== summary against issue 10's targets")
    doc["summary"] = [dict(zip(["figure", "target", "measured", "met"], row)) for row in summary]
    if not args.json:
        print("\n".join(out))
    return doc


def summary_rows(bench: Bench, results: dict[str, ModeResult], probes: dict) -> list[list[str]]:
    rows = []
    for mode, r in results.items():
        p50_t, p95_t = TARGETS[mode]
        lat = r.latency.get(f"p{URGENT} during bulk", {})
        if not lat.get("n"):
            lat = r.latency.get(f"p{URGENT}", {})
        p50, p95 = lat.get("p50"), lat.get("p95")
        met = p50 is not None and p95 is not None and p50 <= p50_t and p95 <= p95_t
        what = {"follow": "kprio drain --follow", "daemon": "Dagster daemon, warm workers",
                "daemon-default": "Dagster daemon, default run launcher"}[mode]
        rows.append([f"urgent p50 / p95 produce -> commit during the bulk drain, {what}",
                     f"<= {p50_t:g} / {p95_t:g} s", f"{fmt(p50)} / {fmt(p95)} s", "yes" if met else "NO"])
    for kind, t in probes.items():
        total = t.get("total", {})
        where = "local Spark" if kind == "local" else "Spark Connect (warm server)"
        warm = total.get("warm")
        rows.append([f"warm fixed cost of a {SMALL_BATCH:,}-record batch (plan + drain + checks + commit), {where}",
                     f"<= {TARGETS['warm fixed cost']:g} s", f"{fmt(warm)} s",
                     "yes" if warm is not None and warm <= TARGETS["warm fixed cost"] else "NO"])
        cold = total.get("cold")
        rows.append([f"cold first batch of a process (start -> committed), {where}",
                     f"<= {TARGETS['cold first batch']:g} s", f"{fmt(cold)} s",
                     "yes" if cold is not None and cold <= TARGETS["cold first batch"] else "NO"])
    daemon = results.get("daemon")
    if daemon and daemon.small:
        vals = [s["latency_s"] for s in daemon.small if s["latency_s"] is not None]
        rows.append([f"{SMALL_BATCH:,}-record batch on the idle daemon, produce -> committed (median)",
                     "(context)", f"{fmt(median(vals))} s", ""])
    follow = results.get("follow") or next(iter(results.values()), None)
    if follow and bench.raw and follow.bulk.get("warm_rate"):
        ratio = follow.bulk["warm_rate"] / bench.raw["rate"]
        rows.append([f"drain throughput after the first batch ({follow.mode}, plan + checks + commit included) / "
                     "raw consume", f">= {TARGETS['drain / raw']:g}",
                     f"{ratio:.2f} ({follow.bulk['warm_rate']:,.0f} / {bench.raw['rate']:,.0f} records/s)",
                     "yes" if ratio >= TARGETS["drain / raw"] else "NO"])
    if follow and bench.raw and follow.bulk.get("rate"):
        ratio = follow.bulk["rate"] / bench.raw["rate"]
        rows.append(["the same with the first (cold) batch, from its plan", "(context)",
                     f"{ratio:.2f} ({follow.bulk['rate']:,.0f} / {bench.raw['rate']:,.0f} records/s)", ""])
    return rows


# -- main -------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bulk-p0", type=int, default=200_000, help="priority-0 backlog (default 200,000)")
    parser.add_argument("--bulk-p1", type=int, default=20_000, help="priority-1 backlog (default 20,000)")
    parser.add_argument("--urgent-s", type=float, default=60.0, help="seconds of priority-2 records (default 60)")
    parser.add_argument("--rate", type=float, default=5.0, help="priority-2 records per second (default 5)")
    parser.add_argument("--mode", choices=("follow", "daemon", "daemon-default", "both", "all"), default="both",
                        help="both: follow and daemon; all: follow, daemon and daemon-default")
    parser.add_argument("--small-batches", type=int, default=3,
                        help=f"idle batches of {SMALL_BATCH:,} records after the drain (default 3)")
    parser.add_argument("--small-gap-s", type=float, default=3.0, help="idle seconds before each small batch")
    parser.add_argument("--probe-batches", type=int, default=6,
                        help=f"batches of {SMALL_BATCH:,} records in the fixed-cost probe (default 6; 0: none)")
    parser.add_argument("--sigterm-records", type=int, default=30_000,
                        help="records produced before the SIGTERM check of --follow (default 30,000)")
    parser.add_argument("--poll-s", type=float, default=0.1, help="committed-offset poll interval (default 0.1)")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="longest wait for a commit or zero lag")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="a kprio.yaml setting for every mode, e.g. planner.target_batch_s=1 (repeatable)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, ledgers, homes)")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the tables")
    parser.add_argument("--json-file", help="also write the JSON document to this file")
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    parser.add_argument("--probe-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        probe_main(args)
        return

    from orchestration.services.broker import EmbeddedBroker

    machine = {"cpus": psutil.cpu_count(), "load_before": tuple(round(x, 2) for x in os.getloadavg())}
    tmp = Path(tempfile.mkdtemp(prefix="kprio-latency-"))
    say(f"working in {tmp}")
    broker = EmbeddedBroker(tmp / "broker", port=None, start_timeout_s=60).start()
    results: dict[str, ModeResult] = {}
    try:
        bench = Bench(args, tmp, broker.bootstrap, broker.status().pid)
        modes = {"both": ("follow", "daemon"), "all": ("follow", "daemon", "daemon-default")}.get(args.mode, (args.mode,))
        for mode in modes:
            results[mode] = bench.run_mode(mode)
            if mode == "follow" and args.probe_batches:
                bench.probe("local", None)
        if args.mode.startswith("daemon") and args.probe_batches and "local" not in bench.probes:
            bench.probe("local", None)
        machine["load_after"] = tuple(round(x, 2) for x in os.getloadavg())
        doc = report(bench, results, machine)
        if args.json:
            print(json.dumps(doc, indent=2, default=str))
        if args.json_file:
            Path(args.json_file).write_text(json.dumps(doc, indent=2, default=str))
    finally:
        broker.stop()
        if args.keep:
            say(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
