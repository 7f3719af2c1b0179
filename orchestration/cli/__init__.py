"""The ``kprio`` operator CLI: one module per command group, assembled in :mod:`.main`.

:func:`run` is the console script: it imports the commands with Python's garbage collector
paused, then moves what the imports made (modules, classes, functions: they live as long as the
process) out of the collector's sight (``gc.freeze``) and starts it again before any command
runs. Collecting those objects over and over while they are made, and once more at exit, was
0.17 s of every command (``kprio plan`` over 1,920 partitions: 1.18 s -> 1.00 s).
"""

import gc


def run() -> None:
    """``kprio``: the commands of :mod:`.main`, imported with the collector paused."""
    gc.disable()
    try:
        from orchestration.cli.main import app
    finally:
        gc.freeze()
        gc.enable()
    app(prog_name="kprio")
