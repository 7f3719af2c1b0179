"""Send the run's chatter (Dagster's event log, Spark's JVM warnings) to a log file, keep the terminal for the demo.

The JVM writes to file descriptor 2 directly, Python loggers through ``sys.stderr``: both go to the log file
within the block, which gets a stream on the original stderr for its progress bars; restored on exit, raise or not.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO


@contextlib.contextmanager
def logs_to(path: Path) -> Iterator[TextIO]:
    """Within the block, fd 2 and ``sys.stderr`` write to ``path`` (truncated); yields the original stderr."""
    path.parent.mkdir(parents=True, exist_ok=True)
    original = sys.stderr
    with open(path, "w", buffering=1) as log:
        try:
            fd2 = original.fileno()
        except (AttributeError, OSError, io.UnsupportedOperation):
            fd2 = None  # a captured stderr (tests, CliRunner) has no descriptor: only redirect Python's
        saved = os.dup(2) if fd2 == 2 else None
        # The terminal's stream for the progress bars: a duplicate of fd 2 taken before redirecting.
        terminal = os.fdopen(os.dup(saved), "w", buffering=1) if saved is not None else original
        try:
            original.flush()
            if saved is not None:
                os.dup2(log.fileno(), 2)
            sys.stderr = log
            yield terminal
        finally:
            sys.stderr = original
            if saved is not None:
                os.dup2(saved, 2)
                os.close(saved)
                terminal.close()
