"""The code location: what it defines, that it loads, and that secrets stay out of its config.

The secret and settings tests build the resources alone (``resources_from_config``), so they
need neither the assets nor the sensor.
"""

from __future__ import annotations

import enum
import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from pydantic import Field

from kprio_core.config import (
    SECRET_SETTINGS,
    KafkaSettings,
    KprioConfig,
    LedgerSettings,
    PlannerSettings,
    SparkSettings,
    parse_config,
    setting_variable,
)
from kprio_core.errors import ConfigError
from orchestration.dagster.resource_fields import fields_class
from orchestration.dagster.resources import (
    RESOURCE_SECTIONS,
    KafkaResource,
    KprioSettings,
    LedgerResource,
    SparkResource,
    resources_from_config,
    secret_field,
)
from tests.fixtures.dagster_instances import fresh_instance

REPO = Path(__file__).resolve().parents[2]
CONFIG = parse_config({"topics": [{"name": "orders", "priorities": 3}], "sensor": {"interval_s": 12}}, env={})
VALUE = "s3cret-value-0451"

pytestmark = pytest.mark.dagster


def test_definitions_are_loadable_and_complete():
    from orchestration.dagster.definitions import build_definitions
    from orchestration.runtime.checks import CHECK_NAMES

    defs = build_definitions(CONFIG)
    dg.Definitions.validate_loadable(defs)

    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} == {
        "drained_batch", "committed_offsets", "replayed_window", "priority_lag"
    }
    checks = {(k.asset_key.to_user_string(), k.name): graph.get_check_spec(k) for k in graph.asset_check_keys}
    # The same six blocking checks on every drain: the batch's, and a replay's (on its hour).
    assert set(checks) == {(asset, name) for asset in ("drained_batch", "replayed_window") for name in CHECK_NAMES}
    assert all(spec.blocking for spec in checks.values())
    assert {k: s.partitions_def is not None for k, s in checks.items() if k[1] == CHECK_NAMES[0]} == {
        ("drained_batch", CHECK_NAMES[0]): False, ("replayed_window", CHECK_NAMES[0]): True}
    specs = {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}
    assert specs["drained_batch"].kinds >= {"spark", "kafka"}
    assert specs["committed_offsets"].kinds == {"kafka"}
    assert all(s.owners == ["team:kprio"] and s.description for s in specs.values())
    assert [d.asset_key for d in specs["committed_offsets"].deps] == [dg.AssetKey("drained_batch")]
    # One op drains, checks, publishes and commits: a UI selection of either asset runs all of it
    # (Dagster refuses a backfill of one asset of a multi-asset that cannot be subset).
    batch_op = defs.resolve_assets_def("drained_batch")
    assert batch_op is defs.resolve_assets_def("committed_offsets")
    assert batch_op.can_subset
    assert batch_op.op.pool == "kprio_drain"
    replays = defs.resolve_assets_def("replayed_window").partitions_def
    assert replays.end_offset == 1 and replays.start.strftime("%Y-%m-%d") == "2026-01-01"

    sensor = defs.resolve_sensor_def("priority_lag_sensor")
    assert sensor.minimum_interval_seconds == 12
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    assert sensor.job_name == "drain_job"
    assert {j.name for j in defs.resolve_all_job_defs()} >= {"drain_job", "plan_batch_job", "replay_window_job"}
    assert defs.resolve_job_def("drain_job").partitions_def.name == "kprio_batches"
    # What the UI launches (a backfill, Materialize) runs its one step in the run's own process.
    assert defs.resolve_implicit_global_asset_job_def().executor_def is dg.in_process_executor
    assert all(j.executor_def is dg.in_process_executor for j in defs.resolve_all_job_defs())
    # No objective configured: priority_lag shows the verdicts, has no check, and its sensor is off by default.
    assert defs.resolve_sensor_def("priority_lag_freshness_sensor").default_status == dg.DefaultSensorStatus.STOPPED


def test_freshness_objectives_are_asset_checks_of_priority_lag():
    from orchestration.dagster.definitions import build_definitions

    config = parse_config({"topics": [{"name": "orders", "priorities": 3}, {"name": "audit-log", "priorities": 1}],
                           "slo": {"max_age_s": {2: 10, 0: 3600}}}, env={})
    defs = build_definitions(config)
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    checks = {(k.asset_key.to_user_string(), k.name): graph.get_check_spec(k) for k in graph.asset_check_keys
              if k.asset_key.to_user_string() == "priority_lag"}
    assert set(checks) == {("priority_lag", "orders_p2_fresh"), ("priority_lag", "orders_p0_fresh"),
                           ("priority_lag", "audit_log_p0_fresh")}
    assert not any(spec.blocking for spec in checks.values())
    assert "at most 10 s old" in checks[("priority_lag", "orders_p2_fresh")].description
    sensor = defs.resolve_sensor_def("priority_lag_freshness_sensor")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING and sensor.job_name == "priority_lag_job"
    assert sensor.minimum_interval_seconds == 10


# --------------------------------------------------------------------------------- secrets


@pytest.mark.parametrize("setting", SECRET_SETTINGS)
def test_every_secret_from_the_environment_reaches_the_client_only_as_an_env_var(monkeypatch, setting):
    variable = setting_variable(setting)
    monkeypatch.setenv(variable, VALUE)
    config = parse_config({}, env={variable: VALUE})
    resources = resources_from_config(config, env={variable: VALUE})

    field = getattr(resources["kafka"], secret_field(setting))
    assert isinstance(field, dg.EnvVar) and field.env_var_name == variable
    shown = repr(resources["kafka"]) + repr(resources["kprio"]) + repr(resources["kprio"].config())
    assert VALUE not in shown
    with dg.build_resources(resources) as built:
        kafka = built.kafka.settings()
        assert built.kprio.config(built.kafka).kafka == kafka
        assert built.kprio.config().kafka.secrets == {}, "no secrets unless the Kafka resource is given"
    assert kafka.client_config()[setting] == VALUE
    assert kafka.redacted()[setting] == "***"


@pytest.mark.parametrize("setting", SECRET_SETTINGS)
def test_every_secret_written_in_the_resource_is_refused_naming_its_variable(setting):
    # The file refuses them (tests/kprio_core/test_config_secrets.py); a resource edited in the
    # launchpad goes through the same validation.
    kafka = KafkaResource(client={setting: VALUE})
    with pytest.raises(ConfigError) as err:
        kafka.settings()
    assert setting_variable(setting) in str(err.value) and VALUE not in str(err.value)
    assert str(err.value).startswith(f"client.{setting}: ") and err.value.where == "resource 'kafka'"


@pytest.mark.parametrize(
    "setting",
    ["sasl.oauthbearer.token.endpoint.url", "sasl.username", "sasl.oauthbearer.client.id", "ssl.ca.location"],
)
def test_a_setting_that_is_no_secret_loads_from_the_environment_and_the_file(setting):
    variable = setting_variable(setting)
    from_env = parse_config({}, env={variable: "v-env"})
    from_file = parse_config({"kafka": {"client": {setting: "v-file"}}}, "kprio.yaml", env={})
    for config, value in ((from_env, "v-env"), (from_file, "v-file")):
        resources = resources_from_config(config, env={})
        dg.Definitions.validate_loadable(dg.Definitions(resources=resources))
        assert resources["kafka"].client == {setting: value}, "a plain, visible field"
        with dg.build_resources({"kafka": resources["kafka"]}) as built:
            assert built.kafka.settings().client_config()[setting] == value


def test_secrets_stay_out_of_run_config_and_logs(monkeypatch):
    env = {setting_variable(s): f"{VALUE}-{i}" for i, s in enumerate(SECRET_SETTINGS)}
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    config = parse_config({}, env=env)
    seen = {}

    @dg.asset
    def probe(context, kafka: KafkaResource, kprio: KprioSettings) -> dg.MaterializeResult:  # noqa: ANN001
        seen.update(kprio.config(kafka).kafka.client_config())
        context.log.info(f"kafka settings: {kafka.settings().redacted()}")
        return dg.MaterializeResult(metadata={"kafka": kafka.settings().redacted()})

    with fresh_instance() as instance:
        result = dg.materialize([probe], resources=resources_from_config(config, env=env), instance=instance)
        assert result.success
        stored = json.dumps(instance.get_run_by_id(result.run_id).run_config, default=str)
        logged = " ".join(str(event) for event in instance.all_logs(result.run_id))
    assert all(seen[s] == env[setting_variable(s)] for s in SECRET_SETTINGS), "every secret reached the run"
    assert not [value for value in env.values() if value in stored + logged]
    assert "***" in logged


# --------------------------------------------------------------------------------- settings


def test_every_config_field_has_its_resource_field():
    # A setting is defined once, in kprio_core/config/: each field of a section is one field of the resource
    # holding that section (the Kafka secrets one EnvVar field each), each other section one field of
    # KprioSettings, and no resource field carries anything else.
    assert set(RESOURCE_SECTIONS) == {"kafka", "spark", "ledger"} <= set(KprioConfig.model_fields)
    secrets = {secret_field(setting) for setting in SECRET_SETTINGS}
    assert set(KafkaResource.model_fields) == set(KafkaSettings.model_fields) - {"secrets"} | secrets
    assert set(SparkResource.model_fields) == set(SparkSettings.model_fields) | {"app_name"}
    assert set(LedgerResource.model_fields) == set(LedgerSettings.model_fields)
    # The three dependencies are named as the sections they hold.
    assert set(KprioSettings.model_fields) == set(KprioConfig.model_fields)
    for resource, model in ((KafkaResource, KafkaSettings), (SparkResource, SparkSettings),
                            (LedgerResource, LedgerSettings)):
        for name, field in resource.model_fields.items():
            if name in model.model_fields:
                assert field.description == model.model_fields[name].description, f"{resource.__name__}.{name}"


class _Knob(str, enum.Enum):
    LOW = "low"
    HIGH = "high"


class _Grown(SparkSettings):
    """The spark section with settings added to the model and nothing else (a new setting of each kind)."""

    knob: _Knob = Field(_Knob.LOW, description="An enum, written by its value.")
    limit: int | None = Field(None, description="An optional number.")
    names: tuple[str, ...] = Field(("a",), description="A tuple, a list in kprio.yaml.")
    nested: PlannerSettings = Field(default_factory=PlannerSettings, description="A nested section.")


def test_a_setting_added_to_the_model_is_a_resource_field_and_comes_back_unchanged():
    # The resources' fields are made from the models (resource_fields.py): a new setting of any kind
    # is a field Dagster takes (in run config, the launchpad), described as the model describes it,
    # and the values Dagster resolves validate back into the model unchanged.
    class Grown(fields_class("GrownFields", _Grown)):
        def settings(self) -> _Grown:
            return _Grown.model_validate({name: getattr(self, name) for name in _Grown.model_fields})

    changed = _Grown(knob=_Knob.HIGH, limit=5, names=("x", "y"), nested=PlannerSettings(record_budget=77),
                     reader="native", master="local[3]", conf={"spark.x": "1"})
    assert set(Grown.model_fields) == set(_Grown.model_fields)
    assert all(Grown.model_fields[n].description == f.description for n, f in _Grown.model_fields.items())
    with dg.build_resources({"grown": Grown(**changed.model_dump(mode="json"))}) as built:
        assert built.grown.settings() == changed
    assert Grown().settings() == _Grown()


def test_config_round_trips_through_the_resources():
    resources = resources_from_config(CONFIG, env={})
    assert resources["kprio"].config() == CONFIG
    assert resources["kprio"].config(resources["kafka"]) == CONFIG
    with dg.build_resources(resources) as built:
        assert built.kprio.config() == CONFIG
        assert built.spark.settings() == CONFIG.spark and built.ledger.settings() == CONFIG.ledger


def test_a_bad_value_in_a_resource_names_the_resource_and_key():
    # A launchpad edit reaches the pydantic model too, and fails as a bad file does.
    resources = resources_from_config(CONFIG, env={})
    sections = CONFIG.model_dump(by_alias=True, exclude={"kafka", "spark", "ledger"})
    sections["topics"] = [{"name": "orders", "topic_template": "{topic}"}]
    bad = KprioSettings(kafka=resources["kafka"], spark=resources["spark"], ledger=resources["ledger"], **sections)
    with pytest.raises(ConfigError, match=r"^topics\.0\.topic_template: .*must contain.* \(resource 'kprio'\)$"):
        bad.config()


@pytest.mark.slow
def test_workspace_loads_with_the_dagster_cli(tmp_path):
    # The same check `dagster dev` makes when it loads workspace.yaml from the repository root.
    result = subprocess.run(
        [sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "DAGSTER_HOME": str(tmp_path), "KPRIO_CONFIG": ""},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Validation successful" in result.stdout + result.stderr


@pytest.mark.spark
def test_the_spark_resource_takes_its_session_from_one_provider_and_stops_none_it_did_not_start(spark):
    """A run's resource makes its own provider (the active session reused, left running at teardown); the
    resource kprio drain's loop hands each run shares the loop's provider, which only the loop stops."""
    from spark_jobs.session import SparkProvider, session_running
    from tests.fixtures.spark import TEST_SPARK

    own = SparkResource(**TEST_SPARK.model_dump(mode="json"), app_name="kprio-tests")
    assert own.session is spark and own.session is spark
    own.teardown_after_execution(dg.build_init_resource_context())
    assert session_running()

    loops = SparkProvider(TEST_SPARK, app_name="kprio-tests")
    shared = own.sharing(loops)
    assert shared.settings() == own.settings() and shared.app_name == own.app_name
    assert shared.session is loops.session() is spark
    shared.teardown_after_execution(dg.build_init_resource_context())
    assert shared.session is spark  # still the loop's provider
    loops.stop()
    assert session_running() and spark.range(2).count() == 2


RESOURCE_CHILD = """
import json, sys
import dagster as dg
from orchestration.dagster.resources import SparkResource
from spark_jobs.session import SparkProvider, session_running

values = json.loads(sys.argv[1])
seen = {}
own = SparkResource(**values)  # a run's resource: its own provider starts the session, its teardown stops it
seen["own"] = own.session.range(2).count()
own.teardown_after_execution(dg.build_init_resource_context())
seen["own_stopped"] = not session_running()

loops = SparkProvider(own.settings(), app_name=own.app_name)  # kprio drain's loop: one provider, every run shares it
loops.start_in_background()
for run in ("first", "second"):
    shared = own.sharing(loops)
    seen[run] = shared.session is loops.session() and shared.session.range(3).count() == 3
    shared.teardown_after_execution(dg.build_init_resource_context())
    seen[run + "_left_running"] = session_running()
loops.stop()
seen["loop_stopped"] = not session_running()
print(json.dumps(seen))
"""


@pytest.mark.spark
@pytest.mark.slow
def test_a_runs_spark_resource_stops_the_session_it_started_and_never_the_loops_it_shares(child_spark_conf):
    """In a process with no session (a child: the tests' session must stay up): a run's own resource stops the
    session it started at teardown; resources sharing the loop's provider leave its session to the loop."""
    from tests.fixtures.spark import TEST_SPARK

    settings = TEST_SPARK.model_copy(update={"master": "local[1]", "conf": {**TEST_SPARK.conf, **child_spark_conf}})
    child = subprocess.run([sys.executable, "-c", RESOURCE_CHILD, json.dumps(settings.model_dump(mode="json"))],
                           cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                           timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    assert json.loads(child.stdout.strip().splitlines()[-1]) == {
        "own": 2, "own_stopped": True, "first": True, "first_left_running": True, "second": True,
        "second_left_running": True, "loop_stopped": True}
