"""The error boundary of every ``kprio`` command: one line on stderr, a documented exit code, no secret.

Every command runs inside :meth:`KprioGroup.main` (the console script and ``CliRunner`` both call it), so no command
can leave this contract by forgetting a decorator. A failure becomes ``kprio: error: <what> (<where>) [<code>]``:
kprio's typed errors (:mod:`kprio_core.errors`, mapped from the libraries' where they happen) give their own; click's
usage errors name the command, code ``usage``; an OSError that reached this far names its file; anything else is a
kprio bug, ``internal_error``, with its type and first line.

An error without a ``where`` names its :attr:`~kprio_core.errors.KprioError.setting` and where that came from (the
configuration file or an environment variable), else the failed command. Exit codes: ``EXIT_*`` (docs/operations.md).
Tracebacks only with ``--debug`` or ``KPRIO_DEBUG=1``; the line, the traceback and every log line are redacted.

>>> line(UsageError("give either --trace or --trace-file, not both", where="kprio simulate"))
'kprio: error: give either --trace or --trace-file, not both (kprio simulate) [usage]'
>>> exit_code(UsageError("x")), exit_code(ConfigError("x")), exit_code(KeyError("x"))
(2, 1, 3)
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
import typer.core
import yaml
from pydantic import ValidationError

from kprio_core.config.load import ConfigSources
from kprio_core.errors import (
    ConfigError,
    InternalError,
    KprioError,
    PathUnusable,
    UsageError,
    os_reason,
    shortened,
)
from orchestration.cli.redaction import Redactor

try:  # typer 0.2x runs its own copy of click and exports none of its usage errors: a private import, here only
    from typer._click import exceptions as click_errors
except ImportError:  # an older typer runs on click itself
    from click import exceptions as click_errors  # type: ignore[no-redef]

EXIT_OK = 0
EXIT_FAILED = 1
"""A failure kprio reports: a bad configuration, a service that does not answer, a path it cannot use, ..."""
EXIT_USAGE = 2
"""The command line itself is wrong."""
EXIT_INTERNAL = 3
"""An exception kprio did not expect: a bug (``--debug`` shows its traceback)."""
EXIT_INTERRUPTED = 130
"""Ctrl-C (SIGINT) in a command that does not handle it itself (``kprio drain`` does: it exits 0)."""

ENV_DEBUG = "KPRIO_DEBUG"
ENV_LOG_FILE = "KPRIO_LOG_FILE"


@dataclass
class Run:
    """What one invocation asked for with the ``kprio`` options (set by the group's callback)."""

    debug: bool = False
    verbose: bool = False
    log_file: Path | None = None
    log_file_from: str = "--log-file"
    command: str = "kprio"
    """The command running (``kprio broker start``), once the group resolved it."""
    redact: Redactor = field(default_factory=lambda: Redactor(()))
    sources: ConfigSources | None = None
    """Where the configuration the command loaded came from (:func:`orchestration.cli.common.config_from`)."""
    argv: tuple[str, ...] = ()
    """The command line's arguments (a long one pasted by mistake is quoted cut in the error line)."""
    logs: Any = None
    """The command's log handler (:func:`~orchestration.cli.logs.routed_logs`); its failed write fails the command."""


RUN = Run()
"""The invocation running now (one at a time per process: a command's own threads never start another)."""


def typed(err: BaseException) -> KprioError:
    """``err`` as kprio's typed error (see the module docstring)."""
    if isinstance(err, KprioError):
        return err
    if isinstance(err, click_errors.UsageError):
        command = err.ctx.command_path if err.ctx is not None else RUN.command
        if RUN.command.startswith(f"{command} "):
            command = RUN.command  # the parser of a command may report with its group's context
        what = " ".join(err.format_message().replace("Value error, ", "").split())  # pydantic's prefix
        nan = not_a_number_given(err, RUN.argv)
        if nan is not None:  # its range check said "should be less than or equal to", which NaN is not either
            what = f"Invalid value for '{nan[0]}': {nan[1]!r} is not a number"
        return UsageError(what, where=f"{command}; see {command} --help")
    if isinstance(err, click_errors.ClickException):
        return UsageError(" ".join(err.format_message().split()), where=RUN.command)
    if isinstance(err, OSError) and err.filename is not None:
        return PathUnusable(f"cannot use {str(err.filename)!r}: {os_reason(err)}", where=str(err.filename))
    if isinstance(err, ValidationError):
        from kprio_core.config import config_error

        return config_error(err, "configuration")
    if isinstance(err, yaml.YAMLError):
        return ConfigError(f"not valid YAML: {getattr(err, 'problem', None) or type(err).__name__}")
    first = next((part.strip() for part in str(err).splitlines() if part.strip()), "")
    what = f"{type(err).__name__}: {first}" if first else type(err).__name__
    hint = "" if RUN.debug else "; rerun with --debug for the traceback"
    return InternalError(f"unexpected {what}", where=f"a bug in kprio{hint}")


def not_a_number_given(err: BaseException, argv: Sequence[str]) -> tuple[str, str] | None:
    """The option a bad-parameter error is about and what it was given, when that is NaN; else None.

    >>> class Interval:
    ...     opts = ["--interval"]
    >>> bad = click_errors.BadParameter("Input should be less than or equal to 3600", param=Interval())
    >>> not_a_number_given(bad, ["lag", "--interval", "NaN"]), not_a_number_given(bad, ["lag", "--interval=-nan"])
    (('--interval', 'NaN'), ('--interval', '-nan'))
    >>> not_a_number_given(bad, ["lag", "--interval", "inf"]), not_a_number_given(bad, ["lag", "--topic", "nan"])
    (None, None)
    """
    names = set(getattr(getattr(err, "param", None), "opts", None) or ())
    for i, arg in enumerate(argv):
        name, equals, value = arg.partition("=")
        if name in names:
            given = value if equals else (argv[i + 1] if i + 1 < len(argv) else "")
            if given.strip().lower().lstrip("+-") == "nan":
                return name, given
    return None


def exit_code(err: BaseException) -> int:
    mapped = typed(err)
    if isinstance(mapped, UsageError):
        return EXIT_USAGE
    if isinstance(mapped, InternalError):
        return EXIT_INTERNAL
    return EXIT_FAILED


def line(err: BaseException) -> str:
    """The one error line of ``err``, its secrets replaced."""
    mapped = typed(err)
    text = " ".join(str(mapped).split())  # one line, whatever a library's message held
    if not mapped.where:
        setting = mapped.setting
        where = RUN.sources.where(setting, mapped.setting_value) if setting and RUN.sources else RUN.command
        text = f"{text} ({where})"
    quoted = [RUN.redact(value) for value in (*RUN.argv, mapped.setting_value, *mapped.shown) if value]
    return shortened(RUN.redact(f"kprio: error: {text} [{mapped.code}]"), quoted)  # cut after redaction: no half secret


def report(err: BaseException) -> int:
    """Print ``err``'s line (after its traceback when debugging) on stderr; its exit code."""
    if RUN.debug:
        sys.stderr.write(RUN.redact("".join(traceback.format_exception(err))))
    typer.secho(line(err), err=True, fg=typer.colors.RED)
    return exit_code(err)


def empty_option(argv: Sequence[str]) -> str | None:
    """The first option of ``argv`` given an empty value (``--home ""``, ``--config=``), or None.

    >>> empty_option(["instance", "init", "--home", ""]), empty_option(["plan", "--config="]), empty_option(["plan"])
    ('--home', '--config', None)
    """
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg.startswith("-") and len(arg) > 1:
            name, equals, value = arg.partition("=")
            if (equals and not value) or (not equals and i + 1 < len(argv) and argv[i + 1] == ""):
                return name
    return None


def interrupted() -> int:
    """Say that the command was interrupted (Ctrl-C), in the one-line form; its exit code."""
    typer.secho(RUN.redact(f"kprio: error: interrupted ({RUN.command}) [interrupted]"), err=True, fg=typer.colors.RED)
    return EXIT_INTERRUPTED


class KprioGroup(typer.core.TyperGroup):
    """The ``kprio`` group: its :meth:`main` is the error boundary of every command."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        RUN.__init__(debug=os.environ.get(ENV_DEBUG, "") not in ("", "0"),  # type: ignore[misc]
                     log_file=Path(os.environ[ENV_LOG_FILE]) if os.environ.get(ENV_LOG_FILE) else None,
                     log_file_from=ENV_LOG_FILE, command=prog_name or "kprio", redact=Redactor.of(os.environ, argv),
                     argv=tuple(argv))
        try:
            empty = empty_option(argv)
            if empty is not None:  # click would take "" as a value: a path of "" is the working directory
                raise UsageError(f"the value of {empty} is empty", where=f"{empty}; see kprio --help")
            result = super().main(args=argv, prog_name=prog_name, complete_var=complete_var, standalone_mode=False,
                                  **extra)
            code = result if isinstance(result, int) else EXIT_OK
            failed = getattr(RUN.logs, "failed", None)
            if code == EXIT_OK and failed is not None:  # the log file's lines were lost (a full disk)
                code = report(failed)
            if code == EXIT_INTERRUPTED:  # typer's form of KeyboardInterrupt (Ctrl-C): Exit(130)
                interrupted()
        except click_errors.NoArgsIsHelpError as err:
            code = err.exit_code  # the group's help is printed already (typer prints it when it is asked for)
        except typer.Abort:  # click's form of EOF at a prompt
            code = interrupted()
        except Exception as err:  # noqa: BLE001 - the boundary: every failure becomes one line
            code = report(err)
        if standalone_mode:
            sys.exit(code)
        return code

    def resolve_command(self, ctx: typer.Context, args: list[str]) -> Any:
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:
            RUN.command = f"{ctx.command_path} {command.name}"
        return name, command, rest


class KprioSubgroup(KprioGroup):
    """A group under ``kprio`` (``kprio broker``): only says which of its commands runs (its main is never called)."""


def take_options(ctx: typer.Context, *, debug: bool, verbose: bool, log_file: Path | None) -> None:
    """The ``kprio`` options of this invocation; the logs are routed until its command ends (``ctx.with_resource``)."""
    from orchestration.cli.logs import routed_logs

    RUN.debug = RUN.debug or debug
    RUN.verbose = verbose
    if log_file is not None:
        RUN.log_file, RUN.log_file_from = log_file, "--log-file"
    RUN.logs = ctx.with_resource(routed_logs(verbose=RUN.verbose, log_file=RUN.log_file,
                                             log_file_from=RUN.log_file_from, debug=RUN.debug, redact=RUN.redact))
