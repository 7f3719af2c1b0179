"""PySpark's and py4j's own log lines go to kprio's logger (``kprio.spark``), never to a stream of their own.

PySpark's query-context loggers hold a handler on the ``sys.stderr`` of their first use (possibly closed since:
``ValueError: I/O operation on closed file``); py4j logs through the root logger. Each gets one handler handing
its warnings and errors to ``kprio.spark`` (the CLI's log file, or the terminal at ``--verbose``:
:mod:`orchestration.cli.logs`); py4j's INFO chatter from a finalizer at exit would reach a long-closed stream.
The local driver JVM's standard error goes to the same log file, or nowhere (:func:`jvm_stderr`).
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
    >>> target.handlers = [Keep()]
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
"""Where a local driver JVM this process starts writes its standard error: a file appended to, or ``os.devnull``;
unset, the process's own (``kprio``'s commands set it: :mod:`orchestration.cli.logs`)."""


@contextlib.contextmanager
def jvm_stderr(environ: Mapping[str, str] = os.environ) -> Iterator[None]:
    """Within the block, a JVM started inherits :data:`ENV_JVM_STDERR`'s file as fd 2 (pyspark has no option for it).

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
