"""Where the log lines of a run executed in this process go: Python's ``dagster.run`` logger, not the terminal.

Dagster's default ``console`` logger (``dagster._loggers.create_console_logger``) is a fresh ``logging.Logger``
outside the hierarchy, on standard error, so a failing run in ``kprio drain`` or ``kprio retry`` would print Dagster's
lines between kprio's. The drain loop's runs get :func:`python_console` instead: the same ``log_level`` config,
its lines through ``dagster.run``, which the CLI routes to its log file (:mod:`orchestration.cli.logs`). The
daemon's runs keep Dagster's own logger.
"""

from __future__ import annotations

import logging
from functools import cache

import dagster as dg

RUN_LOGGER = "dagster.run"


@dg.logger(
    config_schema={"log_level": dg.Field(str, is_required=False, default_value="INFO"),
                   "name": dg.Field(str, is_required=False, default_value="dagster")},
    description="Dagster's console logger, through Python's logging (the dagster.run logger).",
)
def python_console(init_context: dg.InitLoggerContext) -> logging.Logger:
    logger = logging.getLogger(RUN_LOGGER)
    logger.setLevel(init_context.logger_config["log_level"].upper())
    return logger


@cache
def _logged(job: dg.JobDefinition) -> dg.JobDefinition:
    return job.with_logger_defs({**job.loggers, "console": python_console})


def logged_job(defs: dg.Definitions, name: str) -> dg.JobDefinition:
    """The job ``name`` of ``defs``, its ``console`` logger :func:`python_console`."""
    return _logged(defs.resolve_job_def(name))
