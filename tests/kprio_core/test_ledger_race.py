"""The ledger under real processes: two racing writers on one SQLite file, and a crash mid-transaction."""

from __future__ import annotations

import multiprocessing
import random
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from kprio_core.errors import InvalidTransition, RangeConflict
from kprio_core.ledger import BatchState, Ledger
from kprio_core.offsets import OffsetRange
from kprio_core.drain_plan import DrainPlan, PlannedRange

ATTEMPTS = 300
"""Plans each racing process tries to record."""


def plan_of(*ranges: OffsetRange) -> DrainPlan:
    return DrainPlan(
        logical_topic="orders",
        mode="lag-aware",
        record_budget=1000,
        byte_budget=None,
        quotas={2: 1000},
        grants={2: 1000},
        ranges=tuple(PlannedRange(2, r, est_bytes=10 * r.count) for r in ranges),
    )


def race_worker(url: str, seed: int, barrier, results) -> None:  # noqa: ANN001 (multiprocessing proxies)
    """Record overlapping plans ATTEMPTS times; finish, fail or abandon some so the space frees up."""
    outcomes: Counter[str] = Counter()
    errors: list[str] = []
    rng = random.Random(seed)
    ledger = Ledger(url)
    barrier.wait(timeout=120)
    for _ in range(ATTEMPTS):
        spans = [
            OffsetRange("orders-2", rng.randrange(2), start, start + rng.randrange(1, 12))
            for start in sorted(rng.sample(range(0, 60), 2))
        ]
        if spans[0].overlaps(spans[1]):
            spans = spans[:1]
        try:
            batch = ledger.record_plan(plan_of(*spans))
            outcomes["recorded"] += 1
        except RangeConflict:
            outcomes["conflict"] += 1
            continue
        except Exception as err:  # noqa: BLE001 (any other error is what the test looks for)
            errors.append(f"record_plan: {err!r}")
            continue
        try:
            roll = rng.random()
            if roll < 0.4:
                ledger.mark_failed(batch.batch_id, "race: failed")
            elif roll < 0.75:
                ledger.mark_drained(batch.batch_id, {"ranges": []})
                ledger.mark_checked(batch.batch_id, {})
                ledger.mark_committed(batch.batch_id, {})
            if rng.random() < 0.3 and (flying := ledger.in_flight("orders")):
                ledger.abandon(rng.choice(flying).batch_id, "race: abandoned")
        except InvalidTransition:
            outcomes["lost a finishing race"] += 1  # the other process failed that batch first
        except Exception as err:  # noqa: BLE001
            errors.append(f"transition: {err!r}")
    ledger.close()
    results.put((seed, dict(outcomes), errors))


def assert_disjoint(ranges: list[OffsetRange], when: str) -> None:
    ordered = sorted(ranges)
    for a, b in zip(ordered, ordered[1:]):
        assert not a.overlaps(b), f"{when}: {a} and {b} are both in flight"


def race(url: str, seeds: tuple[int, int]) -> Counter:
    """Two spawned processes record plans against ``url`` at once; their outcomes, checked and added up."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(len(seeds)), ctx.Queue()
    workers = [ctx.Process(target=race_worker, args=(url, seed, barrier, results)) for seed in seeds]
    for w in workers:
        w.start()
    try:
        reports = [results.get(timeout=300) for _ in workers]
    finally:
        for w in workers:
            w.join(timeout=60)
            if w.is_alive():
                w.kill()
    assert [w.exitcode for w in workers] == [0] * len(seeds)
    for seed, outcomes, errors in reports:
        assert errors == [], f"process {seed} saw errors other than RangeConflict (e.g. database is locked)"
        assert outcomes.get("recorded", 0) + outcomes.get("conflict", 0) == ATTEMPTS
    totals = sum((Counter(o) for _, o, _ in reports), Counter())
    assert totals["recorded"] > 10 and totals["conflict"] > 10, f"the processes did not really race: {totals}"
    return totals


@pytest.mark.slow
def test_two_processes_racing_never_hold_the_same_offsets(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    Ledger(url).close()  # tables exist before the race, so the race is about reservations
    totals = race(url, seeds=(1, 2))

    with Ledger(url) as ledger:
        assert_disjoint(ledger.reserved_ranges("orders"), "at the end")
        recorded = ledger.batches()
        assert sorted(int(b.batch_id[2:]) for b in recorded) == list(range(1, totals["recorded"] + 1))
        # Replay the event log in commit order (SQLite writes one transaction at a time, so the
        # event keys are that order): the no-overlap invariant held after every single commit.
        plans = {b.batch_id: b.plan.offset_ranges() for b in recorded}
        flying: set[str] = set()
        for event in ledger.events(logical_topic="orders"):
            (flying.add if event.to_state.in_flight else flying.discard)(event.batch_id)
            assert_disjoint([r for batch_id in flying for r in plans[batch_id]], f"after event {event.seq}")
        assert flying == {b.batch_id for b in ledger.in_flight("orders")}


CRASH_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from kprio_core.ledger import Ledger, ledger as module
    from kprio_core.drain_plan import DrainPlan

    url, point, plan_json = sys.argv[1:4]
    led = Ledger(url)
    if point == "after_drained":
        batch = led.record_plan(DrainPlan.from_json(plan_json))
    real = getattr(module, "_insert_ranges" if point == "record_plan" else "_replace_drained")

    def write_then_die(*args):
        real(*args)   # the rows are written inside the open transaction ...
        os._exit(17)  # ... and the process dies before COMMIT

    setattr(module, real.__name__, write_then_die)
    if point == "record_plan":
        led.record_plan(DrainPlan.from_json(plan_json))
    else:
        led.mark_drained(batch.batch_id, {"ranges": [{"topic": "orders-2", "records": 10, "bytes": 1000}]})
    """
)


@pytest.mark.parametrize(
    ("point", "why"),
    [
        ("record_plan", "batch row and ranges written, not committed: no batch, nothing reserved"),
        ("after_drained", "drained numbers written, not committed: batch still planned, no average"),
    ],
)
def test_a_crash_inside_a_transaction_leaves_the_last_committed_truth(tmp_path: Path, point: str, why: str):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    plan = plan_of(OffsetRange("orders-2", 0, 0, 10))
    died = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, url, point, plan.to_json()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert died.returncode == 17, died.stderr
    with Ledger(url, busy_timeout_s=5) as ledger:
        if point == "record_plan":
            assert ledger.batches() == [] and ledger.reserved_ranges("orders") == []
            assert ledger.record_plan(plan).batch_id == "b-000001", "the database is neither locked nor half-written"
        else:
            batch = ledger.get("b-000001")
            assert (batch.state, batch.drain_stats) == (BatchState.PLANNED, None)
            assert ledger.avg_record_bytes("orders") == {}
            assert ledger.reserved_ranges("orders") == [OffsetRange("orders-2", 0, 0, 10)]
            assert ledger.abandon(batch.batch_id, "run died while marking drained").state is BatchState.FAILED
