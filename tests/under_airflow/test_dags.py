"""kprio's DAGs as Airflow's DAG processor loads them: the dags folder's file, its imports, its errors, its shape."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestration.cli.airflow import DAG_FILE
from orchestration.cli.main import app
from tests.fixtures.airflow import AirflowHome

pytestmark = [pytest.mark.airflow]

REPO = Path(__file__).resolve().parents[2]

LOAD = """
import json, sys, runpy
namespace = runpy.run_path(sys.argv[1])
heavy = sorted(m for m in ("pyspark", "great_expectations", "confluent_kafka", "dagster") if m in sys.modules)
print(json.dumps({"dags": sorted(k for k, v in namespace.items() if type(v).__name__ == "DAG"), "heavy": heavy}))
"""

BAG = """
import sys, json
from airflow.dag_processing.dagbag import DagBag
print(json.dumps(DagBag(dag_folder=sys.argv[1]).import_errors))
"""


def write_config(path: Path, **sections: object) -> Path:
    doc = {"topics": [{"name": "orders", "priorities": 3, "partitions": 4}], "ledger": {"url": "sqlite:///ledger.db"},
           "planner": {"max_in_flight": 2}, "recovery": {"max_attempts": 4, "backoff_s": 2, "backoff_max_s": 30},
           **sections}
    path.write_text(yaml.safe_dump(doc))
    return path


def init(dags: Path, config: Path, *more: str):
    return CliRunner().invoke(app, ["airflow", "init", "--dags-folder", str(dags), "--config", str(config), *more])


def test_the_dag_file_loads_both_dags_without_spark_kafka_gx_or_dagster(airflow_home: AirflowHome, tmp_path):
    config = write_config(tmp_path / "kprio.yaml")
    result = init(tmp_path / "dags", config, "--no-pool")
    assert result.exit_code == 0, result.output
    dag_file = tmp_path / "dags" / DAG_FILE
    code = [line for line in dag_file.read_text().splitlines() if line.strip() and not line.startswith('"""')]
    assert len(code) == 2, code  # the import and the globals() update
    done = subprocess.run([sys.executable, "-c", LOAD, str(dag_file)], capture_output=True, text=True, cwd=tmp_path,
                          env=airflow_home.env, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert loaded == {"dags": ["kprio_drain", "kprio_freshness", "kprio_maintain", "kprio_redrain", "kprio_replay"],
                      "heavy": []}


def test_a_config_that_does_not_load_is_one_dag_import_error_naming_it(airflow_home: AirflowHome, tmp_path):
    good = write_config(tmp_path / "kprio.yaml")
    assert init(tmp_path / "dags", good, "--no-pool").exit_code == 0
    good.write_text(yaml.safe_dump({"topics": [{"name": "orders", "priorities": 0}]}))  # broken after init
    done = subprocess.run(
        [sys.executable, "-c", BAG, str(tmp_path / "dags")], capture_output=True, text=True, env=airflow_home.env,
        timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    [(where, error)] = json.loads(done.stdout.splitlines()[-1]).items()
    assert where.endswith(DAG_FILE)
    last = error.strip().splitlines()[-1]
    assert last.startswith(f"orchestration.airflow.dags.KprioDagsError: kprio: cannot build the Airflow DAGs from "
                           f"{good}:"), error
    assert "priorities" in last


def test_init_refuses_to_replace_a_dag_file_kprio_did_not_write(tmp_path):
    config = write_config(tmp_path / "kprio.yaml")
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / DAG_FILE).write_text("# mine\n")
    result = init(tmp_path / "dags", config, "--no-pool")
    assert result.exit_code == 1
    assert "exists and kprio did not write it: pass --force" in result.stderr
    assert (tmp_path / "dags" / DAG_FILE).read_text() == "# mine\n"


def test_init_creates_the_pool_with_a_slot_per_batch_in_flight(airflow_home: AirflowHome, tmp_path):
    config = write_config(tmp_path / "kprio.yaml")
    result = CliRunner().invoke(app, ["airflow", "init", "--dags-folder", str(tmp_path / "dags"), "--config",
                                      str(config)], env=airflow_home.env)
    assert result.exit_code == 0, result.output
    assert "pool kprio_drain: 6 slots" in result.stdout  # max_in_flight 2 x 3 priorities
    pools = json.loads(airflow_home.airflow("pools", "get", "kprio_drain", "--output", "json").stdout)
    assert pools[0]["slots"] in (6, "6"), pools


def test_the_drain_dag_is_continuous_and_maps_a_drain_and_a_commit_per_batch(tmp_path):
    from orchestration.airflow.dags import kprio_dags
    from orchestration.airflow.pool import POOL

    dags = kprio_dags(write_config(tmp_path / "kprio.yaml"))
    drain = dags["kprio_drain"]
    assert drain.max_active_runs == 1 and type(drain.timetable).__name__ == "ContinuousTimetable"
    assert set(drain.task_dict) == {"wait_for_batches", "plan", "batch.drain", "batch.commit"}
    assert drain.task_dict["wait_for_batches"].downstream_task_ids == {"plan"}
    assert drain.task_dict["batch.drain"].downstream_task_ids == {"batch.commit"}
    for name in ("batch.drain", "batch.commit"):
        work = drain.task_dict[name]
        # Airflow's retries are kprio's: max_attempts - 1 of them, backing off as recovery says.
        assert (work.pool, work.retries, work.retry_delay, work.retry_exponential_backoff, work.max_retry_delay) == \
            (POOL, 3, timedelta(seconds=2), True, timedelta(seconds=30))
    redrain = dags["kprio_redrain"]
    assert type(redrain.timetable).__name__ == "NullTimetable"  # triggered by a person only
    assert "batch" in redrain.params and redrain.task_dict["redrain"].retries == 0
    replay = dags["kprio_replay"]
    assert type(replay.timetable).__name__ == "NullTimetable" and {"start", "end"} <= set(replay.params)
    freshness = dags["kprio_freshness"]
    assert set(freshness.task_dict) == {"freshness"} and freshness.max_active_runs == 1
    assert freshness.task_dict["freshness"].retries == 0  # a missed objective is an outcome, not a failure to retry
    maintain = dags["kprio_maintain"]
    assert type(maintain.timetable).__name__ == "CronTriggerTimetable"
    assert maintain.timetable.expression == "17 * * * *" and maintain.max_active_runs == 1 and not maintain.catchup
    assert set(maintain.task_dict) == {"maintain"} and maintain.is_paused_upon_creation  # Parquet: no table


def test_the_maintain_dag_compacts_the_tables_and_returns_the_figures_before_and_after(kprio_dag, tmp_path):
    """``kprio_maintain`` run as the scheduler would (``dag.test()``) on an Iceberg table of 16 small files."""
    from tests.spark_jobs.test_maintenance import drain_settings, expected, offsets, publish_batch
    from tests.under_airflow.test_dag_runs import task_states, xcom

    drain = drain_settings(tmp_path, "iceberg", retention_s=0.0, keep_snapshots=2, schedule="0 3 * * *")
    for n in range(8):
        publish_batch(drain, tmp_path, n)
    dag = kprio_dag(write_config(tmp_path / "kprio.yaml", drain=drain.model_dump(mode="json")), "kprio_maintain")
    assert dag.timetable.expression == "0 3 * * *" and not dag.is_paused_upon_creation  # on by itself for a table
    run = dag.test()
    assert str(run.state) == "success", task_states(run)
    [done] = xcom(run, "maintain")
    assert done["format"] == "iceberg" and (done["totals"]["files_before"], done["totals"]["files_after"]) == (16, 2)
    assert done["totals"]["snapshots_after"] < done["totals"]["snapshots_before"], done
    assert offsets(drain) == expected(8), "the same rows, each once"


def test_each_run_of_the_continuous_drain_dag_gets_a_logical_date_of_its_own(tmp_path):
    """Airflow's scheduler creates the next continuous run at the date the timetable gives after the last one;
    a date already taken means no run is created, ever again (found under a real scheduler)."""
    from airflow.serialization.serialized_objects import DagSerialization

    from orchestration.airflow.dags import kprio_dags

    dag = kprio_dags(write_config(tmp_path / "kprio.yaml"))["kprio_drain"]
    drain = DagSerialization.from_dict(DagSerialization.to_dict(dag))  # what the scheduler schedules from
    first = drain.next_dagrun_info(last_automated_run_info=None)
    second = drain.next_dagrun_info(last_automated_run_info=first)
    assert first.logical_date < second.logical_date
