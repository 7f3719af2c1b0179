"""Run the worked examples in spark_jobs' docstrings (pytest's doctest run covers kprio_core only)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import spark_jobs

MODULES = sorted(m.name for m in pkgutil.walk_packages(spark_jobs.__path__, "spark_jobs.") if not m.ispkg)
"""Every module, those of its packages (``spark_jobs.formats``) too."""


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0, f"{name} has no worked example in its docstrings"
