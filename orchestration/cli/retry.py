"""``kprio retry``: an operator re-drains one batch now, in this process (a failed one whatever its attempts).

Run once a failure's cause is fixed (the skip reasons and ``kprio plan`` name it), on the configured Dagster
instance. A batch superseded by a new incarnation of one of its partitions is refused in one line: it never runs again.
"""

from __future__ import annotations

from typing import Annotated

import typer

from orchestration.cli.common import (
    ConfigOption,
    JsonOption,
    check_batch_id,
    config_from,
    print_json,
)

BatchArgument = Annotated[str, typer.Argument(help="The batch id, e.g. b-000042 (kprio plan names held ones).")]


def retry(batch_id: BatchArgument, config: ConfigOption = None, json_out: JsonOption = False) -> None:
    """Re-drain one batch now: its exact ranges, the checks, the commit (a committed one commits nothing new).

    Example: kprio retry b-000042 --config kprio.yaml
    """
    from kprio_core.errors import BatchSuperseded, DrainStopped
    from kprio_core.kafka import KafkaEdge
    from kprio_core.ledger import Ledger
    from orchestration.dagster.definitions import build_definitions
    from orchestration.dagster.drain_loop import redrain
    from orchestration.dagster.instance import open_instance

    check_batch_id(batch_id, "BATCH_ID of kprio retry")
    settings = config_from(config)
    # Both answer in one line before any Spark starts: an unreachable broker, an unknown batch.
    with KafkaEdge(settings.kafka) as edge:
        for topic in settings.topics:
            edge.partitions(topic)
    with Ledger(settings.ledger.url) as ledger:
        gone = ledger.batches.superseded_batch(batch_id)  # planned on an earlier incarnation: it never runs again
    if gone:
        raise BatchSuperseded(gone[0].describe(), where=batch_id)
    defs = build_definitions(settings)
    with open_instance(settings) as instance:
        outcome = redrain(defs, instance, batch_id)
    if json_out:
        print_json(outcome.to_dict())
    else:
        typer.echo(outcome.line())
    if not outcome.success:
        raise typer.Exit(1) if json_out else DrainStopped(outcome.reason, where=batch_id)
