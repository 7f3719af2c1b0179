"""The layers of docs/architecture.md hold: dependencies point one way, only the Dagster driver (and
what uses it) imports Dagster, and only the Airflow driver imports Airflow.

Each package is imported, every module of it, in a fresh interpreter, and what that pulled in is
read from ``sys.modules``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

IMPORT_ALL = """
import importlib, json, pkgutil, sys
package = importlib.import_module(sys.argv[1])
for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    if not module.name.endswith("__main__"):
        importlib.import_module(module.name)
top = {name.split(".")[0] for name in sys.modules}
print(json.dumps(sorted(top)))
"""


def imported_by(package: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL, package], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize(("package", "forbidden"), [
    ("kprio_core", {"orchestration", "spark_jobs", "dagster", "pyspark", "great_expectations", "airflow"}),
    ("spark_jobs", {"orchestration", "dagster", "great_expectations", "airflow"}),
    ("orchestration.runtime", {"dagster", "airflow"}),
    # The two drivers stand side by side over the runtime: neither needs the other.
    ("orchestration.dagster", {"airflow"}),
    ("orchestration.airflow", {"dagster"}),
])
def test_a_layer_imports_nothing_above_it_nor_any_orchestrator(package, forbidden):
    assert imported_by(package) & forbidden == set()
