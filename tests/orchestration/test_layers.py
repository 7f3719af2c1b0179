"""The layers of docs/architecture.md hold: dependencies point one way, only the Dagster driver (and
what uses it) imports Dagster, and only the Airflow driver imports Airflow.

Each package is imported, every module of it, in a fresh interpreter, and what that pulled in is
read from ``sys.modules``. Then the house is read from its source with ``ast``, every import at any
depth (one inside a function runs only later, so importing finds it not): no private Dagster module,
no floor importing one above it, no import cycle between its modules, no module over 500 lines. Inside
kprio_core the floors are data (``CORE_FLOORS``): the model at the bottom, the pure rules above it, the adapters with
I/O beside the rules and never imported by them, the simulator apart.
"""

from __future__ import annotations

import ast
import graphlib
import json
import subprocess
import sys
from collections.abc import Collection
from pathlib import Path

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


# --- the house read from its source: every import, the ones inside functions too ------------------------------------

ROOT = Path(__file__).resolve().parents[2]
HOUSE = ("kprio_core", "spark_jobs", "orchestration")
"""kprio's own packages, lowest floor first."""
MAX_LINES = 500
"""A module is one idea and fits on a few screens (STYLE.md); tests/ is held to it too, benchmarks/ is not."""
TOO_LONG_FOR_NOW: dict[str, str] = {}
"""Files over MAX_LINES allowed for now, each with why: an entry is removed when its file is split, so any new one
fails."""


CORE_FLOORS = {
    # kprio_core's floors (docs/architecture.md), module prefix -> floor; a module's floor is its longest prefix.
    "kprio_core.model": "model",  # values with no I/O: offsets, plans, records, states, results, leases
    # The typed errors every floor raises are values too; they stay where their hundred importers find them.
    "kprio_core.errors": "model",
    "kprio_core.ledger": "adapter",  # SQLAlchemy
    "kprio_core.kafka": "adapter",  # confluent-kafka
    "kprio_core.jar_cache": "adapter",  # files and downloads
    "kprio_core.java": "adapter",  # runs java
    "kprio_core.values": "adapter",  # record values decoded with the schemas a registry serves (httpx)
    "kprio_core.simulator": "simulator",
    "kprio_core.traces": "simulator",  # the simulator's traces, read from files
    "kprio_core.policies": "simulator",  # the drain policies the simulator replays traces against
    "kprio_core.replay": "simulator",  # the ledger's arrivals replayed (kprio simulate --from-ledger)
    # Everything else: the pure rules (lifecycle, planner, quota, burst, rate, splits, lanes, log changes). The
    # settings model (config/) reads kprio.yaml when asked to; the rules take it as an input.
    "kprio_core": "rules",
}
MAY_IMPORT = {
    "model": {"model"},
    "rules": {"model", "rules"},
    # beside the rules: an adapter uses the model and the rules; no rule uses an adapter
    "adapter": {"model", "rules", "adapter"},
    "simulator": {"model", "rules", "simulator"},
}
"""Which floors of kprio_core a module of each floor may import."""


def core_floor(module: str) -> str | None:
    """The floor of a module of kprio_core (None outside kprio_core)."""
    prefixes = [p for p in CORE_FLOORS if module == p or module.startswith(p + ".")]
    return CORE_FLOORS[max(prefixes, key=len)] if prefixes else None


def house_modules() -> dict[str, Path]:
    """Every module of the house by dotted name (a package by its ``__init__.py``)."""
    found = {}
    for package in HOUSE:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_names(name: str, path: Path, modules: Collection[str]) -> list[tuple[str, int, bool]]:
    """(dotted name, line, only for type checkers) of every import of the module ``name`` at ``path``, at any depth
    (inside functions and classes too); ``from package import module`` names the module, ``from module import name``
    the module (a private ``_name`` too: importing it makes a cycle as any other import does), relative imports
    resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and "TYPE_CHECKING" in ast.unparse(block.test) for node in ast.walk(block)}
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno, id(node) in typing_only) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[:len(package) - node.level + 1], *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.append((full if full in modules else base, node.lineno,
                              id(node) in typing_only))
    return found


@pytest.fixture(scope="module")
def imports() -> dict[str, list[tuple[str, int, bool]]]:
    modules = house_modules()
    return {name: imported_names(name, path, modules) for name, path in modules.items()}


DAGSTER_ADAPTER = "orchestration.dagster.workers.dagster_api"
"""The one module allowed Dagster's private modules: what a warm worker needs that Dagster has no public function for
(it names the Dagster release it was written against; tests/orchestration/test_workers_dagster_api.py proves each)."""


def test_nothing_imports_a_private_module_of_dagster_but_its_one_adapter(imports):
    private = [f"{module}:{line} imports {name}" for module, found in imports.items() for name, line, _ in found
               if name.startswith("dagster._") and module != DAGSTER_ADAPTER]
    assert private == [], "Dagster's public API only (dagster._ is private): " + "; ".join(private)
    assert any(name.startswith("dagster._") for name, _, _ in imports[DAGSTER_ADAPTER]), "the adapter is still needed"


@pytest.mark.parametrize(("floor", "above"), [
    ("kprio_core", ("spark_jobs", "orchestration")),
    ("spark_jobs", ("orchestration",)),
])
def test_no_floor_imports_one_above_it_even_inside_a_function(imports, floor, above):
    upward = [f"{module}:{line} imports {name}" for module, found in imports.items() if module.split(".")[0] == floor
              for name, line, _ in found if name.split(".")[0] in above]
    assert upward == [], f"{floor} imports {' or '.join(above)}: " + "; ".join(upward)


def test_no_import_cycle_between_modules_of_the_house(imports):
    """An import inside a function counts (it runs, later); one only for type checkers does not."""
    graph = {module: {name for name, _, typing in found if name in imports and name != module and not typing}
             for module, found in imports.items()}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as err:
        pytest.fail(f"an import cycle: {' -> '.join(reversed(err.args[1]))}")


def test_no_module_outside_benchmarks_is_over_500_lines():
    paths = [*(p for package in (*HOUSE, "tests", "scripts") for p in (ROOT / package).rglob("*.py")),
             *ROOT.glob("*.py")]
    lengths = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in paths}
    over = {path: n for path, n in lengths.items() if n > MAX_LINES}
    new = {path: n for path, n in over.items() if path not in TOO_LONG_FOR_NOW}
    assert new == {}, f"modules over {MAX_LINES} lines (split them): {new}"
    split = sorted(set(TOO_LONG_FOR_NOW) - set(over))
    assert split == [], f"split since (remove them from TOO_LONG_FOR_NOW): {split}"


def test_every_floor_of_kprio_core_names_modules_that_exist(imports):
    """The floors stay true when modules move: a prefix that matches no module is stale."""
    stale = [p for p in CORE_FLOORS if not any(m == p or m.startswith(p + ".") for m in imports)]
    assert stale == [], f"CORE_FLOORS names no module of the house: {stale}"


@pytest.mark.parametrize("floor", sorted(MAY_IMPORT))
def test_no_floor_of_kprio_core_imports_one_it_may_not_even_inside_a_function(imports, floor):
    """The model imports nothing above it; no rule imports an adapter (``import kprio_core.ledger``, ``from
    kprio_core import ledger``, ``from kprio_core.ledger import Batch`` alike, at any depth, for type checkers too);
    the simulator is imported by no floor."""
    wrong = [f"{module}:{line} imports {name} ({core_floor(name)})" for module, found in imports.items()
             if core_floor(module) == floor for name, line, _ in found
             if core_floor(name) is not None and core_floor(name) not in MAY_IMPORT[floor]]
    assert wrong == [], f"the {floor} floor of kprio_core may import only {sorted(MAY_IMPORT[floor])}: " + "; ".join(wrong)


SIMULATOR_USERS = ("orchestration.cli",)
"""Besides tests/ and benchmarks/ (not in the house), who may import the simulator: ``kprio simulate``."""


def test_nothing_but_tests_benchmarks_and_the_cli_imports_the_simulator(imports):
    users = [f"{module}:{line} imports {name}" for module, found in imports.items()
             if core_floor(module) != "simulator" and not module.startswith(SIMULATOR_USERS)
             for name, line, _ in found if core_floor(name) == "simulator"]
    assert users == [], "the simulator stands apart: " + "; ".join(users)


LOADS_NO_ADAPTER = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {"sqlalchemy", "confluent_kafka"}
                        or m.startswith(("kprio_core.ledger", "kprio_core.kafka")))))
"""


def test_importing_the_rules_loads_no_adapter_nor_its_library(imports):
    """What the floors say, proven in a fresh interpreter: ``import kprio_core.lifecycle`` (and every other rule)
    loads neither SQLAlchemy nor confluent-kafka, nor the ledger or the Kafka edge."""
    rules = sorted(module for module in imports if core_floor(module) in ("rules", "model"))
    assert "kprio_core.lifecycle" in rules
    done = subprocess.run([sys.executable, "-c", LOADS_NO_ADAPTER, *rules], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert loaded == [], f"importing kprio_core's rules and model loaded {len(loaded)} modules of an adapter: {loaded[:8]}"
