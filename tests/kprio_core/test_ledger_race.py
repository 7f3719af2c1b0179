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

from kprio_core.errors import InvalidTransition, LeaseLost, RangeConflict
from kprio_core.ledger import Batch, BatchState, Ledger
from kprio_core.model.drain_plan import DrainPlan, PlannedRange
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import CheckReport, CommitReport, DrainResult, RangeStats

S = BatchState
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


def drained(batch_id: str, attempt: int, plan: DrainPlan) -> DrainResult:
    """A complete drain of every range of ``plan``."""
    stats = tuple(RangeStats(p.priority, p.range, output=p.range.count, dead=0, distinct=p.range.count,
                             first=p.range.start, last=p.range.end - 1, bytes=10 * p.range.count)
                  for p in plan.ranges)
    return DrainResult(batch_id, attempt, plan.logical_topic, stats, staging="/staging", seconds=0.1)


def finish(ledger: Ledger, batch: Batch) -> None:
    ledger.moves.mark_drained(batch.batch_id, drained(batch.batch_id, batch.attempts, batch.plan))
    ledger.moves.mark_checked(batch.batch_id, CheckReport(()))
    ledger.moves.mark_committed(batch.batch_id, CommitReport())


def race_worker(url: str, seed: int, barrier, results) -> None:  # noqa: ANN001 (multiprocessing proxies)
    """Record overlapping plans ATTEMPTS times; finish, fail, retry or give up some so the space frees up."""
    outcomes: Counter[str] = Counter()
    errors: list[str] = []
    rng = random.Random(seed)
    ledger = Ledger(url)
    barrier.wait(timeout=120)
    for _ in range(ATTEMPTS):
        try:
            if rng.random() < 0.5 and (holds := ledger.batches.holds("orders")):
                first = min(holds, key=lambda h: h.start)  # the hold no other hold waits behind
                finish(ledger, ledger.attempts.retry(first.batch_id, reason="race: retry"))
        except (InvalidTransition, RangeConflict, LeaseLost):
            outcomes["lost a race"] += 1  # the other process retried or moved that batch first
        except Exception as err:  # noqa: BLE001 (any other error is what the test looks for)
            errors.append(f"retry: {err!r}")
        # As a planner does, from where the partition's committed offset stands (the ledger refuses a plan below it).
        committed = {tp: b.committed or 0 for tp, b in ledger.beliefs.of("orders").items()}
        spans = []
        for start in sorted(rng.sample(range(0, 60), 2)):
            partition = rng.randrange(2)
            base = committed.get(("orders-2", partition), 0)
            spans.append(OffsetRange("orders-2", partition, base + start, base + start + rng.randrange(1, 12)))
        if spans[0].overlaps(spans[1]):
            spans = spans[:1]
        try:
            batch = ledger.batches.record_plan(plan_of(*spans))
            outcomes["recorded"] += 1
        except RangeConflict:
            outcomes["conflict"] += 1
            continue
        except Exception as err:  # noqa: BLE001
            errors.append(f"record_plan: {err!r}")
            continue
        try:
            roll = rng.random()
            if roll < 0.2:
                ledger.moves.mark_failed(batch.batch_id, "race: failed", retry_at=None)
            elif roll < 0.8:
                finish(ledger, batch)
            if rng.random() < 0.3 and (flying := ledger.batches.in_flight("orders")):
                ledger.moves.mark_failed(rng.choice(flying).batch_id, "race: given up", retry_at=None)
        except (InvalidTransition, RangeConflict, LeaseLost):
            outcomes["lost a race"] += 1  # the other process moved that batch first
        except Exception as err:  # noqa: BLE001
            errors.append(f"transition: {err!r}")
    ledger.close()
    results.put((seed, dict(outcomes), errors))


def assert_disjoint(ranges: list[OffsetRange], when: str) -> None:
    ordered = sorted(r for r in ranges if r.count)
    for a, b in zip(ordered, ordered[1:]):
        assert not a.overlaps(b), f"{when}: {a} and {b} are both taken"


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
        assert errors == [], f"process {seed} saw errors other than lost races (e.g. database is locked)"
        assert outcomes.get("recorded", 0) + outcomes.get("conflict", 0) == ATTEMPTS
    totals = sum((Counter(o) for _, o, _ in reports), Counter())
    assert totals["recorded"] > 10 and totals["conflict"] > 10, f"the processes did not really race: {totals}"
    return totals


def assert_never_taken_twice(ledger: Ledger, *, commit_order: bool) -> None:
    """Replay the event log: no offset was ever in two batches in flight or holding (failed).

    ``commit_order``: the event keys are commit order (SQLite writes one transaction at a time),
    so the check holds after every event. Else (Postgres sequences give insert order) it is made
    when a batch takes ranges: a release can only appear earlier than it committed, never later,
    so any overlap seen then is real.
    """
    batches = ledger.batches.find()
    ranges = {b.batch_id: b.plan.offset_ranges() for b in batches}  # no split in the race: ranges never move
    state: dict[str, BatchState] = {}
    redrains: set[str] = set()
    for event in ledger.batches.events(logical_topic="orders"):
        before = state.get(event.batch_id)
        if before is S.COMMITTED and event.to_state is S.PLANNED:
            redrains.add(event.batch_id)
        state[event.batch_id] = event.to_state
        takes = event.to_state is S.PLANNED and before in (None, S.COMMITTED)
        if commit_order or takes:
            taken = [r for b, s in state.items() if s.in_flight or (s is S.FAILED and b not in redrains)
                     for r in ranges[b]]
            assert_disjoint(taken, f"after event {event.seq} ({event.batch_id} {before} -> {event.to_state})")
    assert {b for b, s in state.items() if s.in_flight} == {b.batch_id for b in ledger.batches.in_flight("orders")}
    assert {b for b, s in state.items() if s is S.FAILED and b not in redrains} == {
        h.batch_id for h in ledger.batches.holds("orders")}


@pytest.mark.slow
def test_two_processes_racing_never_hold_the_same_offsets(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    Ledger(url).close()  # tables exist before the race, so the race is about reservations
    totals = race(url, seeds=(1, 2))

    with Ledger(url) as ledger:
        assert_disjoint(ledger.batches.reserved_ranges("orders"), "at the end")
        assert sorted(int(b.batch_id[2:]) for b in ledger.batches.find()) == list(range(1, totals["recorded"] + 1))
        assert_never_taken_twice(ledger, commit_order=True)


CRASH_SCRIPT = textwrap.dedent(
    """
    import os, sys
    from sqlalchemy import event
    from kprio_core.model.drain_plan import DrainPlan
    from kprio_core.ledger import Ledger
    from kprio_core.model.offsets import OffsetRange
    from kprio_core.model.results import DrainResult

    url, point, plan_json, result_json = sys.argv[1:5]
    led = Ledger(url)
    if point != "record_plan":
        batch = led.batches.record_plan(DrainPlan.from_json(plan_json))

    def die(conn):   # the rows are written inside the open transaction ...
        os._exit(17)  # ... and the process dies before COMMIT

    event.listen(led._engine, "commit", die)
    if point == "record_plan":
        led.batches.record_plan(DrainPlan.from_json(plan_json))
    elif point == "mark_drained":
        led.moves.mark_drained(batch.batch_id, DrainResult.from_json(result_json))
    else:
        led.attempts.split(batch.batch_id, [OffsetRange("orders-2", 1, 0, 10)], "checks failed", retry_at=None)
    """
)


@pytest.mark.parametrize(
    ("point", "why"),
    [
        ("record_plan", "1. batch row and ranges written, not committed: no batch, nothing reserved"),
        ("mark_drained", "2. drained numbers written, not committed: batch still planned, no average"),
        ("split", "3. new batch and moved ranges written, not committed: one batch with both ranges"),
    ],
)
def test_a_crash_inside_a_transaction_leaves_the_last_committed_truth(tmp_path: Path, point: str, why: str):
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    plan = plan_of(OffsetRange("orders-2", 0, 0, 10), OffsetRange("orders-2", 1, 0, 10))
    result = drained("b-000001", 1, plan)
    died = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, url, point, plan.to_json(), result.to_json()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert died.returncode == 17, died.stderr
    with Ledger(url, busy_timeout_s=5) as ledger:
        if point == "record_plan":
            assert ledger.batches.find() == [] and ledger.batches.reserved_ranges("orders") == []
            assert ledger.batches.record_plan(plan).batch_id == "b-000001", (
                "the database is neither locked nor half-written")
            return
        assert [b.batch_id for b in ledger.batches.find()] == ["b-000001"]
        batch = ledger.batches.get("b-000001")
        assert (batch.state, batch.drain, batch.plan) == (S.PLANNED, None, plan)
        assert ledger.samples.avg_record_bytes("orders") == {}
        assert ledger.batches.reserved_ranges("orders") == sorted(plan.offset_ranges())
        assert ledger.moves.mark_failed(batch.batch_id, "run died", retry_at=None).state is S.FAILED
