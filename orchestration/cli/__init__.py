"""The ``kprio`` operator CLI: one module per command group, assembled in :mod:`.main`.

:func:`run` is the console script: it imports the commands with Python's garbage collector
paused (:func:`~orchestration.cli.paused_gc.imports`), then moves what the imports made (modules, classes, functions: they live
as long as the process) out of the collector's sight (``gc.freeze``) and starts it again before any
command runs. Collecting those objects over and over while they are made, and once more at exit,
was 0.17 s of every command (``kprio plan`` over 1,920 partitions: 1.18 s -> 1.00 s). Commands
that import more on their way (the ledger's SQLAlchemy, Dagster) do so within :func:`imports` too.
Only the console script's own process freezes: a command called in a process of someone else's (a
test's) pauses the collector during its imports and leaves that process's objects as they were.
"""

from orchestration.cli.paused_gc import _CONSOLE_SCRIPT, imports

__all__ = ["imports", "run"]


def run() -> None:
    """``kprio``: the commands of :mod:`.main`, imported with the collector paused."""
    _CONSOLE_SCRIPT[0] = True
    try:
        with imports():
            from orchestration.cli.main import app
        app(prog_name="kprio")
    finally:
        _CONSOLE_SCRIPT[0] = False
