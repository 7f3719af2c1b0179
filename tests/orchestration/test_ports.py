"""The runtime's ports: the adapters satisfy them method by method, and the runtime is typed with them only.

``isinstance`` against a ``runtime_checkable`` Protocol only asks whether the names exist; these tests
compare each port method's parameters (names, kinds, which have defaults) and annotations with the
adapter's, so a method removed, renamed or changed on either side fails here. The ledger's port is its
repositories' ports: each names what the runtime asks of that repository, and the ledger holds each one.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from kprio_core.kafka import KafkaEdge
from kprio_core.ledger import Ledger
from kprio_core.ledger.attempts import Attempts
from kprio_core.ledger.batches import Batches
from kprio_core.ledger.beliefs import Beliefs
from kprio_core.ledger.launches import Launches
from kprio_core.ledger.leases import Leases
from kprio_core.ledger.moves import Moves
from kprio_core.ledger.samples import Samples
from orchestration.runtime import ports
from orchestration.runtime.ports import (AttemptsPort, BatchesPort, BeliefsPort, Edge, LaunchesPort, LeasesPort,
                                         LedgerPort, MovesPort, SamplesPort)

RUNTIME = Path(ports.__file__).parent
REPOSITORIES = {"batches": (BatchesPort, Batches), "moves": (MovesPort, Moves), "attempts": (AttemptsPort, Attempts),
                "leases": (LeasesPort, Leases), "launches": (LaunchesPort, Launches), "beliefs": (BeliefsPort, Beliefs),
                "samples": (SamplesPort, Samples)}
"""The ledger's repositories by the name the ledger holds each under: its port and its adapter."""
PORTS = {"edge": (Edge, KafkaEdge), "ledger": (LedgerPort, Ledger), **REPOSITORIES}
CONCRETE = {adapter.__name__ for _, adapter in PORTS.values()}
"""The adapters: no runtime module names them in an annotation."""
PORT_OF = {"edge": {"Edge", "Callable[[], Edge]"}, "ledger": {"LedgerPort"}, "leases": {"LeasesPort"}}
"""What a runtime parameter of that name is annotated with."""


def members(port: type) -> dict[str, object]:
    """The methods and properties ``port`` declares, by name."""
    found: dict[str, object] = {}
    for cls in reversed(port.__mro__):
        if cls is object or not issubclass(cls, ports.Protocol) or cls.__module__ != ports.__name__:
            continue
        found.update({name: value for name, value in vars(cls).items() if not name.startswith("_")
                      and (callable(value) or isinstance(value, property))})
    return found


def shape(member: object) -> tuple:
    """What must agree: property or method; each parameter's name, kind, whether it has a default and its
    annotation; the return annotation (annotations as written: both sides postpone them)."""
    if isinstance(member, property):
        return ("property", member.fget.__annotations__.get("return"))
    signature = inspect.signature(member)
    return ("method", tuple((p.name, p.kind, p.default is not p.empty, p.annotation)
                            for p in signature.parameters.values()), signature.return_annotation)


@pytest.mark.parametrize("port, adapter", PORTS.values(), ids=PORTS)
def test_the_adapter_satisfies_its_port_method_by_method(port, adapter):
    declared = {name: m for name, m in members(port).items() if name not in REPOSITORIES or port is not LedgerPort}
    assert declared, f"{port.__name__} declares nothing"
    for name, member in declared.items():
        assert hasattr(adapter, name), f"{adapter.__name__} has no {name}, which {port.__name__} declares"
        assert shape(member) == shape(inspect.getattr_static(adapter, name)), (
            f"{adapter.__name__}.{name} differs from {port.__name__}.{name}")


def test_the_ledger_holds_each_repository_under_its_ports_name():
    """``LedgerPort.batches`` is a ``BatchesPort``, and a ledger's ``batches`` a ``Batches``, its adapter."""
    held = {name: m for name, m in members(LedgerPort).items() if name in REPOSITORIES}
    assert set(held) == set(REPOSITORIES)
    with Ledger("sqlite://") as ledger:
        for name, (port, adapter) in REPOSITORIES.items():
            assert shape(held[name]) == ("property", port.__name__), f"LedgerPort.{name} is not a {port.__name__}"
            assert type(getattr(ledger, name)) is adapter, f"a ledger's {name} is not a {adapter.__name__}"


def test_a_default_in_a_port_is_the_adapters_written_once():
    for port, _ in PORTS.values():
        for name, member in members(port).items():
            if isinstance(member, property):
                continue
            for p in inspect.signature(member).parameters.values():
                assert p.default in (p.empty, ...), f"{port.__name__}.{name}({p.name}=...) repeats a default"


def test_the_ports_names_resolve():
    """The annotations' names are imported for type checkers only: each import must still hold."""
    tree = ast.parse(Path(ports.__file__).read_text())
    guarded = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    assert guarded
    namespace: dict[str, object] = {}
    for block in guarded:
        exec(compile(ast.Module(body=block.body, type_ignores=[]), ports.__file__, "exec"), namespace)
    for port, _ in PORTS.values():
        for name, member in members(port).items():
            function = member.fget if isinstance(member, property) else inspect.unwrap(member)
            for annotation in function.__annotations__.values():
                eval(annotation, {**vars(ports), **namespace})  # noqa: S307 (our own module's annotations)


def runtime_functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    found = []
    for path in sorted(RUNTIME.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                found.append((path.name, node))
    return found


def test_every_edge_and_ledger_parameter_of_the_runtime_is_typed_with_its_port():
    typed = []
    for module, function in runtime_functions():
        args = function.args
        for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
            if arg.arg in PORT_OF:
                annotation = ast.unparse(arg.annotation) if arg.annotation is not None else None
                assert annotation in PORT_OF[arg.arg], (
                    f"{module}: {function.name}({arg.arg}: {annotation}) is not typed with its port")
                typed.append(f"{module}:{function.name}.{arg.arg}")
    assert len([t for t in typed if t.endswith(".edge")]) >= 10


def test_no_runtime_module_annotates_with_an_adapter():
    for path in sorted(RUNTIME.glob("*.py")):
        tree = ast.parse(path.read_text())
        annotations = []
        for node in ast.walk(tree):
            if isinstance(node, ast.arg | ast.AnnAssign) and node.annotation is not None:
                annotations.append(node.annotation)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
                annotations.append(node.returns)
        for annotation in annotations:
            # A string annotation is parsed too: "Ledger" names the class as Ledger does.
            text = annotation.value if isinstance(annotation, ast.Constant) else ast.unparse(annotation)
            names = {n.id for n in ast.walk(ast.parse(str(text), mode="eval")) if isinstance(n, ast.Name)}
            names |= {n.attr for n in ast.walk(ast.parse(str(text), mode="eval")) if isinstance(n, ast.Attribute)}
            assert not names & CONCRETE, f"{path.name}: annotated with {text}, an adapter, not its port"


def test_no_runtime_module_builds_a_ledger_nor_imports_one():
    """The runtime is handed its ledger (and the heartbeat its driver's lease repository): it opens no connection
    of its own, so it never needs a URL."""
    for path in sorted(RUNTIME.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kprio_core.ledger"):
                assert not {a.name for a in node.names} & CONCRETE, f"{path.name} imports {ast.unparse(node)}"
            if isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in CONCRETE - {"KafkaEdge"}:
                raise AssertionError(f"{path.name}:{node.lineno} builds {ast.unparse(node.func)}")


def called_by_the_runtime() -> dict[str, set[str]]:
    """What the runtime calls on the edge, the ledger and each repository of the ledger it is handed: ``edge.x``,
    ``ledger.x``, ``ledger.batches.x`` and ``leases.x`` in a function with such a parameter, and the same on
    ``self.edge()``, ``self.ledger`` and ``self.leases`` (:class:`~orchestration.runtime.batch.BatchRun`, the
    :class:`~orchestration.runtime.leases.Heartbeat`)."""
    called: dict[str, set[str]] = {name: set() for name in PORTS}
    for _, function in runtime_functions():
        handed = {a.arg for a in (*function.args.args, *function.args.kwonlyargs)} & set(PORT_OF)
        for node in ast.walk(function):
            if isinstance(node, ast.Attribute) and (port := port_called(ast.unparse(node.value), handed)):
                called[port].add(node.attr)
    return called


def port_called(owner: str, handed: set[str]) -> str | None:
    """The port ``owner`` is, an expression a method is called on: ``ledger.beliefs`` in a function handed a
    ``ledger`` (or ``self.ledger.beliefs``) is the ledger's ``beliefs``; anything else None."""
    head, _, rest = owner.removeprefix("self.").replace("()", "").partition(".")
    if head not in handed and not owner.startswith("self."):
        return None
    if not rest:
        return head if head in PORT_OF else None
    return rest if head == "ledger" and rest in REPOSITORIES else None


@pytest.mark.parametrize("name", PORTS)
def test_each_port_names_exactly_what_the_runtime_calls(name):
    assert called_by_the_runtime()[name] == set(members(PORTS[name][0]))
