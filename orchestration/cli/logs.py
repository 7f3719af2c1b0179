"""Where log lines go while a command runs: kprio's log file, or the terminal at ``--verbose``, else nowhere.

kprio's own loggers (``kprio.*``, librdkafka's lines among them: every client kprio builds logs
through ``kprio.kafka``, ``kprio.reader`` or ``kprio.broker``) and the libraries' that would
otherwise print to the terminal (py4j's, Dagster's, Python warnings) share one handler for the
command: a file (``--log-file`` or ``$KPRIO_LOG_FILE``), standard error with ``--verbose``, else
none. So a command's terminal holds its own output and, on failure, its one error line; a broker
outage ``kprio drain`` rides out is its own two lines (:mod:`orchestration.cli.outage`), not
librdkafka's ``FAIL`` line per connection attempt. Every line goes through the command's
:class:`~orchestration.cli.redaction.Redactor`.

The loggers are given back as they were when the command ends (a test runs many commands in one
process), except py4j's: it logs at interpreter exit, after the command, into whatever handler is
left, once a stream a test or the demo had closed (``--- Logging error --- ValueError: I/O operation
on closed file``); it keeps a handler that drops its lines.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

from kprio_core.errors import PathUnusable
from orchestration.cli.redaction import Redactor

ROUTED = ("kprio", "py4j", "dagster", "py.warnings")
"""The loggers whose lines go to the command's handler (and not to the root logger's handlers)."""
QUIET_AFTER = ("py4j",)
"""Loggers that keep dropping their lines after the command (see the module docstring)."""


class RedactingFormatter(logging.Formatter):
    """A formatter whose lines pass through a :class:`Redactor`."""

    def __init__(self, redact: Redactor) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._redact = redact

    def format(self, record: logging.LogRecord) -> str:
        return self._redact(super().format(record))


def _handler(verbose: bool, log_file: Path | None) -> logging.Handler:
    if log_file is not None:
        try:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            return logging.FileHandler(log_file, encoding="utf-8")
        except OSError as err:
            raise PathUnusable.of(err, "--log-file", log_file, doing="write") from None
    if verbose:
        return logging.StreamHandler(sys.stderr)
    return logging.NullHandler()


@contextlib.contextmanager
def routed_logs(*, verbose: bool, log_file: Path | None, debug: bool, redact: Redactor) -> Iterator[None]:
    """Within the block the :data:`ROUTED` loggers write to the command's one handler (see the module docstring)."""
    handler = _handler(verbose, log_file)
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
    try:
        yield
    finally:
        logging.captureWarnings(False)
        for name, (handlers, propagate, old_level, disabled) in saved.items():
            logger = logging.getLogger(name)
            if name in QUIET_AFTER:
                logger.handlers, logger.propagate = [logging.NullHandler()], False
            else:
                logger.handlers, logger.propagate, logger.disabled = handlers, propagate, disabled
                logger.setLevel(old_level)
        handler.close()
