"""The ``kprio`` command: operators' entry point to every part of kprio.

Each command group lives in its own module; this file only assembles them.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="kprio",
    help="Batch priority drainer for Kafka: plan, drain, check and commit prioritised topics.\n\n"
    "Example: kprio demo --records 5000   then   kprio lag --config kprio-data/demo/kprio.yaml",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    # A callback keeps `kprio` a command group even while a single command is registered
    # (typer would otherwise run that command directly and reject its name as an argument).
    pass


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
from orchestration.cli import plan  # noqa: E402

app.command("plan")(plan.plan)
from orchestration.cli import reset  # noqa: E402

app.command("reset")(reset.reset)
from orchestration.cli import retry  # noqa: E402

app.command("retry")(retry.retry)
from orchestration.cli import simulate  # noqa: E402

app.command("simulate")(simulate.simulate)
from orchestration.cli import spark  # noqa: E402

app.add_typer(spark.app, name="spark")
from orchestration.cli import topics  # noqa: E402

app.add_typer(topics.app, name="topics")
