"""The Airflow DAGs of a kprio deployment, built from ``kprio.yaml``: drain, re-drain, replay, freshness, maintenance.

A dags folder loads them with a two-line file (``kprio airflow init --dags-folder D`` writes it)::

    from orchestration.airflow.dags import kprio_dags
    globals().update(kprio_dags())  # --config, else $KPRIO_CONFIG, else ./kprio.yaml

Building them reads the configuration only (no Spark, broker, ledger or GX work in the DAG processor); a
configuration that does not load is one DAG import error with its own message (:class:`KprioDagsError`).

``kprio_drain`` (``@continuous``, one run at a time): ``wait_for_batches`` defers to the triggerer until a tick has
work; ``plan`` runs the tick; then per run order a ``batch`` group (map index: the batch id) of ``drain`` and
``commit``, in :data:`POOL` (the ledger enforces each priority's limit exactly). Airflow's retries
(``recovery.max_attempts`` - 1, exponential from ``recovery.backoff_s`` to ``backoff_max_s``) are the batch's.

``kprio_redrain`` (conf ``{"batch": "b-000042"}``): re-drains exactly that batch's ledger ranges once; a committed
batch commits nothing new. ``kprio_replay`` (conf ``{"start": "2026-11-26T04:00:00Z"}``, ``end`` default start +
1 h): the window of every priority topic (offsets-for-times) drained again into ``drain.replay_path``, checked
before publishing; no consumer group moves. ``kprio_freshness`` (every minute): fails when a priority misses
``slo.max_age_s`` (its log names priority, age, objective, likely cause), warns above the warn threshold.
``kprio_maintain`` (``drain.maintenance.schedule``, one run at a time; paused on creation unless ``drain.format``
is ``delta`` or ``iceberg``): compaction, Delta vacuum and checkpoint, Iceberg snapshot expiry; the figures
before and after in its log and XCom (as Dagster's ``tables_maintenance_job``).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Param, Variable, get_current_context, task, task_group
from airflow.sdk.exceptions import AirflowFailException

from kprio_core.config import KprioConfig, load_config
from kprio_core.errors import KprioError
from orchestration.airflow import tasks
from orchestration.airflow.pool import POOL
from orchestration.airflow.trigger import WaitForBatches

DRAIN_DAG = "kprio_drain"
REDRAIN_DAG = "kprio_redrain"
REPLAY_DAG = "kprio_replay"
FRESHNESS_DAG = "kprio_freshness"
FRESHNESS_EVERY_S = 60
"""How often ``kprio_freshness`` evaluates the objectives (at least; ``sensor.interval_s`` when longer)."""
MAINTAIN_DAG = "kprio_maintain"
CAUSE_SEEN_VARIABLE = "kprio_drain.cause_seen"
"""The Airflow Variable that holds, between DAG runs, whether the probe before a tick saw a transient cause."""
TAGS = ["kprio"]


class KprioDagsError(Exception):
    """The configuration did not load: the DAG file's import error, in one line."""


def kprio_dags(config: str | os.PathLike | None = None) -> dict[str, DAG]:
    """The DAGs by id (the five of the module docstring), for a DAG file's ``globals()``."""
    path = tasks.config_file(config)
    try:
        loaded = load_config(path)
    except KprioError as err:
        raise KprioDagsError(f"kprio: cannot build the Airflow DAGs from {path or 'the built-in defaults'}: "
                             f"{err}") from None
    return {dag.dag_id: dag for dag in (drain_dag(loaded, path), redrain_dag(loaded, path), replay_dag(path),
                                        freshness_dag(loaded, path), maintain_dag(loaded, path))}


def _retries(config: KprioConfig) -> dict[str, Any]:
    recovery = config.recovery
    return {"retries": max(0, recovery.max_attempts - 1), "retry_delay": timedelta(seconds=recovery.backoff_s),
            "retry_exponential_backoff": True, "max_retry_delay": timedelta(seconds=recovery.backoff_max_s)}


def _me() -> tasks.TaskIdentity:
    ti = get_current_context()["ti"]
    return tasks.TaskIdentity(str(ti.id), int(ti.try_number or 1))


def _carry_out(work, *args: Any) -> Any:
    """Run a task body; its one-line failure as Airflow's (no retry when retrying cannot help)."""
    try:
        return work(*args, _me())
    except tasks.TaskFailed as failed:
        if not failed.retry:
            raise AirflowFailException(str(failed)) from None
        raise


START_DATE = datetime(2025, 1, 1, tzinfo=UTC)
"""kprio_drain's start date, any past date: without one, the continuous timetable gives the first run an empty
interval at the second run's logical date, so no second run is created and the DAG stops after one run."""


def drain_dag(config: KprioConfig, path: str | None) -> DAG:
    """``kprio_drain``: wait (deferred) -> plan -> one ``batch`` group (drain -> commit) per batch."""
    with DAG(
        DRAIN_DAG, schedule="@continuous", max_active_runs=1, catchup=False, tags=TAGS, start_date=START_DATE,
        default_args={"pool": POOL, **_retries(config)},
        description="kprio: drain the priority topics in batches (plan, drain, check, publish, commit)",
        doc_md=__doc__,
    ) as dag:
        wait = WaitForBatches(task_id="wait_for_batches", config_path=path, poll_s=config.sensor.interval_s,
                              pool="default_pool", retries=0)

        @task(task_id="plan", pool="default_pool", retries=0)
        def plan() -> list[dict[str, Any]]:
            # The one bit the tick keeps between DAG runs (the sensor keeps it in its cursor).
            seen = Variable.get(CAUSE_SEEN_VARIABLE, default="") == "yes"
            planned = _carry_out(tasks.plan_batches, path, seen)
            if planned.cause_seen != seen:
                Variable.set(CAUSE_SEEN_VARIABLE, "yes" if planned.cause_seen else "",
                             description="kprio: a transient failure's cause was seen by the probe (healing.py)")
            return planned.orders

        @task(task_id="drain", map_index_template="{{ batch_id }}")
        def drain(order: dict[str, Any]) -> dict[str, Any]:
            get_current_context()["batch_id"] = order["batch_id"]
            return _carry_out(tasks.drain_batch, path, order)

        @task(task_id="commit", map_index_template="{{ batch_id }}")
        def commit(order: dict[str, Any]) -> dict[str, Any]:
            get_current_context()["batch_id"] = order["batch_id"]
            return _carry_out(tasks.commit_batch, path, order)

        @task_group(group_id="batch")
        def batch(order: dict[str, Any]) -> None:
            drain(order) >> commit(order)

        orders = plan()
        wait >> orders
        batch.expand(order=orders)
    return dag


def redrain_dag(config: KprioConfig, path: str | None) -> DAG:
    """``kprio_redrain``: one operator's re-drain of the batch the trigger's conf names."""
    with DAG(
        REDRAIN_DAG, schedule=None, catchup=False, tags=TAGS, max_active_runs=1,
        params={"batch": Param(None, type=["null", "string"],
                               description="The kprio batch to re-drain (its exact ledger ranges), e.g. b-000042")},
        description="kprio: re-drain one batch's exact ledger ranges (a committed batch commits nothing new)",
        doc_md=__doc__,
    ) as dag:

        @task(task_id="redrain", pool=POOL, retries=0)
        def redrain() -> dict[str, Any]:
            # The run's conf (the UI's trigger form writes its params there too): what this run was asked for.
            conf = get_current_context()["dag_run"].conf or {}
            return _carry_out(tasks.redrain_batch, path, conf.get("batch"))

        redrain()
    return dag


def replay_dag(path: str | None) -> DAG:
    """``kprio_replay``: the time window its conf names, of every topic, drained again into the replay output."""
    with DAG(
        REPLAY_DAG, schedule=None, catchup=False, tags=TAGS,
        params={"start": Param(None, type=["null", "string"], description="Start of the window (ISO 8601, UTC "
                               "unless it says otherwise), e.g. 2026-11-26T04:00:00Z"),
                "end": Param(None, type=["null", "string"], description="End of the window (default: start + 1 h)")},
        description="kprio: drain a time window of every priority topic again into drain.replay_path "
        "(offsets-for-times; no consumer group offset moves)",
        doc_md=__doc__,
    ) as dag:

        @task(task_id="replay", pool=POOL, retries=0)
        def replay() -> dict[str, Any]:
            return _carry_out(tasks.replay, path, get_current_context()["dag_run"].conf or {})

        replay()
    return dag


def freshness_dag(config: KprioConfig, path: str | None) -> DAG:
    """``kprio_freshness``: every minute, the freshness objectives and lag verdicts; a missed objective fails it."""
    with DAG(
        FRESHNESS_DAG, schedule=timedelta(seconds=max(FRESHNESS_EVERY_S, config.sensor.interval_s)),
        start_date=START_DATE, catchup=False, max_active_runs=1, tags=TAGS,
        description="kprio: the freshness objectives (slo.max_age_s) and lag verdicts of every priority; the task "
        "fails when an objective is missed, naming the priority, age, objective and likely cause",
        doc_md=__doc__,
    ) as dag:

        @task(task_id="freshness", pool="default_pool", retries=0)
        def freshness() -> dict[str, Any]:
            return _carry_out(tasks.check_freshness, path)

        freshness()
    return dag


def maintain_dag(config: KprioConfig, path: str | None) -> DAG:
    """``kprio_maintain``: the tables' maintenance on ``drain.maintenance.schedule``."""
    from spark_jobs.tables import output_of

    with DAG(
        MAINTAIN_DAG, schedule=config.drain.maintenance.schedule, catchup=False, tags=TAGS, max_active_runs=1,
        start_date=START_DATE, is_paused_upon_creation=not output_of(config.drain).tables,
        description="kprio: compact the Delta or Iceberg tables' small files, vacuum or expire old snapshots "
        "(drain.maintenance)",
        doc_md=__doc__,
    ) as dag:

        @task(task_id="maintain", retries=0)
        def maintain() -> dict[str, Any]:
            return _carry_out(tasks.maintain_tables, path)

        maintain()
    return dag
