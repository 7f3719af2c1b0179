"""``kprio simulate``: JSON shapes, trace files, the backlog plot, markdown, and clean errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from kprio_core.simulator import POLICIES
from kprio_core.traces import BUILT_IN
from orchestration.cli.main import app

runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def run(*args: str):  # noqa: ANN201
    return runner.invoke(app, ["simulate", *args])


def test_json_of_one_built_in_trace_has_exactly_the_policies_shape() -> None:
    result = run("--trace", "steady", "--ticks", "30", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert list(doc) == ["policies"]
    assert list(doc["policies"]) == list(POLICIES)
    for stats in doc["policies"].values():
        assert set(stats) == {"utilization", "cap_violations", "wait", "starved"}
        assert list(stats["wait"]) == ["2", "1", "0"]
        assert all(set(w) == {"p50", "p95", "max"} for w in stats["wait"].values())
        assert list(stats["starved"]) == ["2", "1", "0"]
    assert doc["policies"]["strict"]["starved"]["0"] == 30  # steady overload: strict never drains p0
    assert doc["policies"]["kprio"]["starved"] == {"2": 0, "1": 0, "0": 0}


def test_json_of_all_built_in_traces_is_keyed_by_trace() -> None:
    result = run("--ticks", "40", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert list(doc) == ["traces"]
    assert list(doc["traces"]) == list(BUILT_IN)
    assert all(list(t) == ["policies"] for t in doc["traces"].values())


def test_trace_file_with_budget_override_and_hand_checked_numbers(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    # Budget 2 (overridden from 50): tick 0 brings 2 urgent + 1 lax record, then nothing.
    trace.write_text(json.dumps({"budget": 50, "arrivals": [[1, 2], [0, 0]]}))
    result = run("--trace-file", str(trace), "--budget", "2", "--policy", "strict", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc == {
        "policies": {
            "strict": {
                "utilization": 1.0,
                "cap_violations": 0,
                "wait": {"1": {"p50": 0, "p95": 0, "max": 0}, "0": {"p50": 1, "p95": 1, "max": 1}},
                "starved": {"1": 0, "0": 1},
            }
        }
    }


def test_plot_writes_a_png_with_one_subplot_per_policy(tmp_path: Path) -> None:
    out = tmp_path / "backlog.png"
    result = run("--trace", "late_burst", "--ticks", "60", "--plot", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert "late_burst" in result.stdout and "kprio" in result.stdout  # the rich table came too


def test_bad_trace_file_is_one_clear_line_and_exit_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"budget": 10, "arrivals": [[1, 2], [3]]}))
    result = run("--trace-file", str(bad), "--json")
    assert result.exit_code == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "bad.json" in lines[0] and "tick 1 has 1 priorities, tick 0 has 2" in lines[0]
    assert "[trace_invalid]" in lines[0] and "Traceback" not in result.output


def test_unparseable_and_missing_trace_files_fail_cleanly(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{\"budget\": ")
    for path, expected in [(broken, "not valid JSON"), (tmp_path / "none.json", "cannot read trace file")]:
        result = run("--trace-file", str(path))
        assert result.exit_code == 1
        assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_unknown_trace_and_conflicting_options_fail_cleanly(tmp_path: Path) -> None:
    result = run("--trace", "nope")
    assert result.exit_code == 1 and "unknown trace 'nope'" in result.stderr
    result = run("--trace", "steady", "--trace-file", str(tmp_path / "x.json"))
    assert result.exit_code == 2 and "either --trace or --trace-file" in result.stderr  # the command line: usage
    result = run("--policy", "fifo")
    assert result.exit_code == 2 and "unknown policy fifo" in result.stderr
    # Budget 5 cannot be split exponentially over 3 priorities: the error names the policy and trace.
    result = run("--trace", "steady", "--budget", "5")
    assert result.exit_code == 1
    assert "policy 'flipkart' on trace 'steady'" in result.stderr and "[quota_invalid]" in result.stderr


def test_markdown_has_one_table_per_built_in_trace() -> None:
    result = run("--markdown", "--ticks", "40")
    assert result.exit_code == 0, result.output
    for name in BUILT_IN:
        assert f"**{name}**" in result.stdout
    rows = [line for line in result.stdout.splitlines() if line.startswith("| `")]
    assert len(rows) == len(BUILT_IN) * len(POLICIES)


def test_markdown_table_keeps_the_readme_columns_and_alignment() -> None:
    result = run("--markdown", "--trace", "steady", "--ticks", "20", "--policy", "strict")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines if line.startswith("|")]
    assert cells[0] == ["policy", "utilization", "cap violations", "wait p2 (p50/p95/max)",
                        "wait p1 (p50/p95/max)", "wait p0 (p50/p95/max)", "starved (p2/p1/p0)"]
    assert [c.startswith(":") or c.endswith(":") for c in cells[1]] == [True] * 7
    assert all(c.endswith(":") for c in cells[1][1:]), "numbers right-aligned"
    assert cells[2][:3] == ["`strict`", "1.000", "0"]
    assert all(re.fullmatch(r"\d+/\d+/\d+", c) for c in cells[2][3:]), cells[2]
    assert lines[0].startswith("**steady** (budget 100, 20 ticks, 1 partition per priority): ") and lines[1] == ""


TRACES = Path(__file__).resolve().parents[2] / "benchmarks" / "traces"


def test_a_trace_with_objectives_reports_lateness_beside_the_waits_and_runs_edf_first() -> None:
    result = run("--trace-file", str(TRACES / "floods.json"), "--json")
    assert result.exit_code == 0, result.output
    policies = json.loads(result.stdout)["policies"]
    assert list(policies) == ["edf", *POLICIES, "kprio_quotas"]
    for stats in policies.values():
        assert set(stats) == {"utilization", "cap_violations", "wait", "late", "max_lateness", "starved"}
        assert list(stats["late"]) == list(stats["max_lateness"]) == list(stats["wait"]) == ["2", "1", "0"]
    # The floods: today's split left priority 0 late; the planner steered by the objectives is edf.
    assert policies["kprio"]["late"] == policies["edf"]["late"] == {"2": 0, "1": 0, "0": 0}
    assert policies["kprio_quotas"]["late"]["0"] > 0 and policies["flipkart"]["late"]["0"] > 0


def test_markdown_and_table_of_a_trace_with_objectives_have_late_columns(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"budget": 3, "arrivals": [[3, 3], [0, 0]], "objectives": [0, None]}))
    result = run("--trace-file", str(trace), "--markdown", "--policy", "strict", "--policy", "edf")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line.startswith("|")]
    cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]
    assert cells[0][-3:] == ["late p1 (records/max)", "late p0 (records/max)", "starved (p1/p0)"]
    assert cells[2][0] == "`strict`" and cells[2][-3:-1] == ["-", "3/1"]  # p0's 3 records wait 1 tick, objective 0
    assert cells[3][0] == "`edf`" and cells[3][-3:-1] == ["-", "0/0"]
    assert "objectives p1 - / p0 0 ticks" in result.stdout
    table = run("--trace-file", str(trace))
    assert table.exit_code == 0 and "late p0" in table.stdout


def test_plot_of_a_trace_with_objectives_shows_ages(tmp_path: Path) -> None:
    out = tmp_path / "ages.png"
    result = run("--trace-file", str(TRACES / "late_urgent.json"), "--ticks", "70", "--plot", str(out), "--json")
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == PNG_MAGIC


def ledger_with_history(tmp_path: Path, steps: int = 60):  # noqa: ANN201
    """A ledger where 60 ticks, 2 s apart, saw 10 records of priority 2 arrive each and 300 of priority 0 every
    tenth, and a config whose objectives are 4 s (priority 2) and 30 s (priority 0)."""
    from kprio_core.ledger import Ledger
    from tests.kprio_core.ledger_support import Clock, record_history

    url, clock = f"sqlite:///{tmp_path / 'ledger.db'}", Clock()
    start = clock.now
    with Ledger(url, clock=clock) as ledger:
        record_history(ledger, clock, [{2: 10, 0: 300 if i % 10 == 0 else 0} for i in range(steps)])
    config = tmp_path / "kprio.yaml"
    config.write_text(json.dumps({"topics": [{"name": "orders", "priorities": 3}], "ledger": {"url": url},
                                  "slo": {"max_age_s": {2: 4, 0: 30}}}))
    return config, start, clock.now


def test_from_ledger_recommends_the_smallest_budget_that_keeps_every_objective(tmp_path: Path) -> None:
    from kprio_core.replay import arrivals, keeps_every_objective, ledger_trace

    config, start, end = ledger_with_history(tmp_path)
    window = ("--since", start.isoformat(), "--until", end.isoformat(), "--config", str(config))
    result = run("--from-ledger", "orders", *window, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["snapshots"] == 60 and doc["objectives_s"] == {"2": 4.0, "0": 30.0}
    best = doc["recommended"]
    assert best == doc["candidates"][0] and best["interval_s"] == 1 and best["drain_s"] <= 1
    # The figures that show it: the replay keeps every objective at that budget, not at one record less.
    from kprio_core.ledger import Ledger

    with Ledger(json.loads(config.read_text())["ledger"]["url"]) as ledger:
        spans = arrivals(ledger.samples.backlogs("orders", start, end),
                         ledger.samples.drained_since("orders", start), 3)
    assert sum(sum(row) for _, _, row in spans) == 60 * 10 + 6 * 300, "every record that arrived, once"
    trace = ledger_trace("orders", spans, 1, {2: 4, 0: 30})
    assert keeps_every_objective(trace, best["budget"], "kprio")
    assert not keeps_every_objective(trace, best["budget"] - 1, "edf")
    table = run("--from-ledger", "orders", *window)
    assert table.exit_code == 0 and f"a batch of {best['budget']:,} records every 1 s keeps every objective" in table.stdout


def test_from_ledger_with_too_little_history_says_so_in_one_line(tmp_path: Path) -> None:
    config, start, end = ledger_with_history(tmp_path, steps=3)
    result = run("--from-ledger", "orders", "--since", start.isoformat(), "--until", end.isoformat(),
                 "--config", str(config))
    assert result.exit_code == 1 and result.stdout == ""
    [line] = result.stderr.strip().splitlines()
    assert "orders: 3 plans over 4 s recorded from 2025-01-02 03:04 to 2025-01-02 03:04 UTC: too little history" in line
    assert line.startswith("kprio: error: ") and line.endswith("(kprio simulate --from-ledger) [trace_invalid]")
    assert run("--since", "1h").exit_code == 2, "--since without --from-ledger"
    assert run("--from-ledger", "orders", "--since", "yesterday", "--config", str(config)).exit_code == 2
