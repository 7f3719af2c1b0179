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
from orchestration.observe.watch import age_text, freshness_text, styled

TopicOption = Annotated[
    str | None, typer.Option("--topic", "-t", help="Logical topic to show (default: every configured topic).")
]
AgeOption = Annotated[
    bool, typer.Option("--age/--no-age", help="Read the oldest pending record of each backlog to show its age.")
]


def lag_doc(snapshot: Any, now_ms: int, states: dict[tuple[str, int], dict[str, str | None]] | None = None,
            judged: Any = None) -> dict[str, Any]:
    """The JSON shape of one logical topic's lag, most urgent first: ``states`` from :func:`log_states` (a deleted
    topic's partitions under ``deleted``), ``judged`` from :func:`~orchestration.observe.judging.judge_topic`."""
    from kprio_core.kafka import oldest_pending_age_ms

    states = states or {}
    verdicts = {v.priority: v for v in judged.verdicts} if judged is not None else {}
    by_partition = {(q.topic, q.partition): q for v in verdicts.values() for q in v.partitions}
    freshness = {r.priority: r for r in judged.freshness} if judged is not None else {}

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
                    **_partition_verdict(by_partition.get((part.topic, part.partition))),
                }
                for part in sorted(parts, key=lambda x: x.partition)
            ],
            **_priority_verdict(verdicts.get(p), freshness.get(p)),
        }
    seen = {(p.topic, p.partition) for p in snapshot.partitions}
    deleted = [{"topic": t, "partition": q, **doc} for (t, q), doc in sorted(states.items()) if (t, q) not in seen]
    return {"topic": snapshot.logical_topic, "priorities": priorities, "deleted": deleted}


def _partition_verdict(v: Any) -> dict[str, Any]:
    return {} if v is None else {"verdict": v.state.value, "verdict_reason": v.reason}


def _priority_verdict(v: Any, fresh: Any) -> dict[str, Any]:
    """A priority's verdict and, when it has an objective, its freshness outcome, as the JSON shows them."""
    out: dict[str, Any] = {}
    if v is not None:
        out["verdict"] = {"state": v.state.value, "reason": v.reason}
    if fresh is not None:
        out["freshness"] = {"status": fresh.status.value, "age_s": fresh.age_s,
                            "objective_s": fresh.objective.max_age_s,
                            "cause": fresh.cause.value if fresh.cause is not None else None, "line": fresh.line}
    return out


def log_states(config: Any, topic: Any, snapshot: Any, ledger: Any | None
               ) -> dict[tuple[str, int], dict[str, str | None]]:
    """Each partition's log state and what ``kprio plan`` / the sensor do about it (the same rules); without a ledger
    kprio believes nothing, so the states are what Kafka alone tells (ok, lost to retention, ahead of the log)."""
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


def _table(doc: dict[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title=f"lag of {doc['topic']}")
    for name in ("prio", "part", "log start", "high wm", "committed", "backlog", "oldest", "in open txn", "lost"):
        table.add_column(name, justify="right")
    table.add_column("state", justify="left")
    table.add_column("verdict", justify="left")
    for p, prio in doc["priorities"].items():
        for part in prio["partitions"]:
            committed = "none" if part["committed"] is None else str(part["committed"])
            table.add_row(p, str(part["partition"]), str(part["log_start"]), str(part["high_watermark"]), committed,
                          str(part["backlog"]), age_text(part["oldest_age_s"]), _open_transaction(part),
                          str(part["lost_to_retention"] or ""), _state(part), styled(part.get("verdict")))
        waiting = prio["behind_open_transactions"]
        verdict = prio.get("verdict", {}).get("state")
        table.add_row(p, "all", "", "", "", f"[bold]{prio['backlog']}[/bold]",
                      f"[bold]{age_text(prio['oldest_age_s'])}", f"[bold]{waiting}[/bold]" if waiting else "", "",
                      freshness_text(prio.get("freshness")),
                      f"[bold]{styled(verdict)}[/bold]" if verdict else "", end_section=True)
    for part in doc.get("deleted", []):
        table.add_row("", str(part["partition"]), "-", "-", "-", "-", "-", "", "", f"{part['topic']}: {_state(part)}")
    return table


def reasons(doc: dict[str, Any]) -> list[str]:
    """The lines under a topic's table: each priority's verdict when not OK, and each objective not met.

    >>> reasons({"priorities": {"2": {"verdict": {"state": "STOP", "reason": "o-2[0]: 5 records waiting"},
    ...                               "freshness": {"status": "pass", "line": "fresh"}},
    ...                         "0": {"verdict": {"state": "OK", "reason": "1 partition OK"}}}})
    ['priority 2: STOP: o-2[0]: 5 records waiting']
    """
    out = []
    for p, prio in doc["priorities"].items():
        verdict = prio.get("verdict")
        if verdict and verdict["state"] != "OK":
            out.append(f"priority {p}: {verdict['state']}: {verdict['reason']}")
        fresh = prio.get("freshness")
        if fresh and fresh["status"] != "pass":
            out.append(f"priority {p}: freshness {fresh['status']}: {fresh['line']}")
    return out


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
    age = "" if since is None else f", open {age_text(since)}"
    return f"{part['behind_open_transaction']} from {part['last_stable_offset']}{age}"


WatchOption = Annotated[
    bool, typer.Option("--watch", help="Redraw the per-priority backlog, age, verdict and freshness until Ctrl-C.")
]
IntervalOption = Annotated[float, typer.Option("--interval", min=0.1, max=3600,
                                                          help="Seconds between two redraws of --watch.")]
IterationsOption = Annotated[
    int | None, typer.Option("--iterations", min=1, show_default=False,
                             help="With --watch: stop after this many redraws (default: until Ctrl-C).")
]


def look(cfg: Any, topics: Any, edge: Any, ledger: Any, *, with_age: bool, now_s: float,
         history: dict | None = None) -> list[dict[str, Any]]:
    """One :func:`lag_doc` per topic at ``now_s``; ``history``: a re-looking caller's (``--watch``), extended here."""
    from orchestration.observe.judging import judge_topic, remember

    now_ms = int(now_s * 1000)
    docs = []
    for t in topics:
        known = {b.topic for b in ledger.beliefs.of(t.name).values()} if ledger is not None else set()
        snap = edge.snapshot(t, now_ms=now_ms, avg_record_bytes={}, with_age=with_age, deleted_ok=known)
        judged = judge_topic(cfg, t, snap, ledger, now_s=now_s, history=history)
        docs.append(lag_doc(snap, now_ms, log_states(cfg, t, snap, ledger), judged))
        if history is not None:
            remember(cfg, history, snap, judged, now_s)
    return docs


def lag(topic: TopicOption = None, config: ConfigOption = None, as_json: JsonOption = False,
        age: AgeOption = True, watch: WatchOption = False, interval: IntervalOption = 2.0,
        iterations: IterationsOption = None) -> None:
    """Show the backlog of every priority and partition: records, oldest pending age, committed offset, state,
    and each priority's lag verdict and freshness.

    The state says what changed under kprio and what ``kprio plan`` does about it: ok, lost to
    retention, ahead of the log, topic recreated, reset back / forward outside kprio, committed
    offsets gone, partition added, topic deleted (``kprio reset`` decides a held one).

    The backlog ends at the last stable offset (read_committed, the default): records of a
    transaction still open wait apart, in "in open txn" (how many, from which offset, open since).

    The verdict (OK, WARN, REWIND, STALL, ERR, STOP, by LinkedIn's Burrow's rules) judges each partition's
    last verdict.intervals commits and the present; freshness compares the oldest pending record's age with
    slo.max_age_s. A verdict other than OK and an objective not met are said in a line under the table.

    With --json: {"topic": ..., "priorities": {"2": {"backlog": n, "oldest_age_s": x, "verdict": {...},
    "freshness": {...}, "partitions": [...]}}} for one topic, a list of those for several.
    With --watch: the same, redrawn every --interval seconds in the terminal until Ctrl-C.

    Example: kprio lag --topic orders --json
    """
    from contextlib import nullcontext

    from kprio_core.errors import UsageError

    if watch and as_json:
        raise UsageError("--watch redraws a table; give either --watch or --json", where="kprio lag")
    if iterations is not None and not watch:
        raise UsageError("--iterations counts the redraws of --watch", where="kprio lag")
    cfg = config_from(config)
    topics = chosen_topics(cfg, topic)
    # The ledger's SQLAlchemy and librdkafka only once the configuration was read: a mistake is told without them.
    from kprio_core.kafka import KafkaEdge
    from kprio_core.ledger import Ledger, ledger_exists
    # A read command never creates a ledger: without one, kprio believes nothing and Kafka alone tells the states.
    opened = Ledger(cfg.ledger.url) if ledger_exists(cfg.ledger.url) else nullcontext()
    with KafkaEdge(cfg.kafka) as edge, opened as ledger:
        if watch:
            _watch(cfg, topics, edge, ledger, age=age, interval=interval, iterations=iterations)
            return
        with edge.one_view():
            docs = look(cfg, topics, edge, ledger, with_age=age, now_s=time.time())
    _show(docs, as_json)


def _watch(cfg: Any, topics: Any, edge: Any, ledger: Any, *, age: bool, interval: float,
           iterations: int | None) -> None:
    """``--watch``: the lag looked at again and redrawn every ``interval`` seconds (each look one view of Kafka)."""
    from orchestration.observe.watch import watch_lag  # rich's Live only when watching

    history: dict = {}

    def looked() -> list[dict[str, Any]]:
        with edge.one_view():
            return look(cfg, topics, edge, ledger, with_age=age, now_s=time.time(), history=history)

    watch_lag(looked, interval_s=interval, iterations=iterations)


def _show(docs: list[dict[str, Any]], as_json: bool) -> None:
    """The lag as JSON (one topic's document alone), or a table per topic with its reasons under it."""
    if as_json:
        print_json(docs[0] if len(docs) == 1 else docs)
        return
    from rich.console import Console

    console = Console()
    for doc in docs:
        console.print(_table(doc))
        for line in reasons(doc):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
