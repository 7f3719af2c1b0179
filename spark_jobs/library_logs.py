"""PySpark's and py4j's own log lines go to kprio's logger (``kprio.spark``), never to a stream of their own.

PySpark logs an exception that carries a query context to ``SQLQueryContextLogger`` or
``DataFrameQueryContextLogger``, each made with a handler on the ``sys.stderr`` of the moment it is
first used (a JSON line and a traceback on the terminal, or into a stream closed since: the demo's
log, a test's capture, and ``--- Logging error --- ValueError: I/O operation on closed file``); py4j
logs through the root logger. Each gets one handler that hands its records to ``kprio.spark``, so they
go where kprio's lines go (the CLI's log file, or the terminal at ``--verbose``: :mod:`orchestration.cli.logs`).
The local driver JVM's own standard error (log4j's console appender) goes to the same log file, or nowhere
(:func:`jvm_stderr`). Their warnings and errors only: py4j's chatter (``Closing down clientserver connection``, at INFO, from a
finalizer at exit) would otherwise reach a handler of a program long done with its stream.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Mapping

TARGET = "kprio.spark"
PYSPARK_LOGGERS = ("SQLQueryContextLogger", "DataFrameQueryContextLogger")
"""The loggers PySpark makes itself (``pyspark.errors.exceptions.base``), as :class:`pyspark.logger.PySparkLogger`."""


class ToLogger(logging.Handler):
    """Hands every record of ``level`` or above to another logger (which applies its own level and handlers).

    >>> seen = []
    >>> class Keep(logging.Handler):
    ...     def emit(self, record):
    ...         seen.append(f"{record.name}: {record.getMessage()}")
    >>> target = logging.getLogger("kprio.doc")
    >>> target.addHandler(Keep())
    >>> library = logging.getLogger("doc.library")
    >>> library.handlers, library.propagate = [ToLogger(target)], False
    >>> library.info("Closing down clientserver connection")  # below WARNING: not handed on
    >>> library.error("Error while sending or receiving")
    >>> seen
    ['doc.library: Error while sending or receiving']
    """

    def __init__(self, target: logging.Logger, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        if self.target.isEnabledFor(record.levelno):
            self.target.handle(record)


def forward_spark_logs() -> None:
    """Point py4j's and PySpark's own loggers at ``kprio.spark`` (idempotent; before a session's first error)."""
    from pyspark.logger import PySparkLogger

    handler = ToLogger(logging.getLogger(TARGET))
    # PySpark's own class: its loggers take keyword arguments (errorClass=...) a plain Logger refuses.
    loggers = [PySparkLogger.getLogger(name) for name in PYSPARK_LOGGERS] + [logging.getLogger("py4j")]
    for logger in loggers:
        logger.handlers, logger.propagate = [handler], False


ENV_JVM_STDERR = "KPRIO_JVM_STDERR"
"""Where a local Spark driver JVM started by this process writes its standard error (log4j's console appender,
the JVM's own warnings): a file appended to, or ``os.devnull``; unset, the process's own standard error. ``kprio``'s
commands set it to their log file (or ``os.devnull``; at ``--verbose``, leave it unset), :mod:`orchestration.cli.logs`."""


@contextlib.contextmanager
def jvm_stderr(environ: Mapping[str, str] = os.environ) -> Iterator[None]:
    """Within the block, a JVM this process starts inherits the file :data:`ENV_JVM_STDERR` names as its standard
    error (file descriptor 2 points at it, then back): pyspark's gateway has no option for the JVM's streams.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "jvm.log")
    >>> with jvm_stderr({ENV_JVM_STDERR: path}):
    ...     _ = os.write(2, b"WARN NativeCodeLoader: Unable to load native-hadoop library\\n")
    >>> open(path).read()
    'WARN NativeCodeLoader: Unable to load native-hadoop library\\n'
    """
    target = environ.get(ENV_JVM_STDERR)
    if not target:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        file = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        os.close(saved)
        yield  # the log file's own error is the CLI's to report; the JVM keeps the terminal
        return
    try:
        os.dup2(file, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(file)
