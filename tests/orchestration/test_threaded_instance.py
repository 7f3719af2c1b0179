"""The copy of a Dagster instance ``kprio drain``'s threaded runs execute on: the same storage as the instance,
no compute-log capture, the YAML handlers built once; an instance whose storage it would not open is refused."""

from __future__ import annotations

import dagster as dg
import pytest
import yaml

from kprio_core.config import KprioConfig
from orchestration.dagster.instance import DAGSTER_YAML
from orchestration.dagster.instance_yaml import dagster_yaml
from orchestration.dagster.threaded_instance import (
    PROBE_PARTITIONS,
    ThreadedInstanceMismatch,
    for_runs_in_threads,
)

pytestmark = pytest.mark.dagster


@dg.op
def one() -> int:
    return 1


@dg.job
def trivial() -> None:
    one()


def assert_a_copy_on_the_same_storage(instance: dg.DagsterInstance) -> None:
    with for_runs_in_threads(instance) as threaded:
        result = trivial.execute_in_process(instance=threaded)
        assert result.success
        assert type(threaded.compute_log_manager).__name__ == "NoOpComputeLogManager"
        assert threaded.get_yaml_python_handlers() is threaded.get_yaml_python_handlers()
    record = instance.get_run_record_by_id(result.run_id)
    assert record is not None and record.dagster_run.status == dg.DagsterRunStatus.SUCCESS
    assert type(instance.compute_log_manager).__name__ != "NoOpComputeLogManager", "the instance passed is untouched"
    assert instance.get_dynamic_partitions(PROBE_PARTITIONS) == [], "the probe leaves no key behind"


def test_the_copy_of_a_test_instance_runs_on_its_storage():
    with dg.instance_for_test() as instance:
        assert_a_copy_on_the_same_storage(instance)


def test_the_copy_of_a_home_with_kprios_dagster_yaml_runs_on_its_storage(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / DAGSTER_YAML).write_text(dagster_yaml(KprioConfig()))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert_a_copy_on_the_same_storage(instance)


def test_an_instance_whose_storage_is_not_where_its_root_says_is_refused_in_one_line(tmp_path):
    # The dagster.yaml moves the root (local artifact storage) away from the home that holds it and the storage:
    # a copy made from the root would run on another storage, which the instance's UI, sensor and daemon never see.
    home, root = tmp_path / "home", tmp_path / "artifacts"
    home.mkdir()
    root.mkdir()
    (home / DAGSTER_YAML).write_text(yaml.safe_dump({
        "local_artifact_storage": {"module": "dagster._core.storage.root", "class": "LocalArtifactStorage",
                                   "config": {"base_dir": str(root)}},
        "storage": {"sqlite": {"base_dir": str(home / "storage")}},
    }))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.root_directory == str(root)
        with pytest.raises(ThreadedInstanceMismatch) as raised, for_runs_in_threads(instance):
            pass
    assert str(raised.value).count("\n") == 0 and str(root) in str(raised.value)
