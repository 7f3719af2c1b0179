"""State the ledger derives on read: burst windows, rate samples, average record sizes, throughput."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from kprio_core.burst import PollHistory
from kprio_core.lanes import Ordering
from kprio_core.ledger import Batch, DrainedSample, DrainSample, Ledger
from kprio_core.lifecycle import batch_fixed_cost, drain_rate
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import RangeStats
from kprio_core.rate import RateQuotaTracker
from tests.kprio_core.ledger_support import (
    CHECKS_PASSED,
    Clock,
    R,
    commit_report,
    drain_and_check,
    drain_check_commit,
    make_plan,
    result_for,
)

QUOTAS = {2: 29, 1: 14, 0: 7}


def commit(ledger: Ledger, clock: Clock, batch: Batch, history: PollHistory | None = None, **kw) -> Batch:
    """Drain, check and commit; like the commit step of the previous kprio, record the batch into ``history``."""
    clock.tick()
    done = drain_check_commit(ledger, batch, **kw)
    if history is not None:
        history.record(done.drain.written_by_priority(), done.plan.quotas)
    return done


def test_poll_history_is_what_recording_each_committed_poll_gives(ledger: Ledger, clock: Clock):
    recorded = PollHistory(3, window_size=3, maxed_out_threshold=2)
    plan = lambda *spans: make_plan(*spans, quotas=QUOTAS)  # noqa: E731
    b1 = commit(ledger, clock, ledger.batches.record_plan(plan(R("orders-2", 0, 0, 29), R("orders-0", 0, 0, 7))),
                recorded, dead=1)
    failed = ledger.batches.record_plan(plan(R("orders-2", 0, 29, 58)))
    ledger.moves.mark_failed(failed.batch_id, "drain failed", retry_at=None)  # never committed: no poll
    commit(ledger, clock, ledger.attempts.replay(b1.batch_id))  # a re-drain of committed offsets: no poll
    early = ledger.batches.record_plan(plan(R("orders-1", 0, 0, 14)))
    late = ledger.batches.record_plan(plan(R("orders-1", 1, 0, 3), R("orders-0", 1, 0, 7)))
    child = ledger.attempts.split(late.batch_id, [R("orders-0", 1, 0, 7)], "checks failed", retry_at=None)
    commit(ledger, clock, ledger.batches.get(late.batch_id), recorded)  # commit order, not record order
    commit(ledger, clock, early, recorded)
    # split off a poll: part of its parent's
    commit(ledger, clock, ledger.attempts.retry(child.batch_id, reason="retry"))
    commit(ledger, clock, ledger.attempts.retry(failed.batch_id, reason="retry"), recorded)

    derived = ledger.samples.poll_history("orders", 3, window_size=3, maxed_out_threshold=2)
    assert derived == recorded
    assert derived.counts(2) == [0, 0, 29] and derived.counts(1) == [3, 14, 0] and derived.counts(0) == [0, 0, 0]
    assert ledger.samples.poll_history("orders", 3, window_size=6, maxed_out_threshold=2).counts(2) == [29, 0, 0, 29]
    assert ledger.samples.poll_history("payments", 3) == PollHistory(3)


def test_poll_history_starts_afresh_after_the_number_of_priorities_changed(ledger: Ledger, clock: Clock):
    commit(ledger, clock, ledger.batches.record_plan(make_plan(R("orders-2", 0, 0, 10), quotas=QUOTAS)))
    commit(ledger, clock, ledger.batches.record_plan(make_plan(R("orders-1", 0, 0, 10), quotas={1: 33, 0: 17})))
    commit(ledger, clock, ledger.batches.record_plan(make_plan(R("orders-2", 0, 10, 15), quotas=QUOTAS)))
    assert ledger.samples.poll_history("orders", 3).counts(2) == [5], "the 2-priority batch ends the window"
    assert ledger.samples.poll_history("orders", 2).counts(1) == [], "the newest poll had 3 priorities"


def test_drained_since_gives_the_rate_samples_of_committed_batches(ledger: Ledger, clock: Clock):
    start = clock.now
    b1 = commit(ledger, clock, ledger.batches.record_plan(make_plan(R("orders-2", 0, 0, 30), R("orders-0", 0, 0, 7))),
                dead=2)
    b1_at = clock.now
    commit(ledger, clock, ledger.attempts.replay(b1.batch_id))  # re-drained offsets were consumed before: no sample
    drain_and_check(ledger, ledger.batches.record_plan(make_plan(R("orders-2", 0, 30, 40))))  # not committed: no sample
    clock.tick(2)
    commit(ledger, clock, ledger.batches.record_plan(make_plan(R("orders-1", 0, 0, 14))), bytes_per_record=50)
    samples = ledger.samples.drained_since("orders", start)
    assert samples == [
        DrainedSample(b1_at, 2, 30, 3000),
        DrainedSample(b1_at, 0, 7, 700),
        DrainedSample(clock.now, 1, 14, 700),
    ], "records are output plus dead letters, in commit order, most urgent first"
    assert ledger.samples.drained_since("orders", clock.now) == samples[2:]
    assert ledger.samples.drained_since("payments", start) == []


def test_rate_tracker_is_the_one_the_commits_would_have_fed(ledger: Ledger, clock: Clock):
    quotas = {"records_per_s": {2: 10.0, 0: 5.0}, "bytes_per_s": {2: 800.0}}
    fed = RateQuotaTracker(**quotas, samples=3, window_s=2.0)
    old = commit(ledger, clock, ledger.batches.record_plan(make_plan(R("orders-2", 0, 0, 50))))  # leaves the window
    clock.tick(10)
    for spans in ([R("orders-2", 0, 50, 110), R("orders-0", 0, 0, 9)], [R("orders-2", 0, 110, 115)]):
        done = commit(ledger, clock, ledger.batches.record_plan(make_plan(*spans)))
        for p, records in done.drain.written_by_priority().items():
            fed.record_batch(p, records, 100 * records, clock.now.timestamp())
    clock.tick(0.5)
    derived = ledger.samples.rate_tracker("orders", **quotas, samples=3, window_s=2.0)
    now = clock.now.timestamp()
    for p in (2, 1, 0):
        assert derived.rates(p, now) == fed.rates(p, now)
        assert derived.throttle_time(p, now) == fed.throttle_time(p, now)
    assert derived.throttle_time(2, now) > 0, f"65 records in 4.5 s are over 10/s ({old.batch_id} is not)"


def drained(ledger: Ledger, clock: Clock, spans: list[tuple[OffsetRange, int]]) -> Batch:
    """Record, drain (spans are (range, bytes drained from it)) and commit one batch."""
    batch = ledger.batches.record_plan(make_plan(*(r for r, _ in spans), topic=spans[0][0].topic.rsplit("-", 1)[0]))
    result = result_for(batch)
    sized = tuple(replace(s, bytes=size) for s, (_, size) in zip(result.ranges, spans))
    clock.tick()
    batch = ledger.moves.mark_drained(batch.batch_id, replace(result, ranges=sized))
    batch = ledger.moves.mark_checked(batch.batch_id, CHECKS_PASSED)
    return ledger.moves.mark_committed(batch.batch_id, commit_report(batch))


def test_avg_record_bytes_is_sum_bytes_over_sum_records(ledger: Ledger, clock: Clock):
    drained(ledger, clock, [(R("orders-2", 0, 0, 29), 5800), (R("orders-0", 0, 0, 4), 4000)])
    drained(ledger, clock, [(R("orders-2", 1, 0, 1), 400), (R("orders-1", 0, 0, 0), 0)])
    drained(ledger, clock, [(R("payments-2", 0, 0, 10), 1_000_000)])  # other logical topic
    avg = ledger.samples.avg_record_bytes("orders")
    assert avg == {"orders-0": 1000.0, "orders-2": pytest.approx(6200 / 30)}, "orders-1 drained 0 records: absent"


def test_avg_record_bytes_counts_the_last_k_batches_of_each_topic(ledger: Ledger, clock: Clock):
    drained(ledger, clock, [(R("orders-2", 0, 0, 10), 1000), (R("orders-0", 0, 0, 10), 5000)])
    drained(ledger, clock, [(R("orders-2", 0, 10, 20), 2000)])
    drained(ledger, clock, [(R("orders-2", 0, 20, 25), 1000), (R("orders-2", 1, 0, 5), 2000)])
    assert ledger.samples.avg_record_bytes("orders", last_batches=2) == {"orders-2": 250.0, "orders-0": 500.0}
    assert ledger.samples.avg_record_bytes("orders", last_batches=1) == {"orders-2": 300.0, "orders-0": 500.0}
    assert ledger.samples.avg_record_bytes("orders", last_batches=3)["orders-2"] == 200.0
    with pytest.raises(ValueError, match="last_batches must be >= 1"):
        ledger.samples.avg_record_bytes("orders", last_batches=0)


def test_avg_record_bytes_counts_any_drain_and_a_rerun_replaces_its_numbers(ledger: Ledger):
    batch = ledger.batches.record_plan(make_plan((0, 10)))
    ledger.moves.mark_drained(batch.batch_id, result_for(batch, 100))
    assert ledger.samples.avg_record_bytes("orders") == {"orders-2": 100.0}, "drained is enough: sizes are known"
    ledger.moves.mark_drained(batch.batch_id, result_for(batch, 300))
    assert ledger.samples.avg_record_bytes("orders") == {"orders-2": 300.0}
    ledger.moves.mark_failed(batch.batch_id, "checks failed", retry_at=None)
    assert ledger.samples.avg_record_bytes("orders") == {"orders-2": 300.0}
    assert ledger.attempts.retry(batch.batch_id, reason="retry").drain is None, "a new attempt has not drained yet"
    assert ledger.samples.avg_record_bytes("orders") == {"orders-2": 300.0}, "but the sizes measured stay known"


def test_throughput_is_the_best_drain_rate_of_the_recent_batches(ledger: Ledger, clock: Clock):
    assert ledger.samples.throughput("orders") is None, "no history"
    commit(ledger, clock, ledger.batches.record_plan(make_plan(R("orders-2", 0, 0, 3000))), seconds=2.0)
    commit(ledger, clock, ledger.batches.record_plan(make_plan(R("orders-0", 0, 0, 1000))), seconds=2.0, dead=10)
    drain_and_check(ledger, ledger.batches.record_plan(make_plan(R("orders-2", 0, 3000, 3100))), seconds=0.01)
    no_time = ledger.batches.record_plan(make_plan(R("orders-2", 1, 0, 5)))
    commit(ledger, clock, no_time, seconds=0.0)  # no time: skipped
    assert ledger.samples.throughput("orders") == 1500.0, "max(3000 / 2, 1000 / 2); uncommitted and timeless left out"
    assert ledger.samples.throughput("orders", last_batches=1) == 500.0
    assert ledger.samples.throughput("payments") is None
    # Trickles measure a drain's fixed cost, not its rate: they do not pull the estimate down.
    for offset in range(8):
        commit(ledger, clock, ledger.batches.record_plan(make_plan(R("orders-2", 1, 5 + offset * 6, 11 + offset * 6))),
               seconds=0.4)
    assert ledger.samples.throughput("orders") == 1500.0, "eight trickles of 6 records in 0.4 s each, then the best"
    assert ledger.samples.throughput("orders", last_batches=8) == 15.0, "only trickles: their own rate"
    with pytest.raises(ValueError, match="last_batches must be >= 1"):
        ledger.samples.throughput("orders", last_batches=0)


def test_drain_samples_carry_the_records_time_and_the_batch_time(ledger: Ledger, clock: Clock):
    first = ledger.batches.record_plan(make_plan(R("orders-0", 0, 0, 50_000)))
    clock.tick(7.5)  # a cold first batch: 7.5 s from its plan to its commit, 0.1 s of it its records
    drain_check_commit(ledger, first, seconds=4.4, record_seconds=0.1)
    retried = ledger.batches.record_plan(make_plan(R("orders-0", 0, 50_000, 60_000)))
    ledger.moves.mark_failed(retried.batch_id, "drain failed", retry_at=None)
    clock.tick(30.0)
    drain_check_commit(ledger, ledger.attempts.retry(retried.batch_id, reason="retry"), seconds=0.5)  # an older result
    newest, oldest = ledger.samples.drains("orders")
    assert oldest == DrainSample(50_000, 4.4, 0.1, 7.5)
    assert newest == DrainSample(10_000, 0.5, None, None), "no records' time measured; its retry wait is not a cost"
    assert drain_rate([newest, oldest]) == 500_000.0, "the first batch's records: 50,000 in 0.1 s"
    assert batch_fixed_cost([newest, oldest]) == 7.4


def test_derived_state_survives_a_restart(url: str, clock: Clock):
    with Ledger(url, clock=clock) as first:
        commit(first, clock, first.batches.record_plan(make_plan(R("orders-2", 0, 0, 29), quotas=QUOTAS)), seconds=1.0)
    with Ledger(url, clock=clock) as again:
        assert again.samples.poll_history("orders", 3).counts(2) == [29]
        assert again.samples.throughput("orders") == 29.0
        assert again.samples.avg_record_bytes("orders") == {"orders-2": 100.0}
        assert [s.records for s in again.samples.drained_since("orders", clock.now - timedelta(seconds=5))] == [29]


def test_range_stats_round_trip_through_the_range_rows(ledger: Ledger):
    batch = ledger.batches.record_plan(make_plan(R("orders-2", 0, 0, 30)))
    stats = RangeStats(2, R("orders-2", 0, 0, 30), output=27, dead=2, distinct=29, first=0, last=29, bytes=5800,
                       nulls=(("id", 1),), lost=(R("orders-2", 0, 3, 4),), files=("orders/priority=2/a.parquet",))
    result = replace(result_for(batch), ranges=(stats,), reader="python", ordering=Ordering.KEY, lanes=4, seconds=2.5)
    assert ledger.moves.mark_drained(batch.batch_id, result).drain == result


def test_backlog_samples_are_what_each_plan_saw_by_snapshot(ledger: Ledger, clock: Clock):
    from kprio_core.model.records import BacklogSample
    from tests.kprio_core.ledger_support import record_history

    start = clock.now
    record_history(ledger, clock, [{2: 3, 0: 10}, {2: 1}, {0: 5}], budget=8)
    samples = ledger.samples.backlogs("orders", start, clock.now)
    assert [s.backlog for s in samples] == [{2: 3, 0: 10}, {2: 1, 0: 5}, {2: 0, 0: 5}]
    assert [s.at for s in samples] == [start + timedelta(seconds=s) for s in (1, 3, 5)]
    assert isinstance(samples[0], BacklogSample)
    assert ledger.samples.backlogs("orders", start + timedelta(seconds=2), clock.now) == samples[1:], "the window"
    assert ledger.samples.backlogs("payments", start, clock.now) == []


# --------------------------------------------------------------------------------- commit samples


def test_each_commit_is_a_sample_per_moved_partition_with_its_log_end(ledger: Ledger, clock: Clock):
    """The lag verdict's ring: the newest commits of each partition, oldest first, with the lag at commit time."""
    from kprio_core.ledger import CommitSample
    from kprio_core.model.results import CommitReport

    started = clock.now
    for i in range(4):
        batch = drain_and_check(ledger, ledger.batches.record_plan(make_plan((10 * i, 10 * i + 10))))
        clock.tick(10)
        moves = {("orders-2", 0): (10 * i or None, 10 * i + 10)}
        if i == 3:  # one commit moves another partition too, and one partition's end is not known
            moves[("orders-2", 1)] = (None, 5)
        ledger.moves.mark_committed(batch.batch_id, CommitReport.of(moves, {}), log_ends={("orders-2", 0): 10 * i + 25})
    other = drain_and_check(ledger, ledger.batches.record_plan(make_plan((0, 3), topic="payments")))
    ledger.moves.mark_committed(other.batch_id, CommitReport.of({("payments-2", 0): (None, 3)}, {}))

    at = [started + timedelta(seconds=10 * (i + 1)) for i in range(4)]
    assert ledger.samples.commits("orders", 3) == [
        CommitSample("orders-2", 0, at[1], 20, 35), CommitSample("orders-2", 0, at[2], 30, 45),
        CommitSample("orders-2", 0, at[3], 40, 55), CommitSample("orders-2", 1, at[3], 5, None)]
    assert [s.committed for s in ledger.samples.commits("payments", 10)] == [3]


def test_only_the_newest_commit_samples_of_a_partition_are_kept(ledger: Ledger, clock: Clock):
    from kprio_core.ledger.commit_samples import SAMPLES_KEPT

    for i in range(SAMPLES_KEPT + 3):
        clock.tick()
        drain_check_commit(ledger, ledger.batches.record_plan(make_plan((i, i + 1))))
    with ledger._engine.begin() as conn:
        kept = conn.exec_driver_sql("SELECT committed FROM kprio_commit_samples ORDER BY id").scalars().all()
    assert kept == list(range(4, SAMPLES_KEPT + 4))
    assert [s.committed for s in ledger.samples.commits("orders", 2)] == [SAMPLES_KEPT + 2, SAMPLES_KEPT + 3]
