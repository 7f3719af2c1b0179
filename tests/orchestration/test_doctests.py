"""Run the worked examples in the Dagster modules' docstrings (pytest's doctest run covers kprio_core only)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "orchestration.adoption",
    "orchestration.batch_asset",
    "orchestration.checks",
    "orchestration.commit",
    "orchestration.decide",
    "orchestration.drain_loop",
    "orchestration.instance",
    "orchestration.partitions",
    "orchestration.replay_asset",
    "orchestration.tags",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0
