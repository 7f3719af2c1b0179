"""``kprio lag``: backlog in records and in time, per priority and partition, from the live cluster."""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from orchestration.cli.common import (
    ConfigOption,
    JsonOption,
    chosen_topics,
    config_from,
    print_json,
)

TopicOption = Annotated[
    str | None, typer.Option("--topic", "-t", help="Logical topic to show (default: every configured topic).")
]
AgeOption = Annotated[
    bool, typer.Option("--age/--no-age", help="Read the oldest pending record of each backlog to show its age.")
]


def lag_doc(snapshot: Any, now_ms: int, states: dict[tuple[str, int], dict[str, str | None]] | None = None
            ) -> dict[str, Any]:
    """The JSON shape of one logical topic's lag, most urgent priority first.

    ``states``: per partition, its log state and what kprio does about it (:func:`log_states`);
    a partition of a deleted topic is listed under ``deleted``.
    """
    from kprio_core.kafka import oldest_pending_age_ms

    states = states or {}

    ages = oldest_pending_age_ms(snapshot, now_ms)
    priorities: dict[str, Any] = {}
    for p in range(snapshot.n_priorities - 1, -1, -1):
        parts = snapshot.of_priority(p)
        priorities[str(p)] = {
            "backlog": sum(part.backlog for part in parts),
            "behind_open_transactions": sum(part.behind_open_transaction for part in parts),
            "oldest_age_s": None if ages[p] is None else ages[p] / 1000,
            "partitions": [
                {
                    "partition": part.partition,
                    "topic": part.topic,
                    "log_start": part.log_start,
                    "high_watermark": part.high_watermark,
                    "last_stable_offset": part.stable_offset,
                    "committed": part.committed,
                    "backlog": part.backlog,
                    "behind_open_transaction": part.behind_open_transaction,
                    "open_transaction_age_s": None if part.open_transaction_ms is None
                    else max(0, now_ms - part.open_transaction_ms) / 1000,
                    "oldest_age_s": None if part.oldest_pending_ms is None
                    else max(0, now_ms - part.oldest_pending_ms) / 1000,
                    "lost_to_retention": (lost.count if (lost := part.lost_to_retention) else 0),
                    **states.get((part.topic, part.partition), {"state": "ok", "decision": None, "text": None}),
                }
                for part in sorted(parts, key=lambda x: x.partition)
            ],
        }
    seen = {(p.topic, p.partition) for p in snapshot.partitions}
    deleted = [{"topic": t, "partition": q, **doc} for (t, q), doc in sorted(states.items()) if (t, q) not in seen]
    return {"topic": snapshot.logical_topic, "priorities": priorities, "deleted": deleted}


def log_states(config: Any, topic: Any, snapshot: Any, ledger: Any | None
               ) -> dict[tuple[str, int], dict[str, str | None]]:
    """Each partition's log state and what ``kprio plan`` / the sensor do about it (the same rules).

    ``ledger`` None (no ledger yet): kprio believes nothing, so the states are what Kafka alone tells
    (ok, lost to retention, ahead of the log).
    """
    from datetime import UTC, datetime

    from kprio_core.lifecycle import LedgerView, log_decisions, needs_committed
    from kprio_core.log_changes import LogState
    from orchestration.runtime.tick import read_view, with_committed

    view = LedgerView(topic.name)
    if ledger is not None:  # the tick's own view and rule 7: lag shows what the tick would decide
        view = read_view(ledger, config, topic, datetime.now(UTC))
        view = with_committed(view, ledger, needs_committed(snapshot, view, config))
    found = log_decisions(config, view, snapshot)
    changes, decided, holds, redraining = found.changes, found.decided, found.holds, found.redraining
    by_tp = {(d.change.topic, d.change.partition): d for d in decided}
    held = {(h.topic, h.partition): h for h in holds}
    out = {}
    for c in changes:
        tp = (c.topic, c.partition)
        d = by_tp.get(tp)
        decision = "re-draining" if tp in redraining else (d.outcome.value if d is not None else None)
        if c.state is LogState.LOST_TO_RETENTION:
            decision = "drain past (allow_data_loss)" if config.drain.allow_data_loss else "hold"
        text = held[tp].reason if tp in held else (d.describe() if d is not None else None)
        out[tp] = {"state": c.state.value, "decision": decision, "text": text}
    return out


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _table(doc: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=f"lag of {doc['topic']}")
    for name in ("prio", "part", "log start", "high wm", "committed", "backlog", "oldest", "in open txn", "lost"):
        table.add_column(name, justify="right")
    table.add_column("state", justify="left")
    for p, prio in doc["priorities"].items():
        for part in prio["partitions"]:
            committed = "none" if part["committed"] is None else str(part["committed"])
            table.add_row(p, str(part["partition"]), str(part["log_start"]), str(part["high_watermark"]), committed,
                          str(part["backlog"]), _age(part["oldest_age_s"]), _open_transaction(part),
                          str(part["lost_to_retention"] or ""), _state(part))
        waiting = prio["behind_open_transactions"]
        table.add_row(p, "all", "", "", "", f"[bold]{prio['backlog']}[/bold]", f"[bold]{_age(prio['oldest_age_s'])}",
                      f"[bold]{waiting}[/bold]" if waiting else "", "", "", end_section=True)
    for part in doc.get("deleted", []):
        table.add_row("", str(part["partition"]), "-", "-", "-", "-", "-", "", "", f"{part['topic']}: {_state(part)}")
    return table


def _state(part: dict[str, Any]) -> str:
    """The partition's log state, and what kprio does about it when that is not just draining.

    >>> _state({"state": "ok", "decision": None}), _state({"state": "ahead of the log", "decision": "hold"})
    ('ok', 'ahead of the log: hold')
    """
    decision = part.get("decision")
    return part["state"] if not decision or decision == "drain" else f"{part['state']}: {decision}"


def _open_transaction(part: dict[str, Any]) -> str:
    """Offsets waiting behind a transaction still open at the last stable offset, and for how long.

    >>> _open_transaction({"behind_open_transaction": 40, "last_stable_offset": 960, "open_transaction_age_s": 75.0})
    '40 from 960, open 75.0 s'
    >>> _open_transaction({"behind_open_transaction": 0})
    ''
    """
    if not part["behind_open_transaction"]:
        return ""
    since = part.get("open_transaction_age_s")
    age = "" if since is None else f", open {_age(since)}"
    return f"{part['behind_open_transaction']} from {part['last_stable_offset']}{age}"


def lag(topic: TopicOption = None, config: ConfigOption = None, as_json: JsonOption = False,
        age: AgeOption = True) -> None:
    """Show the backlog of every priority and partition: records, oldest pending age, committed offset, state.

    The state says what changed under kprio and what ``kprio plan`` does about it: ok, lost to
    retention, ahead of the log, topic recreated, reset back / forward outside kprio, committed
    offsets gone, partition added, topic deleted (``kprio reset`` decides a held one).

    The backlog ends at the last stable offset (read_committed, the default): records of a
    transaction still open wait apart, in "in open txn" (how many, from which offset, open since).

    With --json: {"topic": ..., "priorities": {"2": {"backlog": n, "oldest_age_s": x, "partitions": [...]}}}
    for one topic, a list of those for several.

    Example: kprio lag --topic orders --json
    """
    from contextlib import nullcontext

    from kprio_core.kafka import KafkaEdge
    from kprio_core.ledger import Ledger, ledger_exists

    cfg = config_from(config)
    topics = chosen_topics(cfg, topic)
    now_ms = int(time.time() * 1000)
    docs = []
    # A read command never creates a ledger: without one, kprio believes nothing and Kafka alone tells the states.
    opened = Ledger(cfg.ledger.url) if ledger_exists(cfg.ledger.url) else nullcontext()
    with KafkaEdge(cfg.kafka) as edge, opened as ledger, edge.one_view():
        for t in topics:
            known = {b.topic for b in ledger.beliefs(t.name).values()} if ledger is not None else set()
            snap = edge.snapshot(t, now_ms=now_ms, avg_record_bytes={}, with_age=age, deleted_ok=known)
            docs.append(lag_doc(snap, now_ms, log_states(cfg, t, snap, ledger)))
    if as_json:
        print_json(docs[0] if len(docs) == 1 else docs)
        return
    from rich.console import Console

    console = Console()
    for doc in docs:
        console.print(_table(doc))
