"""The batch ledger on a SQLite file: reservations (overlaps, the committed offset), slots per priority, and the
holds of failed batches."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kprio_core.errors import RangeConflict
from kprio_core.ledger import BatchState, Ledger
from kprio_core.model.offsets import OffsetRange
from tests.kprio_core.ledger_support import Clock, R, drain_check_commit, make_plan

S = BatchState


# --------------------------------------------------------------------------------- reservations

def test_overlap_is_refused_with_the_holder_and_the_range(ledger: Ledger):
    held = ledger.batches.record_plan(make_plan((0, 10)))
    with pytest.raises(RangeConflict) as err:
        ledger.batches.record_plan(make_plan((30, 40), (9, 12)))
    assert held.batch_id in str(err.value)
    assert "orders-2[0]@[9,12) overlaps orders-2[0]@[0,10) held by batch b-000001 (planned)" in str(err.value)
    assert [b.batch_id for b in ledger.batches.find()] == [held.batch_id], "nothing of the refused plan is stored"
    assert ledger.batches.reserved_ranges("orders") == [OffsetRange("orders-2", 0, 0, 10)]
    assert ledger.batches.record_plan(make_plan((10, 20))).batch_id == "b-000002", "a refused plan uses no id"


@pytest.mark.parametrize(
    ("second", "why"),
    [
        (R("orders-2", 0, 10, 20), "1. adjacent: [0,10) ends where [10,20) starts"),
        (R("orders-2", 1, 0, 10), "2. same offsets, other partition"),
        (R("orders-1", 0, 0, 10), "3. same offsets, other priority topic"),
        (R("orders-2", 0, 5, 5), "4. an empty range holds no offset"),
    ],
)
def test_ranges_that_do_not_overlap_are_accepted(ledger: Ledger, second: OffsetRange, why: str):
    ledger.batches.record_plan(make_plan((0, 10)))
    ledger.batches.record_plan(make_plan(second))
    assert len(ledger.batches.in_flight("orders")) == 2


def test_plan_overlapping_itself_is_refused(ledger: Ledger):
    with pytest.raises(RangeConflict, match=r"\[0,10\) overlaps orders-2\[0\]@\[5,15\) of the same plan"):
        ledger.batches.record_plan(make_plan((0, 10), (5, 15)))


def test_once_a_batch_committed_the_offsets_after_it_are_free_and_its_own_are_refused(ledger: Ledger):
    drain_check_commit(ledger, ledger.batches.record_plan(make_plan((0, 10))))
    assert ledger.batches.reserved_ranges("orders") == [] and ledger.batches.holds("orders") == []
    assert ledger.batches.record_plan(make_plan((10, 20))).state is S.PLANNED
    # A plan made from a snapshot older than that commit (another driver's) is refused in the same transaction.
    with pytest.raises(RangeConflict, match=r"orders-2\[0\]@\[2,8\) starts below offset 10, which kprio committed"):
        ledger.batches.record_plan(make_plan((2, 8)))
    assert [b.state for b in ledger.batches.find("orders")] == [S.PLANNED, S.COMMITTED]


# Batch A drains orders-2[0]@[0,10) (priority 2); batch B drains orders-2[1]@[0,10) and orders-0[0]@[0,10).
# (plan priorities, max_in_flight, refused priority or None, why)
SLOT_CASES = [
    ({1}, 1, None, "1. priority 1 has no batch in flight: its slot is free"),
    ({2}, 1, 2, "2. A and B take priority 2's one slot"),
    ({2}, 2, 2, "3. A and B take both of priority 2's slots"),
    ({2}, 3, None, "4. a third slot of priority 2 is free"),
    ({0}, 1, 0, "5. B takes priority 0's one slot"),
    ({0}, 2, None, "6. urgent or not, a priority counts only its own batches"),
    ({1, 0}, 1, 0, "7. any full priority of the plan refuses it"),
    ({2}, None, None, "8. no limit: only overlaps refuse"),
]


@pytest.mark.parametrize(("priorities", "limit", "refused", "why"), SLOT_CASES, ids=[c[3] for c in SLOT_CASES])
def test_max_in_flight_counts_slots_per_priority(ledger: Ledger, priorities, limit, refused, why):
    ledger.batches.record_plan(make_plan(R("orders-2", 0, 0, 10)))
    ledger.batches.record_plan(make_plan(R("orders-2", 1, 0, 10), R("orders-0", 0, 0, 10)))
    plan = make_plan(*(R(f"orders-{p}", 5, 0, 10) for p in sorted(priorities)))
    if refused is None:
        assert ledger.batches.record_plan(plan, max_in_flight=limit).priorities == priorities
        return
    holders = ledger.batches.full_priorities("orders", limit)[refused]
    assert holders == (["b-000001", "b-000002"] if refused == 2 else ["b-000002"])
    with pytest.raises(RangeConflict, match=rf"priority {refused} already has {len(holders)} batch\(es\) in flight "
                                            rf"\(max_in_flight={limit} per priority\): {', '.join(holders)}"):
        ledger.batches.record_plan(plan, max_in_flight=limit)


def test_failed_batches_take_no_slot_and_topics_count_apart(ledger: Ledger):
    first = ledger.batches.record_plan(make_plan((0, 10)), max_in_flight=1)
    assert ledger.batches.full_priorities("orders", 1) == {2: [first.batch_id]}
    ledger.batches.record_plan(make_plan((0, 10), topic="payments"), max_in_flight=1)  # another topic: its own slots
    ledger.moves.mark_failed(first.batch_id, "operator stop", retry_at=None)
    assert ledger.batches.full_priorities("orders", 1) == {}
    assert ledger.batches.record_plan(make_plan(R("orders-2", 1, 0, 10)), max_in_flight=1).batch_id == "b-000003"
    with pytest.raises(ValueError, match="max_in_flight must be >= 1"):
        ledger.batches.record_plan(make_plan(R("orders-2", 2, 0, 10)), max_in_flight=0)


# Failed batch F read orders-2[0]@[10,20) and orders-1[1]@[5,8): it holds both partitions from those starts.
# (wanted range, conflicts, why)
HOLD_CASES = [
    (R("orders-2", 0, 20, 30), True, "1. later on the held partition: could not commit past F"),
    (R("orders-2", 0, 1000, 1010), True, "2. held up to the end of the log"),
    (R("orders-2", 0, 5, 15), True, "3. overlaps F's own range"),
    (R("orders-2", 0, 0, 10), False, "4. before the hold's start: not held"),
    (R("orders-2", 1, 10, 20), False, "5. another partition keeps draining"),
    (R("orders-0", 0, 10, 20), False, "6. another priority keeps draining"),
    (R("orders-1", 1, 8, 9), True, "7. F's second partition is held too"),
    (R("orders-1", 1, 2, 2), False, "8. an empty range holds nothing and asks for nothing"),
]


@pytest.mark.parametrize(("wanted", "conflicts", "why"), HOLD_CASES, ids=[c[2] for c in HOLD_CASES])
def test_a_failed_batch_holds_its_partitions_from_its_range_start(ledger: Ledger, wanted, conflicts, why):
    failed = ledger.batches.record_plan(make_plan(R("orders-2", 0, 10, 20), R("orders-1", 1, 5, 8)))
    ledger.moves.mark_failed(failed.batch_id, "values_match_schema failed", retry_at=None)
    if not conflicts:
        assert ledger.batches.record_plan(make_plan(wanted)).state is S.PLANNED
        return
    with pytest.raises(RangeConflict, match=rf"{wanted.topic}\[{wanted.partition}\], held from offset \d+ by failed "
                                            rf"batch {failed.batch_id} \(retry it first\)|overlaps"):
        ledger.batches.record_plan(make_plan(wanted))


def test_holds_list_each_partition_once_until_the_retry_commits(ledger: Ledger, clock: Clock):
    retry_at = clock.now + timedelta(seconds=10)
    failed = ledger.batches.record_plan(make_plan(R("orders-2", 0, 10, 20), R("orders-1", 1, 5, 8),
                                                  R("orders-0", 2, 4, 4)))
    ledger.moves.mark_failed(failed.batch_id, "drain failed", retry_at=retry_at)
    holds = ledger.batches.holds("orders", max_attempts=1)
    assert [(h.topic, h.partition, h.start, h.batch_id, h.attempts, h.retry_at, h.exhausted) for h in holds] == [
        ("orders-1", 1, 5, failed.batch_id, 1, retry_at, True),
        ("orders-2", 0, 10, failed.batch_id, 1, retry_at, True),
    ], "sorted by partition; the empty range holds nothing; 1 of max 1 attempts: exhausted"
    assert [h.exhausted for h in ledger.batches.holds("orders", max_attempts=3)] == [False, False]
    assert ledger.batches.holds("payments") == [] and ledger.batches.reserved_ranges("orders") == []
    retried = ledger.attempts.retry(failed.batch_id, reason="operator retry")
    assert ledger.batches.holds("orders") == [] and ledger.batches.reserved_ranges("orders") == sorted(
        r for r in retried.plan.offset_ranges() if r.count)
    drain_check_commit(ledger, retried)
    assert ledger.batches.holds("orders") == []
    assert ledger.batches.record_plan(make_plan(R("orders-2", 0, 20, 30))).in_flight


def test_a_failed_redrain_of_committed_offsets_holds_nothing(ledger: Ledger):
    batch = drain_check_commit(ledger, ledger.batches.record_plan(make_plan((0, 10))))
    replay = ledger.attempts.replay(batch.batch_id)
    failed = ledger.moves.mark_failed(replay.batch_id, "handler raised on the re-drain", retry_at=None)
    assert failed.replay_of_committed and not failed.holds
    assert ledger.batches.holds("orders") == [] and ledger.batches.reserved_ranges("orders") == []
    assert ledger.batches.record_plan(make_plan((10, 20))).in_flight, "its offsets are committed: nothing waits for it"
