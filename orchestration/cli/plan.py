"""``kprio plan``: the batch priority_lag_sensor would launch now, without launching or recording it."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from orchestration.cli.common import ConfigOption, JsonOption, clean_errors, config_from, print_json

TopicOption = Annotated[
    str | None, typer.Option("--topic", "-t", help="Plan only this logical topic (default: every configured topic).")
]


def decision_doc(decision: Any) -> dict[str, Any]:
    """The JSON shape of one topic's decision: what would happen, and the plan when there is one."""
    doc: dict[str, Any] = {
        "topic": decision.topic,
        "action": decision.kind,
        "reason": decision.reason,
        "launch": [b.batch_id for b in decision.launch],
        "throttled": {str(p): round(t, 3) for p, t in decision.throttled.items()},
    }
    plan = decision.plan
    if plan is not None:
        doc["plan"] = {
            "mode": plan.mode,
            "record_budget": plan.record_budget,
            "byte_budget": plan.byte_budget,
            "records": plan.records,
            "est_bytes": plan.est_bytes,
            "quotas": {str(p): n for p, n in plan.quotas.items()},
            "grants": {str(p): n for p, n in plan.grants.items()},
            "records_by_priority": {str(p): n for p, n in plan.records_by_priority().items()},
            "backlog_before": {str(p): n for p, n in plan.backlog_before.items()},
            "burst": None if plan.burst is None else {
                "priority": plan.burst.priority, "extra": plan.burst.extra, "reason": plan.burst.reason,
            },
            "ranges": [
                {"priority": r.priority, "topic": r.range.topic, "partition": r.range.partition,
                 "start": r.range.start, "end": r.range.end, "records": r.range.count, "est_bytes": r.est_bytes}
                for r in plan.ranges
            ],
            "lost": [str(r) for r in plan.lost],
        }
    return doc


def _print(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    plan = doc.get("plan")
    if plan is None:
        what = f"launch {', '.join(doc['launch'])} (planned, no run yet)" if doc["launch"] else doc["reason"]
        console.print(f"[bold]{doc['topic']}[/bold]: {what}")
        return
    by_p = ", ".join(f"p{p}={n}" for p, n in plan["records_by_priority"].items())
    console.print(f"[bold]{doc['topic']}[/bold]: next batch {plan['records']} records ({by_p}), mode {plan['mode']}")
    table = Table("priority", "range", "records", "est. bytes")
    for r in plan["ranges"]:
        table.add_row(str(r["priority"]), f"{r['topic']}[{r['partition']}]@[{r['start']},{r['end']})",
                      str(r["records"]), str(r["est_bytes"]))
    console.print(table)
    if plan["burst"]:
        console.print(f"burst: {plan['burst']['reason']}")


@clean_errors
def plan(config: ConfigOption = None, json_out: JsonOption = False, topic: TopicOption = None) -> None:
    """Show the batch the sensor would launch now (nothing is recorded or launched).

    Example: kprio plan --topic orders --json
    """
    from kprio_core.kafka import KafkaEdge
    from kprio_core.ledger import Ledger
    from orchestration.instance import open_instance
    from orchestration.planning import decide
    from orchestration.sensors import existing_runs

    settings = config_from(config)
    topics = [settings.topic(topic)] if topic else list(settings.topics)
    now_s = time.time()
    with KafkaEdge(settings.kafka) as edge, Ledger(settings.ledger.url) as ledger, open_instance() as instance:
        decisions = [
            decide(settings, t, edge=edge, ledger=ledger, now_s=now_s, runs=existing_runs(instance, ledger, t.name))
            for t in topics
        ]
    for decision in decisions:
        if decision.error is not None:
            # The sensor skips with this as its reason; an operator asking for a plan gets an error.
            raise decision.error
    docs = [decision_doc(d) for d in decisions]
    if json_out:
        print_json(docs if topic is None else docs[0])
        return
    for doc in docs:
        _print(doc)
