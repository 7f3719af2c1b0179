"""kprio's Airflow DAGs run end to end with ``dag.test()``: the session's broker and Spark, a real Airflow home.

``dag.test()`` runs a DAG run in this process the way Airflow's scheduler would (it serializes the
DAG from the dags folder into the metadata database, schedules the tasks by their dependencies,
maps the batch task group over the plan's run orders, runs a deferred task's trigger inline):
every task does its real work through the shared runtime, on the session's Spark.
"""

from __future__ import annotations

import pytest

from kprio_core.ledger import BatchState, Ledger
from orchestration.airflow.tasks import TaskFailed, TaskIdentity, redrain_batch
from tests.fixtures.kafka import fill
from tests.orchestration.conservation import conservation, lag
from tests.orchestration.dagster_env import read_all_dead_letters, read_all_output
from tests.orchestration.test_isolation import POISON, produce_with_poison

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.airflow, pytest.mark.slow]

SCHEMA = {"i": "long", "amount": "double"}
MAX_RUNS = 12


def task_states(run) -> dict[str, list[str]]:
    """The states of a DAG run's task instances by task id (a mapped task: one per map index)."""
    states: dict[str, list[str]] = {}
    for ti in sorted(run.get_task_instances(), key=lambda t: (t.task_id, t.map_index)):
        states.setdefault(ti.task_id, []).append(str(ti.state))
    return states


def xcom(run, task_id: str) -> list:
    """The return values of ``task_id`` in ``run`` (one per map index), read from Airflow's XCom table."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    query = XComModel.get_many(run_id=run.run_id, dag_ids=run.dag_id, task_ids=task_id, key="return_value")
    with create_session() as session:
        rows = session.scalars(query).all()
        return [XComModel.deserialize_value(row) for row in sorted(rows, key=lambda r: r.map_index)]


def drain_to_zero(dag, topic, config, edge) -> list:
    """DAG runs of ``kprio_drain`` until no lag is left (each: wait, plan, the batches); the runs."""
    runs = []
    while any(lag(topic, edge).values()):
        assert len(runs) < MAX_RUNS, f"still lag after {MAX_RUNS} DAG runs: {lag(topic, edge)}"
        run = dag.test()
        assert str(run.state) == "success", task_states(run)
        runs.append(run)
    return runs


def test_the_drain_dag_drains_three_priorities_quarantines_poison_and_lets_urgent_overtake_bulk(
    make_topic, airflow_config, kprio_dag, kafka_settings, spark
):
    topic = make_topic(priorities=3, partitions=2, records={1: 200}, schema=SCHEMA, required_fields=("i",))
    poison = produce_with_poison(kafka_settings, topic.priority_topic(0), partitions=2, good_per_partition=600,
                                 poison_at={0: [v for v, _ in POISON[:3]], 1: [v for v, _ in POISON[3:]]})
    path, config = airflow_config(topic, planner={"record_budget": 600, "target_batch_s": None})
    dag = kprio_dag(path, "kprio_drain")
    with Ledger(config.ledger.url) as ledger:
        from kprio_core.kafka import KafkaEdge

        with KafkaEdge(config.kafka) as edge:
            first = dag.test()
            assert str(first.state) == "success", task_states(first)
            states = task_states(first)
            assert states["wait_for_batches"] == ["success"] and states["plan"] == ["success"]
            assert states["batch.drain"] and set(states["batch.drain"]) == {"success"}
            assert states["batch.commit"] == states["batch.drain"]  # one drain and one commit per batch
            # The drain task's XCom: the blocking checks' verdicts, all passed (poison is quarantined, not a failure).
            for drained in xcom(first, "batch.drain"):
                assert drained["checks"] and all(c["passed"] for c in drained["checks"].values()), drained
            assert all(c["state"] == "committed" for c in xcom(first, "batch.commit"))

            # An urgent burst arrives while priority 0's bulk still waits: the next DAG run takes all of it.
            assert lag(topic, edge)[0] > 0
            fill(kafka_settings, topic.priority_topic(2), 30, partitions=2)
            second = dag.test()
            assert str(second.state) == "success", task_states(second)
            planned = [ledger.batches.get(o["batch_id"]) for o in xcom(second, "plan")[0]]
            assert sum(b.plan.records_by_priority().get(2, 0) for b in planned) == 30
            assert lag(topic, edge)[2] == 0 and lag(topic, edge)[0] > 0  # urgent done, bulk not yet

            drain_to_zero(dag, topic, config, edge)
            check = conservation(config, topic, edge)
            assert check.ok, check
            assert all(b.state is BatchState.COMMITTED for b in ledger.batches.find(topic.name))
    dead = read_all_dead_letters(spark, config.drain.dead_letter_path, topic)
    assert {(t, p, o) for t, p, o, _ in dead} == set(poison)


def test_a_redrain_triggered_with_a_conf_drains_the_batch_once_and_commits_nothing_new(
    make_topic, airflow_config, kprio_dag, spark
):
    from kprio_core.kafka import KafkaEdge

    topic = make_topic(priorities=3, partitions=2, records={0: 120, 2: 20}, schema=SCHEMA)
    path, config = airflow_config(topic)
    with KafkaEdge(config.kafka) as edge, Ledger(config.ledger.url) as ledger:
        drain_to_zero(kprio_dag(path, "kprio_drain"), topic, config, edge)
        [batch] = ledger.batches.find(topic.name)
        committed, rows = edge.committed(topic), len(read_all_output(spark, config.drain.output_path, topic))
        redrain = kprio_dag(path, "kprio_redrain")

        run = redrain.test(run_conf={"batch": batch.batch_id})

        assert str(run.state) == "success", task_states(run)
        [done] = xcom(run, "redrain")
        assert done["state"] == "committed" and all(c["passed"] for c in done["checks"].values())
        again = ledger.batches.get(batch.batch_id)
        assert again.state is BatchState.COMMITTED and again.replay_of_committed
        assert again.attempts == batch.attempts + 1  # one drain more, no other
        assert edge.committed(topic) == committed  # nothing new committed, nothing moved back
        assert len(read_all_output(spark, config.drain.output_path, topic)) == rows  # replaced, not added
        assert conservation(config, topic, edge).ok

        # A conf naming no batch, or one the ledger does not have: the run fails, once, with one line.
        for conf in ({}, {"batch": "b-999999"}):
            failed = redrain.test(run_conf=conf)
            assert str(failed.state) == "failed" and task_states(failed) == {"redrain": ["failed"]}, conf


@pytest.mark.parametrize(("batch", "says"), [
    (None, 'kprio_redrain needs the batch to re-drain: trigger it with the conf {"batch": "b-000042"}'),
    ("b-999999", "b-999999 is not a batch of"),
])
def test_a_redrain_of_no_batch_or_an_unknown_one_fails_with_one_line_and_no_retry(
    make_topic, airflow_config, batch, says
):
    path, _ = airflow_config(make_topic(priorities=2, partitions=1, schema=SCHEMA))
    with pytest.raises(TaskFailed) as failed:
        redrain_batch(str(path), batch, TaskIdentity("t-1"))
    assert str(failed.value).startswith(says) and "\n" not in str(failed.value)
    assert failed.value.retry is False


def test_a_replay_triggered_with_a_window_holds_exactly_its_records_and_moves_no_group(
    make_topic, airflow_config, kprio_dag, spark
):
    from tests.orchestration.test_backfills import HOUR_22

    # Records 1 s apart from 22:59:50: p1 offsets 0-9 fall in hour 22, 10-19 in hour 23; p0 only in hour 22.
    topic = make_topic(priorities=2, partitions=1, records={1: 20, 0: 5}, base_ts_ms=HOUR_22 + 3_590_000)
    path, config = airflow_config(topic)
    dag = kprio_dag(path, "kprio_replay")

    for _ in range(2):  # a rerun replaces the window's output
        run = dag.test(run_conf={"start": "2023-11-14T23:00:00Z"})
        assert str(run.state) == "success", task_states(run)

    [done] = xcom(run, "replay")
    assert done["window"] == "w-20231114T2300" and done["records"] == {"p1": 10, "p0": 0}
    assert all(c["passed"] for c in done["checks"].values())
    assert read_all_output(spark, config.drain.replay_path, topic) == [(topic.priority_topic(1), 0, o)
                                                                       for o in range(10, 20)]
    from kprio_core.kafka import KafkaEdge

    with KafkaEdge(config.kafka) as edge:
        assert set(edge.committed(topic).values()) == {None}  # the live groups never moved
    failed = dag.test(run_conf={})  # no window: one line, no retry
    assert str(failed.state) == "failed" and task_states(failed) == {"replay": ["failed"]}


def test_a_batch_another_driver_holds_waits_in_the_airflow_task_which_names_the_holder(
    make_topic, airflow_config, spark
):
    """Two orchestrators on one ledger: a Dagster run (``kprio drain``'s, the daemon's) holds the batch's lease
    and renews it; the Airflow task of the same batch drains nothing while it does, and says who holds it."""
    import logging
    import os
    import socket
    import threading
    import time
    import uuid

    from kprio_core.model.recovery import lease_owner
    from orchestration.airflow.tasks import drain_batch, plan_batches
    from orchestration.runtime.leases import Heartbeat

    topic = make_topic(priorities=3, partitions=2, records={0: 60, 2: 10}, schema=SCHEMA)
    path, config = airflow_config(topic)
    [order] = plan_batches(str(path), False, TaskIdentity("plan-1")).orders
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    airflow_log = logging.getLogger("kprio.airflow")
    level = airflow_log.level
    airflow_log.addHandler(handler)
    airflow_log.setLevel(logging.INFO)  # as in an Airflow task
    dagster_run = lease_owner(str(uuid.uuid4()), host=socket.gethostname(), pid=os.getpid())
    try:
        with Ledger(config.ledger.url) as ledger:
            held = ledger.leases.claim(order["batch_id"], dagster_run, config.recovery.lease_s)
            with Heartbeat(ledger.leases, order["batch_id"], held.token, config.recovery.lease_s):
                result: dict = {}
                task = threading.Thread(target=lambda: result.update(
                    drain_batch(str(path), order, TaskIdentity("drain-1"))))
                task.start()
                waits = f"{order['batch_id']} waits: batch {order['batch_id']} is being worked on by {dagster_run}"
                deadline = time.monotonic() + 60
                while waits not in said and time.monotonic() < deadline:
                    task.join(0.2)
                assert waits in said, said
                # the Airflow task drained nothing
                assert ledger.batches.get(order["batch_id"]).state is BatchState.PLANNED
                ledger.leases.release(order["batch_id"], dagster_run)  # the other run ends, leaving the batch to it
            task.join(120)
            assert result.get("state") == "checked", result  # then it drained it, once: attempt 1
            assert ledger.batches.get(order["batch_id"]).attempts == 1
    finally:
        airflow_log.removeHandler(handler)
        airflow_log.setLevel(level)


def test_the_plan_task_retries_a_transient_failure_at_once_when_the_probe_that_failed_passes_again(
    make_topic, airflow_config, tmp_path, spark
):
    """The healing probe under Airflow: the bit the plan task keeps between DAG runs (a Variable) is this
    function's ``cause_seen``; a retry waiting a one-minute backoff is launched at once once the cause passes."""
    from orchestration.airflow.tasks import commit_batch, drain_batch, plan_batches
    from tests.fixtures.small_disks import read_only_dir

    topic = make_topic(priorities=2, partitions=1, records={1: 40, 0: 40}, schema=SCHEMA)
    out = tmp_path / "out"
    path, config = airflow_config(topic, drain={"output_path": str(out)},
                                  recovery={"max_attempts": 1, "backoff_s": 60, "backoff_max_s": 60})
    with read_only_dir(out):
        [order] = plan_batches(str(path), False, TaskIdentity("plan-1")).orders
        with pytest.raises(TaskFailed, match="Read-only file system"):
            drain_batch(str(path), order, TaskIdentity("drain-1"))
        waiting = plan_batches(str(path), False, TaskIdentity("plan-2"))
        assert waiting.orders == [] and waiting.cause_seen  # the probe sees the cause: nothing launched
    with Ledger(config.ledger.url) as ledger:
        assert ledger.batches.get(order["batch_id"]).state is BatchState.FAILED

        healed = plan_batches(str(path), waiting.cause_seen, TaskIdentity("plan-3"))

        [retry] = healed.orders  # the backoff of a minute is not waited out
        assert (retry["batch_id"], retry["why"], healed.cause_seen) == (order["batch_id"], "retry", False)
        drain_batch(str(path), retry, TaskIdentity("drain-2"))
        assert commit_batch(str(path), retry, TaskIdentity("commit-2"))["state"] == "committed"
