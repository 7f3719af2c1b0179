"""``kprio topics create|verify``: the priority topics of every configured logical topic on the cluster.

``create`` never alters an existing topic; ``verify`` prints one line per mismatch and exits 1 when there is any.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import typer

from kprio_core.errors import ConfigError, TopicsMismatch
from orchestration.cli.boundary import KprioSubgroup
from orchestration.cli.common import (
    ConfigOption,
    JsonOption,
    chosen_topics,
    config_from,
    print_json,
)

app = typer.Typer(
    cls=KprioSubgroup,
    help="Create and verify the priority topics of the configured logical topics.\n\n"
    "Example: kprio topics create --config kprio.yaml   then   kprio topics verify --config kprio.yaml",
    no_args_is_help=True,
)

TopicOption = Annotated[
    str | None, typer.Option("--topic", "-t", help="Only this logical topic (default: every configured topic).")
]


def _selected(config: Any, topic: str | None) -> tuple[Any, tuple[Any, ...]]:
    settings = config_from(config)
    return settings, tuple(chosen_topics(settings, topic))


def _report_mismatches(mismatches: list[Any], bootstrap: str, as_json: bool, doc: dict[str, Any]) -> None:
    """Print the mismatches (one line each) or the JSON document; exit 1 when there is any."""
    doc["mismatches"] = [{**dataclasses.asdict(m), "message": m.describe()} for m in mismatches]
    doc["ok"] = not mismatches
    if as_json:
        print_json(doc)
    else:
        for mismatch in mismatches:
            typer.echo(mismatch.describe())
    if mismatches:
        n = len(mismatches)
        raise TopicsMismatch(f"{n} mismatch{'es' if n > 1 else ''} between the topics on {bootstrap} and the "
                             "configuration", where="topics")


@app.command()
def create(config: ConfigOption = None, topic: TopicOption = None, as_json: JsonOption = False) -> None:
    """Create the missing priority topics as configured, then verify every one of them.

    Partitions from topics[].partitions (required), the replication factor from topics[].replication_factor
    (default: the broker's), settings from topics[].topic_config. An existing topic is left as it is (and said so).

    Example: kprio topics create --config kprio.yaml --topic orders
    """
    from kprio_core.kafka import KafkaEdge

    settings, topics = _selected(config, topic)
    unsized = [t.name for t in topics if t.partitions is None]
    if unsized:
        raise ConfigError(f"topics[{', '.join(unsized)}].partitions is not set: say how many partitions each "
                          "priority topic gets (e.g. partitions: 6) to create them", where=str(config or "kprio.yaml"))
    created: dict[str, list[str]] = {}
    with KafkaEdge(settings.kafka) as edge:
        for t in topics:
            created[t.name] = edge.create_topics(t)
        mismatches = edge.topic_mismatches(topics)
    doc: dict[str, Any] = {"bootstrap": settings.kafka.bootstrap_servers, "topics": []}
    for t in topics:
        names = list(t.priority_topics().values())
        made = created[t.name]
        doc["topics"].append({"topic": t.name, "created": made, "existing": [n for n in names if n not in made],
                              "partitions": t.partitions, "replication_factor": t.replication_factor,
                              "topic_config": dict(t.topic_config)})
        if not as_json:
            rf = f", replication factor {t.replication_factor}" if t.replication_factor else ""
            if made:
                typer.echo(f"{t.name}: created {', '.join(made)} ({t.partitions} partitions each{rf})")
            if len(made) < len(names):
                exist = [n for n in names if n not in made]
                typer.echo(f"{t.name}: {', '.join(exist)} already exist{'s' if len(exist) == 1 else ''} (left as is)")
    _report_mismatches(mismatches, settings.kafka.bootstrap_servers, as_json, doc)


@app.command()
def verify(config: ConfigOption = None, topic: TopicOption = None, as_json: JsonOption = False) -> None:
    """Check the cluster against the configuration: one line per mismatch, exit 1 when there is any.

    Each priority topic must exist, with the partitions and replication factor topics[] sets (when it does).

    Example: kprio topics verify --config kprio.yaml --json
    """
    from kprio_core.kafka import KafkaEdge

    settings, topics = _selected(config, topic)
    with KafkaEdge(settings.kafka) as edge:
        mismatches = edge.topic_mismatches(topics)
    checked = [name for t in topics for name in t.priority_topics().values()]
    unsized = [t.name for t in topics if t.partitions is None]
    doc: dict[str, Any] = {"bootstrap": settings.kafka.bootstrap_servers, "checked": checked,
                           "partitions_unchecked": unsized}
    if not as_json:
        for name in unsized:
            typer.echo(f"{name}: partition counts not checked (topics[{name}].partitions is not set)")
        if not mismatches:
            typer.echo(f"ok: {len(checked)} priority topics of {len(topics)} logical "
                       f"topic{'s' if len(topics) > 1 else ''} match the configuration on "
                       f"{settings.kafka.bootstrap_servers}")
    _report_mismatches(mismatches, settings.kafka.bootstrap_servers, as_json, doc)
