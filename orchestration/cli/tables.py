"""``kprio tables maintain``: keep the Delta or Iceberg tables healthy from the command line (e.g. from cron).

For ``kprio drain --follow``: the maintenance Dagster's schedule and Airflow's DAG run. Safe beside a running
drain: each step commits as a transaction of its own, and a compaction that meets a batch's publish is planned again.
"""

from __future__ import annotations

from typing import Annotated

import typer

from orchestration.cli.boundary import KprioSubgroup
from orchestration.cli.common import ConfigOption, JsonOption, chosen_topics, config_from, print_json

app = typer.Typer(
    cls=KprioSubgroup,
    help="Maintain the Delta or Iceberg tables kprio writes (drain.format).\n\n"
    "Example: kprio tables maintain --config kprio.yaml",
    no_args_is_help=True,
)

TopicOption = Annotated[
    str | None, typer.Option("--topic", "-t", help="Only this logical topic (default: every configured topic).")
]


@app.command()
def maintain(config: ConfigOption = None, topic: TopicOption = None, as_json: JsonOption = False) -> None:
    """Compact small files, then vacuum and checkpoint (Delta) or expire old snapshots (Iceberg).

    Example: kprio tables maintain --config kprio.yaml --topic orders
    """
    from orchestration.runtime.maintenance import maintain_tables

    settings = config_from(config)
    names = [t.name for t in chosen_topics(settings, topic)]
    report = maintain_tables(settings, names)
    if as_json:
        print_json(report.to_dict())
        return
    for line in report.lines():
        typer.echo(line)
