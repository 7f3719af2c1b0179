"""``kprio simulate``: replay traces against the drain policies and compare waits, utilization, starvation.

Output: tables, ``--json`` (:func:`results_json`), ``--markdown`` (docs/benchmarks.md's) and ``--plot out.png``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from kprio_core.config import KprioConfig
from kprio_core.errors import TraceInvalid, UsageError
from kprio_core.extras import PLOT, require
from kprio_core.simulator import POLICIES, WITH_OBJECTIVES, PolicyResult, simulate_all
from kprio_core.traces import BUILT_IN, Trace, built_in, load_trace_file
from orchestration.cli.common import ConfigOption, JsonOption, config_from, print_json, using_path

Results = Mapping[str, Mapping[str, PolicyResult]]
"""Policy results by trace name, then policy name."""


def _waits(result: PolicyResult, p: int) -> str:
    w = result.wait[p]
    return "-" if w.max is None else f"{w.p50}/{w.p95}/{w.max}"


def _starved(result: PolicyResult) -> str:
    return "/".join(str(n) for n in result.starved.values())


def _late(result: PolicyResult, p: int) -> str:
    late = result.late[p]
    return "-" if late is None else f"{late}/{result.max_lateness[p]}"


def results_json(results: Results, single: bool) -> dict[str, object]:
    """The ``--json`` document: exactly ``{"policies": ...}`` for one trace, else keyed by trace."""
    by_trace = {
        name: {"policies": {pol: r.to_dict() for pol, r in policies.items()}} for name, policies in results.items()
    }
    return next(iter(by_trace.values())) if single else {"traces": by_trace}


def markdown_report(results: Results, traces: Mapping[str, Trace]) -> str:
    """One markdown table per trace: utilization, cap violations, p50/p95/max wait and starved per priority."""
    from tabulate import tabulate

    parts: list[str] = []
    for name, policies in results.items():
        trace, order = traces[name], list(next(iter(policies.values())).wait)
        late = order if trace.objectives else []
        header = ["policy", "utilization", "cap violations", *(f"wait p{p} (p50/p95/max)" for p in order),
                  *(f"late p{p} (records/max)" for p in late), f"starved ({'/'.join(f'p{p}' for p in order)})"]
        rows = [[f"`{pol}`", f"{r.utilization:.3f}", r.cap_violations, *(_waits(r, p) for p in order),
                 *(_late(r, p) for p in late), _starved(r)] for pol, r in policies.items()]
        # "pipe", not "github": tabulate's github tables have no alignment colons.
        table = tabulate(rows, header, "pipe", colalign=["left"] + ["right"] * (len(header) - 1), disable_numparse=True)
        goals = f", objectives {_objectives(trace)} ticks" if trace.objectives else ""
        parts.append(f"**{name}** (budget {trace.budget}, {trace.ticks} ticks, {trace.n_partitions} partition"
                     f"{'s' if trace.n_partitions > 1 else ''} per priority{goals}): {trace.about}\n\n{table}\n")
    parts.append(
        "Waits in ticks (drained in the tick of arrival = 0; records left at the end count their wait so far); "
        "utilization = drained / sum of min(budget, backlog) per tick; starved = longest run of ticks with "
        "backlog and nothing drained"
        + ("; late = records that waited longer than their objective / the largest wait beyond it."
           if any(t.objectives for t in traces.values()) else ".")
    )
    return "\n".join(parts)


def _objectives(trace: Trace) -> str:
    """``p2 60 / p1 30 / p0 6`` (most urgent first; ``-``: none)."""
    goals = trace.objectives or ()
    return " / ".join(f"p{p} {'-' if goals[p] is None else goals[p]}" for p in reversed(range(len(goals))))


def _print_tables(results: Results, traces: Mapping[str, Trace]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for name, policies in results.items():
        trace = traces[name]
        order = list(next(iter(policies.values())).wait)
        late = order if trace.objectives else []
        goals = f", objectives {_objectives(trace)}" if trace.objectives else ""
        table = Table(
            title=f"{name}: budget {trace.budget}, {trace.ticks} ticks{goals}",
            caption=f"{trace.about}\nwait = p50/p95/max in ticks; starved = longest run of ticks drained nothing"
            + ("; late = records late/largest lateness in ticks" if late else ""),
        )
        table.add_column("policy", no_wrap=True)
        table.add_column("util.", justify="right")
        table.add_column("over\ncap", justify="right")
        for p in order:
            table.add_column(f"wait p{p}", justify="right", no_wrap=True)
        for p in late:
            table.add_column(f"late p{p}", justify="right", no_wrap=True)
        table.add_column(f"starved\n{'/'.join(f'p{p}' for p in order)}", justify="right", no_wrap=True)
        for pol, r in policies.items():
            table.add_row(pol, f"{r.utilization:.3f}", str(r.cap_violations), *(_waits(r, p) for p in order),
                          *(_late(r, p) for p in late), _starved(r))
        console.print(table)


def plot_backlogs(results: Results, out: Path, traces: Mapping[str, Trace] | None = None) -> None:
    """Backlog per priority over time (with objectives: the oldest pending age, each objective dashed), per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, cols = len(results), max(len(p) for p in results.values())
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False, sharex="row", sharey="row")
    for r, (name, policies) in enumerate(results.items()):
        for c, (pol, result) in enumerate(policies.items()):
            ax = axes[r][c]
            ticks = range(len(result.backlog_by_tick))
            goals = traces[name].objectives if traces else None
            for p in result.wait:  # most urgent first
                line, = ax.plot(ticks, [row[p] for row in (result.oldest_by_tick if goals else result.backlog_by_tick)],
                                label=f"p{p}")
                if goals and goals[p] is not None:
                    ax.axhline(goals[p], linestyle="--", linewidth=0.8, color=line.get_color())
            ax.set_title(f"{name}: {pol}", fontsize=9)
            ax.set_xlabel("tick")
            if c == 0:
                ax.set_ylabel("oldest pending record's age (ticks)" if goals else "backlog (records)")
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, format="png")
    plt.close(fig)


FromLedgerOption = Annotated[
    str | None, typer.Option("--from-ledger", help="Replay the arrivals the ledger recorded for this logical topic "
                             "and recommend the smallest budget per batch (and batch interval) that keeps every "
                             "objective (slo.max_age_s).")
]
SinceOption = Annotated[str | None, typer.Option("--since", help="With --from-ledger: the window's start, an ISO time "
                                                 "or how long ago (90m, 6h, 2d; default 1d).")]
UntilOption = Annotated[str | None, typer.Option("--until", help="With --from-ledger: the window's end (default now).")]


def simulate(
    trace: Annotated[
        str | None,
        typer.Option("--trace", help=f"Built-in trace: {', '.join(BUILT_IN)} (default: all of them)."),
    ] = None,
    trace_file: Annotated[
        Path | None,
        typer.Option(
            "--trace-file",
            help='JSON trace {"budget": int, "arrivals": \\[\\[n_p0, n_p1, ...], ...]} (one row per tick); optional '
            '"objectives": \\[ticks or null per priority] adds lateness and the edf reference.',
        ),
    ] = None,
    ticks: Annotated[
        int | None, typer.Option("--ticks", min=1, max=100_000,
                                  help="Run this many ticks (cut, or pad with idle ticks; at most 100,000).")
    ] = None,
    budget: Annotated[int | None, typer.Option("--budget", min=1, help="Records each policy may drain per tick.")] = None,
    policy: Annotated[
        list[str] | None, typer.Option("--policy", help=f"Policy to run, repeatable: {', '.join(POLICIES)}, "
                                       f"{', '.join(WITH_OBJECTIVES)} (default: all; the last two on a trace with "
                                       "objectives: the reference and the planner without them).")
    ] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a PNG of backlog per priority over time (with "
                                              "objectives: the oldest pending record's age against each).")] = None,
    markdown: Annotated[bool, typer.Option("--markdown", help="Print markdown tables (for docs/benchmarks.md).")] = False,
    from_ledger: FromLedgerOption = None,
    since: SinceOption = None,
    until: UntilOption = None,
    config: ConfigOption = None,
    as_json: JsonOption = False,
) -> None:
    """Replay record arrivals against the strict, round_robin, flipkart and kprio drain policies (on a trace with
    objectives also the earliest-deadline-first reference, edf, and kprio without them, kprio_quotas).

    Example: kprio simulate --trace late_burst --budget 200 --json; kprio simulate --from-ledger orders --since 6h
    """
    settings = config_from(config) if config is not None or from_ledger is not None else None  # read only if asked
    if from_ledger is not None:
        if trace or trace_file or ticks or budget or policy or plot or markdown:
            raise UsageError("--from-ledger takes only --since, --until, --config and --json", where="kprio simulate")
        from_the_ledger(settings, from_ledger, since, until, as_json)
        return
    _check_trace_options(trace, trace_file, since, until, as_json, markdown, policy)
    traces = _traces(trace, trace_file, budget, ticks)
    results = {name: simulate_all(t, policy) for name, t in traces.items()}
    _report(results, traces, plot, as_json, markdown)


def _check_trace_options(trace: str | None, trace_file: Path | None, since: str | None, until: str | None,
                         as_json: bool, markdown: bool, policy: list[str] | None) -> None:
    """Refuse the options of a trace replay that cannot go together, before any trace is read."""
    if since or until:
        raise UsageError("--since and --until go with --from-ledger", where="kprio simulate")
    if trace and trace_file:
        raise UsageError("give either --trace or --trace-file, not both", where="kprio simulate")
    if as_json and markdown:
        raise UsageError("give either --json or --markdown, not both", where="kprio simulate")
    unknown = [p for p in policy or () if p not in POLICIES | WITH_OBJECTIVES]
    if unknown:
        raise UsageError(f"unknown policy {', '.join(unknown)}: choose from {', '.join(POLICIES | WITH_OBJECTIVES)}",
                         where="--policy")


def _traces(trace: str | None, trace_file: Path | None, budget: int | None, ticks: int | None) -> dict[str, Trace]:
    """The traces to replay by name: the file's, the built-in one named, or every built-in one."""
    if trace_file is not None:
        chosen = [load_trace_file(trace_file).with_overrides(budget=budget, ticks=ticks)]
    else:
        names = [trace] if trace else list(BUILT_IN)
        chosen = [built_in(name, budget=budget, ticks=ticks) for name in names]
    return {t.name: t for t in chosen}


def _report(results: Results, traces: Mapping[str, Trace], plot: Path | None, as_json: bool, markdown: bool) -> None:
    """The results as asked: the plot written, then JSON, markdown or the tables."""
    if plot is not None:  # first: a plot that cannot be written fails before anything is printed
        require(PLOT, "--plot", where="--plot")
        with using_path("--plot", plot, doing="write"):
            plot_backlogs(results, plot, traces)
    if as_json:
        print_json(results_json(results, single=len(traces) == 1))
    elif markdown:
        typer.echo(markdown_report(results, traces))
    else:
        _print_tables(results, traces)
    if plot is not None and not as_json:
        typer.echo(f"wrote {plot}")


AGO = re.compile(r"(\d+)([smhd])")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def when(text: str | None, now: datetime, default: timedelta, option: str) -> datetime:
    """``--since`` / ``--until``: an ISO time (UTC unless it says otherwise) or how long before ``now`` (``6h``)."""
    if text is None:
        return now - default
    if m := AGO.fullmatch(text.strip()):
        return now - timedelta(seconds=int(m[1]) * UNITS[m[2]])
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"{text!r} is neither an ISO time nor a duration like 90m, 6h or 2d", where=option) from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def from_the_ledger(config: KprioConfig, name: str, since_text: str | None, until_text: str | None,
                    as_json: bool) -> None:
    """Replay what arrived on ``name`` and recommend a budget (and interval) that keeps every objective."""
    from kprio_core.lifecycle import batch_fixed_cost, drain_rate
    from kprio_core.replay import arrivals, candidates, recommended

    topic = config.topic(name)
    now = datetime.now(UTC)
    start, end = when(since_text, now, timedelta(days=1), "--since"), when(until_text, now, timedelta(0), "--until")
    goals = {p: s for p, s in config.slo.max_age_s.items() if p < topic.priorities}
    where = "kprio simulate --from-ledger"
    if not goals:
        raise UsageError(f"{name} has no objective to keep: set slo.max_age_s", where=where)
    samples, drained, measured = _ledger_history(config, name, start, end)
    _check_enough_history(name, samples, goals, start, end, where)
    rate, fixed = drain_rate(measured), batch_fixed_cost(measured)
    found = candidates(name, arrivals(samples, drained, topic.priorities), goals, rate=rate, fixed_cost_s=fixed)
    best = recommended(found)
    doc = {"topic": name, "since": start.isoformat(), "until": end.isoformat(), "snapshots": len(samples),
           "objectives_s": {str(p): goals[p] for p in sorted(goals, reverse=True)}, "drain_rate": rate,
           "fixed_cost_s": fixed, "candidates": [dataclasses.asdict(c) for c in found],
           "recommended": None if best is None else dataclasses.asdict(best)}
    if as_json:
        print_json(doc)
        return
    _print_candidates(name, samples, start, end, found, best, rate)


def _ledger_history(config: KprioConfig, name: str, start: datetime, end: datetime) -> tuple[list, list, list]:
    """(backlog samples, drained batches, measured drains) the ledger recorded of ``name`` between start and end."""
    from kprio_core.ledger import Ledger, ledger_exists

    samples, drained, measured = [], [], []
    if ledger_exists(config.ledger.url):
        with Ledger(config.ledger.url) as ledger:
            samples = ledger.samples.backlogs(name, start, end)
            drained = [d for d in ledger.samples.drained_since(name, start) if d.at <= end]
            measured = ledger.samples.drains(name)
    return samples, drained, measured


def _check_enough_history(name: str, samples: list, goals: Mapping[int, float], start: datetime, end: datetime,
                          where: str) -> None:
    """At least MIN_SAMPLES plans over twice the largest objective: less is too little to say what a budget would do."""
    from kprio_core.replay import MIN_SAMPLES

    seen_s = (samples[-1].at - samples[0].at).total_seconds() if samples else 0.0
    if len(samples) < MIN_SAMPLES or seen_s < 2 * max(goals.values()):
        raise TraceInvalid(f"{name}: {len(samples)} plan{'s' if len(samples) != 1 else ''} over {seen_s:.0f} s "
                           f"recorded from {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC: too little history to "
                           f"replay (at least {MIN_SAMPLES} plans over twice the largest objective, "
                           f"{2 * max(goals.values()):g} s)", where=where)


def _print_candidates(name: str, samples: list, start: datetime, end: datetime, found: list, best: Any,
                      rate: float | None) -> None:
    """The candidates as a table, then the recommendation (or why there is none)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{name}: {len(samples)} snapshots, {start:%Y-%m-%d %H:%M} - {end:%Y-%m-%d %H:%M} UTC",
                  caption="budget = the smallest record budget per batch under which no record breaks its objective")
    for column in ("batch every", "ticks", "budget", "records/s", "a batch drains in", "late without objectives"):
        table.add_column(column, justify="right")
    for c in found:
        table.add_row(f"{c.interval_s:g} s", f"{c.ticks:,}", f"{c.budget:,}", f"{c.budget / c.interval_s:,.0f}",
                      "-" if c.drain_s is None else f"{c.drain_s:.1f} s", f"{c.late_today:,}")
    console = Console()
    console.print(table)
    if best is None:
        console.print(f"{name}: no batch interval drains its budget within it at the measured "
                      f"{rate or 0:,.0f} records/s: the objectives need a faster drain")
    else:
        speed = "" if best.drain_s is None else f" (a batch drains in about {best.drain_s:.1f} s)"
        console.print(f"{name}: a batch of {best.budget:,} records every {best.interval_s:g} s keeps every "
                      f"objective{speed}: planner.record_budget {best.budget}")
