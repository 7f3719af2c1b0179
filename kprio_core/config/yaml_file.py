"""Reading ``kprio.yaml``: one YAML document from a regular UTF-8 file by PyYAML's safe loader, each refusal one
:class:`~kprio_core.errors.ConfigError` naming the file, line and column. Refused, though YAML takes them:

- a key given twice in one mapping (YAML keeps the last one silently);
- nesting deeper than :data:`MAX_DEPTH` (PyYAML composes recursively: thousands of ``[`` exhaust the stack);
- more than :data:`MAX_VALUES` values once aliases are expanded (the "billion laughs"), and an alias inside the
  value its anchor names (a loop);
- an integer of more digits than Python converts (4,300), which could not even be read.

An exponent without a dot (``1e6``) is a number, as in YAML 1.2 (PyYAML's 1.1 reads it as text). In a merge
(``<<``), a mapping's own keys win.

>>> try:
...     load_yaml("planner: {record_budget: 10, record_budget: 20}\\n")
... except Refused as err:
...     print(err.problem, "- line", err.problem_mark.line + 1, "column", err.problem_mark.column + 1)
key 'record_budget' is given twice (first on line 1) - line 1 column 30
>>> load_yaml("a: 1e6\\nb: 2.5E3\\nc: -1e-3\\nd: 1.0e+2\\ne: e6\\nf: 1e\\n")
{'a': 1000000.0, 'b': 2500.0, 'c': -0.001, 'd': 100.0, 'e': 'e6', 'f': '1e'}
>>> load_yaml("base: &b {record_budget: 10, mode: flipkart}\\nplanner: {<<: *b, record_budget: 20}\\n")["planner"]
{'record_budget': 20, 'mode': 'flipkart'}
"""

from __future__ import annotations

import re
import stat
from pathlib import Path

import yaml

from kprio_core.errors import ConfigError, os_reason

MAX_DEPTH = 50
"""How deep mappings and lists may nest: kprio's deepest setting is five levels down."""
MAX_VALUES = 100_000
"""How many values a file may hold once its aliases are expanded: a configuration holds hundreds."""
MERGE = "tag:yaml.org,2002:merge"


class Refused(yaml.MarkedYAMLError):
    """Valid YAML that kprio does not read (the module docstring), at a line and column."""

    def __init__(self, problem: str, mark: yaml.Mark) -> None:
        super().__init__(problem=problem, problem_mark=mark)


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing what the module docstring lists."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._values = 0
        self._sizes: dict[int, int] = {}
        """The values of each node composed so far (by ``id``), its aliases expanded."""

    def _count(self, values: int, mark: yaml.Mark) -> None:
        self._values += values
        if self._values > MAX_VALUES:
            raise Refused(f"holds more than {MAX_VALUES:,} values once its aliases are expanded (aliases of aliases, "
                          "an alias bomb?): write each setting where it goes", mark)

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = self.anchors.get(event.anchor)
            if node is not None:  # else PyYAML's own "found undefined alias"
                if id(node) not in self._sizes:
                    raise Refused(f"the alias *{event.anchor} is inside the value &{event.anchor} names: a loop",
                                  event.start_mark)
                self._count(self._sizes[id(node)], event.start_mark)
            return super().compose_node(parent, index)
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise Refused(f"nests deeper than {MAX_DEPTH} levels of mappings and lists", event.start_mark)
        before = self._values
        node = super().compose_node(parent, index)
        self._depth -= 1
        self._count(1, event.start_mark)
        self._sizes[id(node)] = self._values - before
        return node

    def compose_mapping_node(self, anchor: str | None) -> yaml.MappingNode:
        node = super().compose_mapping_node(anchor)
        seen: dict[tuple[str, str], int] = {}
        for key, _ in node.value:  # as written: SafeLoader merges (flatten_mapping) only when constructing
            if isinstance(key, yaml.ScalarNode) and key.tag != MERGE:
                if (key.tag, key.value) in seen:
                    first = seen[key.tag, key.value] + 1
                    raise Refused(f"key {key.value!r} is given twice (first on line {first})", key.start_mark)
                seen[key.tag, key.value] = key.start_mark.line
        return node

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # beyond Python's 4,300 digits of an int conversion
            raise Refused(f"a number of {len(node.value):,} digits: no setting takes one", node.start_mark) from None


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_implicit_resolver(  # YAML 1.2's exponent floats that YAML 1.1 reads as text (after 1.1's int and float)
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789"))


def load_yaml(text: str) -> object:
    """The one YAML document in ``text``; :class:`Refused` or PyYAML's own error (with its mark) when it is none."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader


def read_yaml(path: Path, where: str) -> object:
    """The YAML document in the regular file ``path``; ConfigError saying what is wrong with the file, and where."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise ConfigError("configuration file not found", where=where) from None
    except OSError as err:
        raise ConfigError(f"cannot read the configuration file: {os_reason(err)}", where=where) from None
    if stat.S_ISDIR(mode):
        raise ConfigError("is a directory, not a configuration file", where=where)
    if not stat.S_ISREG(mode):
        raise ConfigError("is not a regular file (a device, a pipe or a socket): name a YAML file", where=where)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"cannot read the configuration file: {os_reason(err)}", where=where) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ConfigError(f"is not UTF-8 text (byte 0x{data[err.start]:02x} on line {line})", where=where) from None
    try:
        return load_yaml(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or err
        said = problem if isinstance(err, Refused) else f"not valid YAML: {problem}"
        raise ConfigError(str(said), where=f"{where}{at}") from None
