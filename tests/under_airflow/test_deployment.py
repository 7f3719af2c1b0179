"""kprio under a real Airflow 3 deployment: scheduler, triggerer, DAG processor and API server, each a process.

The deployment (``tests/fixtures/airflow_deployment.py``) starts with the test session, and its
thread produces the backlogs and triggers the re-drain through the REST API while the rest of the
suite runs; these tests run last and check what the deployment did by itself, then look at it in
Chromium. Every task ran in a process of the LocalExecutor, draining through the session's
Spark Connect server.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from kprio_core.ledger import BatchState, Ledger
from tests.fixtures.airflow_deployment import DRAIN_TIMEOUT_S, START_TIMEOUT_S, KprioUnderAirflow
from tests.fixtures.deployments import REPO, Stages

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
        batches = ledger.batches(topic.name)
    assert batches and all(b.state is BatchState.COMMITTED for b in batches), batches
    assert {p for b in batches for p in b.priorities} == {0, 1, 2}
    # The DAG runs that drained them: continuous kprio_drain runs, each wait -> plan -> batch groups.
    runs = [r for r in kprio.airflow.dag_runs("kprio_drain") if r["state"] == "success"]
    tasks = {t["task_id"] for r in runs for t in kprio.airflow.task_instances("kprio_drain", r["dag_run_id"])}
    assert {"wait_for_batches", "plan", "batch.drain", "batch.commit"} <= tasks, tasks


def test_a_killed_drain_task_is_healed_by_airflow_s_retry_and_the_lease_rules(airflow_in_background: Stages):
    kprio = reached(airflow_in_background, "crashed")
    topic = kprio.topics["crash"]

    assert (kprio.airflow.root / "crashed-once").exists()  # a drain task really killed itself after its publish
    check = kprio.conservation(topic)
    assert check.ok, check
    with Ledger(kprio.config.ledger.url) as ledger:
        batches = sorted(ledger.batches(topic.name), key=lambda b: b.batch_id)
    assert all(b.state is BatchState.COMMITTED for b in batches), batches
    assert batches[0].attempts >= 2, batches[0]
    # Airflow saw the task die and tried it again: a drain task instance on its second try, succeeded.
    drains = [t for r in kprio.airflow.dag_runs("kprio_drain")
              for t in kprio.airflow.task_instances("kprio_drain", r["dag_run_id"]) if t["task_id"] == "batch.drain"]
    assert any(t["try_number"] >= 2 and t["state"] == "success" for t in drains), \
        [(t["try_number"], t["state"]) for t in drains]


def test_a_redrain_triggered_through_the_rest_api_drains_the_batch_once_and_commits_nothing_new(
    airflow_in_background: Stages,
):
    kprio = reached(airflow_in_background, "redrained")
    topic, seen = kprio.topics["bulk"], kprio.seen["redrain"]
    batch, before = seen["batch"], seen["before"]

    assert seen["triggered"]["conf"] == {"batch": batch.batch_id}
    assert seen["ended"]["state"] == "success", kprio.airflow.task_instances("kprio_redrain",
                                                                             seen["ended"]["dag_run_id"])
    with Ledger(kprio.config.ledger.url) as ledger:
        again = ledger.get(batch.batch_id)
    assert again.state is BatchState.COMMITTED and again.replay_of_committed
    assert again.attempts == batch.attempts + 1  # one drain more, no other
    assert kprio.committed(topic) == before["committed"]  # nothing new committed, nothing moved back
    check = kprio.conservation(topic)
    assert check.ok and check.output == before["output"], check  # replaced, not added


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("KPRIO_REFRESH_SCREENSHOTS") == "1":
        return REPO / "docs" / "screenshots"
    return tmp_path_factory.mktemp("screenshots")


@pytest.mark.browser
def test_the_grid_view_of_kprio_drain_shows_its_runs_and_batch_tasks(airflow_in_background: Stages, page,
                                                                     screenshots: Path):
    from playwright.sync_api import expect

    kprio = reached(airflow_in_background, "redrained")
    page.goto(f"{kprio.airflow.url}/dags/kprio_drain", wait_until="domcontentloaded")
    expect(page.get_by_text("kprio_drain").first).to_be_visible(timeout=60_000)
    expect(page.get_by_text("@continuous").first).to_be_visible()
    # The grid's rows: the two tasks and the mapped task group of the batches.
    for row in ("wait_for_batches", "plan"):
        expect(page.get_by_text(row, exact=True).first).to_be_visible(timeout=30_000)
    expect(page.get_by_text(re.compile(r"^batch \[")).first).to_be_visible()
    path = screenshots / "airflow-grid.png"
    page.screenshot(path=str(path))
    assert path.stat().st_size > 10_000
