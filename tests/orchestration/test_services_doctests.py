"""Run the worked examples in the services' docstrings (pytest's doctest run covers kprio_core only)."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["orchestration.services.broker", "orchestration.services.process", "orchestration.services.spark_connect"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0, f"{name} has no docstring example"
