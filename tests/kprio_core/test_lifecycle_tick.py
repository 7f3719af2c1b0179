"""The tick's rules as a numbered case table: inputs built by hand, no broker, no ledger, no Dagster.

Each case is one ``TickInputs`` (a ledger view, a lag snapshot or its error, the runs seen, the
owners known dead, the clock) and the final answer the rules must give: the verdict, the run keys
launched (in order), which priorities the plan takes, and a phrase of what waits. A second table
checks rule 12 (launched elsewhere) on its own.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from kprio_core.config import KprioConfig
from kprio_core.errors import BrokerUnreachable, TopicMissing
from kprio_core.ledger import BatchState, DrainedSample, Hold
from kprio_core.lifecycle import (
    BatchRuns,
    CarryOutLogChanges,
    FailDeadRun,
    Launch,
    LedgerView,
    RecordPlan,
    RunState,
    RunSummary,
    Skip,
    TickInputs,
    Verdict,
    Why,
    decide_tick,
)
from kprio_core.lifecycle.examples import T0, batch, claim, snapshot
from kprio_core.lifecycle.tick import launched_elsewhere, resume_stuck, retry_failed
from kprio_core.log_changes import Belief, Superseded
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.snapshot import PartitionLag

NOW = T0 + timedelta(seconds=10)
ME, OTHER, GONE = "@host-a:100", "@host-b:200", "@host-a:999"
CONFIG = KprioConfig.model_validate({
    "topics": [{"name": "orders", "priorities": 3}],
    "planner": {"record_budget": 50, "target_batch_s": None},
    "rate": {"quotas": {2: {"records_per_s": 10}}, "samples": 2, "window_s": 1},
})
TOPIC = CONFIG.topics[0]

PLANNED = batch("b-000001")
LEASED = batch("b-000001", state=BatchState.DRAINED, owner="r1@host-a:100")  # live until T0+30
EXPIRED = batch("b-000001", state=BatchState.DRAINED, owner="r1@host-b:200", until=T0)
DEAD_OWNER = batch("b-000001", state=BatchState.DRAINED, owner=f"r1{GONE}")
DRAINED = batch("b-000001", state=BatchState.DRAINED)
CHECKED = batch("b-000001", state=BatchState.CHECKED)
FAILED = batch("b-000001", state=BatchState.FAILED, retry_at=T0)
BACKING_OFF = batch("b-000001", state=BatchState.FAILED, retry_at=NOW + timedelta(seconds=5))
TRANSIENT_BACKING_OFF = batch("b-000001", state=BatchState.FAILED, retry_at=NOW + timedelta(seconds=50), transient=True)
EXHAUSTED = batch("b-000001", state=BatchState.FAILED, attempts=3)
TRANSIENT = batch("b-000001", state=BatchState.FAILED, attempts=3, transient=True)
OWN_RANGE = tuple(PLANNED.plan.offset_ranges())  # orders-2[0]@[0,10)


def hold_of(b, exhausted: bool = False) -> Hold:
    return Hold("orders-2", 0, 0, b.batch_id, BatchState.FAILED, b.reason, b.attempts, b.retry_at, exhausted)


def runs(*summaries: RunSummary, of: str = "b-000001") -> BatchRuns:
    return BatchRuns({of: summaries})


def inputs(view: LedgerView | None = None, lag=None, **more) -> TickInputs:
    lag = snapshot(backlog={2: 10}) if lag is None else lag
    return TickInputs(view or LedgerView("orders"), lag, now=NOW, driver=ME, **more)


def flying(b, **more) -> LedgerView:
    return LedgerView("orders", in_flight=(b,), reserved=OWN_RANGE, **more)


def failing(b, **more) -> LedgerView:
    return LedgerView("orders", failed=(b,), **more)


RETENTION = dataclasses.replace(snapshot(backlog={2: 10}), partitions=(
    PartitionLag("orders-2", 0, 2, log_start=5, high_watermark=10, committed=0, avg_record_bytes=100.0),
    *snapshot(backlog={}).partitions[1:]))

SECOND_P2_PARTITION = dataclasses.replace(snapshot(backlog={2: 30, 1: 20, 0: 10}), partitions=(
    *snapshot(backlog={2: 30, 1: 20, 0: 10}).partitions,
    PartitionLag("orders-2", 1, 2, log_start=0, high_watermark=15, committed=0, avg_record_bytes=100.0)))
"""Backlog on every priority, and on a second partition of priority 2 that no failed batch holds."""

def two_priorities(batch_id: str, state: BatchState, start: int, end: int, **more):
    """A batch of ``[start, end)`` on orders-2[0] and on orders-1[0] (a batch over two priorities)."""
    from kprio_core.model.drain_plan import DrainPlan, PlannedRange

    ranges = tuple(PlannedRange(p, OffsetRange(f"orders-{p}", 0, start, end), est_bytes=100) for p in (2, 1))
    b = batch(batch_id, state=state, **more)
    return dataclasses.replace(b, plan=DrainPlan("orders", "lag-aware", 50, None, {}, {}, ranges))


def moved_back(group: int, believed: int, *, high: int = 40, others: int = 0, **views) -> TickInputs:
    """Priority 1's group moved back to ``group`` outside kprio, which committed ``believed``; ``others`` records
    of backlog on priority 2. ``views``: the ledger view's other fields."""
    lag = dataclasses.replace(snapshot(backlog={}), partitions=(
        PartitionLag("orders-2", 0, 2, log_start=0, high_watermark=believed + others, committed=believed),
        PartitionLag("orders-1", 0, 1, log_start=0, high_watermark=high, committed=group),
        PartitionLag("orders-0", 0, 0, log_start=0, high_watermark=believed, committed=believed)))
    beliefs = {(f"orders-{p}", 0): Belief(f"orders-{p}", 0, committed=believed) for p in (2, 1, 0)}
    return inputs(LedgerView("orders", beliefs=beliefs, **views), lag=lag)


DONE_1 = two_priorities("b-000001", BatchState.COMMITTED, 0, 10)
DONE_2 = two_priorities("b-000002", BatchState.COMMITTED, 10, 20)
LEFT = batch("b-000003", state=BatchState.FAILED, priority=1, start=20, end=30, retry_at=T0, transient=True)
"""What the commit of a batch in flight left when priority 1's group moved back under it: a failed split."""
LEFT_HOLDS = (Hold("orders-1", 0, 20, "b-000003", BatchState.FAILED, "not committed", 1, T0, False, True),)
COVERED = {("orders-1", 0): (DONE_1, DONE_2)}

# (number, why, inputs, verdict, launched run keys, plan priorities or None, a phrase of what waits or None)
CASES = [
    (1, "nothing recorded, nothing produced: idle", inputs(lag=snapshot()), Verdict.IDLE, [], None, None),
    (2, "a backlog on every priority and nothing in flight: one plan takes all three", inputs(
        lag=snapshot(backlog={2: 30, 1: 20, 0: 10})), Verdict.PLAN, [], {2, 1, 0}, None),
    (3, "a planned batch no run was requested for gets its first run (run key = batch id)",
     inputs(flying(PLANNED)), Verdict.LAUNCH, ["b-000001"], None, None),
    (4, "a run of that run key exists: it is not launched twice", inputs(
        flying(PLANNED), runs=runs(RunSummary("r1", RunState.STARTED, run_key="b-000001"))), Verdict.IDLE, [], None,
     None),
    (5, "a live lease: its run works, nothing to do", inputs(flying(LEASED)), Verdict.IDLE, [], None, None),
    (6, "an expired lease: resumed by a new attempt", inputs(flying(EXPIRED)), Verdict.LAUNCH,
     ["b-000001.attempt-2"], None, None),
    (7, "the lease owner's process is gone: resumed at once, before the lease expires",
     inputs(flying(DEAD_OWNER), dead=frozenset({f"r1{GONE}"})), Verdict.LAUNCH, ["b-000001.attempt-2"], None, None),
    (8, "its last run ended without finishing it and nobody holds it: resumed",
     inputs(flying(DRAINED), runs=runs(RunSummary("r1", RunState.FAILURE, run_key="b-000001"))),
     Verdict.LAUNCH, ["b-000001.attempt-2"], None, None),
    (9, "its last run failed but the orchestrator retries it: no second run",
     inputs(flying(DRAINED), runs=runs(RunSummary("r1", RunState.FAILURE, run_key="b-000001", will_retry=True))),
     Verdict.IDLE, [], None, None),
    (10, "a checked batch whose predecessors committed gets a commit run",
     inputs(flying(CHECKED, ready_to_commit=(CHECKED,))), Verdict.LAUNCH, ["b-000001.commit-1"], None, None),
    (11, "a failed batch with attempts left, backoff over: retried as attempt 2",
     inputs(failing(FAILED, holds=(hold_of(FAILED),))), Verdict.LAUNCH, ["b-000001.attempt-2"], None, None),
    (12, "a failed batch still backing off waits and says until when",
     inputs(failing(BACKING_OFF, holds=(hold_of(BACKING_OFF),))), Verdict.HELD, [], None, "retries at 00:00:15"),
    (13, "retries exhausted: no run, its partition waits for a person",
     inputs(failing(EXHAUSTED, holds=(hold_of(EXHAUSTED, exhausted=True),))), Verdict.HELD, [], None, None),
    (14, "a transient cause is retried whatever the attempts",
     inputs(failing(TRANSIENT, holds=(hold_of(TRANSIENT),))), Verdict.LAUNCH, ["b-000001.attempt-4"], None, None),
    (15, "a failed batch superseded by a new incarnation never runs again",
     inputs(failing(FAILED, superseded=(Superseded("b-000001", "orders-2", 0, 1, 2),))), Verdict.PLAN, [], {2},
     None),
    (16, "the broker is down: blocked, but recorded batches still get their runs",
     inputs(flying(PLANNED), lag=BrokerUnreachable("localhost:9092", 5.0)), Verdict.BLOCKED, ["b-000001"], None,
     None),
    (24, "a priority topic is missing: blocked, and the reason names the error's code",
     inputs(lag=TopicMissing("orders-2", "localhost:9092")), Verdict.BLOCKED, [], None, None),
    (17, "another driver claimed the launch: it is not launched here, and says by whom",
     inputs(flying(PLANNED, claims={"b-000001": claim("b-000001", OTHER, NOW)})), Verdict.IDLE, [], None,
     f"is launched by {OTHER}"),
    (18, "this driver's own claim does not stop it (its earlier request was lost)",
     inputs(flying(PLANNED, claims={"b-000001": claim("b-000001", ME, NOW)})), Verdict.LAUNCH, ["b-000001"], None,
     None),
    (19, "a claim of a dead driver is taken over",
     inputs(flying(PLANNED, claims={"b-000001": claim("b-000001", GONE, NOW)}), dead=frozenset({GONE})),
     Verdict.LAUNCH, ["b-000001"], None, None),
    (20, "an expired claim stops nobody", inputs(flying(PLANNED, claims={
        "b-000001": claim("b-000001", OTHER, T0, seconds=5)})), Verdict.LAUNCH, ["b-000001"], None, None),
    (21, "priority 2's slot is taken: the plan takes the other priorities, priority 2 waits",
     inputs(flying(LEASED), lag=snapshot(backlog={2: 30, 1: 20, 0: 10})), Verdict.PLAN, [], {1, 0},
     "priority 2 waits for its slot (b-000001 in flight)"),
    (22, "priority 2 drained 40 records in the last second against a quota of 10/s: throttled",
     inputs(LedgerView("orders", rate_samples=(DrainedSample(NOW, 2, 40, 0),)), lag=snapshot(backlog={2: 10})),
     Verdict.THROTTLED, [], None, None),
    (23, "offsets lost to retention before they were drained hold their partition",
     inputs(lag=RETENTION), Verdict.HELD, [], None, None),
    (26, "a driver's first tick retries a transient failure at once, not after its backoff",
     inputs(failing(TRANSIENT_BACKING_OFF, holds=(hold_of(TRANSIENT_BACKING_OFF),)), fresh_start=True),
     Verdict.LAUNCH, ["b-000001.attempt-2"], None, None),
    (27, "later ticks wait out a transient failure's backoff",
     inputs(failing(TRANSIENT_BACKING_OFF, holds=(hold_of(TRANSIENT_BACKING_OFF),))), Verdict.HELD, [], None,
     "retries at 00:01:00"),
    (28, "a failure that is not transient waits out its backoff even on a first tick",
     inputs(failing(BACKING_OFF, holds=(hold_of(BACKING_OFF),)), fresh_start=True), Verdict.HELD, [], None,
     "retries at 00:00:15"),
    (25, "a retry and new backlog of its priority in one tick: the retry takes the slot, the plan the others",
     inputs(failing(FAILED, holds=(hold_of(FAILED),)), lag=SECOND_P2_PARTITION),
     Verdict.LAUNCH, ["b-000001.attempt-2"], {1, 0}, "priority 2 waits for its slot (b-000001 in flight)"),
    (43, "the ticks after case 25, while the retry's run waits for a worker and has not taken the batch: the retry "
         "keeps the slot (a plan taking it would make the retry's run wait for that batch, on the worker it needs)",
     inputs(failing(FAILED, holds=(hold_of(FAILED),)), lag=SECOND_P2_PARTITION,
            runs=runs(RunSummary("r2", RunState.QUEUED, run_key="b-000001.attempt-2"))),
     Verdict.PLAN, [], {1, 0}, "priority 2 waits for its slot (b-000001 in flight)"),
    (29, "priority 1's group moved back: the range covering where it stands is re-drained; priority 2 (in the same "
         "batch) is planned on, its slot untouched by the re-drain",
     moved_back(5, 20, others=7, committed=COVERED), Verdict.LAUNCH, ["b-000001.attempt-2"], {2}, None),
    (30, "what the commit of the overtaken batch left waits for the re-drain, spends no attempt and takes no slot: "
         "the re-drain goes first",
     moved_back(5, 20, committed=COVERED, failed=(LEFT,), holds=LEFT_HOLDS), Verdict.LAUNCH, ["b-000001.attempt-2"],
     None, "b-000003 waits for the re-drain of orders-1[0] up to 20 (its group was moved back outside kprio to 5)"),
    (31, "the re-drain brought the group back where kprio left it: what the commit left is retried by itself",
     moved_back(20, 20, committed=COVERED, failed=(LEFT,), holds=LEFT_HOLDS), Verdict.LAUNCH,
     ["b-000003.attempt-2"], None, None),
    (32, "the overtaken batch still in flight holds priority 1's slot: the re-drain waits, held; priority 2's "
         "backlog waits for its own slot only",
     moved_back(5, 20, others=7, committed=COVERED, in_flight=(two_priorities("b-000003", BatchState.DRAINED, 20,
                                                                               30, owner="r1@host-a:100"),)),
     Verdict.BUSY, [], None, "priority 2 waits for its slot (b-000003 in flight)"),
    (33, "the warm workers' bulk lane runs its one batch (workers.count 2, one bulk batch of another topic in "
         "flight): only the most urgent priority is planned, the others wait for a bulk worker",
     inputs(lag=snapshot(backlog={2: 30, 1: 20, 0: 10}), bulk_running=1), Verdict.PLAN, [], {2},
     "priority 1 waits for a worker of the bulk lane (1 bulk batches run, workers.count 2)"),
    (34, "the bulk lane busy and nothing urgent waiting: nothing is planned, and the reason says why",
     inputs(lag=snapshot(backlog={1: 20, 0: 10}), bulk_running=1), Verdict.BUSY, [], None,
     "priority 0 waits for a worker of the bulk lane"),
    (35, "a planned batch whose run ended before it took it has spent that attempt: failed, transient (by the "
         "driver), and retried at once under a run key of its own, in the same tick",
     inputs(flying(PLANNED), runs=runs(RunSummary("r1", RunState.FAILURE, run_key="b-000001"))), Verdict.LAUNCH,
     ["b-000001.attempt-2"], None, None),
    (36, "its resume ended before it took it too: failed at the resume's attempt, never asked again under the run "
         "key that already ended",
     inputs(flying(PLANNED), runs=runs(RunSummary("r2", RunState.FAILURE, run_key="b-000001.attempt-2"),
                                       RunSummary("r1", RunState.FAILURE, run_key="b-000001"))), Verdict.LAUNCH,
     ["b-000001.attempt-3"], None, None),
    (38, "a failed batch's retry ended before it took it: that attempt is spent, not retried under its key again",
     inputs(failing(FAILED, holds=(hold_of(FAILED),)),
            runs=runs(RunSummary("r2", RunState.FAILURE, run_key="b-000001.attempt-2"))), Verdict.LAUNCH,
     ["b-000001.attempt-3"], None, None),
    (39, "ended before it was taken again, after a transient failure: the streak backs off (no run now), and the "
         "plan may not take its range meanwhile",
     inputs(flying(dataclasses.replace(PLANNED, attempts=2, transient_streak=1)),
            runs=runs(RunSummary("r2", RunState.FAILURE, run_key="b-000001.attempt-2"))), Verdict.IDLE, [], None,
     "b-000001 retries at"),
    (40, "a checked batch's commit run ended before it took it, its turn come: failed, transient (a retry drains and "
         "commits it again, replacing its output), never asked again under the commit run key that ended",
     inputs(flying(CHECKED, ready_to_commit=(CHECKED,)),
            runs=runs(RunSummary("r2", RunState.FAILURE, run_key="b-000001.commit-1"))), Verdict.LAUNCH,
     ["b-000001.attempt-2"], None, None),
    (42, "a checked batch whose commit run ended well is not failed: the run of the batch before it commits it",
     inputs(flying(CHECKED, ready_to_commit=(CHECKED,)),
            runs=runs(RunSummary("r2", RunState.SUCCESS, run_key="b-000001.commit-1"))), Verdict.IDLE, [], None, None),
    (41, "a checked batch that waits for an earlier batch to commit is not failed by its drain run's end",
     inputs(flying(CHECKED), runs=runs(RunSummary("r1", RunState.SUCCESS, run_key="b-000001"))), Verdict.IDLE, [],
     None, None),
    (37, "failed at its last attempt by the run that took it: held, its partition waits for a person, named",
     inputs(failing(EXHAUSTED, holds=(hold_of(EXHAUSTED, exhausted=True),)),
            runs=runs(RunSummary("r3", RunState.FAILURE, run_key="b-000001.attempt-3"))), Verdict.HELD, [], None,
     None),
]


@pytest.mark.parametrize("number, why, given, verdict, launched, plan_priorities, waits",
                         CASES, ids=[f"{c[0]:02d}" for c in CASES])
def test_the_tick_decides(number, why, given, verdict, launched, plan_priorities, waits):
    d = decide_tick(CONFIG, TOPIC, given)
    assert d.verdict is verdict, (why, d.describe())
    assert [x.run_key for x in d.launch] == launched, why
    planned = None if d.plan is None else {p for p, n in d.plan.records_by_priority().items() if n}
    assert planned == plan_priorities, (why, d.describe())
    if waits is not None:
        assert any(waits in w for w in d.waiting), (why, d.waiting)
    # Every decision is typed actions in the applier's order: dead runs, log changes, launches, a plan, or a skip.
    kinds = [type(a).__name__ for a in d.actions]
    order = ["FailDeadRun", "FailUntaken", "CarryOutLogChanges", "Launch", "RecordPlan", "Skip"]
    assert kinds == sorted(kinds, key=order.index), kinds
    assert (Skip in map(type, d.actions)) == (not d.launch and d.plan is None), why


@pytest.mark.parametrize("given, attempt", [
    (runs(RunSummary("r1abcdefg", RunState.FAILURE, run_key="b-000001")), 1),
    (runs(RunSummary("r2abcdefg", RunState.CANCELED, run_key="b-000001.attempt-2"),
          RunSummary("r1abcdefg", RunState.FAILURE, run_key="b-000001")), 2),
    (runs(RunSummary("r1abcdefg", RunState.FAILURE)), 1),  # launched from the UI: no run key, the batch's attempt
    (runs(RunSummary("r2abcdefg", RunState.FAILURE, run_key="b-000001.attempt-2")), 2),  # a failed batch's retry
], ids=["its-run", "its-resume", "no-run-key", "a-retry"])
def test_a_batch_whose_run_ended_before_it_took_it_fails_at_that_attempt(given, attempt, request):
    view = failing(FAILED, holds=(hold_of(FAILED),)) if "retry" in request.node.name else flying(PLANNED)
    d = decide_tick(CONFIG, TOPIC, inputs(view, runs=given))
    [untaken] = d.untaken
    assert (untaken.batch.batch_id, untaken.attempt) == ("b-000001", attempt)
    assert "ended" in untaken.why and "before it took the batch" in untaken.why, untaken.why
    assert untaken.retry_at == NOW and untaken.as_failed().transient  # the first of a streak: at once
    assert [x.run_key for x in d.launch] == [f"b-000001.attempt-{attempt + 1}"] and d.stuck == ()


@pytest.mark.parametrize("given, why", [
    (runs(RunSummary("r1", RunState.STARTED, run_key="b-000001")), "its run works"),
    (runs(RunSummary("r1", RunState.FAILURE, run_key="b-000001", will_retry=True)), "Dagster retries it"),
    (runs(RunSummary("r1", RunState.STARTED, run_key="b-000001", runner=GONE, orphaned=True)),
     "orphaned: resumed (rule 1), its run marked failed"),
    (runs(RunSummary("r1", RunState.FAILURE, run_key="b-000001")), "a run of an earlier attempt (attempt 2 now)"),
], ids=["active", "will-retry", "orphaned", "earlier-attempt"])
def test_a_planned_batch_is_not_failed_while_a_run_may_still_take_it(given, why):
    b = PLANNED if "earlier" not in why else batch("b-000001", attempts=2)
    assert decide_tick(CONFIG, TOPIC, inputs(flying(b), runs=given)).untaken == (), why


def test_a_move_back_re_drains_only_what_it_moved_and_holds_no_other_priority():
    """Cases 29 and 32 in detail: the re-drain is priority 1's range of the batch, exactly; priority 2 is planned
    from where it stands; while the overtaken batch holds priority 1's slot, the re-drain says what it waits for."""
    d = decide_tick(CONFIG, TOPIC, moved_back(5, 20, others=7, committed=COVERED))
    [redrain] = [r for x in d.decided for r in x.redrain]
    assert (redrain.batch.batch_id, [str(r) for r in redrain.ranges]) == ("b-000001", ["orders-1[0]@[0,10)"])
    assert redrain.priorities == {1}
    assert {(h.topic, h.exhausted) for h in d.holds} == {("orders-1", False)}, "held for the re-drain, not a person"
    assert [str(r) for r in d.plan.offset_ranges() if r.count] == ["orders-2[0]@[20,27)"]
    busy = decide_tick(CONFIG, TOPIC, moved_back(5, 20, committed=COVERED, in_flight=(
        two_priorities("b-000003", BatchState.DRAINED, 20, 30, owner="r1@host-a:100"),)))
    assert any("re-drain of b-000001 waits for a slot of priority 1 (b-000003 in flight)" in h.reason
               for h in busy.holds), [h.reason for h in busy.holds]


@pytest.mark.parametrize("state", [BatchState.PLANNED, BatchState.DRAINED, BatchState.CHECKED])
def test_a_batch_in_flight_that_committed_before_the_snapshot_is_kprios_own_commit_not_a_move(state):
    """The view is read before the lag snapshot: a batch drained then may publish and commit in between (seen with
    the native reader's long batches: its [798,2740) recorded as 'skipped by the operator'). A group standing at
    the end of a range in flight is kprio's own commit; a re-drain's end is not (the group is still moved back)."""
    flying_b = two_priorities("b-000003", state, 20, 30, owner="r1@host-a:100")
    d = decide_tick(CONFIG, TOPIC, moved_back(30, 20, in_flight=(flying_b,)))
    assert not d.decided and not d.holds, d.describe()
    redrain = dataclasses.replace(two_priorities("b-000001", state, 0, 10), replay_of_committed=True)
    d = decide_tick(CONFIG, TOPIC, moved_back(10, 20, committed=COVERED, in_flight=(redrain,)))
    assert [str(x.change.state) for x in d.decided] == [], "held as re-draining, no new decision"
    assert [h.reason.split(" after:")[0] for h in d.holds] == ["re-draining"]


def test_an_early_retry_says_so_and_an_ordinary_one_does_not():
    """Case 26 in detail: the driver ends the backoff of an early retry in the ledger before its run starts."""
    fresh = decide_tick(CONFIG, TOPIC, inputs(failing(TRANSIENT_BACKING_OFF, holds=(hold_of(TRANSIENT_BACKING_OFF),)),
                                              fresh_start=True))
    ordinary = decide_tick(CONFIG, TOPIC, inputs(failing(FAILED, holds=(hold_of(FAILED),)), fresh_start=True))
    assert [x.early for x in fresh.launch] == [True] and [x.early for x in ordinary.launch] == [False]


def test_a_resumed_batch_names_the_run_to_mark_failed():
    """Case 7 in detail: the dead owner's run is the one the applier marks failed, then attempt 2 takes over."""
    d = decide_tick(CONFIG, TOPIC, inputs(flying(DEAD_OWNER), dead=frozenset({f"r1{GONE}"})))
    [dead] = [a for a in d.actions if isinstance(a, FailDeadRun)]
    assert dead.run_ids == ("r1",) and "is gone" in dead.why
    assert d.stuck == ((DEAD_OWNER, dead.why),)


def test_the_plan_is_an_action_after_the_launches():
    d = decide_tick(CONFIG, TOPIC, inputs(flying(PLANNED), lag=snapshot(backlog={2: 10, 1: 20})))
    # The log changes carry out what is seen for the first time (the partitions' beliefs), before anything runs.
    assert [type(a) for a in d.actions] == [CarryOutLogChanges, Launch, RecordPlan]
    assert d.verdict is Verdict.LAUNCH and d.plan.records_by_priority()[1] == 20


def test_a_caught_up_priority_is_planned_apart_from_a_bulk_rest():
    """A trickle on priority 2 beside a large priority-0 backlog: two batches, so the trickle's slot frees fast."""
    config = KprioConfig.model_validate({"topics": [{"name": "orders", "priorities": 3}]})
    lag = snapshot(backlog={2: 4, 0: 900_000})
    d = decide_tick(config, config.topics[0], inputs(LedgerView("orders", throughput=200_000.0), lag=lag))
    plans = [a.plan for a in d.actions if isinstance(a, RecordPlan)]
    assert [{p: n for p, n in x.records_by_priority().items() if n} for x in plans] == [{2: 4}, {0: 399_996}]  # one budget, shared
    assert d.plans == tuple(plans) and d.plan == plans[0]
    assert d.summary() == "plan 4 records (p2=4); plan 399996 records (p0=399996)"
    # Unmeasured (a first batch): one batch, which measures the rate.
    first = decide_tick(config, config.topics[0], inputs(LedgerView("orders"), lag=lag))
    assert len(first.plans) == 1
    # A person's plan (the manual job narrows the budget or the priorities) is the one batch asked for.
    manual = decide_tick(config, config.topics[0], inputs(LedgerView("orders", throughput=200_000.0), lag=lag),
                         record_budget=500_000)
    assert [x.records_by_priority()[2] for x in manual.plans] == [4]


def test_a_backlog_tail_shorter_than_a_batch_fixed_cost_is_planned_now():
    """Two seconds at 300,000 records/s is 600,000 records; a tail that drains in under a batch's fixed cost
    (0.8 s here: 240,000 records) joins the batch instead of paying that cost again, and the priorities it
    catches up that drain quickly are planned apart from the bulk."""
    config = KprioConfig.model_validate({"topics": [{"name": "orders", "priorities": 3}]})

    def plans(backlog: dict[int, int], fixed_cost_s: float | None) -> list[dict[int, int]]:
        view = LedgerView("orders", throughput=300_000.0, fixed_cost_s=fixed_cost_s)
        d = decide_tick(config, config.topics[0], inputs(view, lag=snapshot(backlog=backlog)))
        return [{p: n for p, n in x.records_by_priority().items() if n} for x in d.plans]

    assert plans({2: 3, 1: 50_000, 0: 750_000}, 0.8) == [{2: 3, 1: 50_000}, {0: 750_000}]
    assert plans({2: 3, 1: 50_000, 0: 750_000}, None) == [{2: 3, 1: 50_000}, {0: 549_997}], "no fixed cost known"
    bigger = plans({2: 3, 1: 50_000, 0: 850_000}, 0.8)  # 900,003: the tail would be 300,003 records, 1 s
    assert sum(n for x in bigger for n in x.values()) == 600_000
    # A cold first batch's fixed cost (7 s): the tail stays within another target_batch_s (600,000 records).
    assert plans({0: 1_500_000}, 7.0) == [{0: 600_000}], "a tail of 900,000 records is a batch of its own"
    assert plans({0: 1_100_000}, 7.0) == [{0: 1_000_000}], "a tail of 500,000 joins, up to planner.record_budget"


def test_objectives_steer_the_plan_by_the_records_deadlines():
    """slo.max_age_s reaches the planner: priority 0's 40 records (6 s objective) are 5 s old, priority 2's 100 (60 s)
    30 s old: priority 0's are due first, the rest of the budget goes to priority 2, and the plan says why."""
    now_ms = int(NOW.timestamp() * 1000)
    parts = (PartitionLag("orders-2", 0, 2, 0, 100, 0, times=((now_ms - 30_000, 100),)),
             PartitionLag("orders-1", 0, 1, 0, 0, 0), PartitionLag("orders-0", 0, 0, 0, 40, 0, times=((now_ms - 5_000, 40),)))
    lag = dataclasses.replace(snapshot(), partitions=parts, taken_at_ms=now_ms)
    config = CONFIG.model_copy(update={"slo": CONFIG.slo.model_copy(update={"max_age_s": {2: 60, 0: 6}})})
    d = decide_tick(config, TOPIC, inputs(lag=lag))
    assert d.plan.records_by_priority() == {2: 10, 1: 0, 0: 40}
    assert d.plan.due == {2: "10 records due within 30 s of their objective",
                          0: "40 records due within 1 s of their objective"}
    assert decide_tick(CONFIG, TOPIC, inputs(lag=lag)).plan.records_by_priority() == {2: 43, 1: 0, 0: 7}, "today's"


def test_the_manual_plan_narrows_priorities_and_budget():
    d = decide_tick(CONFIG, TOPIC, inputs(lag=snapshot(backlog={2: 30, 1: 20, 0: 10})), priorities={1},
                    record_budget=10)
    assert d.plan.records_by_priority() == {2: 0, 1: 10, 0: 0}
    assert d.plan.backlog_before == {2: 30, 1: 20, 0: 10}, "the plan records the whole backlog it saw"


# --- the individual rules ------------------------------------------------------------------------


@pytest.mark.parametrize("b, dead, seen, stuck, why", [
    (PLANNED, (), BatchRuns(), False, "planned, never launched: launch_unlaunched's case, not stuck"),
    (LEASED, (), BatchRuns(), False, "a live lease of a live owner"),
    (EXPIRED, (), BatchRuns(), True, "the lease expired"),
    (DEAD_OWNER, {f"r1{GONE}"}, BatchRuns(), True, "the owner is known dead"),
    (EXPIRED, (), runs(RunSummary("r9", RunState.QUEUED)), False, "another run is on its way to take it over"),
    (DRAINED, (), runs(RunSummary("r1", RunState.STARTED, runner=GONE, orphaned=True)), True,
     "its run is STARTED but the kprio process that ran it is gone"),
    (CHECKED, (), runs(RunSummary("r1", RunState.SUCCESS)), False, "checked: waits for its commit, not stuck"),
])
def test_resume_stuck(b, dead, seen, stuck, why):
    assert bool(resume_stuck([b], seen, now=NOW, dead=dead)) is stuck, why


TRANSIENT_DUE = batch("b-000001", state=BatchState.FAILED, retry_at=T0, transient=True)
FULL = "the output root /out is full"


@pytest.mark.parametrize("b, full, cause, fresh, launched, waits, why", [
    (FAILED, {}, None, False, ["b-000001.attempt-2"], [], "1. backoff over, slot free"),
    (FAILED, {2: ["b-000002"]}, None, False, [], ["b-000001 waits for a slot of priority 2"],
     "2. its priority's slot is taken"),
    (BACKING_OFF, {}, None, False, [], ["b-000001 retries at 00:00:15 UTC"], "3. still backing off"),
    (EXHAUSTED, {}, None, False, [], [], "4. retries exhausted: only a person retries it"),
    (TRANSIENT_DUE, {}, FULL, False, [], [f"b-000001 waits for its cause to pass ({FULL})"],
     "5. a transient failure is never retried into a cause a probe sees"),
    (TRANSIENT_DUE, {}, None, False, ["b-000001.attempt-2"], [], "6. due and its cause gone: at once"),
    (TRANSIENT_BACKING_OFF, {}, None, False, [], ["b-000001 retries at 00:01:00 UTC"],
     "7. a later failure of a streak backs off when no cause was seen passing"),
    (TRANSIENT_BACKING_OFF, {}, None, True, ["b-000001.attempt-2"], [],
     "8. ... and is retried at once when a cause the driver saw has passed (or the driver just started)"),
    (TRANSIENT_BACKING_OFF, {}, FULL, True, [], [f"b-000001 waits for its cause to pass ({FULL})"],
     "9. but never while the cause is seen, fresh start or not"),
    (FAILED, {}, FULL, False, ["b-000001.attempt-2"], [], "10. a failure that is not transient ignores the probe"),
])
def test_retry_failed(b, full, cause, fresh, launched, waits, why):
    launches, waiting = retry_failed([b], BatchRuns(), now=NOW, max_attempts=3, full=full, cause=cause,
                                     fresh_start=fresh)
    assert ([x.run_key for x in launches], waiting) == (launched, waits), why


def test_a_batch_split_off_another_retries_once_that_one_has_drained():
    """After a drain that died was split apart (the most urgent records kept, the rest split off), the part split
    off waits while the part kept drains: a Python worker of its own that dies could fail the kept part's Spark tasks
    too (Spark hands a worker on to the next task while the task it served still reads from it), and the urgent
    records would wait a second attempt (test_isolation's dying worker, seen once in 6 to 10 runs)."""
    kept = dataclasses.replace(TRANSIENT_DUE, batch_id="b-000001")
    split_off = dataclasses.replace(TRANSIENT_DUE, batch_id="b-000002", parent="b-000001", plan=dataclasses.replace(
        TRANSIENT_DUE.plan, ranges=tuple(dataclasses.replace(r, priority=0) for r in TRANSIENT_DUE.plan.ranges)))
    newest_first = [split_off, kept]  # as the ledger lists them
    launches, waiting = retry_failed(newest_first, BatchRuns(), now=NOW, max_attempts=1, full={})
    assert [x.run_key for x in launches] == ["b-000001.attempt-2"]
    assert waiting == ["b-000002 waits for b-000001, which it was split from, to drain first"]
    launches, waiting = retry_failed([split_off], BatchRuns(), now=NOW, max_attempts=1, full={}, in_flight={"b-000001"})
    assert (launches, waiting) == ([], ["b-000002 waits for b-000001, which it was split from, to drain first"])
    launches, _ = retry_failed([split_off], BatchRuns(), now=NOW, max_attempts=1, full={})  # b-000001 committed
    assert [x.run_key for x in launches] == ["b-000002.attempt-2"]


@pytest.mark.parametrize("summary, retried_by_the_tick, why", [
    (RunSummary("r1", RunState.FAILURE, will_retry=True, ended_at=NOW - timedelta(seconds=20)), False,
     "1. Dagster's retry daemon said it retries the run, 20 s ago: its retry is on its way"),
    (RunSummary("r1", RunState.FAILURE, will_retry=True, ended_at=NOW - timedelta(seconds=600)), True,
     "2. it said so 10 minutes ago and no retry came: the tick retries the batch itself"),
    (RunSummary("r1", RunState.FAILURE, will_retry=False, ended_at=NOW - timedelta(seconds=5)), True,
     "3. no orchestrator retry promised (kprio drain's runs carry dagster/max_retries=0): the tick retries"),
])
def test_a_wait_for_the_orchestrators_own_retry_is_bounded(summary, retried_by_the_tick, why):
    launches, _ = retry_failed([FAILED], runs(summary), now=NOW, max_attempts=3, full={})
    assert bool(launches) is retried_by_the_tick, why


@pytest.mark.parametrize("b, claims, dead, elsewhere, why", [
    (PLANNED, {}, (), None, "no claim, no lease: this driver launches it"),
    (PLANNED, {"b-000001": claim("b-000001", OTHER, NOW)}, (), OTHER, "another live driver claimed the run key"),
    (PLANNED, {"b-000001": claim("b-000001", ME, NOW)}, (), None, "this driver's own claim"),
    (PLANNED, {"b-000001": claim("b-000001", OTHER, NOW)}, {OTHER}, None, "the claimant is dead"),
    (PLANNED, {"b-000001.attempt-2": claim("b-000001.attempt-2", OTHER, NOW)}, (), None,
     "a claim of another attempt's run key"),
    (LEASED, {}, (), "r1@host-a:100", "another live run holds the batch's lease"),
    (EXPIRED, {}, (), None, "an expired lease holds nothing"),
])
def test_launched_elsewhere(b, claims, dead, elsewhere, why):
    found = launched_elsewhere(Launch(b, Why.NEW, 1), inputs(flying(b, claims=claims), dead=frozenset(dead)))
    assert (found is None) == (elsewhere is None), (why, found)
    if elsewhere is not None:
        assert elsewhere in found, why
