"""Where log lines go while a command runs: kprio's log file, or the terminal at ``--verbose``, else nowhere.

kprio's loggers (librdkafka's, py4j's and PySpark's among them) and the libraries' that would print to the terminal
share one redacting handler per command, so its terminal holds its output and, on failure, its one error line; a
local Spark driver JVM's own log goes to the same file, or nowhere. The loggers are given back as they were when the
command ends (a test runs many commands in one process).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from kprio_core.errors import PathUnusable
from orchestration.cli.redaction import Redactor

ENV_JVM_STDERR = "KPRIO_JVM_STDERR"
"""spark_jobs.library_logs.ENV_JVM_STDERR (not imported from there: that would import pyspark for every command)."""

ROUTED = ("kprio", "dagster", "py.warnings", "pyiceberg")
"""The loggers routed to the command's handler, not the root's (pyiceberg warns of every column without statistics)."""


class RedactingFormatter(logging.Formatter):
    """A formatter whose lines pass through a :class:`Redactor`."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        return self._redact(super().format(record))


class LogFile(logging.FileHandler):
    """The command's log file: its first failed write (a full disk) is kept as :attr:`failed`, the line of a command
    that succeeds otherwise, instead of logging's traceback per line; the lines after it are dropped."""

    def __init__(self, path: Path, named: str) -> None:
        super().__init__(path, encoding="utf-8")
        self.named = named
        self.failed: PathUnusable | None = None

    def _failing(self, err: OSError) -> None:
        self.failed = self.failed or PathUnusable.of(err, self.named, self.baseFilename, doing="write")

    def emit(self, record: logging.LogRecord) -> None:
        if self.failed is None:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        err = sys.exc_info()[1]
        if isinstance(err, OSError):
            self._failing(err)
        else:  # a record that cannot be formatted: logging's own report
            super().handleError(record)

    def close(self) -> None:
        try:
            super().close()  # flushes what a failed write left in the buffer: fails again
        except OSError as err:
            self._failing(err)


def _handler(verbose: bool, log_file: Path | None, log_file_from: str) -> logging.Handler:
    if log_file is not None:
        named = f"{log_file_from} {log_file}"
        try:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            return LogFile(log_file, named)
        except OSError as err:
            raise PathUnusable.of(err, named, log_file, doing="write") from None
    if verbose:
        return logging.StreamHandler(sys.stderr)
    return logging.NullHandler()


@contextlib.contextmanager
def routed_logs(*, verbose: bool, log_file: Path | None, log_file_from: str, debug: bool,
                redact: Redactor) -> Iterator[logging.Handler]:
    """Within the block the :data:`ROUTED` loggers write to the handler it yields (``log_file_from``: the option)."""
    handler = _handler(verbose, log_file, log_file_from)
    handler.setFormatter(RedactingFormatter(redact))
    level = logging.DEBUG if debug else logging.INFO
    saved = {}
    for name in ROUTED:
        logger = logging.getLogger(name)
        saved[name] = (logger.handlers[:], logger.propagate, logger.level, logger.disabled)
        logger.handlers, logger.propagate, logger.disabled = [handler], False, False
        if verbose or log_file is not None:
            logger.setLevel(level)
    logging.captureWarnings(True)
    # A local Spark driver JVM writes to its standard error itself: the log file, or nowhere (spark_jobs.library_logs).
    jvm_saved = os.environ.get(ENV_JVM_STDERR)
    if log_file is not None or not verbose:
        os.environ[ENV_JVM_STDERR] = str(log_file) if log_file is not None else os.devnull
    try:
        yield handler
    finally:
        if jvm_saved is None:
            os.environ.pop(ENV_JVM_STDERR, None)
        else:
            os.environ[ENV_JVM_STDERR] = jvm_saved
        logging.captureWarnings(False)
        for name, (handlers, propagate, old_level, disabled) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers, logger.propagate, logger.disabled = handlers, propagate, disabled
            logger.setLevel(old_level)
        handler.close()
