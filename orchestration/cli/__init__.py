"""The ``kprio`` operator CLI: one module per command group, assembled in :mod:`.main`.

:func:`run` is the console script: it imports the commands with Python's garbage collector
paused (:func:`imports`), then moves what the imports made (modules, classes, functions: they live
as long as the process) out of the collector's sight (``gc.freeze``) and starts it again before any
command runs. Collecting those objects over and over while they are made, and once more at exit,
was 0.17 s of every command (``kprio plan`` over 1,920 partitions: 1.18 s -> 1.00 s). Commands
that import more on their way (the ledger's SQLAlchemy, Dagster) do so within :func:`imports` too.
Only the console script's own process freezes: a command called in a process of someone else's (a
test's) pauses the collector during its imports and leaves that process's objects as they were.
"""

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_CONSOLE_SCRIPT = [False]
"""True while :func:`run` runs: the process is kprio's own."""


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


def run() -> None:
    """``kprio``: the commands of :mod:`.main`, imported with the collector paused."""
    _CONSOLE_SCRIPT[0] = True
    try:
        with imports():
            from orchestration.cli.main import app
        app(prog_name="kprio")
    finally:
        _CONSOLE_SCRIPT[0] = False
