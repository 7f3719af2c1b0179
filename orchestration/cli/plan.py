"""``kprio plan``: what priority_lag_sensor would do now (runs, the next batch, what waits), without doing it."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestration.cli.common import (
    ConfigOption,
    JsonOption,
    chosen_topics,
    config_from,
    print_json,
)
from orchestration.cli.paused_gc import imports

if TYPE_CHECKING:
    from kprio_core.model.drain_plan import DrainPlan

IN_MEMORY = "sqlite://"
"""The ledger ``kprio plan`` reads when none exists yet: a new, empty one that lives as long as the command."""

TopicOption = Annotated[
    str | None, typer.Option("--topic", "-t", help="Plan only this logical topic (default: every configured topic).")
]


def hold_doc(hold: Any) -> dict[str, Any]:
    from kprio_core.lifecycle import describe_hold

    return {"topic": hold.topic, "partition": hold.partition, "from_offset": hold.start, "batch_id": hold.batch_id,
            "attempts": hold.attempts, "exhausted": hold.exhausted, "reason": hold.reason,
            "retry_at": hold.retry_at.isoformat() if hold.retry_at else None, "text": describe_hold(hold)}


def decision_doc(decision: Any) -> dict[str, Any]:
    """The JSON shape of one topic's decision: what would happen, the plans when there are (``plan``: the
    first; ``plans``: every one, two when caught-up priorities are planned apart), what waits."""
    doc: dict[str, Any] = {
        "topic": decision.topic,
        "action": decision.verdict.value,
        "reason": decision.reason,
        "launch": [{"batch_id": x.batch.batch_id, "why": x.why.value, "attempt": x.attempt, "run_key": x.run_key}
                   for x in decision.launch],
        "stuck": [{"batch_id": b.batch_id, "why": why} for b, why in decision.stuck],
        "held": [hold_doc(h) for h in decision.holds],
        "waiting": list(decision.waiting),
        "throttled": {str(p): round(t, 3) for p, t in decision.throttled.items()},
        "superseded": [{"batch_id": s.batch_id, "topic": s.topic, "partition": s.partition,
                        "planned_incarnation": s.planned, "incarnation": s.current, "text": s.describe()}
                       for s in decision.superseded],
        "log_changes": [{"topic": d.change.topic, "partition": d.change.partition, "state": d.change.state.value,
                         "outcome": d.outcome.value, "decided_by": d.decided_by, "text": d.describe()}
                        for d in decision.decided],
    }
    plans = [_plan_doc(plan) for plan in decision.plans]
    if plans:
        doc["plan"] = plans[0]
        doc["plans"] = plans
    return doc


def _plan_doc(plan: DrainPlan) -> dict[str, Any]:
    """One planned batch as ``kprio plan --json`` shows it."""
    return {
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
        "due": {str(p): why for p, why in plan.due.items()},
        "ranges": [
            {"priority": r.priority, "topic": r.range.topic, "partition": r.range.partition,
             "start": r.range.start, "end": r.range.end, "records": r.range.count, "est_bytes": r.est_bytes}
            for r in plan.ranges
        ],
        "lost": [str(r) for r in plan.lost],
    }


def _print(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    name = f"[bold]{doc['topic']}[/bold]"
    for x in doc["launch"]:
        console.print(f"{name}: run {x['batch_id']} ({x['why']}, attempt {x['attempt']})")
    for s in doc["stuck"]:
        console.print(f"{name}: {s['batch_id']} is stuck: {s['why']}")
    for plan in doc.get("plans", []):
        by_p = ", ".join(f"p{p}={n}" for p, n in plan["records_by_priority"].items())
        console.print(f"{name}: next batch {plan['records']} records ({by_p}), mode {plan['mode']}")
        table = Table("priority", "range", "records", "est. bytes")
        for r in plan["ranges"]:
            table.add_row(str(r["priority"]), f"{r['topic']}[{r['partition']}]@[{r['start']},{r['end']})",
                          str(r["records"]), str(r["est_bytes"]))
        console.print(table)
        if plan["burst"]:
            console.print(f"burst: {plan['burst']['reason']}")
        for p, why in plan["due"].items():
            console.print(f"objective of priority {p}: {why}")
    if not doc.get("plans") and not doc["launch"]:
        console.print(f"{name}: {doc['reason']}")
    for c in doc.get("log_changes", []):
        if c["outcome"] != "hold":
            console.print(f"{name}: log change: {c['text']}")
    for s in doc.get("superseded", []):
        console.print(f"{name}: {s['text']}")
    for text in doc["waiting"]:
        console.print(f"{name}: waiting: {text}")
    for h in doc["held"]:
        console.print(f"{name}: held: {h['text']}")


def plan(config: ConfigOption = None, json_out: JsonOption = False, topic: TopicOption = None) -> None:
    """Show what the sensor would do now: runs to request, the next batch, held partitions (nothing is done).

    It writes nothing: without a ledger yet it plans as a new, empty one would (in memory), and without a
    Dagster instance yet it knows no runs.

    Example: kprio plan --topic orders --json
    """
    from contextlib import ExitStack

    settings = config_from(config)
    topics = chosen_topics(settings, topic)
    now_s = time.time()
    with imports():  # only once the configuration was read: a mistake there is told without them
        from kprio_core.kafka import KafkaEdge
        from kprio_core.ledger import Ledger, ledger_exists
        from orchestration.runtime.runs import LazyRuns
        from orchestration.runtime.tick import decide_all

    def dagster_runs(stack: ExitStack):  # noqa: ANN202 - DagsterRuns, imported here
        from orchestration.dagster.instance import instance_to_read
        from orchestration.dagster.runs import DagsterRuns

        return DagsterRuns(stack.enter_context(instance_to_read(settings)))

    url = settings.ledger.url if ledger_exists(settings.ledger.url) else IN_MEMORY
    with (ExitStack() as stack, KafkaEdge(settings.kafka) as edge, Ledger(url) as ledger, edge.one_view()):
        # The Dagster instance is opened only when a batch in flight or failed needs its runs read.
        runs = LazyRuns(lambda: dagster_runs(stack))
        decisions = decide_all(runs, edge, ledger, settings, topics, now_s=now_s)
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
