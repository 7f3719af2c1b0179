"""Imports with Python's garbage collector paused, and, in the console script's own process, frozen after.

:func:`orchestration.cli.run` imports the commands within :func:`imports`; commands that import more
on their way (the ledger's SQLAlchemy, Dagster) do so within it too. A module of its own, so that
the commands (``drain``, ``plan``) import it without importing the package that imports them.
"""

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_CONSOLE_SCRIPT = [False]
"""True while :func:`orchestration.cli.run` runs: the process is kprio's own."""


@contextmanager
def imports() -> Iterator[None]:
    """Within it the garbage collector is paused; in the console script's process what was made
    meanwhile is frozen out of its sight after (``gc.freeze``: imports make what lives as long as the
    process, so collecting it is wasted work). The collector then runs as it did before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _CONSOLE_SCRIPT[0]:
            gc.freeze()
        if enabled:
            gc.enable()
