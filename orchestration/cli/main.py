"""The ``kprio`` command: this file only assembles the command groups, each in a module of its own."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from orchestration.cli.boundary import ENV_DEBUG, ENV_LOG_FILE, KprioGroup, take_options

app = typer.Typer(
    name="kprio",
    cls=KprioGroup,
    help="Batch priority drainer for Kafka: plan, drain, check and commit prioritised topics.\n\n"
    "Errors are one line on stderr, 'kprio: error: <what> (<where>) [<code>]'; exit 1 for a failure, 2 for a "
    "wrong command line, 3 for a kprio bug (docs/operations.md, Errors and exit codes).\n\n"
    "Example: kprio demo --records 5000   then   kprio lag --config kprio-data/demo/kprio.yaml",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option("--debug", help=f"Print the traceback of an error before its line "
                                        f"(also: {ENV_DEBUG}=1).")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Print kprio's log and the libraries' "
                                          "(librdkafka, py4j, Dagster) on stderr.")] = False,
    log_file: Annotated[Path | None, typer.Option("--log-file", show_default=False, help=f"Append kprio's log "
                                                  f"and the libraries' to this file (also: {ENV_LOG_FILE}).")] = None,
) -> None:
    """Options of every command; a callback also keeps `kprio` a command group while a single command is
    registered (typer would otherwise run that command directly and reject its name as an argument)."""
    take_options(ctx, debug=debug, verbose=verbose, log_file=log_file)


# Command registrations: one line per command module (keep alphabetical).
from orchestration.cli import airflow  # noqa: E402

app.add_typer(airflow.app, name="airflow")
from orchestration.cli import broker  # noqa: E402

app.add_typer(broker.app, name="broker")
from orchestration.cli import dead_letters  # noqa: E402

app.command("dead-letters")(dead_letters.dead_letters)
from orchestration.cli import demo  # noqa: E402

app.command("demo")(demo.demo)
from orchestration.cli import drain  # noqa: E402

app.command("drain")(drain.drain)
from orchestration.cli import explain  # noqa: E402

app.command("burst", context_settings=explain.CONTEXT)(explain.burst)
app.command("quota", context_settings=explain.CONTEXT)(explain.quota)
from orchestration.cli import instance  # noqa: E402

app.add_typer(instance.app, name="instance")
from orchestration.cli import lag  # noqa: E402

app.command("lag")(lag.lag)
from orchestration.cli import metrics  # noqa: E402

app.command("metrics")(metrics.metrics)
from orchestration.cli import plan  # noqa: E402

app.command("plan")(plan.plan)
from orchestration.cli import registry  # noqa: E402

app.add_typer(registry.app, name="registry")
from orchestration.cli import reset  # noqa: E402

app.command("reset")(reset.reset)
from orchestration.cli import retry  # noqa: E402

app.command("retry")(retry.retry)
from orchestration.cli import simulate  # noqa: E402

app.command("simulate")(simulate.simulate)
from orchestration.cli import spark  # noqa: E402

app.add_typer(spark.app, name="spark")
from orchestration.cli import tables  # noqa: E402

app.add_typer(tables.app, name="tables")
from orchestration.cli import topics  # noqa: E402

app.add_typer(topics.app, name="topics")
