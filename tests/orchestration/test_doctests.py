"""Run the worked examples in orchestration's docstrings (pytest's doctest run covers kprio_core only).

Each listed module must have examples (a runner that finds none fails, so a module whose examples
were lost does not pass by running nothing), and every module that has examples is listed.
"""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.util
import pkgutil
from pathlib import Path

import pytest

import orchestration

MODULES = [
    "orchestration.airflow.pool",
    "orchestration.airflow.tasks",
    "orchestration.cli.boundary",
    "orchestration.cli.dead_letters",
    "orchestration.cli.lag",
    "orchestration.cli.outage",
    "orchestration.cli.redaction",
    "orchestration.dagster.batch_asset",
    "orchestration.dagster.checks",
    "orchestration.dagster.drain_report",
    "orchestration.dagster.freshness",
    "orchestration.dagster.instance",
    "orchestration.dagster.instance_yaml",
    "orchestration.dagster.partitions",
    "orchestration.dagster.resource_fields",
    "orchestration.dagster.resources",
    "orchestration.dagster.tags",
    "orchestration.dagster.workers.lanes",
    "orchestration.dagster.workers.home",
    "orchestration.demo.avro_values",
    "orchestration.demo.layout",
    "orchestration.demo.output_view",
    "orchestration.demo.plot",
    "orchestration.demo.report",
    "orchestration.demo.workload",
    "orchestration.observe.endpoint",
    "orchestration.observe.errors",
    "orchestration.observe.judging",
    "orchestration.observe.lineage",
    "orchestration.observe.metrics",
    "orchestration.observe.watch",
    "orchestration.runtime.adoption",
    "orchestration.runtime.batch_metadata",
    "orchestration.runtime.checks",
    "orchestration.runtime.commit",
    "orchestration.runtime.healing",
    "orchestration.runtime.maintenance",
    "orchestration.runtime.replay",
    "orchestration.runtime.runs",
    "orchestration.runtime.tags",
    "orchestration.services.broker",
    "orchestration.services.broker.ports",
    "orchestration.services.broker.props",
    "orchestration.services.broker_security",
    "orchestration.services.jars",
    "orchestration.services.process",
    "orchestration.services.registry",
    "orchestration.services.registry_build",
    "orchestration.services.spark_connect",
    "orchestration.services.tls",
]


def examples_in(name: str) -> int:
    """The examples in the docstrings of module ``name``, read from its source (importing every module would
    import Airflow here, and Airflow sets up its logging in the process that imports it)."""
    source = Path(importlib.util.find_spec(name).origin).read_text()
    docstrings = [ast.get_docstring(node, clean=False) or "" for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)]
    return sum(len(doctest.DocTestParser().get_examples(text)) for text in docstrings)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0, f"{name} has no worked example in its docstrings"


def test_every_module_with_examples_is_run():
    walked = [m.name for m in pkgutil.walk_packages(orchestration.__path__, "orchestration.")
              if not m.name.endswith(".__main__")]  # running it would run the CLI
    unlisted = sorted(name for name in walked if name not in MODULES and examples_in(name))
    assert not unlisted, f"modules with docstring examples no test runs: add them to MODULES: {unlisted}"
