"""The runtime's ports: the adapters satisfy them method by method, and the runtime is typed with them only.

``isinstance`` against a ``runtime_checkable`` Protocol only asks whether the names exist; these tests
compare each port method's parameters (names, kinds, which have defaults) and annotations with the
adapter's, so a method removed, renamed or changed on either side fails here.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from kprio_core.kafka import KafkaEdge
from kprio_core.ledger import Ledger
from orchestration.runtime import ports
from orchestration.runtime.ports import Edge, LedgerLeases, LedgerMemory, LedgerMoves, LedgerPort, LedgerReads

RUNTIME = Path(ports.__file__).parent
CONCRETE = {"KafkaEdge", "Ledger"}
"""The adapters: no runtime module names them in an annotation."""
PORT_OF = {"edge": {"Edge", "Callable[[], Edge]"}, "ledger": {"LedgerPort", "LedgerReads"}}
"""What a runtime parameter of that name is annotated with."""


def members(port: type) -> dict[str, object]:
    """The methods and properties ``port`` declares (its own and its groups'), by name."""
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


@pytest.mark.parametrize("port, adapter", [(Edge, KafkaEdge), (LedgerPort, Ledger)], ids=["edge", "ledger"])
def test_the_adapter_satisfies_its_port_method_by_method(port, adapter):
    declared = members(port)
    assert declared, f"{port.__name__} declares nothing"
    for name, member in declared.items():
        assert hasattr(adapter, name), f"{adapter.__name__} has no {name}, which {port.__name__} declares"
        assert shape(member) == shape(inspect.getattr_static(adapter, name)), (
            f"{adapter.__name__}.{name} differs from {port.__name__}.{name}")


def test_a_default_in_a_port_is_the_adapters_written_once():
    for port in (Edge, LedgerPort):
        for name, member in members(port).items():
            if isinstance(member, property):
                continue
            for p in inspect.signature(member).parameters.values():
                assert p.default in (p.empty, ...), f"{port.__name__}.{name}({p.name}=...) repeats a default"


def test_the_ledgers_groups_are_apart_and_make_the_whole_port():
    groups = [set(members(g)) for g in (LedgerReads, LedgerMoves, LedgerLeases, LedgerMemory)]
    assert sum(map(len, groups)) == len(set().union(*groups)) == len(members(LedgerPort))


def test_the_ports_names_resolve():
    """The annotations' names are imported for type checkers only: each import must still hold."""
    tree = ast.parse(Path(ports.__file__).read_text())
    guarded = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    assert guarded
    namespace: dict[str, object] = {}
    for block in guarded:
        exec(compile(ast.Module(body=block.body, type_ignores=[]), ports.__file__, "exec"), namespace)
    for port in (Edge, LedgerPort):
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


def called_by_the_runtime() -> dict[str, set[str]]:
    """What the runtime calls on the edge and the ledger it is handed: ``edge.x`` and ``ledger.x`` in a function
    with such a parameter, ``self.edge().x`` and ``self.ledger.x`` in :class:`~orchestration.runtime.batch.BatchRun`
    (a ledger a module opens itself, the heartbeat's own connection, is not handed to it)."""
    called: dict[str, set[str]] = {"edge": set(), "ledger": set()}
    for _, function in runtime_functions():
        handed = {a.arg for a in (*function.args.args, *function.args.kwonlyargs)} & set(called)
        for node in ast.walk(function):
            if not isinstance(node, ast.Attribute):
                continue
            owner = ast.unparse(node.value)
            if owner in handed:
                called[owner].add(node.attr)
            elif owner in ("self.edge()", "self.ledger"):
                called[owner.removeprefix("self.").removesuffix("()")].add(node.attr)
    return called


def test_each_port_names_exactly_what_the_runtime_calls():
    called = called_by_the_runtime()
    assert called["edge"] == set(members(Edge))
    assert called["ledger"] == set(members(LedgerPort))
