"""The shipped dagster.yaml with Postgres storage (dagster-postgres) on a throwaway PostgreSQL server:
Dagster creates its tables there, runs a job, and reads the password only from the environment."""

from __future__ import annotations

import dagster as dg
import pytest

from kprio_core.config import KprioConfig
from orchestration.dagster.instance import DAGSTER_YAML, open_instance
from orchestration.dagster.instance_yaml import DEFAULT_PG_PASSWORD_ENV, dagster_yaml
from tests.fixtures.postgres import PostgresServer, postgres_server  # noqa: F401 (fixture)

pytestmark = [pytest.mark.dagster, pytest.mark.slow]


@dg.op
def one() -> int:
    return 1


@dg.job
def trivial() -> None:
    one()


def rows(server: PostgresServer, database: str, sql: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(host=server.host, port=server.port, user=server.user, dbname=database) as conn:
        return conn.execute(sql).fetchall()


def test_a_job_runs_on_the_postgres_storage(postgres_server, tmp_path, monkeypatch):  # noqa: F811
    database = postgres_server.new_database("dagster")
    # Trust authentication accepts any password: proves the one Dagster got came from the environment.
    url = f"postgresql://{postgres_server.user}:from-the-env@{postgres_server.host}:{postgres_server.port}/{database}"
    home = tmp_path / "home"
    home.mkdir()
    text = dagster_yaml(KprioConfig(), postgres_url=url)
    assert "from-the-env" not in text
    (home / DAGSTER_YAML).write_text(text)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv(DEFAULT_PG_PASSWORD_ENV, "from-the-env")
    with open_instance() as instance:
        result = trivial.execute_in_process(instance=instance)
        assert result.success
        record = instance.get_run_record_by_id(result.run_id)
        assert record is not None and record.dagster_run.status == dg.DagsterRunStatus.SUCCESS
        assert instance.event_log_storage.supports_global_concurrency_limits, "pools need the concurrency tables"
    assert rows(postgres_server, database, "SELECT run_id, status FROM runs") == [(result.run_id, "SUCCESS")]
    assert not (home / "history").exists(), "nothing went to SQLite"


def test_a_missing_password_variable_is_named(postgres_server, tmp_path, monkeypatch):  # noqa: F811
    database = postgres_server.new_database("dagster")
    home = tmp_path / "home"
    home.mkdir()
    (home / DAGSTER_YAML).write_text(dagster_yaml(KprioConfig(), postgres_url=postgres_server.url(database),
                                                  postgres_password_env="KPRIO_TEST_UNSET_PG_PASSWORD"))
    monkeypatch.delenv("KPRIO_TEST_UNSET_PG_PASSWORD", raising=False)
    with pytest.raises(dg.DagsterInvalidConfigError, match="KPRIO_TEST_UNSET_PG_PASSWORD"):
        dg.DagsterInstance.from_config(str(home))


def test_the_url_from_an_environment_variable(postgres_server, tmp_path, monkeypatch):  # noqa: F811
    database = postgres_server.new_database("dagster")
    home = tmp_path / "home"
    home.mkdir()
    (home / DAGSTER_YAML).write_text(dagster_yaml(KprioConfig(), postgres_url_env="KPRIO_TEST_PG_URL"))
    monkeypatch.setenv("KPRIO_TEST_PG_URL", postgres_server.url(database, driver="postgresql+psycopg2"))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert trivial.execute_in_process(instance=instance).success
    assert len(rows(postgres_server, database, "SELECT run_id FROM runs")) == 1
