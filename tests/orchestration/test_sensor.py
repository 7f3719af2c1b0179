"""priority_lag_sensor's tick on the real broker and a real Dagster instance: plans, runs, holds, skip reasons."""

from __future__ import annotations

import os
import re
import socket
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest

from kprio_core.burst import PollHistory
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.recovery import lease_owner
from kprio_core.planner import Budget, plan_batch
from orchestration.dagster import drain_loop
from orchestration.dagster.sensors import tick
from tests.fixtures.kafka import fill
from tests.orchestration.ledger_states import commit_as_drained

pytestmark = [pytest.mark.broker, pytest.mark.dagster]


def run_tick(env, instance, now_s: float | None = None):
    turn = tick(instance, env.edge, env.ledger, env.config, now_s=now_s)
    if turn.partitions:
        instance.add_dynamic_partitions("kprio_batches", list(turn.partitions))
    return turn


def skip(env, instance, now_s: float | None = None) -> str:
    turn = run_tick(env, instance, now_s)
    assert not turn.requests, turn.requests
    return turn.skip_reason


def stand_in_run(instance, job_name: str, batch_id: str, parent_run_id: str | None = None,
                 **tags: str) -> dg.DagsterRun:
    """A STARTED run of ``job_name`` for the batch's partition (its process is never started); with
    ``parent_run_id``, a retry or re-execution of that run."""

    @dg.op
    def noop() -> None:
        pass

    @dg.job(name=job_name)
    def job() -> None:
        noop()

    return instance.create_run_for_job(job, status=dg.DagsterRunStatus.STARTED, parent_run_id=parent_run_id,
                                       root_run_id=parent_run_id, tags={"dagster/partition": batch_id, **tags})


def test_tick_records_the_planners_plan_and_requests_its_run(make_topic, kprio_env, dagster_instance):
    topic = make_topic(priorities=3, partitions=2, records={2: 10, 1: 5, 0: 20})
    env = kprio_env(topic, planner={"record_budget": 20})
    expected = plan_batch(
        env.edge.snapshot(topic, now_ms=0), Budget(20, env.config.planner.byte_budget, 0.05),
        history=PollHistory(3), reserved=(),
    )

    turn = run_tick(env, dagster_instance)

    [request] = turn.requests
    [batch] = env.ledger.batches.find(topic.name)
    assert (request.run_key, request.partition_key) == (batch.batch_id, batch.batch_id) == ("b-000001",) * 2
    assert request.tags == {"kprio/logical_topic": topic.name, "kprio/attempt": "1", "kprio/why": "new",
                            "kprio/slot-p0": topic.name, "kprio/slot-p1": topic.name, "kprio/slot-p2": topic.name,
                            "kprio/lane": "urgent"}  # it drains the most urgent priority: the workers' urgent lane
    assert batch.state.value == "planned"
    assert batch.plan.offset_ranges() == expected.offset_ranges()
    assert batch.plan.records_by_priority() == expected.records_by_priority() == {2: 10, 1: 5, 0: 5}
    assert dagster_instance.get_dynamic_partitions("kprio_batches") == ["b-000001"]

    # No run was launched for it: the next tick asks again with the same run key, and plans nothing new
    # (each priority's one slot is taken by the planned batch).
    again = run_tick(env, dagster_instance)
    assert [r.run_key for r in again.requests] == ["b-000001"]
    assert len(env.ledger.batches.find(topic.name)) == 1


@pytest.mark.spark
@pytest.mark.slow
def test_a_burst_in_priority_2_goes_first_while_priority_0_keeps_its_share(
    make_topic, kprio_env, dagster_instance, kafka_settings, spark
):
    topic = make_topic(priorities=3, partitions=1, records={0: 60})
    env = kprio_env(topic, planner={"record_budget": 20, "target_batch_s": None})
    first = drain_loop.drain(env.defs, dagster_instance, max_batches=1)
    assert [(b.state.value, b.records) for b in first.batches] == [("committed", {0: 20})]

    fill(kafka_settings, topic.priority_topic(2), 40, partitions=1)
    [request] = run_tick(env, dagster_instance).requests

    plan = env.ledger.batches.get(request.partition_key).plan
    by_p = plan.records_by_priority()
    assert by_p[2] > by_p[0] >= 1  # the burst first, and no starvation of the old backlog
    assert sum(by_p.values()) == 20
    p0 = [r.range for r in plan.ranges if r.priority == 0]
    assert p0 == [OffsetRange(topic.priority_topic(0), 0, 20, 20 + by_p[0])]  # continues where batch 1 stopped
    assert [r.range.start for r in plan.ranges if r.priority == 2] == [0]


def test_skip_reason_no_backlog(make_topic, kprio_env, dagster_instance):
    env = kprio_env(make_topic(priorities=2, partitions=1))
    assert skip(env, dagster_instance) == "no backlog"


def test_an_urgent_priority_is_planned_while_a_bulk_batch_holds_its_slot(make_topic, kprio_env, dagster_instance,
                                                                         kafka_settings):
    topic = make_topic(priorities=3, partitions=1, records={0: 50})
    env = kprio_env(topic)
    [bulk] = run_tick(env, dagster_instance).requests  # a p0 batch, in flight from now on
    env.ledger.leases.claim(bulk.partition_key, lease_owner("r1", host="elsewhere", pid=1), 60)
    fill(kafka_settings, topic.priority_topic(2), 5, partitions=1)

    [urgent] = run_tick(env, dagster_instance).requests

    assert env.ledger.batches.get(urgent.partition_key).plan.records_by_priority() == {2: 5, 1: 0, 0: 0}
    assert urgent.tags["kprio/slot-p2"] == topic.name and "kprio/slot-p0" not in urgent.tags
    env.ledger.leases.claim(urgent.partition_key, lease_owner("r2", host="elsewhere", pid=2), 60)  # its run took it
    fill(kafka_settings, topic.priority_topic(0), 5, partitions=1)
    assert skip(env, dagster_instance).startswith("priority 0 waits for its slot (b-000001 in flight)")


def test_a_failed_batch_holds_only_its_partitions(make_topic, kprio_env, dagster_instance):
    topic = make_topic(priorities=2, partitions=2, records={1: 10, 0: 10})
    env = kprio_env(topic, planner={"record_budget": 4}, recovery={"max_attempts": 1})
    [request] = run_tick(env, dagster_instance).requests
    failed = env.ledger.batches.get(request.partition_key)
    held = {r.range.topic_partition for r in failed.plan.ranges}
    env.ledger.moves.mark_failed(failed.batch_id, "values_match_schema failed (invalid_records=5)", retry_at=None)

    # The other partitions keep draining, batch after batch, until only the held ones are left.
    while (turn := run_tick(env, dagster_instance)).requests:
        for request in turn.requests:
            again = env.ledger.batches.get(request.partition_key)
            assert again.batch_id != failed.batch_id
            assert not {r.range.topic_partition for r in again.plan.ranges} & held
            commit_as_drained(env.ledger, again.batch_id, env.edge, topic)  # as its run would
    backlog = {(p.topic, p.partition) for p in env.edge.snapshot(topic, now_ms=0).partitions if p.backlog}
    assert backlog == held
    reason = turn.skip_reason
    assert reason.startswith("no backlog outside held partitions; held: ")
    # One clause for the one failure: every partition it holds named, its reason said once.
    where = ", ".join(f"{name}[{partition}] from 0" for name, partition in sorted(held))
    assert f"held: {where} by {failed.batch_id} (failed once: values_match_schema" in reason
    assert reason.count("values_match_schema") == 1
    assert f"fix the cause, then kprio retry {failed.batch_id}" in reason


def test_a_failed_batch_with_attempts_left_is_retried_after_its_backoff(make_topic, kprio_env, dagster_instance):
    topic = make_topic(priorities=2, partitions=1, records={1: 5})
    env = kprio_env(topic, recovery={"max_attempts": 3})
    now = datetime(2026, 3, 1, 12, tzinfo=UTC)  # the sensor's clock: the retry is due 30 s later
    [request] = run_tick(env, dagster_instance, now.timestamp()).requests
    soon = now + timedelta(seconds=30)
    env.ledger.moves.mark_failed(request.partition_key, "drain failed: broker restarted", retry_at=soon)
    assert "retried by itself at" in skip(env, dagster_instance, now.timestamp())

    # Once the backoff is over the retry is due.
    turn = tick(dagster_instance, env.edge, env.ledger, env.config, now_s=soon.timestamp() + 1)
    [retry] = turn.requests
    assert (retry.run_key, retry.tags["kprio/attempt"], retry.tags["kprio/why"]) == (
        f"{request.partition_key}.attempt-2", "2", "retry")


def test_skip_reason_throttled(make_topic, kprio_env, dagster_instance, kafka_settings):
    topic = make_topic(priorities=3, partitions=1, records={2: 5})
    env = kprio_env(topic, rate={"samples": 2, "window_s": 1.0, "quotas": {2: {"records_per_s": 1}}})
    # The 5 records committed just now: over 1 record/s (the ledger says what was drained, and when).
    [request] = run_tick(env, dagster_instance).requests
    commit_as_drained(env.ledger, request.partition_key)
    fill(kafka_settings, topic.priority_topic(2), 5, partitions=1)
    assert re.fullmatch(r"throttled for \d+\.\d s on priority 2", skip(env, dagster_instance))


def test_skip_reason_byte_budget_below_one_record(make_topic, kprio_env, dagster_instance):
    # The planner never exceeds the byte budget, so a budget below one record plans nothing:
    # the tick must say so instead of looking idle while the backlog waits.
    topic = make_topic(priorities=2, partitions=1, records={1: 5})
    env = kprio_env(topic, planner={"byte_budget": 1, "record_budget": 100})
    assert skip(env, dagster_instance).startswith("planner.byte_budget (1 bytes) is smaller than one record")


def test_skip_reason_broker_unreachable(make_topic, kprio_env, dagster_instance):
    env = kprio_env(make_topic(priorities=2, partitions=1)).rebuild(
        kafka={"bootstrap_servers": "127.0.0.1:1", "timeout_s": 1.0}
    )
    assert skip(env, dagster_instance).startswith("broker unreachable: no Kafka broker answered at 127.0.0.1:1")


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "never-committed"])
def test_offsets_lost_to_retention_hold_their_partition_whether_or_not_it_was_committed(
    make_topic, kprio_env, dagster_instance, committed
):
    topic = make_topic(priorities=2, partitions=2, records={1: 12})
    env = kprio_env(topic)
    name = topic.priority_topic(1)
    if committed:
        env.edge.commit(topic, [OffsetRange(name, 0, 0, 1)])
    env.edge.delete_records({(name, 0): 3})

    turn = run_tick(env, dagster_instance)

    [request] = turn.requests  # partition 1 drains; partition 0 waits
    assert {r.range.topic_partition for r in env.ledger.batches.get(request.partition_key).plan.ranges} == {(name, 1)}
    lost = f"{name}[0] from {1 if committed else 0} (offsets [{1 if committed else 0},3) lost to retention"
    assert lost in turn.decisions[0].describe()
    assert "set drain.allow_data_loss" in turn.decisions[0].describe()


def test_a_batch_whose_run_died_is_resumed_and_its_run_marked_failed(make_topic, kprio_env, dagster_instance):
    topic = make_topic(priorities=2, partitions=1, records={1: 5})
    env = kprio_env(topic)
    [request] = run_tick(env, dagster_instance).requests

    # A run of that partition took the batch's lease, then its process died (kill -9): it stays STARTED.
    run = stand_in_run(dagster_instance, "drain_job", request.partition_key)
    dead = lease_owner(run.run_id, host=socket.gethostname(), pid=2 ** 22 + 17)  # no such process
    env.ledger.leases.claim(request.partition_key, dead, 600)

    turn = run_tick(env, dagster_instance)

    [resume] = turn.requests
    assert (resume.tags["kprio/why"], resume.tags["kprio/attempt"]) == ("resume", "2")
    assert dagster_instance.get_run_by_id(run.run_id).status is dg.DagsterRunStatus.FAILURE
    [(batch, why)] = turn.decisions[0].stuck
    assert batch.batch_id == request.partition_key and "is gone" in why


@pytest.mark.parametrize("alive", [False, True], ids=["runner-killed", "runner-alive"])
def test_a_run_a_killed_kprio_drain_left_started_before_taking_the_lease_is_resumed(
    make_topic, kprio_env, dagster_instance, alive
):
    topic = make_topic(priorities=2, partitions=1, records={1: 5})
    env = kprio_env(topic)
    [request] = run_tick(env, dagster_instance).requests

    # `kprio drain` created the run in process (tagged with itself) and was killed before the run took the
    # lease: no run monitoring watches an in-process run, so it would stay STARTED for ever.
    runner = lease_owner("", host=socket.gethostname(), pid=os.getpid() if alive else 2 ** 22 + 17)
    run = stand_in_run(dagster_instance, "drain_job", request.partition_key, **{
        "kprio/runner": runner, "dagster/run_key": request.run_key})

    turn = run_tick(env, dagster_instance)

    if alive:  # its runner works on it: nothing to do but wait
        assert turn.requests == () and turn.decisions[0].stuck == ()
        assert dagster_instance.get_run_by_id(run.run_id).status is dg.DagsterRunStatus.STARTED
        return
    [resume] = turn.requests
    assert (resume.partition_key, resume.tags["kprio/why"], resume.tags["kprio/attempt"]) == (
        request.partition_key, "resume", "2")
    assert dagster_instance.get_run_by_id(run.run_id).status is dg.DagsterRunStatus.FAILURE
    [(_, why)] = turn.decisions[0].stuck
    assert f"the process running it ({runner}) is gone" in why


@pytest.mark.parametrize("parent_runner", ["worker", "driver"])
def test_a_retry_is_not_dead_with_the_runner_its_parent_had(make_topic, kprio_env, dagster_instance, parent_runner):
    """Dagster's run retries copy the failed run's tags, its ``kprio/runner`` too: the retry waiting for a worker
    names the killed parent's, but is its batch's live run, neither failed nor doubled by a resume."""
    topic = make_topic(priorities=2, partitions=1, records={1: 5})
    env = kprio_env(topic)
    [request] = run_tick(env, dagster_instance).requests
    parent = "0b0e5c1e-dead-4000-8000-00000000beef"
    dead = lease_owner(parent if parent_runner == "worker" else "", host=socket.gethostname(), pid=2 ** 22 + 17)
    retry = stand_in_run(dagster_instance, "drain_job", request.partition_key, parent_run_id=parent,
                         **{"kprio/runner": dead, "dagster/run_key": request.run_key})

    turn = run_tick(env, dagster_instance)

    assert turn.requests == () and turn.decisions[0].stuck == ()
    assert dagster_instance.get_run_by_id(retry.run_id).status is dg.DagsterRunStatus.STARTED


def test_runs_that_end_before_they_take_their_batch_spend_its_attempts_under_new_run_keys_and_it_heals(
        make_topic, kprio_env, dagster_instance):
    """A run that fails before it starts (its worker, its code; here Dagster refuses its run config) spends its
    batch's attempt, the first run's and the retry's alike: the next tick fails the batch at it, transient, and
    retries it at once under a run key no run had. (A resume or retry asked for the run key that had ended already:
    the batch waited for ever, its backlog reserved.)"""
    from kprio_core.ledger import BatchState

    topic = make_topic(priorities=2, partitions=1, records={1: 5})
    env = kprio_env(topic, recovery={"backoff_s": 0, "backoff_max_s": 0})
    [request] = run_tick(env, dagster_instance).requests
    keys = []
    for attempt in (1, 2):
        keys.append(request.run_key)
        assert not drain_loop.execute(env.defs, dagster_instance, request, log_level="NOT-A-LEVEL").success
        [request] = run_tick(env, dagster_instance).requests  # fails the batch at the attempt, retries it
        batch = env.ledger.batches.get(request.partition_key)
        assert (batch.state, batch.attempts, batch.transient) == (BatchState.FAILED, attempt, True), batch
        assert f"(attempt {attempt}) ended FAILURE before it took the batch" in batch.reason, batch.reason
    assert request.run_key not in keys and request.tags["kprio/attempt"] == "3", request

    assert drain_loop.execute(env.defs, dagster_instance, request).success  # the cause passed: it heals
    assert env.ledger.batches.get(request.partition_key).state is BatchState.COMMITTED


def test_a_commit_run_that_ends_before_it_takes_its_checked_batch_fails_it_and_the_retry_drains_and_commits_it(
        make_topic, kprio_env, dagster_instance):
    """A checked batch whose turn came gets a commit run (``b.commit-1``); if that run ends before it takes the batch,
    the commit run key has ended: the next tick fails the batch, transient, and retries it (drained again, its
    output replaced, then committed) instead of waiting for ever, checked, its backlog reserved."""
    from kprio_core.ledger import BatchState
    from kprio_core.model.results import CheckReport
    from tests.orchestration.conservation import conservation, lag
    from tests.orchestration.ledger_states import drained_as_planned

    topic = make_topic(priorities=2, partitions=1, records={1: 5})
    env = kprio_env(topic)
    [request] = run_tick(env, dagster_instance).requests
    batch_id = request.partition_key
    env.ledger.moves.mark_drained(batch_id, drained_as_planned(env.ledger, batch_id))  # as if its run stopped
    env.ledger.moves.mark_checked(batch_id, CheckReport(()))  # before its commit
    [commit] = run_tick(env, dagster_instance).requests
    assert commit.run_key == f"{batch_id}.commit-1", commit
    assert not drain_loop.execute(env.defs, dagster_instance, commit, log_level="NOT-A-LEVEL").success

    [retry] = run_tick(env, dagster_instance).requests
    batch = env.ledger.batches.get(batch_id)
    assert (batch.state, batch.transient, retry.run_key) == (BatchState.FAILED, True, f"{batch_id}.attempt-2"), batch
    assert "its commit run" in batch.reason and "before it took the batch" in batch.reason, batch.reason
    assert drain_loop.execute(env.defs, dagster_instance, retry).success
    assert env.ledger.batches.get(batch_id).state is BatchState.COMMITTED
    assert lag(topic, env.edge) == {1: 0, 0: 0} and conservation(env.config, topic, env.edge).ok


def test_a_batch_no_run_takes_again_and_again_backs_off_holding_its_partitions_and_says_so(
        make_topic, kprio_env, dagster_instance):
    """The first such failure of a streak is retried at once (a worker that just came back); the next ones back off
    (``recovery.backoff_s``, doubling): a cause that does not pass is never retried in a loop, and the skip says
    when the next try is."""
    topic = make_topic(priorities=2, partitions=1, records={1: 5})
    env = kprio_env(topic, recovery={"backoff_s": 60, "backoff_max_s": 60})
    [request] = run_tick(env, dagster_instance).requests
    assert not drain_loop.execute(env.defs, dagster_instance, request, log_level="NOT-A-LEVEL").success
    [request] = run_tick(env, dagster_instance).requests  # the first of a streak: at once
    assert not drain_loop.execute(env.defs, dagster_instance, request, log_level="NOT-A-LEVEL").success
    assert run_tick(env, dagster_instance).requests == ()
    said = skip(env, dagster_instance)
    assert f"by {request.partition_key}" in said and "before it took the batch" in said, said
    batch = env.ledger.batches.get(request.partition_key)
    assert batch.transient_streak == 2 and (batch.retry_at - env.ledger.now()).total_seconds() > 50, batch


def test_a_run_launched_from_the_ui_is_the_batchs_run(make_topic, kprio_env, dagster_instance, kafka_settings):
    topic = make_topic(priorities=2, partitions=1, records={1: 5})
    env = kprio_env(topic)
    [request] = run_tick(env, dagster_instance).requests

    # The asset page's materialization runs as __ASSET_JOB with the partition tag only.
    stand_in_run(dagster_instance, "__ASSET_JOB", request.partition_key)
    fill(kafka_settings, topic.priority_topic(1), 5, partitions=1)
    assert skip(env, dagster_instance) == "priority 1 waits for its slot (b-000001 in flight)"
