"""kprio under a real Airflow 3 deployment: scheduler, triggerer, DAG processor and API server, each a process.

The deployment (``tests/fixtures/airflow_deployment.py``) starts with the test session, and its
thread produces the backlogs, triggers the re-drain through the REST API and opens the grid in
headless Chromium while the rest of the suite runs, recording what it saw, then stops it; these
tests run last and check what the deployment did by itself: the ledger, the topics and the
output it left, the task instances and DAG runs the REST API reported. Every task ran in a
process of the LocalExecutor, draining through the session's Spark Connect server.
"""

from __future__ import annotations

import pytest

from kprio_core.ledger import BatchState, Ledger
from tests.fixtures.airflow_deployment import DRAIN_TIMEOUT_S, START_TIMEOUT_S, KprioUnderAirflow
from tests.fixtures.deployments import Stages

pytestmark = [pytest.mark.broker, pytest.mark.airflow, pytest.mark.slow, pytest.mark.deployment("airflow")]

STAGE_TIMEOUT_S = START_TIMEOUT_S + 3 * DRAIN_TIMEOUT_S


def reached(stages: Stages, stage: str) -> KprioUnderAirflow:
    return stages.wait(stage, STAGE_TIMEOUT_S)["kprio"]


def test_kprio_drain_drains_three_priorities_to_zero_lag_by_itself(airflow_in_background: Stages):
    kprio = reached(airflow_in_background, "drained")
    topic = kprio.topics["bulk"]

    check = kprio.conservation(topic)
    assert check.ok, check
    with Ledger(kprio.config.ledger.url) as ledger:
        batches = ledger.batches.find(topic.name)
    assert batches and all(b.state is BatchState.COMMITTED for b in batches), batches
    assert {p for b in batches for p in b.priorities} == {0, 1, 2}
    # The DAG runs that drained them: continuous kprio_drain runs, each wait -> plan -> batch groups.
    done = {t["task_id"] for t in kprio.seen["drained"] if t["state"] == "success"}
    assert {"wait_for_batches", "plan", "batch.drain", "batch.commit"} <= done, done
    # Each batch's drain task (mapped: a DAG run still waiting for its plan has only an unexpanded placeholder).
    drains = [t for t in kprio.seen["drained"] if t["task_id"] == "batch.drain" and t.get("map_index", -1) >= 0]
    assert len(drains) >= len(batches) and all(t["state"] == "success" for t in drains), [
        (t["dag_run_id"][-26:], t.get("map_index"), t["state"]) for t in drains]


def test_a_killed_drain_task_is_healed_by_airflow_s_retry_and_the_lease_rules(airflow_in_background: Stages):
    kprio = reached(airflow_in_background, "crashed")
    topic = kprio.topics["crash"]

    assert (kprio.airflow.root / "crashed-once").exists()  # a drain task really killed itself after its publish
    check = kprio.conservation(topic)
    assert check.ok, check
    with Ledger(kprio.config.ledger.url) as ledger:
        batches = sorted(ledger.batches.find(topic.name), key=lambda b: b.batch_id)
    assert all(b.state is BatchState.COMMITTED for b in batches), batches
    assert batches[0].attempts >= 2, batches[0]
    # Airflow saw the task die and tried it again: a drain task instance on its second try, succeeded.
    drains = [t for t in kprio.seen["crashed"] if t["task_id"] == "batch.drain"]
    assert any(t["try_number"] >= 2 and t["state"] == "success" for t in drains), \
        [(t["try_number"], t["state"]) for t in drains]


def test_a_read_only_output_a_person_fixes_heals_under_airflow_with_no_command_run(airflow_in_background: Stages):
    """The output refused the batch (a read-only mount); once a person made it writable, the continuous DAG's next
    runs retried the failed batch by themselves (the plan task's probe passed) and drained the topic."""
    kprio = reached(airflow_in_background, "healed")
    topic, healed = kprio.topics["heal"], kprio.seen["healed"]

    assert healed["failed"] and all("Read-only file system" in b.reason for b in healed["failed"]), healed["failed"]
    check = kprio.conservation(topic)
    assert check.ok, check
    with Ledger(kprio.config.ledger.url) as ledger:
        batches = ledger.batches.find(topic.name)
        assert all(b.state is BatchState.COMMITTED for b in batches), batches
        assert all(ledger.batches.get(b.batch_id).state is BatchState.COMMITTED for b in healed["failed"])
    assert healed["healed_after_s"] < DRAIN_TIMEOUT_S, healed


def test_a_redrain_triggered_through_the_rest_api_drains_the_batch_once_and_commits_nothing_new(
    airflow_in_background: Stages,
):
    kprio = reached(airflow_in_background, "redrained")
    topic, seen = kprio.topics["bulk"], kprio.seen["redrain"]
    batch, before = seen["batch"], seen["before"]

    assert seen["triggered"]["conf"] == {"batch": batch.batch_id}
    assert seen["ended"]["state"] == "success", seen["tasks"]
    assert [(t["task_id"], t["state"], t["try_number"]) for t in seen["tasks"]] == [("redrain", "success", 1)]
    with Ledger(kprio.config.ledger.url) as ledger:
        again = ledger.batches.get(batch.batch_id)
    assert again.state is BatchState.COMMITTED and again.replay_of_committed
    assert again.attempts == batch.attempts + 1  # one drain more, no other
    assert kprio.committed(topic) == before["committed"]  # nothing new committed, nothing moved back
    check = kprio.conservation(topic)
    assert check.ok and check.output == before["output"], check  # replaced, not added


def test_the_grid_view_of_kprio_drain_shows_its_tasks_and_the_batch_group(airflow_in_background: Stages):
    grid = reached(airflow_in_background, "shown").seen["grid"]
    if "skipped" in grid:
        pytest.skip(grid["skipped"])
    assert grid["shown"] == ["kprio_drain", "@continuous", "wait_for_batches", "plan", r"^batch \["]
    assert grid["path"].stat().st_size > 10_000
