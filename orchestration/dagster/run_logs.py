"""Where the log lines of a run executed in this process go: Python's ``dagster.run`` logger, not the terminal.

Dagster's default ``console`` logger is a logger of its own (``dagster._loggers.create_console_logger``: a fresh
``logging.Logger`` outside the hierarchy, coloredlogs' handler on standard error), so a run that fails inside
``kprio drain`` or ``kprio retry`` would print Dagster's own lines between kprio's. The runs the drain loop executes
(:mod:`orchestration.dagster.drain_loop`) get :func:`python_console` as their ``console`` logger instead: the same
``log_level`` config, its lines through ``dagster.run``, a child of the ``dagster`` logger the CLI routes to its log
file (or the terminal at ``--verbose``, :mod:`orchestration.cli.logs`); elsewhere they propagate as Python logging's
configuration says. The runs the daemon launches keep Dagster's own logger: only the job executed here changes.
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
