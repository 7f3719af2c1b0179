"""The batch ledger on a SQLite file: transitions, reservations, replay, restarts, small state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kprio_core.burst import PollHistory
from kprio_core.config import LedgerSettings
from kprio_core.errors import BatchNotFound, DrainStatsInvalid, InvalidTransition, RangeConflict
from kprio_core.ledger import TRANSITIONS, Batch, BatchState, Ledger
from kprio_core.offsets import OffsetRange
from kprio_core.drain_plan import BurstDecision, DrainPlan, PlannedRange

S = BatchState


class Clock:
    """A clock the test moves by hand (the ledger reads time only through it)."""

    def __init__(self) -> None:
        self.now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def tick(self, seconds: float = 1.0) -> None:
        self.now += timedelta(seconds=seconds)


def make_plan(*spans: tuple[int, int] | OffsetRange, topic: str = "orders", priority: int = 2) -> DrainPlan:
    """A plan over ``spans`` ((start, end) of <topic>-<priority> partition 0, or whole ranges)."""
    planned = []
    for span in spans:
        r = span if isinstance(span, OffsetRange) else OffsetRange(f"{topic}-{priority}", 0, *span)
        prio = int(r.topic.rsplit("-", 1)[1])
        planned.append(PlannedRange(prio, r, est_bytes=100 * r.count))
    return DrainPlan(
        logical_topic=topic,
        mode="lag-aware",
        record_budget=1000,
        byte_budget=None,
        quotas={2: 571, 1: 286, 0: 143},
        grants={2: 571, 1: 286, 0: 143},
        ranges=tuple(planned),
    )


def stats_for(plan: DrainPlan, bytes_per_record: int = 100) -> dict:
    return {
        "ranges": [
            {
                "topic": p.range.topic,
                "partition": p.range.partition,
                "start": p.range.start,
                "end": p.range.end,
                "records": p.range.count,
                "bytes": bytes_per_record * p.range.count,
            }
            for p in plan.ranges
        ]
    }


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'deep' / 'dir' / 'ledger.db'}"


@pytest.fixture
def ledger(url: str, clock: Clock):
    with Ledger(url, clock=clock) as led:
        yield led


# --------------------------------------------------------------------------------- transitions

ACTIONS = ("drain", "check", "commit", "fail", "replay")


def act(ledger: Ledger, batch: Batch, action: str) -> Batch:
    if action == "drain":
        return ledger.mark_drained(batch.batch_id, stats_for(batch.plan))
    if action == "check":
        return ledger.mark_checked(batch.batch_id, {"row_count_matches": True})
    if action == "commit":
        return ledger.mark_committed(batch.batch_id, {"committed": {"orders-2/0": batch.plan.ranges[0].range.end}})
    if action == "fail":
        return ledger.mark_failed(batch.batch_id, "checks failed: 3 null ids")
    return ledger.replay(batch.batch_id)


PATH_TO = {
    S.PLANNED: (),
    S.DRAINED: ("drain",),
    S.CHECKED: ("drain", "check"),
    S.COMMITTED: ("drain", "check", "commit"),
    S.FAILED: ("fail",),
}

# (from, action, expected state or None for InvalidTransition, why)
TRANSITION_CASES = [
    (S.PLANNED, "drain", S.DRAINED, "1. the drain wrote the planned ranges"),
    (S.PLANNED, "check", None, "2. nothing drained yet: nothing to check"),
    (S.PLANNED, "commit", None, "3. commit after proof: no drain, no checks"),
    (S.PLANNED, "fail", S.FAILED, "4. a planned run can die before draining"),
    (S.PLANNED, "replay", None, "5. still in flight: replay needs failed or committed"),
    (S.DRAINED, "drain", S.DRAINED, "6. a rerun of the drain replaces its output"),
    (S.DRAINED, "check", S.CHECKED, "7. checks passed on the drained output"),
    (S.DRAINED, "commit", None, "8. commit after proof: checks have not passed"),
    (S.DRAINED, "fail", S.FAILED, "9. the drain output failed the checks"),
    (S.DRAINED, "replay", None, "10. still in flight"),
    (S.CHECKED, "drain", S.DRAINED, "11. a re-drain after the checks; checks run again"),
    (S.CHECKED, "check", None, "12. checks already recorded; a re-check follows a re-drain"),
    (S.CHECKED, "commit", S.COMMITTED, "13. commit after proof"),
    (S.CHECKED, "fail", S.FAILED, "14. the commit itself can fail"),
    (S.CHECKED, "replay", None, "15. still in flight"),
    (S.COMMITTED, "drain", None, "16. a committed batch is re-drained only through replay"),
    (S.COMMITTED, "check", None, "17. nothing new to check"),
    (S.COMMITTED, "commit", None, "18. committing twice is a bug upstream"),
    (S.COMMITTED, "fail", None, "19. committed offsets cannot un-happen"),
    (S.COMMITTED, "replay", S.PLANNED, "20. replay of a committed batch re-drains; its commit adds nothing"),
    (S.FAILED, "drain", None, "21. a failed batch holds no ranges: replay it first"),
    (S.FAILED, "check", None, "22. nothing valid to check"),
    (S.FAILED, "commit", None, "23. never commit a failed batch"),
    (S.FAILED, "fail", None, "24. already failed; the first reason stays"),
    (S.FAILED, "replay", S.PLANNED, "25. replay reserves the same ranges again"),
]


@pytest.mark.parametrize(("start", "action", "expected", "why"), TRANSITION_CASES, ids=[c[3] for c in TRANSITION_CASES])
def test_transition_table(ledger: Ledger, start: BatchState, action: str, expected: BatchState | None, why: str):
    batch = ledger.record_plan(make_plan((0, 10), (20, 30)))
    for step in PATH_TO[start]:
        batch = act(ledger, batch, step)
    assert batch.state is start
    if expected is None:
        with pytest.raises(InvalidTransition) as err:
            act(ledger, batch, action)
        assert batch.batch_id in str(err.value) and start.value in str(err.value)
        assert ledger.get(batch.batch_id) == batch, "a refused transition changes nothing"
        return
    after = act(ledger, batch, action)
    assert after.state is expected
    assert ledger.get(batch.batch_id) == after
    reserved = ledger.reserved_ranges("orders")
    assert reserved == (sorted(batch.plan.offset_ranges()) if expected.in_flight else [])


def test_transition_cases_cover_the_table():
    """Every allowed move of TRANSITIONS is a case above, and every case above is in it."""
    target = {"drain": S.DRAINED, "check": S.CHECKED, "commit": S.COMMITTED, "fail": S.FAILED, "replay": S.PLANNED}
    allowed = {(start, target[action]) for start, action, expected, _ in TRANSITION_CASES if expected is not None}
    assert allowed == set(TRANSITIONS)
    assert len(TRANSITION_CASES) == len(S) * len(ACTIONS)


def test_invalid_transition_message_names_batch_state_and_asked_state(ledger: Ledger):
    batch = ledger.record_plan(make_plan((0, 10)))
    with pytest.raises(InvalidTransition, match=r"batch b-000001 is planned and cannot become committed"):
        ledger.mark_committed(batch.batch_id, {})


def test_lifecycle_keeps_outputs_times_and_events(ledger: Ledger, clock: Clock):
    plan = make_plan((0, 10))
    created = clock.now
    batch = ledger.record_plan(plan)
    assert (batch.created_at, batch.updated_at, batch.attempts, batch.reason) == (created, created, 1, None)
    assert batch.plan == plan and batch.in_flight and not batch.replay_of_committed
    clock.tick()
    batch = ledger.mark_drained(batch.batch_id, stats_for(plan))
    assert batch.drain_stats == stats_for(plan) and batch.updated_at == created + timedelta(seconds=1)
    batch = ledger.mark_checked(batch.batch_id, {"passed": 5})
    assert batch.check_results == {"passed": 5}
    batch = ledger.mark_drained(batch.batch_id, stats_for(plan, 120))
    assert batch.check_results is None, "a re-drain voids earlier checks"
    batch = ledger.mark_checked(batch.batch_id, {"passed": 5})
    batch = ledger.mark_committed(batch.batch_id, {"lag_after": 0})
    assert batch.commit_report == {"lag_after": 0} and not batch.in_flight and batch.created_at == created
    moves = [(e.from_state, e.to_state) for e in ledger.events(batch.batch_id)]
    assert moves == [
        (None, S.PLANNED),
        (S.PLANNED, S.DRAINED),
        (S.DRAINED, S.CHECKED),
        (S.CHECKED, S.DRAINED),
        (S.DRAINED, S.CHECKED),
        (S.CHECKED, S.COMMITTED),
    ]


def test_mark_failed_needs_a_reason_and_abandon_says_so(ledger: Ledger):
    batch = ledger.record_plan(make_plan((0, 10)))
    with pytest.raises(ValueError, match="needs a reason"):
        ledger.mark_failed(batch.batch_id, "  ")
    failed = ledger.abandon(batch.batch_id, "run 7f3a died")
    assert (failed.state, failed.reason) == (S.FAILED, "abandoned: run 7f3a died")
    assert ledger.events(batch.batch_id)[-1].reason == "abandoned: run 7f3a died"
    with pytest.raises(InvalidTransition):
        ledger.abandon(batch.batch_id, "again")


# --------------------------------------------------------------------------------- reservations

def test_overlap_is_refused_with_the_holder_and_the_range(ledger: Ledger):
    held = ledger.record_plan(make_plan((0, 10)))
    with pytest.raises(RangeConflict) as err:
        ledger.record_plan(make_plan((30, 40), (9, 12)))
    message = str(err.value)
    assert held.batch_id in message
    assert "orders-2[0]@[9,12) overlaps orders-2[0]@[0,10)" in message
    assert [b.batch_id for b in ledger.batches()] == [held.batch_id], "nothing of the refused plan is stored"
    assert ledger.reserved_ranges("orders") == [OffsetRange("orders-2", 0, 0, 10)]
    assert ledger.record_plan(make_plan((10, 20))).batch_id == "b-000002", "a refused plan uses no id"


@pytest.mark.parametrize(
    ("second", "why"),
    [
        (OffsetRange("orders-2", 0, 10, 20), "adjacent: [0,10) ends where [10,20) starts"),
        (OffsetRange("orders-2", 1, 0, 10), "same offsets, other partition"),
        (OffsetRange("orders-1", 0, 0, 10), "same offsets, other priority topic"),
        (OffsetRange("orders-2", 0, 5, 5), "an empty range holds no offset"),
    ],
)
def test_ranges_that_do_not_overlap_are_accepted(ledger: Ledger, second: OffsetRange, why: str):
    ledger.record_plan(make_plan((0, 10)))
    ledger.record_plan(make_plan(second))
    assert len(ledger.in_flight("orders")) == 2


def test_plan_overlapping_itself_is_refused(ledger: Ledger):
    with pytest.raises(RangeConflict, match=r"\[0,10\) overlaps orders-2\[0\]@\[5,15\) of the same plan"):
        ledger.record_plan(make_plan((0, 10), (5, 15)))


@pytest.mark.parametrize("finish", [("fail",), ("drain", "check", "commit")])
def test_ranges_are_free_again_once_the_batch_leaves_flight(ledger: Ledger, finish: tuple[str, ...]):
    batch = ledger.record_plan(make_plan((0, 10)))
    for step in finish:
        batch = act(ledger, batch, step)
    assert ledger.reserved_ranges("orders") == []
    assert ledger.record_plan(make_plan((0, 10))).state is S.PLANNED


def test_max_in_flight_counts_batches_of_the_topic(ledger: Ledger):
    first = ledger.record_plan(make_plan((0, 10)), max_in_flight=1)
    with pytest.raises(RangeConflict, match=r"'orders' already has 1 batch\(es\) in flight \(max_in_flight=1\): b-000001"):
        ledger.record_plan(make_plan((10, 20)), max_in_flight=1)
    ledger.record_plan(make_plan((0, 10), topic="payments"), max_in_flight=1)  # another topic: its own count
    ledger.record_plan(make_plan((10, 20)), max_in_flight=2)
    ledger.mark_failed(first.batch_id, "operator stop")
    assert ledger.record_plan(make_plan((30, 40)), max_in_flight=2).batch_id == "b-000004"
    with pytest.raises(ValueError, match="max_in_flight must be >= 1"):
        ledger.record_plan(make_plan((50, 60)), max_in_flight=0)


# --------------------------------------------------------------------------------- replay

def test_replay_of_a_failed_batch_reserves_the_same_ranges(ledger: Ledger):
    plan = make_plan((0, 10), OffsetRange("orders-1", 3, 7, 9))
    batch = ledger.record_plan(plan)
    batch = ledger.mark_drained(batch.batch_id, stats_for(plan))
    ledger.mark_failed(batch.batch_id, "row count 9 != 10")
    again = ledger.replay(batch.batch_id)
    assert (again.state, again.attempts, again.reason, again.drain_stats) == (S.PLANNED, 2, None, None)
    assert again.plan == plan and not again.replay_of_committed
    assert ledger.reserved_ranges("orders") == sorted(plan.offset_ranges())
    assert ledger.events(batch.batch_id)[-1].reason == "replay of a failed batch"


def test_replay_of_a_committed_batch_is_flagged_for_good(ledger: Ledger):
    batch = ledger.record_plan(make_plan((0, 10)))
    for step in ("drain", "check", "commit", "replay"):
        batch = act(ledger, batch, step)
    assert (batch.state, batch.attempts, batch.replay_of_committed, batch.commit_report) == (S.PLANNED, 2, True, None)
    assert ledger.reserved_ranges("orders") == [OffsetRange("orders-2", 0, 0, 10)]
    for step in ("drain", "fail", "replay"):
        batch = act(ledger, batch, step)
    assert (batch.attempts, batch.replay_of_committed) == (3, True), "a failed re-drain of committed offsets stays flagged"


def test_replay_conflicts_with_a_newer_batch_holding_the_ranges(ledger: Ledger):
    old = ledger.record_plan(make_plan((0, 10)))
    ledger.mark_failed(old.batch_id, "executor lost")
    newer = ledger.record_plan(make_plan((5, 15)))
    with pytest.raises(RangeConflict, match=rf"held by batch {newer.batch_id}"):
        ledger.replay(old.batch_id)
    assert ledger.get(old.batch_id).state is S.FAILED
    with pytest.raises(RangeConflict, match="max_in_flight=1"):
        ledger.replay(old.batch_id, max_in_flight=1)  # the newer batch already fills the one slot


def test_replay_of_an_in_flight_batch_says_fail_it_first(ledger: Ledger):
    batch = ledger.record_plan(make_plan((0, 10)))
    with pytest.raises(InvalidTransition, match="b-000001 is planned and cannot be replayed.*fail it first"):
        ledger.replay(batch.batch_id)


# --------------------------------------------------------------------------------- reading

def test_unknown_and_malformed_ids_are_not_found(ledger: Ledger):
    with pytest.raises(BatchNotFound, match="no batch b-000009"):
        ledger.get("b-000009")
    with pytest.raises(BatchNotFound, match="'42' is not a ledger batch id"):
        ledger.mark_failed("42", "x")
    with pytest.raises(BatchNotFound):
        ledger.events("b-000003")


def test_listing_filters_and_orders(ledger: Ledger):
    a = ledger.record_plan(make_plan((0, 10)))
    b = ledger.record_plan(make_plan((0, 10), topic="payments"))
    c = ledger.record_plan(make_plan((10, 20)))
    ledger.mark_failed(a.batch_id, "x")
    ids = lambda bs: [x.batch_id for x in bs]  # noqa: E731
    assert ids(ledger.batches()) == [c.batch_id, b.batch_id, a.batch_id], "newest first"
    assert ids(ledger.batches("orders")) == [c.batch_id, a.batch_id]
    assert ids(ledger.batches(states=[S.FAILED])) == [a.batch_id]
    assert ids(ledger.batches(limit=1)) == [c.batch_id]
    assert ids(ledger.in_flight()) == [b.batch_id, c.batch_id], "oldest first"
    assert ids(ledger.in_flight("payments")) == [b.batch_id]
    assert ledger.reserved_ranges("orders") == [OffsetRange("orders-2", 0, 10, 20)]
    assert ledger.reserved_ranges("nobody") == []


def test_plan_round_trips_with_every_decision(ledger: Ledger):
    plan = DrainPlan(
        logical_topic="orders",
        mode="flipkart",
        record_budget=50,
        byte_budget=4096,
        quotas={2: 29, 1: 14, 0: 7},
        grants={2: 43, 1: 0, 0: 7},
        ranges=(PlannedRange(2, OffsetRange("orders-2", 0, 0, 43), 4000), PlannedRange(0, OffsetRange("orders-0", 1, 3, 10))),
        burst=BurstDecision(2, 14, "priority 2 maxed out 4 of the last 6 batches"),
        lost=(OffsetRange("orders-0", 1, 0, 3),),
        backlog_before={2: 100, 1: 0, 0: 10},
        snapshot_taken_at_ms=1_735_787_045_000,
    )
    assert ledger.get(ledger.record_plan(plan).batch_id).plan == plan


def test_from_settings_creates_the_parent_directory(tmp_path: Path):
    target = tmp_path / "a" / "b" / "ledger.db"
    with Ledger.from_settings(LedgerSettings(url=f"sqlite:///{target}")) as led:
        led.record_plan(make_plan((0, 1)))
    assert target.is_file()


def test_repr_hides_a_database_password():
    led = Ledger.__new__(Ledger)
    led._url = "postgresql+psycopg://kprio:s3cret@db:5432/kprio"
    assert "s3cret" not in repr(led) and "kprio:***@db" in repr(led)


# --------------------------------------------------------------------------------- restarts

def test_a_restarted_process_sees_the_truth(url: str, clock: Clock):
    first = Ledger(url, clock=clock)
    drained = first.record_plan(make_plan((0, 10)))
    first.mark_drained(drained.batch_id, stats_for(drained.plan))
    failed = first.record_plan(make_plan((10, 20)))
    first.mark_failed(failed.batch_id, "handler raised ValueError")
    first.save_history("orders", {"n_priorities": 3})
    first.close()  # the process dies here: nothing else is written

    restarted = Ledger(url, clock=clock)
    assert [(b.batch_id, b.state) for b in restarted.in_flight()] == [(drained.batch_id, S.DRAINED)]
    assert restarted.get(failed.batch_id).reason == "handler raised ValueError"
    assert restarted.reserved_ranges("orders") == [OffsetRange("orders-2", 0, 0, 10)], "a dead run keeps its ranges"
    with pytest.raises(RangeConflict):
        restarted.record_plan(make_plan((5, 6)))
    restarted.abandon(drained.batch_id, "run died before the checks")
    assert restarted.reserved_ranges("orders") == []
    assert restarted.load_history("orders") == {"n_priorities": 3}
    assert restarted.record_plan(make_plan((0, 10))).batch_id == "b-000003"
    restarted.close()


def test_two_open_ledgers_on_one_file_see_each_other(url: str):
    a, b = Ledger(url), Ledger(url)
    try:
        batch = a.record_plan(make_plan((0, 10)))
        with pytest.raises(RangeConflict, match=batch.batch_id):
            b.record_plan(make_plan((9, 11)))
        b.mark_failed(batch.batch_id, "stopped from process b")
        assert a.get(batch.batch_id).state is S.FAILED
    finally:
        a.close()
        b.close()


# --------------------------------------------------------------------------------- small state

def test_history_and_state_survive_a_restart_and_stay_per_topic(url: str):
    history = PollHistory.from_counts({2: [29, 29, 10]}, {2: 29, 1: 14, 0: 7})
    with Ledger(url) as led:
        assert led.load_history("orders") is None and led.load_poll_history("orders") is None
        led.save_history("orders", history.to_dict())
        led.save_state("orders", "rate", {"samples": [[0, 5.0]]})
        led.save_state("orders", "rate", {"samples": [[1, 7.5]]})  # replaces
        led.save_state("payments", "rate", {"samples": []})
    with Ledger(url) as led:
        assert led.load_history("orders") == history.to_dict()
        assert led.load_poll_history("orders") == history
        assert led.load_state("orders", "rate") == {"samples": [[1, 7.5]]}
        assert led.load_state("payments", "rate") == {"samples": []}
        assert led.load_state("orders", "other") is None and led.load_history("payments") is None


def test_state_must_be_a_json_dict(ledger: Ledger):
    with pytest.raises(TypeError, match="state 'rate' of 'orders' must be a dict"):
        ledger.save_state("orders", "rate", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="state 'rate' of 'orders' is not JSON-serialisable"):
        ledger.save_state("orders", "rate", {"when": datetime(2025, 1, 1)})
    with pytest.raises(TypeError, match="checks of b-000001 is not JSON"):
        ledger.mark_checked(ledger.mark_drained(ledger.record_plan(make_plan((0, 1))).batch_id, {}).batch_id, {"x": {1, 2}})


# --------------------------------------------------------------------------------- average record bytes

def drain(ledger: Ledger, clock: Clock, spans: list[tuple[OffsetRange, int]]) -> Batch:
    """Record and drain one batch; spans are (range, bytes drained from it)."""
    logical = spans[0][0].topic.rsplit("-", 1)[0]
    batch = ledger.record_plan(make_plan(*(r for r, _ in spans), topic=logical))
    stats = {"ranges": [{"topic": r.topic, "records": r.count, "bytes": size} for r, size in spans]}
    clock.tick()
    batch = ledger.mark_drained(batch.batch_id, stats)
    return ledger.mark_failed(batch.batch_id, "free the ranges for the next test batch")


def test_avg_record_bytes_is_sum_bytes_over_sum_records(ledger: Ledger, clock: Clock):
    drain(ledger, clock, [(OffsetRange("orders-2", 0, 0, 29), 5800), (OffsetRange("orders-0", 0, 0, 4), 4000)])
    drain(ledger, clock, [(OffsetRange("orders-2", 1, 0, 1), 400), (OffsetRange("orders-1", 0, 0, 0), 0)])
    drain(ledger, clock, [(OffsetRange("payments-2", 0, 0, 10), 1_000_000)])  # other logical topic
    avg = ledger.avg_record_bytes("orders")
    assert avg == {"orders-0": 1000.0, "orders-2": pytest.approx(6200 / 30)}, "orders-1 drained 0 records: absent"


def test_avg_record_bytes_counts_the_last_k_batches_of_each_topic(ledger: Ledger, clock: Clock):
    drain(ledger, clock, [(OffsetRange("orders-2", 0, 0, 10), 1000), (OffsetRange("orders-0", 0, 0, 10), 5000)])
    drain(ledger, clock, [(OffsetRange("orders-2", 0, 10, 20), 2000)])
    drain(ledger, clock, [(OffsetRange("orders-2", 0, 20, 30), 3000)])
    assert ledger.avg_record_bytes("orders", last_batches=2) == {"orders-2": 250.0, "orders-0": 500.0}
    assert ledger.avg_record_bytes("orders", last_batches=1) == {"orders-2": 300.0, "orders-0": 500.0}
    assert ledger.avg_record_bytes("orders", last_batches=3)["orders-2"] == 200.0
    with pytest.raises(ValueError, match="last_batches must be >= 1"):
        ledger.avg_record_bytes("orders", last_batches=0)


def test_a_rerun_drain_replaces_its_numbers(ledger: Ledger):
    batch = ledger.record_plan(make_plan((0, 10)))
    ledger.mark_drained(batch.batch_id, stats_for(batch.plan, 100))
    ledger.mark_drained(batch.batch_id, stats_for(batch.plan, 300))
    assert ledger.avg_record_bytes("orders") == {"orders-2": 300.0}


@pytest.mark.parametrize(
    ("stats", "message"),
    [
        ({"ranges": {"topic": "orders-2"}}, "'ranges' must be a list"),
        ({"ranges": [{"topic": "orders-2", "records": 3}]}, r"ranges\[0\].bytes must be an integer >= 0, got None"),
        ({"ranges": [{"records": 3, "bytes": 9}]}, r"ranges\[0\].topic must be a topic name"),
        (
            {"ranges": [{"topic": "orders-2", "records": True, "bytes": 9}]},
            r"ranges\[0\].records must be an integer >= 0, got True",
        ),
    ],
)
def test_malformed_drain_stats_are_refused_and_change_nothing(ledger: Ledger, stats: dict, message: str):
    batch = ledger.record_plan(make_plan((0, 10)))
    with pytest.raises(DrainStatsInvalid, match=rf"drain stats of b-000001: {message}"):
        ledger.mark_drained(batch.batch_id, stats)
    assert ledger.get(batch.batch_id).state is S.PLANNED
