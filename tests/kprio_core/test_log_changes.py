"""The rules of kprio_core.log_changes: one case per row, with why; and the ledger's beliefs and log events."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect

from kprio_core.config import OnOffsetOutOfRange as P
from kprio_core.ledger import Ledger
from kprio_core.log_changes import (
    Belief,
    Change,
    classify,
    hold_reason,
    in_flight_blocks_reset,
    is_superseded,
    outcome_of,
    redrain_ranges,
    reset_target,
    superseded,
    with_commits_under_way,
)
from kprio_core.log_changes import (
    LogState as S,
)
from kprio_core.log_changes import (
    Outcome as O,
)
from kprio_core.model.offsets import OffsetRange as R
from kprio_core.model.snapshot import PartitionLag


def lag(committed, log_start=0, high=100, topic="o-2", partition=0):
    return PartitionLag(topic, partition, priority=2, log_start=log_start, high_watermark=high, committed=committed)


def belief(committed=None, topic_id="A", incarnation=1):
    return Belief("o-2", 0, topic_id, incarnation, committed)


def committing(committed, *ends):
    """A belief with batches in flight whose ranges end at ``ends`` (their commits may be under way)."""
    return with_commits_under_way({("o-2", 0): belief(committed)}, [R("o-2", 0, committed, e) for e in ends])[("o-2", 0)]


CASES = [
    # (belief, lag, topic id now, topic known, state, outcome under hold, why)
    (belief(60), lag(60), "A", True, S.OK, O.DRAIN, "the group stands where kprio left it"),
    (None, lag(None), "A", False, S.OK, O.DRAIN, "a topic new to kprio: drained from its start, nothing to say"),
    (None, lag(None), "A", True, S.PARTITION_ADDED, O.DRAIN, "a new partition of a known topic: picked up, recorded"),
    (belief(60), None, None, True, S.TOPIC_DELETED, O.HOLD, "the topic kprio drained is gone"),
    (belief(60), lag(60, high=10), "B", True, S.TOPIC_RECREATED, O.HOLD, "a new topic id beats every offset rule"),
    (belief(60, topic_id=None), lag(60, high=10), "B", True, S.AHEAD_OF_LOG, O.HOLD,
     "no id believed (a cluster without ids): the recreation shows as an offset beyond the log"),
    (belief(60), lag(None), "A", True, S.COMMITTED_GONE, O.RESTORE, "the group's offsets expired: restore them"),
    (belief(60), lag(None, high=10), "B", True, S.TOPIC_RECREATED, O.HOLD, "recreated and gone: identity first"),
    (belief(60), lag(500), "A", True, S.AHEAD_OF_LOG, O.HOLD, "someone set it beyond the high watermark"),
    (None, lag(500), "A", False, S.AHEAD_OF_LOG, O.HOLD, "beyond the log even without a belief (a fresh ledger)"),
    (belief(60), lag(20), "A", True, S.MOVED_BACK, O.REDRAIN, "moved back by a reset tool: re-drain exactly"),
    (belief(60), lag(90), "A", True, S.MOVED_FORWARD, O.ACCEPT, "moved forward: skipped by the operator, recorded"),
    (belief(60), lag(60, log_start=80), "A", True, S.LOST_TO_RETENTION, O.HOLD, "retention deleted [60,80)"),
    (belief(None), lag(None, log_start=5), "A", True, S.LOST_TO_RETENTION, O.HOLD, "never committed, log starts at 5"),
    (belief(60), lag(100), "A", True, S.MOVED_FORWARD, O.ACCEPT, "forward to the high watermark exactly is no overflow"),
    (committing(60, 90), lag(90), "A", True, S.OK, O.DRAIN,
     "at a checked batch's end: kprio's own commit, Kafka told before the ledger (a crash or a tick in between)"),
    (committing(60, 90), lag(95), "A", True, S.MOVED_FORWARD, O.ACCEPT, "past every end kprio may have committed"),
    (committing(60, 90), lag(20), "A", True, S.MOVED_BACK, O.REDRAIN, "a commit under way never moves it back"),
]


@pytest.mark.parametrize(("b", "observed", "topic_id", "known", "state", "outcome", "why"), CASES,
                         ids=[c[-1] for c in CASES])
def test_each_case_has_one_state_and_one_outcome(b, observed, topic_id, known, state, outcome, why):
    change = classify(b, observed, topic_id=topic_id, topic_known=known)
    assert change.state is state, why
    assert outcome_of(change, P.HOLD) is outcome, why


@pytest.mark.parametrize(("policy", "outcome", "target"), [
    (P.HOLD, O.HOLD, None),
    (P.EARLIEST, O.RESET_EARLIEST, 3),
    (P.LATEST, O.RESET_LATEST, 10),
], ids=["hold waits for a person", "earliest drains the new log whole", "latest skips it (recorded)"])
@pytest.mark.parametrize("state", [S.AHEAD_OF_LOG, S.TOPIC_RECREATED])
def test_the_policy_decides_out_of_range_offsets_only(policy, outcome, target, state):
    change = Change("o-2", 0, state, 60, 60, 3, 10)
    assert outcome_of(change, policy) is outcome
    assert reset_target(change, outcome) == target
    # Every other state keeps its rule whatever the policy.
    for other, rule in [(S.MOVED_BACK, O.REDRAIN), (S.MOVED_FORWARD, O.ACCEPT), (S.COMMITTED_GONE, O.RESTORE),
                        (S.TOPIC_DELETED, O.HOLD), (S.OK, O.DRAIN), (S.PARTITION_ADDED, O.DRAIN)]:
        assert outcome_of(Change("o-2", 0, other, 60, 60, 3, 10), policy) is rule


def test_allow_data_loss_drains_past_retention_only():
    lost = Change("o-2", 0, S.LOST_TO_RETENTION, 60, 60, 80, 100)
    assert outcome_of(lost, P.HOLD, allow_data_loss=True) is O.DRAIN
    ahead = Change("o-2", 0, S.AHEAD_OF_LOG, 60, 600, 0, 100)
    assert outcome_of(ahead, P.HOLD, allow_data_loss=True) is O.HOLD, "data loss is not an offset beyond the log"


def test_a_committed_offset_beyond_the_log_is_not_clamped():
    p = lag(500, high=30)
    assert (p.next_offset, p.backlog, p.pending.count, p.ahead_of_log) == (500, 0, 0, True)
    # The log growing past nothing it knows: records [30,520) are still not treated as new from 500.
    assert lag(500, high=520).backlog == 20 and lag(500, high=520).ahead_of_log is False


@pytest.mark.parametrize(("start", "until", "drained", "expected", "why"), [
    (40, 100, [(0, 40), (40, 70), (70, 100)], [(40, 70), (70, 100)], "aligned: the two later batches"),
    (45, 100, [(0, 40), (40, 70), (70, 100)], [(40, 70), (70, 100)], "inside a batch: that whole batch again"),
    (0, 40, [(0, 40), (40, 70)], [(0, 40)], "only what was moved back over"),
    (10, 100, [(30, 60), (60, 100)], None, "below what this ledger drained: no exact ranges, hold"),
    (40, 100, [(40, 70), (80, 100)], None, "a hole between batches: hold"),
])
def test_redrain_ranges_rewrite_whole_drained_ranges(start, until, drained, expected, why):
    got = redrain_ranges(start, until, [R("o-2", 0, s, e) for s, e in drained])
    assert (None if got is None else [(r.start, r.end) for r in got]) == expected, why


def test_a_hold_names_the_partition_the_offsets_the_log_and_the_command():
    text = hold_reason(Change("o-2", 3, S.TOPIC_RECREATED, 120, 120, 0, 7, 1, "A", "B"))
    assert text == ("o-2[3] topic recreated: its topic id changed from A to B; committed 120; log [0,7); "
                    "decide: kprio reset o-2[3] --to earliest|latest|<offset>")


def test_beliefs_follow_kprio_commits_and_recorded_decisions(tmp_path):
    from kprio_core.model.results import CheckReport, CommitReport
    from tests.kprio_core.ledger_support import make_plan, result_for

    with Ledger(f"sqlite:///{tmp_path / 'l.db'}") as ledger:
        b = ledger.batches.record_plan(make_plan((0, 10)))
        ledger.moves.mark_drained(b.batch_id, result_for(b))
        ledger.moves.mark_checked(b.batch_id, CheckReport(()))
        [r] = b.plan.offset_ranges()
        ledger.moves.mark_committed(b.batch_id, CommitReport.of({r.topic_partition: (None, 10)}, {}))
        assert ledger.beliefs.of("orders")[r.topic_partition].committed == 10
        # A commit never lowers the belief (a replay's commit from a moved-back offset).
        ledger.beliefs.remember("orders", [Belief(r.topic, r.partition, "ID", 1, 10)])
        change = Change(r.topic, r.partition, S.MOVED_FORWARD, 10, 30, 0, 40)
        first = ledger.beliefs.record_change("orders", change, O.ACCEPT, decided_by="rule", note="skipped [10,30)")
        assert first is not None and ledger.beliefs.record_change("orders", change, O.ACCEPT, decided_by="rule") is None
        assert [e.outcome for e in ledger.beliefs.log_events("orders")] == ["accept"]
        assert ledger.beliefs.of("orders")[r.topic_partition].topic_id == "ID"


def test_a_commit_that_finds_the_group_past_its_end_raises_the_belief_to_its_end():
    """Someone moved the group forward past a batch in flight: its commit writes nothing there, yet kprio drained
    up to the batch's end; only the offsets beyond it are someone else's skip (never lowered: a re-drain's end)."""
    from kprio_core.model.results import CheckReport, CommitReport
    from tests.kprio_core.ledger_support import make_plan, result_for

    with Ledger("sqlite://") as ledger:
        b = ledger.batches.record_plan(make_plan((0, 10)))
        [r] = b.plan.offset_ranges()
        ledger.moves.mark_drained(b.batch_id, result_for(b))
        ledger.moves.mark_checked(b.batch_id, CheckReport(()))
        ledger.beliefs.remember("orders", [Belief(r.topic, r.partition, None, 1, 0)])
        ledger.moves.mark_committed(b.batch_id, CommitReport.of({}, {r.topic_partition: "already committed at 25"}),
                                    reached={r.topic_partition: 10})
        assert ledger.beliefs.of("orders")[r.topic_partition].committed == 10
        ledger.beliefs.remember("orders", [Belief(r.topic, r.partition, None, 1, 40)])
        replay = ledger.attempts.replay(b.batch_id)
        ledger.moves.mark_drained(replay.batch_id, result_for(replay))
        ledger.moves.mark_checked(replay.batch_id, CheckReport(()))
        ledger.moves.mark_committed(replay.batch_id, CommitReport(), reached={r.topic_partition: 10})
        assert ledger.beliefs.of("orders")[r.topic_partition].committed == 40


def test_a_v2_ledger_without_the_new_tables_gets_them(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    Ledger(url).close()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE kprio_log_events")
        conn.exec_driver_sql("DROP TABLE kprio_partitions")
    with Ledger(url) as ledger:
        assert ledger.beliefs.of("orders") == {} and ledger.beliefs.log_events() == []
    assert {"kprio_partitions", "kprio_log_events"} <= set(inspect(engine).get_table_names())
    engine.dispose()


def test_a_v2_ledger_without_commit_samples_gets_them_from_its_committed_batches(tmp_path):
    """The verdict's window of a ledger made before kprio kept commit samples: its committed batches' commits,
    at their commit time, log end unknown."""
    from tests.kprio_core.ledger_support import drain_check_commit, make_plan

    url = f"sqlite:///{tmp_path / 'old.db'}"
    with Ledger(url) as ledger:
        first = drain_check_commit(ledger, ledger.batches.record_plan(make_plan((0, 10))))
        second = drain_check_commit(ledger, ledger.batches.record_plan(make_plan((10, 25))))
        ledger.batches.record_plan(make_plan((25, 30)))  # not committed: no sample
    engine = create_engine(url)
    with engine.begin() as conn:  # the ledger as a kprio before the samples wrote it
        conn.exec_driver_sql("DROP TABLE kprio_commit_samples")
    with Ledger(url) as ledger:
        samples = ledger.samples.commits("orders", 10)
    assert [(s.topic, s.partition, s.at, s.committed, s.log_end) for s in samples] == [
        ("orders-2", 0, first.committed_at, 10, None), ("orders-2", 0, second.committed_at, 25, None)]
    engine.dispose()


def test_a_v2_ledger_without_the_new_columns_gets_them_and_its_rows_read_as_they_meant(tmp_path):
    from tests.kprio_core.ledger_support import make_plan

    url = f"sqlite:///{tmp_path / 'old.db'}"
    with Ledger(url) as ledger:
        ledger.batches.record_plan(make_plan((0, 10)))
    engine = create_engine(url)
    with engine.begin() as conn:  # the table as a kprio before the columns wrote it
        conn.exec_driver_sql("ALTER TABLE kprio_batches DROP COLUMN lease_epoch")
        conn.exec_driver_sql("ALTER TABLE kprio_batches DROP COLUMN transient_streak")
    with Ledger(url) as ledger:
        [old] = ledger.batches.find()
        assert (old.lease_epoch, old.transient_streak) == (0, 0)
        assert ledger.leases.claim(old.batch_id, "r@h:1", 30).lease_epoch == 2, "above the epoch and the attempt"
    assert {"lease_epoch", "transient_streak"} <= {c["name"] for c in inspect(engine).get_columns("kprio_batches")}
    engine.dispose()


# --- a hold a person was asked to decide ----------------------------------------------------------


def test_a_hold_that_asks_a_person_stays_whatever_the_log_does_until_a_person_decides(tmp_path):
    """Someone moved the group to 421, beyond the log's end at 121: held for a person. 450 records later the
    log's end is past 421, which alone reads as a forward move (skip [121,421) as the operator's): it must not."""
    from kprio_core.lifecycle.log_rules import decide_log_changes

    ahead = Change("o-2", 0, S.AHEAD_OF_LOG, 121, 421, 0, 121)
    later = Change("o-2", 0, S.MOVED_FORWARD, 121, 421, 0, 571)

    def decide(change, open_holds, policy=P.HOLD):
        return decide_log_changes([change], policy, False, drained=lambda t, q: [], redraining=(),
                                  open_holds=open_holds)

    with Ledger(f"sqlite:///{tmp_path / 'l.db'}") as ledger:
        [held], [hold] = decide(ahead, ledger.beliefs.open_holds("orders"))
        assert held.outcome is O.HOLD and hold.exhausted
        ledger.beliefs.record_change("orders", ahead, held.outcome, decided_by=held.decided_by, note=held.describe())
        open_holds = ledger.beliefs.open_holds("orders")
        assert set(open_holds) == {("o-2", 0)}

        [still], [hold] = decide(later, open_holds)
        assert still.outcome is O.HOLD and still.standing and hold.exhausted and hold.start == 121
        assert "committed 421 is beyond the log's end 121" in hold.reason and "log [0,571)" in hold.reason
        assert "kprio reset o-2[0]" in hold.reason
        [unheld], _ = decide(later, {})
        assert unheld.outcome is O.ACCEPT, "without the recorded hold the same change reads as accepted"

        # A decision kprio waits for by itself records a wait, which leaves the person's hold open.
        ledger.beliefs.record_change("orders", ahead, O.WAIT, decided_by="policy")
        assert set(ledger.beliefs.open_holds("orders")) == {("o-2", 0)}
        # The rule the user configured decides it: a reset of the log that became another log.
        [reset], holds = decide(later, ledger.beliefs.open_holds("orders"), P.EARLIEST)
        assert (reset.outcome, reset.target, reset.incarnation, reset.decided_by, holds) == (
            O.RESET_EARLIEST, 0, 2, "policy", ())
        # A person's kprio reset ends it.
        ledger.beliefs.record_change("orders", later, O.RESET_TO_OFFSET, decided_by="person", committed_after=121)
        assert ledger.beliefs.open_holds("orders") == {}


# --- batches planned on an earlier incarnation ------------------------------------------------


@pytest.mark.parametrize("planned, current, expected, why", [
    (1, 1, False, "same incarnation: the batch runs and holds as before"),
    (1, 2, True, "planned before the reset that started incarnation 2: another log's offsets now"),
    (2, 3, True, "every older incarnation is superseded, not only the first"),
    (2, 2, False, "planned on the new incarnation after the reset"),
    (3, 2, False, "a plan newer than the belief (never recorded so) is not older"),
])
def test_is_superseded(planned, current, expected, why):
    assert is_superseded(planned, current) is expected, why


@pytest.mark.parametrize("planned, current, expected, why", [
    ({("o-2", 0): 1, ("o-1", 0): 1}, {("o-2", 0): 2}, ["o-2[0]"], "one partition reset: superseded there only"),
    ({("o-2", 0): 1, ("o-2", 1): 1}, {("o-2", 0): 2, ("o-2", 1): 2}, ["o-2[0]", "o-2[1]"], "each partition named"),
    ({("o-2", 0): 2}, {("o-2", 0): 2}, [], "planned on the current incarnation"),
    ({("o-2", 0): 1}, {}, [], "no belief above 1: incarnation 1"),
    ({("o-1", 0): 1}, {("o-2", 0): 2}, [], "another partition's reset does not touch it"),
])
def test_superseded_names_each_partition_with_both_incarnations(planned, current, expected, why):
    found = superseded("b-000003", planned, current)
    assert [s.where for s in found] == expected, why
    for s in found:
        assert (s.planned, s.current) == (planned[(s.topic, s.partition)], current[(s.topic, s.partition)])
        assert s.describe().startswith(f"b-000003 is superseded on {s.where}: planned on incarnation {s.planned}")


@pytest.mark.parametrize("new_incarnation, in_flight, waits, why", [
    (True, ["b-000004"], True, "a new incarnation never starts under a batch in flight"),
    (True, [], False, "nothing in flight: the reset goes ahead"),
    (False, ["b-000004"], False, "a reset on the same log keeps the incarnation: no batch is superseded"),
])
def test_a_reset_to_a_new_incarnation_waits_for_a_batch_in_flight(new_incarnation, in_flight, waits, why):
    c = Change("o-2", 0, S.TOPIC_RECREATED, 30, None, 0, 12, 1, "A", "B")
    assert (in_flight_blocks_reset(c, new_incarnation, in_flight) is not None) is waits, why


def test_a_superseded_failed_batch_holds_nothing_and_is_never_retried_by_the_ledger():
    from kprio_core.errors import BatchSuperseded
    from kprio_core.model.drain_plan import DrainPlan, PlannedRange

    def plan(*ranges, incarnations=None):
        return DrainPlan("o", "lag-aware", 50, None, {2: 50}, {2: 50},
                         tuple(PlannedRange(2, r, est_bytes=10) for r in ranges), incarnations=incarnations or {})

    with Ledger("sqlite://") as ledger:
        failed = ledger.batches.record_plan(plan(R("o-2", 0, 10, 20), R("o-2", 1, 0, 5)))
        ledger.moves.mark_failed(failed.batch_id, "check failed", retry_at=None)
        assert {h.partition for h in ledger.batches.holds("o")} == {0, 1}
        ledger.beliefs.remember("o", [Belief("o-2", 0, "B", 2, 0)])  # a reset of o-2[0] started incarnation 2
        assert [(s.batch_id, s.where, s.planned, s.current) for s in ledger.batches.superseded("o")] == \
            [(failed.batch_id, "o-2[0]", 1, 2)]
        assert ledger.batches.holds("o") == [], "superseded whole: it holds neither partition"
        with pytest.raises(BatchSuperseded, match=r"b-000001 is superseded on o-2\[0\]: planned on incarnation 1"):
            ledger.attempts.retry(failed.batch_id, reason="automatic retry")
        with pytest.raises(BatchSuperseded):
            ledger.attempts.replay(failed.batch_id)
        assert ledger.batches.get(failed.batch_id).attempts == 1
        # The new incarnation and the other partition are planned anew over the failed batch's offsets.
        fresh = ledger.batches.record_plan(plan(R("o-2", 0, 0, 12), R("o-2", 1, 0, 5), incarnations={"o-2[0]": 2}))
        assert ledger.batches.superseded_batch(fresh.batch_id) == ()
        assert ledger.moves.note_superseded(ledger.batches.superseded("o")[0]) is True
        assert ledger.moves.note_superseded(ledger.batches.superseded("o")[0]) is False, "said once"


@pytest.mark.parametrize("allow, high, outcome, why", [
    (True, 400, O.RECORD_GAP, "nothing after the gap to drain: the gap is recorded and the group moves past it"),
    (True, 450, None, "records after the gap: the batch that drains them records it (its plan's lost ranges)"),
    (False, 400, None, "drain.allow_data_loss unset: held for a person (lost_partitions), nothing decided here"),
])
def test_a_gap_retention_left_with_nothing_after_it_is_recorded_when_allowed(allow, high, outcome, why):
    from kprio_core.lifecycle.log_rules import decide_log_changes

    gap = Change("o-2", 0, S.LOST_TO_RETENTION, 300, 300, 400, high)
    decided, holds = decide_log_changes([gap], P.HOLD, allow, drained=lambda t, q: [], redraining=())
    assert [d.outcome for d in decided] == ([outcome] if outcome else []), why
    if outcome:
        assert (decided[0].target, decided[0].decided_by, holds) == (400, "policy", ()), why


# --- a group moved back: re-drained once per move, step by step, only what the move touched -------

def drained(batch_id, *ranges, state=None, **more):
    """A drained batch of ``ranges`` (``(priority, partition, start, end)``) of the logical topic ``o``."""
    from kprio_core.ledger import BatchState
    from kprio_core.lifecycle.examples import T0
    from kprio_core.model.drain_plan import DrainPlan, PlannedRange
    from kprio_core.model.records import Batch

    planned = tuple(PlannedRange(p, R(f"o-{p}", q, s, e), est_bytes=e - s) for p, q, s, e in ranges)
    plan = DrainPlan("o", "lag-aware", 50, None, {}, {}, planned)
    return Batch(batch_id, "o", state or BatchState.COMMITTED, plan, more.pop("attempts", 1), T0, T0, **more)


def moved(partition, group, believed=30, priority=1):
    return Change(f"o-{priority}", partition, S.MOVED_BACK, believed, group, 0, 50)


def recorded(change, group):
    """The partition's last recorded change: the re-drain decided when the group stood at ``group``."""
    from datetime import UTC, datetime

    from kprio_core.model.records import LogEvent

    return LogEvent(1, "o", change.topic, change.partition, 1, S.MOVED_BACK.value, O.REDRAIN.value, "rule",
                    change.believed, group, None, 0, 50, datetime(2026, 1, 1, tzinfo=UTC), None)


def _failed_redrain(**more):
    from kprio_core.ledger import BatchState

    return drained("b-000001", (1, 0, 0, 10), (2, 0, 0, 10), state=BatchState.FAILED, replay_of_committed=True,
                   reason="values_match_schema failed", **more)


B1 = drained("b-000001", (1, 0, 0, 10), (1, 1, 0, 10), (2, 0, 0, 10))   # every priority, both partitions of o-1
B2 = drained("b-000002", (1, 0, 10, 20), (1, 1, 10, 20))
B3 = drained("b-000003", (1, 0, 20, 30), (1, 1, 20, 30))


def redrain_cases():
    from kprio_core.lifecycle.examples import T0

    soon = T0.replace(minute=5)
    return [
        # (n, why, changes, drained batches, slots in use, last recorded, expected [(partition, batch, ranges, new
        #  decision)], a phrase of a hold, a person needed)
        (1, "one partition moved back: the range covering where its group stands is re-drained; a new decision",
         [moved(0, 5)], [B1, B2, B3], {}, {}, [(0, "b-000001", ["o-1[0]@[0,10)"], True)], None, False),
        (2, "the same move a tick later, the group moved by the re-drain's commit: carried on, not decided again",
         [moved(0, 10)], [B1, B2, B3], {}, {0: 5}, [(0, "b-000002", ["o-1[0]@[10,20)"], False)], None, False),
        (3, "moved back below where the re-drain had reached: a move of its own, decided (and recorded) again",
         [moved(0, 3)], [B1, B2, B3], {}, {0: 10}, [(0, "b-000001", ["o-1[0]@[0,10)"], True)], None, False),
        (4, "a batch over two priorities: only the moved priority's range is re-drained, priority 2's range stays "
            "and its slot, full, does not stop it",
         [moved(0, 5, believed=10)], [B1], {2: ["b-000009"]}, {}, [(0, "b-000001", ["o-1[0]@[0,10)"], True)], None,
         False),
        (5, "the whole group moved back, one batch covers both partitions: one re-drain of both ranges",
         [moved(0, 5), moved(1, 2)], [B1, B2, B3], {}, {},
         [(0, "b-000001", ["o-1[0]@[0,10)", "o-1[1]@[0,10)"], True), (1, None, [], True)], None, False),
        (6, "the partitions stand in different batches: the older batch first; the other waits for the slot, so "
            "every re-drain commits from where its group stands (never a gap)",
         [moved(0, 15), moved(1, 5)], [B1, B2, B3], {}, {},
         [(0, None, [], True), (1, "b-000001", ["o-1[1]@[0,10)"], True)], "waits for a slot of priority 1", False),
        (7, "the moved priority's slot is taken (the batch the move overtook is in flight): it waits, held",
         [moved(0, 5)], [B1, B2, B3], {1: ["b-000004"]}, {}, [(0, None, [], True)],
         "re-drain of b-000001 waits for a slot of priority 1 (b-000004 in flight)", False),
        (8, "a failed re-drain covers it and its backoff is over: it is drained again",
         [moved(0, 5, believed=10)], [_failed_redrain(retry_at=T0)], {}, {0: 5},
         [(0, "b-000001", ["o-1[0]@[0,10)"], False)], None, False),
        (9, "a failed re-drain still backing off: it waits, held by it as by a failed batch (retried at its time)",
         [moved(0, 5, believed=10)], [_failed_redrain(retry_at=soon)], {}, {0: 5}, [(0, None, [], False)],
         "retried by itself at 00:05:00 UTC", False),
        (10, "a failed re-drain out of attempts: held for a person, naming the batch to retry",
         [moved(0, 5, believed=10)], [_failed_redrain(attempts=3)], {}, {0: 5}, [(0, None, [], False)],
         "fix the cause, then kprio retry b-000001", True),
    ]


@pytest.mark.parametrize(("n", "why", "changes", "batches", "slots", "last", "expected", "phrase", "person"),
                         redrain_cases(), ids=[f"{c[0]}" for c in redrain_cases()])
def test_a_moved_back_group_is_re_drained_once_per_move_step_by_step(n, why, changes, batches, slots, last,
                                                                   expected, phrase, person):
    from kprio_core.lifecycle.examples import T0
    from kprio_core.lifecycle.log_rules import decide_log_changes

    events = {(c.topic, c.partition): recorded(c, last[c.partition]) for c in changes if c.partition in last}
    decided, holds = decide_log_changes(
        changes, P.HOLD, False, drained=lambda t, q: [b for b in batches if (t, q) in b.partitions], redraining=(),
        slots=slots, max_in_flight=1, last=events, now=T0.replace(minute=1), max_attempts=3)
    got = [(d.change.partition, d.redrain[0].batch.batch_id if d.redrain else None,
            [str(r) for r in d.redrain[0].ranges] if d.redrain else [], not d.continuing) for d in decided]
    assert got == expected, f"case {n}: {why}"
    assert {d.outcome for d in decided} == {O.REDRAIN}, f"case {n}: {why}"
    assert [(h.topic, h.partition) for h in holds] == [(c.topic, c.partition) for c in changes], "each one held"
    assert any(h.exhausted for h in holds) is person, f"case {n}: {why}"
    if phrase is not None:
        from kprio_core.lifecycle.holds import describe_holds

        assert phrase in describe_holds(holds), (f"case {n}: {why}", describe_holds(holds))


def test_a_move_back_with_no_drained_range_under_it_is_held_for_a_person():
    from kprio_core.lifecycle.log_rules import decide_log_changes

    [d], [h] = decide_log_changes([moved(0, 5)], P.HOLD, False, drained=lambda t, q: [B2, B3], redraining=())
    assert d.outcome is O.HOLD and h.exhausted and "no drained ranges covering it" in h.reason


def test_the_ledger_re_drains_a_part_of_a_committed_batch_as_a_batch_of_its_own():
    """Priority 1's group moved back under a batch that also drained priority 2: its priority-1 range alone is
    put back (a new planned batch, the committed one keeps the rest); all of a batch's ranges: the batch itself."""
    from kprio_core.ledger import BatchState
    from kprio_core.model.drain_plan import DrainPlan, PlannedRange
    from kprio_core.model.results import CheckReport, CommitReport
    from tests.kprio_core.ledger_support import result_for

    both = DrainPlan("o", "lag-aware", 50, None, {}, {}, (PlannedRange(2, R("o-2", 0, 0, 10), est_bytes=10),
                                                         PlannedRange(1, R("o-1", 0, 0, 10), est_bytes=10)))
    with Ledger("sqlite://") as ledger:
        b = ledger.batches.record_plan(both)
        ledger.moves.mark_drained(b.batch_id, result_for(b))
        ledger.moves.mark_checked(b.batch_id, CheckReport(()))
        ledger.moves.mark_committed(b.batch_id, CommitReport.of({("o-2", 0): (None, 10), ("o-1", 0): (None, 10)}, {}))
        with pytest.raises(ValueError, match="is not a range of the batch"):
            ledger.attempts.redrain(b.batch_id, [R("o-1", 0, 0, 5)])
        part = ledger.attempts.redrain(b.batch_id, [R("o-1", 0, 0, 10)], max_in_flight=1)
        assert (part.state, part.replay_of_committed, part.parent, part.attempts, part.priorities) == (
            BatchState.PLANNED, True, b.batch_id, 1, frozenset({1}))
        assert [str(r) for r in part.plan.offset_ranges()] == ["o-1[0]@[0,10)"]
        assert part.committed_at == ledger.batches.get(b.batch_id).committed_at, "its offsets were committed before"
        rest = ledger.batches.get(b.batch_id)
        assert rest.state is BatchState.COMMITTED and [str(r) for r in rest.plan.offset_ranges()] == ["o-2[0]@[0,10)"]
        assert ledger.batches.blocking_predecessors(part.batch_id) == [], (
            "a re-drain blocks nothing and waits for nothing")
        assert ledger.attempts.redrain(b.batch_id, [R("o-2", 0, 0, 10)]).batch_id == b.batch_id, (
            "all its ranges: a replay")
        assert ledger.batches.get(b.batch_id).state is BatchState.PLANNED
