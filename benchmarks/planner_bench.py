"""Planner timing: 3 priorities x 8 / 64 / 512 / 4096 partitions each, median of repeats.

Run: ``python benchmarks/planner_bench.py [--repeats 15]``. A script, not a timed test: timings
depend on the machine. Target: under 20 ms at 512 partitions, growing no worse than linearly.

Each snapshot has skewed backlogs (most partitions a few hundred records, one in ten a hundred
thousand), a quarter of the partitions with a batch in flight, and avg record sizes; the budget
is 50 000 records. Four planner calls are timed: lag-aware without a byte budget, lag-aware
with a byte budget that binds (the byte search runs), flipkart mode with a full history, and
lag-aware steered by objectives (10 s / 60 s / 3,600 s, a batch every 4 s) over the time marks a
tick reads (:func:`kprio_core.deadlines.mark_times`, offsets spread evenly over each backlog).
"no-GC" repeats the lag-aware call with Python's cyclic garbage collector paused: the gap at
4096 partitions is the collector walking the ~30k objects a plan allocates, not the algorithm
(sorting aside, every step is linear in partitions); "us/part" is lag-aware time per partition.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import random
import statistics
import time

from kprio_core.burst import PollHistory
from kprio_core.deadlines import Objectives, mark_times
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.snapshot import LagSnapshot, PartitionLag
from kprio_core.planner import Budget, plan_batch
from kprio_core.quota import exponential_quotas

N_PRIORITIES = 3
RECORDS = 50_000
SIZES = (8, 64, 512, 4096)
NOW_MS = 10_000_000
OBJECTIVES = Objectives.of({2: 10, 1: 60, 0: 3600}, every_s=4)


def scenario(partitions: int, seed: int = 7) -> tuple[LagSnapshot, list[OffsetRange]]:
    rng = random.Random(seed)
    parts, reserved = [], []
    for prio in range(N_PRIORITIES):
        for p in range(partitions):
            committed = rng.randint(0, 10_000)
            backlog = rng.randint(100_000, 200_000) if rng.random() < 0.1 else rng.randint(0, 500)
            lag = PartitionLag(
                f"orders-{prio}", p, prio, log_start=0, high_watermark=committed + backlog,
                committed=committed, avg_record_bytes=rng.choice([0.0, 180.0, 512.5, 2048.0]),
                oldest_pending_ms=rng.choice([None, rng.randint(0, 10**6)]),
            )
            backlog_times = mark_times(OBJECTIVES, NOW_MS)[prio]
            lag = dataclasses.replace(lag, times=tuple(
                (t, committed + backlog * (k + 1) // (len(backlog_times) + 1)) for k, t in enumerate(backlog_times)))
            parts.append(lag)
            if rng.random() < 0.25 and backlog:
                reserved.append(OffsetRange(lag.topic, p, committed, committed + rng.randint(1, backlog)))
    return LagSnapshot.of("orders", N_PRIORITIES, parts, taken_at_ms=NOW_MS), reserved


def median_ms(call, repeats: int, collect: bool = True) -> tuple[float, float]:
    """Median (wall, CPU) time of ``call`` in ms; ``collect=False`` pauses Python's cyclic GC meanwhile.

    CPU time is what an idle machine's wall time would be; on a shared, busy machine the wall
    time also counts the time other processes held the cores.
    """
    call()  # warm-up
    walls, cpus = [], []
    gc.collect()
    if not collect:
        gc.disable()
    try:
        for _ in range(repeats):
            w0, c0 = time.perf_counter(), time.process_time()
            call()
            cpus.append((time.process_time() - c0) * 1000)
            walls.append((time.perf_counter() - w0) * 1000)
    finally:
        gc.enable()
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()

    quotas = exponential_quotas(N_PRIORITIES, RECORDS)
    history = PollHistory.from_counts({2: [quotas[2]] * 6, 1: [100] * 6, 0: [quotas[0]] * 6}, quotas)
    header = (
        f"{'partitions':>10} {'total':>6} {'wall ms':>8} | {'CPU ms':>7} {'+bytes':>7} {'flipkart':>9}"
        f" {'no-GC':>7} {'us/part':>8} {'objectives':>10}"
    )
    print("3 priorities x N partitions each; median of", args.repeats, "repeats; CPU columns in ms")
    print(header)
    print("-" * len(header))
    for size in SIZES:
        snap, reserved = scenario(size)
        total = len(snap.partitions)
        byte_budget = Budget(RECORDS, bytes=4_000_000)
        lag_wall, lag = median_ms(lambda: plan_batch(snap, Budget(RECORDS), reserved=reserved), args.repeats)
        _, lagb = median_ms(lambda: plan_batch(snap, byte_budget, reserved=reserved), args.repeats)
        _, flip = median_ms(
            lambda: plan_batch(snap, Budget(RECORDS), mode="flipkart", history=history, reserved=reserved),
            args.repeats,
        )
        _, nogc = median_ms(
            lambda: plan_batch(snap, Budget(RECORDS), reserved=reserved), args.repeats, collect=False
        )
        _, steered = median_ms(lambda: plan_batch(snap, Budget(RECORDS), reserved=reserved, objectives=OBJECTIVES),
                               args.repeats)
        plan = plan_batch(snap, byte_budget, reserved=reserved)
        assert plan.records <= RECORDS and plan.est_bytes <= 4_000_000
        print(
            f"{size:>10} {total:>6} {lag_wall:>8.2f} | {lag:>7.2f} {lagb:>7.2f} {flip:>9.2f}"
            f" {nogc:>7.2f} {1000 * lag / total:>8.2f} {steered:>10.2f}"
        )

if __name__ == "__main__":
    main()
