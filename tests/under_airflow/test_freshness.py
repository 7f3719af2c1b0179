"""``kprio_freshness``: the freshness objectives as an Airflow task's outcome, on the session's broker.

Records wait on priority 1 with nobody draining them. An objective they break fails the DAG run's
``freshness`` task (no retry), its one line naming the priority, the age, the objective and the likely
cause; an objective they keep lets it succeed, its XCom the verdict and the freshness outcome per priority.
"""

from __future__ import annotations

import time

import pytest

from orchestration.airflow.tasks import TaskFailed, TaskIdentity, check_freshness
from tests.under_airflow.test_dag_runs import task_states, xcom

pytestmark = [pytest.mark.broker, pytest.mark.airflow]


def test_a_missed_objective_fails_the_freshness_task(make_topic, airflow_config, kprio_dag):
    topic = make_topic(priorities=2, partitions=1, records={1: 5}, base_ts_ms=int(time.time() * 1000) - 120_000)
    path, _ = airflow_config(topic, slo={"max_age_s": {1: 60}})
    with pytest.raises(TaskFailed) as missed:
        check_freshness(str(path), TaskIdentity("test"))
    assert not missed.value.retry
    assert str(missed.value).startswith(f"freshness objective missed: {topic.name} priority 1: oldest pending "
                                        "record 12")
    assert "objective 60 s: likely cause: " in str(missed.value)

    run = kprio_dag(path, "kprio_freshness").test()
    assert str(run.state) == "failed"
    assert task_states(run) == {"freshness": ["failed"]}


def test_a_kept_objective_lets_the_task_succeed_with_the_verdicts(make_topic, airflow_config, kprio_dag):
    topic = make_topic(priorities=2, partitions=1, records={1: 5}, base_ts_ms=int(time.time() * 1000))
    path, _ = airflow_config(topic, slo={"max_age_s": {1: 3600}})
    run = kprio_dag(path, "kprio_freshness").test()
    assert str(run.state) == "success", task_states(run)
    [doc] = xcom(run, "freshness")
    urgent = doc[topic.name]["1"]
    assert urgent["backlog"] == 5 and urgent["verdict"] == "OK"
    assert urgent["freshness"]["status"] == "pass" and urgent["freshness"]["objective_s"] == 3600
    assert "freshness" not in doc[topic.name]["0"], "no objective for priority 0"
