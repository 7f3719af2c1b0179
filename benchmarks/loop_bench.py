"""Benchmark: the speed of the loop, every figure of the speed-of-the-loop issue in one run and one table.

One command (``python benchmarks/loop_bench.py``; add ``--daemon`` for the Dagster daemon's rows,
which take a few minutes more) runs, one after the other, on the embedded broker (or the
cluster in KPRIO_BOOTSTRAP_SERVERS) with the default configuration and ``local[2]``:

1. ``benchmarks/latency_bench.py`` over the issue's workload: 900,000 priority-0 and 100,000
   priority-1 records of ~200 B up front (3 priorities x 4 partitions), then the drainer while
   priority-2 records arrive at 5/s for 40 s: ``kprio drain --follow``; with ``--daemon`` also the
   Dagster daemon as a user deploys it (``kprio instance init``, ``dagster dev``, the default local
   Spark; the sensor turned on once the warm workers are warm) on kprio's warm workers, and the same
   with Dagster's default run launcher (a process per run). It measures, in the same run, the reference:
   the same 1,000,000 records read by plain confluent-kafka consumers, one per partition, in parallel
   processes (every record's key, value, timestamp and headers touched);
2. ``benchmarks/plan_scale_bench.py``: ``kprio plan`` as a new process and one tick over 192, 1,920
   and 19,200 partitions (``--sizes 1,10`` leaves the last out: it takes about four minutes).

and prints one table: figure, reference, kprio, ratio, goal, met. The sub-benchmarks' own tables
(where an urgent record's time goes, the steps of a batch, every process's peak RSS) are in their
logs, kept with ``--keep-logs DIR``. Figures, never a test: these machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOALS = {"bulk": (("follow", 0.7), ("daemon", 0.5), ("daemon-default", None)),
         "urgent": (("follow", (1.0, 2.0)), ("daemon", (3.0, 5.0)), ("daemon-default", None))}
"""The warm-runs issue's goals per mode (None: a row for comparison, Dagster's default run launcher)."""
LABELS = {"follow": "kprio drain --follow", "daemon": "Dagster daemon, warm workers",
          "daemon-default": "Dagster daemon, default run launcher"}
RSS_BEFORE_MIB = {"local Spark JVM": 529, "local Spark python workers": 982}
"""Peak RSS of the same follow run before the loop ran batches side by side (commit 9c4677b, 2026-11-26)."""


def run(script: str, args: list[str], log: Path) -> None:
    print(f"running {script} {' '.join(args)} (log: {log})", flush=True)
    with log.open("w") as out:
        done = subprocess.run([sys.executable, str(HERE / script), *args], stdout=out, stderr=subprocess.STDOUT,
                              check=False)
    if done.returncode != 0:
        sys.exit(f"{script} failed with exit status {done.returncode}: see {log}")


def rows(latency: dict, scale: list[dict]) -> list[list[str]]:
    """The table's rows: figure, reference, kprio, ratio, goal, met."""
    out: list[list[str]] = []
    raw = latency["raw_consume"]
    reference = f"{raw['rate']:,.0f} rec/s ({raw.get('consumers', '?')} consumers in parallel)"
    for mode, goal in GOALS["bulk"]:
        m = latency["modes"].get(mode)
        if not m:
            continue
        rate = m["bulk"]["warm_rate"]
        ratio = rate / raw["rate"]
        out.append([f"bulk throughput, first commit -> zero lag ({LABELS[mode]})", reference, f"{rate:,.0f} rec/s",
                    f"{ratio:.2f}", f">= {goal}" if goal else "", _met(ratio >= goal) if goal else ""])
    for mode, goals in GOALS["urgent"]:
        m = latency["modes"].get(mode)
        if not m:
            continue
        lat = m["latency"]["p2 during bulk"]
        p50, p95 = lat["p50"], lat["p95"]
        shown = "none committed" if p50 is None else f"{p50:.2f} / {p95:.2f} s"
        out.append([f"urgent produce -> commit while the bulk drains, p50 / p95 ({LABELS[mode]}, {lat['n']} records)",
                    "", shown, "", f"<= {goals[0]:g} / {goals[1]:g} s" if goals else "",
                    _met(p50 is not None and p50 <= goals[0] and p95 <= goals[1]) if goals else ""])
    follow = latency["modes"]["follow"]
    first = follow["first_commit"] - follow["started"]
    out.append(["first commit after kprio drain starts (local Spark)", "", f"{first:.1f} s", "", "<= 10 s",
                _met(first <= 10)])
    for mode in ("daemon", "daemon-default"):
        m = latency["modes"].get(mode)
        if not m or not m.get("first_tick"):
            continue
        first = m["first_commit"] - m["first_tick"]
        goal = 5.0 if mode == "daemon" else None
        out.append([f"first commit after the sensor's first evaluation ({LABELS[mode]})", "", f"{first:.1f} s", "",
                    f"<= {goal:g} s" if goal else "", _met(first <= goal) if goal else ""])
    goal_size = next((size for size in scale if size["partitions"] == 1920), None)
    for size in scale:
        at_goal = size is goal_size  # the goal's size; the others show how the cost grows
        took = size["plan_process_s"]
        kprio = f"{'failed' if took is None else f'{took:.2f} s'} (one tick {size['tick_s']:.3f} s)"
        if at_goal:
            out.append([f"kprio plan, new process, {size['partitions']:,} partitions", "", kprio, "", "<= 1 s",
                        _met(took is not None and took <= 1.0)])
            continue
        # Linear: a larger size's tick costs no more per partition than the goal size's (20% for noise).
        per = size["tick_s"] / size["partitions"]
        ratio = per / (goal_size["tick_s"] / goal_size["partitions"]) if goal_size else None
        larger = goal_size is not None and size["partitions"] > goal_size["partitions"]
        out.append([f"kprio plan, new process, {size['partitions']:,} partitions",
                    "tick per partition at 1,920" if larger else "", kprio,
                    f"{ratio:.2f}" if larger and ratio is not None else "",
                    "linear (<= 1.2)" if larger else "", _met(ratio <= 1.2) if larger and ratio is not None else ""])
    rss = {p["kind"]: p["peak_rss_mib"] for p in follow["processes"]}
    for kind, before in RSS_BEFORE_MIB.items():
        if kind in rss:
            out.append([f"peak RSS, {kind} (follow)", f"{before:,} MiB (before)", f"{rss[kind]:,} MiB",
                        f"{rss[kind] / before:.2f}", "no higher", _met(rss[kind] <= before)])
    return out


def _met(ok: bool) -> str:
    return "yes" if ok else "NO"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--daemon", action="store_true",
                        help="also run the Dagster daemon's modes: warm workers and the default run launcher")
    parser.add_argument("--sizes", default="1,10,100",
                        help="plan_scale_bench's sizes (logical topics; default 1,10,100)")
    parser.add_argument("--keep-logs", help="directory for the sub-benchmarks' logs and JSON (default: a temp dir)")
    args = parser.parse_args()
    logs = Path(args.keep_logs or tempfile.mkdtemp(prefix="kprio-loop-bench-"))
    logs.mkdir(parents=True, exist_ok=True)
    run("latency_bench.py", ["--mode", "all" if args.daemon else "follow", "--bulk-p0", "900000", "--bulk-p1",
                             "100000", "--urgent-s", "40", "--probe-batches", "0", "--small-batches", "0",
                             "--json-file", str(logs / "latency.json")], logs / "latency.log")
    run("plan_scale_bench.py", ["--sizes", args.sizes, "--json-file", str(logs / "scale.json")], logs / "scale.log")
    latency = json.loads((logs / "latency.json").read_text())
    scale = json.loads((logs / "scale.json").read_text())
    from tabulate import tabulate

    print()
    print(tabulate(rows(latency, scale), headers=["figure", "reference", "kprio", "ratio", "goal", "met"],
                   tablefmt="github", disable_numparse=True))
    machine = latency.get("machine", {})
    print(f"\nmachine: {machine}; logs and JSON in {logs}")


if __name__ == "__main__":
    main()
