"""Imports with Python's garbage collector paused, and, in the console script's own process, frozen after.

Imports make objects that live as long as the process: collecting them while they are made, and again at exit,
was 0.17 s of every command. Another process's (a test's) objects are left as they were. A module of its own, so that
the commands (``drain``, ``plan``) import it without importing the package that imports them.
"""

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_CONSOLE_SCRIPT = [False]
"""True while :func:`orchestration.cli.run` runs: the process is kprio's own."""


@contextmanager
def imports() -> Iterator[None]:
    """The collector paused within the block; in the console script's process, what it made frozen (``gc.freeze``)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _CONSOLE_SCRIPT[0]:
            gc.freeze()
        if enabled:
            gc.enable()
