"""``kprio drain``: evaluate priority_lag_sensor and execute the runs it requests, in this process.

The runs go to the configured Dagster instance (``$DAGSTER_HOME``, else
``./kprio-data/dagster_home``), so ``dagster dev`` on the same home shows them.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from orchestration.cli.common import ConfigOption, JsonOption, clean_errors, config_from, fail, print_json

TopicOption = Annotated[
    str | None, typer.Option("--topic", "-t", help="Drain only this logical topic (default: every configured topic).")
]
UntilEmptyOption = Annotated[
    bool,
    typer.Option(
        "--until-empty/--once",
        help="Keep ticking until no backlog is left (default), or run only what one sensor tick requests.",
    ),
]
MaxBatchesOption = Annotated[
    int | None, typer.Option("--max-batches", min=1, help="Stop after this many batches.", show_default=False)
]


@clean_errors
def drain(
    config: ConfigOption = None,
    json_out: JsonOption = False,
    until_empty: UntilEmptyOption = True,
    max_batches: MaxBatchesOption = None,
    topic: TopicOption = None,
) -> None:
    """Drain the backlog through the sensor and drain_job, in process, batch by batch.

    Example: kprio drain --until-empty --max-batches 20 --json --config kprio.yaml
    """
    from kprio_core.kafka import KafkaEdge
    from orchestration.definitions import build_definitions
    from orchestration.instance import open_instance
    from orchestration.runner import drain as run_drain

    settings = config_from(config)
    if topic is not None:
        settings = settings.model_copy(update={"topics": (settings.topic(topic),)})
    defs = build_definitions(settings)

    def show(batch: Any) -> None:
        if not json_out:
            typer.echo(batch.line())

    with open_instance() as instance:
        # One line per batch is the progress report; Dagster's own event log stays in the instance.
        report = run_drain(defs, instance, max_batches=max_batches, once=not until_empty, log_level="WARNING",
                           on_batch=show)
    committed: dict[str, dict[str, int | None]] = {}
    with KafkaEdge(settings.kafka) as edge:
        for logical in settings.topics:
            for (name, partition), offset in sorted(edge.committed(logical).items()):
                committed.setdefault(name, {})[str(partition)] = offset
    summary = {
        "batches": [b.to_dict() for b in report.batches],
        "records": {str(p): n for p, n in report.records().items()},
        "committed": committed,
        "stopped": report.stopped,
        "ok": report.ok,
    }
    if json_out:
        print_json(summary)
    else:
        total = sum(report.records().values())
        typer.echo(f"{len(report.batches)} batches, {total} records committed; {report.stopped}")
    if not report.ok:
        # With --json the summary already says why; a line on stderr would only repeat it.
        raise typer.Exit(1) if json_out else fail(report.stopped)
