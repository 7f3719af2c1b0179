"""A base install, with none of the extras importable, imports kprio, plans and drains JSON into Parquet; a setting
that needs an extra fails at load in one line naming the ``pip install`` that brings it.

Every Python process of a case (the ``kprio`` CLI, Dagster's, Spark's Python workers) starts with a
``sitecustomize`` on its ``PYTHONPATH`` that marks the modules of the extras absent (``None`` in ``sys.modules``:
an import fails, ``importlib.util.find_spec`` answers None), as a machine without them would: the top-level modules of every distribution the extras of
``pyproject.toml`` bring that the base's own requirements (and the test runner's) do not, read from the installed
distributions' metadata. The drain runs on the session's broker, in a Spark session of its own (a real process).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from kprio_core.ledger import BatchState
from spark_jobs import tables
from spark_jobs.layout import OUTPUT
from tests.orchestration.conservation import conservation, lag
from tests.orchestration.test_recovery import REPO, child_config

PIP_OWN = {"setuptools", "_distutils_hack", "pkg_resources"}
"""What every pip environment has, whoever asked for it."""
PARTS_OF_EXTRAS = ("orchestration.observe.metrics", "orchestration.observe.endpoint", "orchestration.observe.feed",
                   "orchestration.observe.lineage",
                   "orchestration.airflow")
"""The modules that are a part themselves, their library imported at the top: only these may not import."""


def _closure(requirements: list[str]) -> set[str]:
    """The distributions ``requirements`` bring, with their requirements' (markers of extras honoured)."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        key = re.sub(r"[-_.]+", "-", req.name).lower()
        if f"{key}{sorted(req.extras)}" in seen:
            continue
        seen |= {f"{key}{sorted(req.extras)}", key}
        if key == "kprio":
            continue
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            sub = Requirement(text)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in ("", *req.extras)):
                todo.append(sub)
    return {k for k in seen if "[" not in k}


def refused_modules() -> set[str]:
    """The top-level modules of what the extras bring beyond the base (and the test runner)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    base = _closure([*project["dependencies"], *extras["test"], *extras["browser"]])
    brought = _closure([r for name in extras if name not in ("test", "browser", "all") for r in extras[name]]) - base
    by_module = metadata.packages_distributions()
    return {module for module, dists in by_module.items()
            if any(re.sub(r"[-_.]+", "-", d).lower() in brought for d in dists)
            and not any(re.sub(r"[-_.]+", "-", d).lower() in base for d in dists)} - PIP_OWN


SITECUSTOMIZE = """
import sys

REFUSED = frozenset({refused!r})
# A base install: the extras' modules are not there. None in sys.modules is what the import system says of a
# module that is not there: an import raises ModuleNotFoundError, importlib.util.find_spec answers None.
sys.modules.update(dict.fromkeys(REFUSED))
"""

IMPORT_ALL = """
import importlib, json, pkgutil, sys
failed = {}
for package in ("kprio_core", "spark_jobs", "orchestration"):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if info.name.endswith(".__main__"):
            continue  # runs the CLI
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as err:
            failed[info.name] = err.name
refused = __import__("sitecustomize").REFUSED
print(json.dumps({"failed": failed, "extras_loaded": sorted(m for m, module in sys.modules.items()
                                                            if module is not None and m.partition(".")[0] in refused)}))
"""

LOAD_LINES = """
from kprio_core.config import parse_config
from kprio_core.errors import ConfigError

registry = {"schema_registry": {"url": "http://127.0.0.1:1"}}
for raw in ({"drain": {"format": "iceberg"}}, {"topics": [{"name": "o", "value_format": "avro"}], **registry},
            {"topics": [{"name": "o", "key_format": "protobuf"}], **registry}, {"lineage": {"enabled": True}}):
    try:
        parse_config(raw, "kprio.yaml", env={})
    except ConfigError as err:
        print(err)
    else:
        print("loaded")
"""


@pytest.fixture(scope="module")
def base_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a base install's processes: the finder that refuses the extras comes first."""
    guard = tmp_path_factory.mktemp("base-install")
    refused = refused_modules()
    assert {"deltalake", "pyiceberg", "duckdb", "fastavro", "grpc_tools", "httpx", "prometheus_client", "openlineage",
            "matplotlib"} <= refused, sorted(refused)
    (guard / "sitecustomize.py").write_text(SITECUSTOMIZE.format(refused=sorted(refused)))
    return {**os.environ, "PYTHONPATH": f"{guard}{os.pathsep}{REPO}"}


def run(env: dict[str, str], *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def test_every_module_of_a_base_install_imports_but_the_parts_themselves(base_env):
    done = run(base_env, "-c", IMPORT_ALL, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert run(base_env, "-c", "import deltalake").returncode != 0, "an extra's module is not there"
    not_parts = {m: why for m, why in found["failed"].items() if not m.startswith(PARTS_OF_EXTRAS)}
    assert not_parts == {}, "a base module imports an extra at its import (import it where it is used)"
    assert found["extras_loaded"] == []


def test_a_setting_that_needs_a_missing_extra_fails_at_load_naming_the_install(base_env, tmp_path):
    config = tmp_path / "kprio.yaml"
    config.write_text(yaml.safe_dump({"topics": [{"name": "orders", "priorities": 3}], "drain": {"format": "delta"},
                                      "ledger": {"url": f"sqlite:///{tmp_path}/ledger.db"}}))
    done = run(base_env, "-m", "orchestration.cli", "plan", "--config", str(config))
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    assert done.stderr.strip() == (f"kprio: error: drain.format: delta needs deltalake, which is not installed: "
                                   f"pip install 'kprio[delta]' ({config}) [config_invalid]"), done.stderr
    assert not (tmp_path / "ledger.db").exists(), "nothing written"
    lines = run(base_env, "-c", LOAD_LINES).stdout.splitlines()
    assert lines == [
        "drain.format: iceberg needs pyiceberg, which is not installed: pip install 'kprio[iceberg]' (kprio.yaml)",
        "topics.0.value_format: avro needs httpx, which is not installed: pip install 'kprio[registry]' (kprio.yaml)",
        "topics.0.key_format: protobuf needs httpx, which is not installed: pip install 'kprio[registry]' "
        "(kprio.yaml)",
        "lineage.enabled: OpenLineage events needs openlineage, which is not installed: pip install "
        "'kprio[observe]' (kprio.yaml)"]


OPTIONS = [
    ("simulate --plot {tmp}/p.png", "--plot needs matplotlib, which is not installed: pip install 'kprio[report]' "
     "(--plot)"),
    ("demo --data-dir {tmp}/demo", "kprio demo's report needs matplotlib, which is not installed: pip install "
     "'kprio[report]' (kprio demo)"),
    ("registry start --data-dir {tmp}/registry", "the embedded schema registry needs httpx, which is not installed: "
     "pip install 'kprio[registry]' (kprio registry start)"),
    ("metrics --port 0", "kprio metrics needs prometheus_client, which is not installed: pip install "
     "'kprio[observe]' (kprio metrics)"),
]


@pytest.mark.parametrize(("argv", "line"), OPTIONS, ids=[a.split(" -")[0] for a, _ in OPTIONS])
def test_an_option_that_needs_a_missing_extra_fails_in_one_line_before_it_starts_anything(base_env, tmp_path, argv,
                                                                                         line):
    done = run(base_env, "-m", "orchestration.cli", *argv.format(tmp=tmp_path).split())
    assert (done.returncode, done.stdout, done.stderr.strip()) == (1, "", f"kprio: error: {line} [extra_missing]")
    assert list(tmp_path.iterdir()) == [], "nothing made"


@pytest.mark.broker
@pytest.mark.spark
@pytest.mark.slow
def test_a_base_install_plans_and_drains_json_into_parquet(base_env, make_topic, kprio_env, child_spark_conf,
                                                          tmp_path):
    topic = make_topic(priorities=2, partitions=2, records={1: 40, 0: 60}, schema={"i": "long", "amount": "double"})
    env = kprio_env(topic, planner={"record_budget": 60, "target_batch_s": None})
    config = child_config(env, tmp_path, {"master": "local[1]", "conf": child_spark_conf})
    home = tmp_path / "home"
    home.mkdir()
    drain_env = {**base_env, "DAGSTER_HOME": str(home)}

    planned = run(drain_env, "-m", "orchestration.cli", "plan", "--json", "--config", str(config))
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert json.loads(planned.stdout)[0]["plan"]["records"] == 60
    drained = run(drain_env, "-m", "orchestration.cli", "--verbose", "drain", "--until-empty", "--json", "--config",
                  str(config), timeout=600)
    assert drained.returncode == 0, drained.stderr[-3000:]
    summary = json.loads(drained.stdout)
    assert summary["ok"] and summary["stopped"] == "no backlog left", summary

    assert lag(topic, env.edge) == {1: 0, 0: 0}, drained.stderr[-6000:]
    assert {b.state for b in env.ledger.batches.find(topic.name)} == {BatchState.COMMITTED}
    check = conservation(env.config, topic, env.edge)
    assert check.ok and check.output == 100, check
    assert tables.read_rows(env.config.drain, OUTPUT, topic.name).num_rows == 100
    assert sorted(Path(env.config.drain.output_path, topic.name).glob("priority=*/*.parquet"))
