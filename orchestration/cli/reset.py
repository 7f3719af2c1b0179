"""``kprio reset <topic>[<partition>] --to earliest|latest|<offset>``: a person decides for a held partition.

Named by the holds of a log that changed under kprio: commits the offset through the edge's commit path and records
the decision in the ledger (a new incarnation for a recreated or truncated log: its output never collides with the
earlier one's); the next tick releases the hold.
"""

from __future__ import annotations

import time
from typing import Annotated

import typer

from orchestration.cli.common import (
    ConfigOption,
    JsonOption,
    config_from,
    print_json,
)

PartitionArgument = Annotated[str, typer.Argument(help="The partition, as topic[partition]: e.g. orders-2[0].")]
ToOption = Annotated[str, typer.Option("--to", help="earliest, latest, or an offset inside the log.")]


def reset(partition: PartitionArgument, to: ToOption, config: ConfigOption = None, json_out: JsonOption = False) -> None:
    """Commit a held partition's offset (earliest, latest or an offset) and record the decision in the ledger.

    Example: kprio reset 'orders-2[0]' --to earliest --config kprio.yaml
    """
    from kprio_core.errors import ResetRefused, UsageError
    from kprio_core.kafka import KafkaEdge
    from kprio_core.ledger import Ledger, ledger_exists
    from kprio_core.log_changes import parse_partition, parse_target
    from orchestration.runtime.log_changes import reset_partition

    try:
        name, number = parse_partition(partition)
    except ValueError as err:
        raise UsageError(str(err), where="PARTITION of kprio reset") from None
    try:
        parse_target(to)
    except ValueError as err:
        raise UsageError(str(err), where="--to of kprio reset") from None
    settings = config_from(config)
    known = [topic for logical in settings.topics for topic in logical.priority_topics().values()]
    if name not in known:
        raise UsageError(f"{name!r} is not a priority topic of the configuration (it has {', '.join(known)})",
                         where="PARTITION of kprio reset")
    logical = next(t for t in settings.topics if name in t.priority_topics().values())

    def check_partition(edge: KafkaEdge) -> None:
        present = sorted(p for keys in edge.partitions(logical).values() for topic, p in keys if topic == name)
        if number not in present:
            raise UsageError(f"{name} has no partition {number} (it has {', '.join(map(str, present))})",
                             where="PARTITION of kprio reset")

    with KafkaEdge(settings.kafka) as edge:
        # A new ledger is made only once the cluster answered and has the partition (a broker that does not answer
        # leaves none behind); an existing one (PostgreSQL) is asked first.
        new_ledger = not ledger_exists(settings.ledger.url)
        if new_ledger:
            check_partition(edge)
        with Ledger(settings.ledger.url) as ledger:
            if not new_ledger:
                check_partition(edge)
            try:
                line = reset_partition(edge, ledger, settings, name, number, to, now_ms=int(time.time() * 1000))
            except ValueError as err:
                raise ResetRefused(str(err), where=partition) from None
    if json_out:
        print_json({"partition": partition, "to": to, "text": line})
    else:
        typer.echo(line)
