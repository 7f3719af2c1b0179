"""``kprio lag --watch``: the per-priority backlog, age, verdict and freshness, redrawn in the terminal (rich Live).

For a person without a metrics stack: one row per priority, most urgent first, redrawn from a fresh lag snapshot.
The verdict's window grows with every redraw, so a drain that stops turns STOP on screen once stuck long enough.
``kprio lag``'s table imports its cells (an age, a verdict in its colour, a freshness outcome) from here.

>>> doc = {"topic": "orders", "priorities": {"2": {"backlog": 40, "oldest_age_s": 95.0,
...        "verdict": {"state": "STOP", "reason": "orders-2[0]: 40 records waiting, no commit for 200 s"},
...        "freshness": {"status": "fail", "age_s": 95.0, "objective_s": 60.0}}}}
>>> [row[:4] for row in rows(doc)]
[('2', '40', '95.0 s', '[red]STOP[/red]')]
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any


def age_text(seconds: float | None) -> str:
    """An age as a person reads it.

    >>> age_text(95.0), age_text(600.0), age_text(None)
    ('95.0 s', '10.0 min', '-')
    """
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


VERDICT_STYLES = {"OK": "green", "WARN": "yellow", "REWIND": "yellow", "STALL": "red", "ERR": "red", "STOP": "red"}
FRESHNESS_STYLES = {"pass": "green", "warn": "yellow", "fail": "red"}


def styled(state: str | None) -> str:
    """A verdict in its colour (rich markup).

    >>> styled("STOP"), styled(None)
    ('[red]STOP[/red]', '')
    """
    if not state:
        return ""
    style = VERDICT_STYLES.get(state, "white")
    return f"[{style}]{state}[/{style}]"


def freshness_text(fresh: dict[str, Any] | None) -> str:
    """A priority's freshness outcome against its objective (empty: no objective).

    >>> freshness_text({"status": "fail", "age_s": 95.0, "objective_s": 60.0})
    'freshness [red]fail[/red] (95.0 s / 60 s)'
    """
    if not fresh:
        return ""
    style = FRESHNESS_STYLES[fresh["status"]]
    return f"freshness [{style}]{fresh['status']}[/{style}] ({age_text(fresh['age_s'])} / {fresh['objective_s']:g} s)"


def rows(doc: dict[str, Any]) -> list[tuple[str, str, str, str, str, str]]:
    """(priority, backlog, oldest age, verdict, freshness, reason) per priority of one lag document."""
    out = []
    for p, prio in doc["priorities"].items():
        verdict = prio.get("verdict") or {}
        reason = verdict.get("reason", "") if verdict.get("state") not in (None, "OK") else ""
        out.append((p, f"{prio['backlog']:,}", age_text(prio["oldest_age_s"]), styled(verdict.get("state")),
                    freshness_text(prio.get("freshness")).removeprefix("freshness "), reason))
    return out


def render(docs: list[dict[str, Any]], *, at: datetime, round_no: int) -> Any:
    """The watched picture: one table per topic."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    tables: list[Any] = [Text(f"kprio lag --watch: {at:%H:%M:%S} UTC, redraw {round_no}  (Ctrl-C to stop)")]
    for doc in docs:
        table = Table(title=f"{doc['topic']}", title_justify="left")
        for name, justify in (("prio", "right"), ("backlog", "right"), ("oldest", "right"), ("verdict", "left"),
                              ("freshness", "left"), ("why", "left")):
            table.add_column(name, justify=justify, overflow="fold")
        for row in rows(doc):
            table.add_row(*row[:5], Text(row[5]))
        tables.append(table)
    return Group(*tables)


def watch_lag(look: Callable[[], list[dict[str, Any]]], *, interval_s: float, iterations: int | None = None,
              console: Any = None) -> int:
    """Redraw ``look()``'s documents every ``interval_s`` until Ctrl-C (or ``iterations`` redraws); the redraws."""
    from rich.console import Console
    from rich.live import Live

    console = console or Console()
    done = 0
    try:
        with Live(console=console, auto_refresh=False, transient=False) as live:
            while iterations is None or done < iterations:
                started = time.monotonic()
                docs = look()
                done += 1
                live.update(render(docs, at=datetime.now(UTC), round_no=done), refresh=True)
                if iterations is not None and done >= iterations:
                    break
                time.sleep(max(0.0, interval_s - (time.monotonic() - started)))
    except KeyboardInterrupt:
        pass  # a person stopped watching: not an error
    return done
