"""The ``kprio`` operator CLI: one module per command group, assembled in :mod:`.main`.

:func:`run`, the console script, imports the commands within :func:`~orchestration.cli.paused_gc.imports` (which
says why); commands that import more on their way (the ledger's SQLAlchemy, Dagster) do so within it too.
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
