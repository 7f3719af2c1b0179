"""``kprio quota`` and ``kprio burst``: explain the base quota split and flipkart's window rule.

Pure computations (no broker, no config): what the planner grants a budget and, for ``burst``, a poll history.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Annotated, Any

import typer

from kprio_core.burst import (
    DEFAULT_MAXED_OUT_THRESHOLD,
    DEFAULT_WINDOW_SIZE,
    PollHistory,
    burst_capacities,
    eligible_to_burst,
    maxed_out_count,
    unused_capacity,
)
from kprio_core.config import MAX_PRIORITIES
from kprio_core.errors import UsageError
from kprio_core.model.priority import Priority
from kprio_core.quota import Distribution, base_quotas
from orchestration.cli.common import JsonOption, print_json

Priorities = Annotated[
    int, typer.Option("--priorities", "-n", min=1, max=MAX_PRIORITIES,
                      help="Number of priority levels: 0 .. N-1 (flipkart's maxPriority).")
]


def _old_option_names(name: str) -> str:
    """Click's token normalizer: the hidden, deprecated ``--max-priority`` is read as ``--priorities``."""
    if name == "max-priority":
        typer.echo("kprio: warning: --max-priority is deprecated (it is a number of levels): use --priorities",
                   err=True)
        return "priorities"
    return name


CONTEXT = {"token_normalize_func": _old_option_names}
"""``context_settings`` of ``kprio quota`` and ``kprio burst``."""

MaxRecords = Annotated[int, typer.Option("--max-records", "-r", min=1,
                                         help="Record budget of one batch (max.poll.records).")]
ModeOption = Annotated[Distribution, typer.Option("--mode", "-m", help="Quota split: exp (flipkart's default) or linear.")]


def _keyed(mapping: Mapping[Priority, Any]) -> dict[str, Any]:
    """JSON object with priorities as string keys, most urgent first."""
    return {str(p): mapping[p] for p in sorted(mapping, reverse=True)}


def quota(
    priorities: Priorities,
    max_records: MaxRecords,
    mode: ModeOption = Distribution.EXP,
    as_json: JsonOption = False,
) -> None:
    """Show how a batch's record budget is split over priority levels.

    Example: kprio quota --priorities 3 --max-records 50   ->   2: 29, 1: 14, 0: 7
    """
    quotas = base_quotas(priorities, max_records, mode.value)
    if as_json:
        print_json(_keyed(quotas))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{mode.value} split of {max_records} records over {priorities} priorities")
    table.add_column("priority", justify="right")
    table.add_column("quota", justify="right")
    table.add_column("share", justify="right")
    for p, q in quotas.items():
        table.add_row(str(p), str(q), f"{100 * q / max_records:.1f}%")
    Console().print(table)


def parse_history(text: str, n_priorities: int) -> dict[Priority, list[int]]:
    """``'{"2": [29, 29], "1": [14]}'`` -> ``{2: [29, 29], 1: [14]}``, or a UsageError saying what is wrong."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as err:
        raise UsageError(f"--history is not valid JSON ({err.msg} at character {err.pos}): {text!r}",
                         where=HISTORY) from None
    except (ValueError, RecursionError):  # Python's limits: 4,300 digits in an integer, its stack for nesting
        raise UsageError("--history holds a number of thousands of digits, or lists nested thousands deep",
                         where=HISTORY) from None
    if not isinstance(raw, dict):
        raise UsageError(f'--history must be a JSON object like {{"2": [29, 29], "1": [14]}}, got {text!r}',
                         where=HISTORY)
    history: dict[Priority, list[int]] = {}
    for key, counts in raw.items():
        try:
            p = int(key)
        except ValueError:
            raise UsageError(f"--history key {key!r} is not a priority number", where=HISTORY) from None
        if not 0 <= p < n_priorities:
            raise UsageError(f"--history names priority {p}, outside 0..{n_priorities - 1}", where=HISTORY)
        if not isinstance(counts, list) or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
            raise UsageError(f"--history of priority {p} must be a list of drained counts >= 0, got {counts!r}",
                             where=HISTORY)
        history[p] = counts
    return history


HISTORY = "--history of kprio burst"


def burst_report(quotas: Mapping[Priority, int], history: PollHistory) -> dict[str, Any]:
    """Capacities, the decision and, per priority, the window facts the rule looked at."""
    caps, decision = burst_capacities(quotas, history)
    windows = {
        p: {
            "counts": history.counts(p),
            "maxed_out": maxed_out_count(history.windows[p]),
            "eligible": eligible_to_burst(history.windows[p], history.maxed_out_threshold),
            "unused": unused_capacity(history.windows[p], quotas[p]),
        }
        for p in quotas
    }
    return {
        "quotas": _keyed(quotas),
        "capacities": _keyed(caps),
        "burst": {"priority": decision.priority, "extra": decision.extra, "reason": decision.reason},
        "windows": _keyed(windows),
        "window_size": history.window_size,
        "threshold": history.maxed_out_threshold,
    }


def burst(
    priorities: Priorities,
    max_records: MaxRecords,
    history: Annotated[
        str,
        typer.Option(
            "--history",
            "-H",
            help='Drained counts per priority, oldest first, as JSON: \'{"2":[29,29],"1":[10,9],"0":[7]}\'. '
            "Only the last --window-size counts are kept; a missing priority has drained nothing yet.",
        ),
    ],
    window_size: Annotated[int, typer.Option("--window-size", min=1, max=10_000,
                                             help="Poll-history window (batches).")] = DEFAULT_WINDOW_SIZE,
    threshold: Annotated[
        int, typer.Option("--threshold", min=1, help="Maxed-out batches in the window that make a priority eligible.")
    ] = DEFAULT_MAXED_OUT_THRESHOLD,
    mode: ModeOption = Distribution.EXP,
    as_json: JsonOption = False,
) -> None:
    """Show the capacities flipkart's window rule gives the next batch, who bursts, by how much and why.

    Example (flipkart's case 3): kprio burst -n 3 -r 50 --history '{"2":[29,29,29,29,29,29],"1":[10,10,7,10,9,0],"0":[7,7,7,7,7,7]}'
    -> priority 2 bursts by 4, to 33.
    """
    if threshold > window_size:
        raise UsageError(f"--threshold {threshold}: the maxed-out threshold must be within 1..window size "
                         f"{window_size}", where="kprio burst")
    quotas = base_quotas(priorities, max_records, mode.value)
    counts = parse_history(history, priorities)
    poll_history = PollHistory.from_counts(counts, quotas, window_size, threshold)
    report = burst_report(quotas, poll_history)
    if as_json:
        print_json(report)
        return
    _print_burst(report, max_records, window_size, threshold)


def _print_burst(report: dict[str, Any], max_records: int, window_size: int, threshold: int) -> None:
    """The window facts per priority as a table, then who bursts and why."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"window rule: {max_records} records, window {window_size}, threshold {threshold}")
    for name in ("priority", "quota", "window (oldest first)", "maxed out", "eligible", "unused", "capacity"):
        table.add_column(name, justify="left" if name.startswith("window") else "right")
    for key, w in report["windows"].items():
        table.add_row(
            key,
            str(report["quotas"][key]),
            str(w["counts"]),
            f"{w['maxed_out']}/{window_size}",
            "yes" if w["eligible"] else "no",
            str(w["unused"]),
            str(report["capacities"][key]),
        )
    console = Console()
    console.print(table)
    decision = report["burst"]
    head = "no burst" if decision["priority"] is None else f"priority {decision['priority']} bursts by {decision['extra']}"
    console.print(f"{head}: {decision['reason']}", soft_wrap=True)
