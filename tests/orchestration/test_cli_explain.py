"""``kprio quota`` and ``kprio burst``: numbers, JSON shapes, the four flipkart cases, clean errors."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from orchestration.cli.main import app

runner = CliRunner()

CASE3 = '{"2":[29,29,29,29,29,29],"1":[10,10,7,10,9,0],"0":[7,7,7,7,7,7]}'


def run(*args: str):  # noqa: ANN201
    return runner.invoke(app, list(args))


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-n", "3", "-r", "50"], {"2": 29, "1": 14, "0": 7}),
        (["--priorities", "3", "--max-records", "10"], {"2": 7, "1": 2, "0": 1}),
        (["-n", "3", "-r", "50", "--mode", "linear"], {"2": 26, "1": 16, "0": 8}),
        (["-n", "1", "-r", "5"], {"0": 5}),
    ],
    ids=["flipkart-50", "flipkart-10", "linear", "one-level"],
)
def test_quota_json(args: list[str], expected: dict[str, int]) -> None:
    result = run("quota", *args, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc == expected
    assert list(doc) == list(expected), "most urgent first"


def test_quota_table() -> None:
    result = run("quota", "-n", "3", "-r", "50")
    assert result.exit_code == 0, result.output
    for row in (("2", "29", "58.0%"), ("1", "14", "28.0%"), ("0", "7", "14.0%")):
        assert any(all(cell in line for cell in row) for line in result.stdout.splitlines()), row


BURST_CASES = [
    # (case, history, capacities, burster, extra, why)
    (1, '{"2":[29,29,29,29,29,29],"1":[14,14,14,14,14,14],"0":[7,7,7,7,7,7]}',
     {"2": 29, "1": 14, "0": 7}, None, 0, "flipkart case 1: all full, no burst"),
    (2, '{"2":[29,29,29,29,29,29],"1":[14,14,14,11,10,9],"0":[7,7,7,7,7,7]}',
     {"2": 29, "1": 14, "0": 7}, None, 0, "flipkart case 2: priority 1 peaked at 14, nothing to take"),
    (3, CASE3, {"2": 33, "1": 14, "0": 7}, 2, 4, "flipkart case 3: priority 2 gets 33"),
    (4, '{"2":[20,25,25,20,15,10],"1":[10,10,7,10,9,0],"0":[7,7,7,7,7,7]}',
     {"2": 29, "1": 14, "0": 15}, 0, 8, "flipkart case 4: priority 0 gets 15"),
]


@pytest.mark.parametrize(("case", "history", "caps", "burster", "extra", "why"), BURST_CASES,
                         ids=[f"case-{c[0]}" for c in BURST_CASES])
def test_burst_json_flipkart_cases(case, history, caps, burster, extra, why) -> None:
    result = run("burst", "--priorities", "3", "--max-records", "50", "--history", history, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["quotas"] == {"2": 29, "1": 14, "0": 7}
    assert doc["capacities"] == caps, why
    assert (doc["burst"]["priority"], doc["burst"]["extra"]) == (burster, extra), why
    assert doc["burst"]["reason"]
    assert (doc["window_size"], doc["threshold"]) == (6, 4)


def test_burst_window_facts_and_options() -> None:
    # --window-size 3 keeps the last 3 counts of each priority; --threshold 2 of them make it eligible
    result = run("burst", "-n", "3", "-r", "50", "--history", CASE3, "--window-size", "3", "--threshold", "2", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["windows"]["1"] == {"counts": [10, 9, 0], "maxed_out": 0, "eligible": False, "unused": 4}
    assert doc["windows"]["2"]["eligible"] is True
    assert doc["capacities"]["2"] == 33


def test_burst_table_says_who_and_why() -> None:
    result = run("burst", "-n", "3", "-r", "50", "--history", CASE3)
    assert result.exit_code == 0, result.output
    assert "priority 2 bursts by 4" in result.stdout
    assert "29 + 4 = 33" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["burst", "-n", "3", "-r", "50", "--history", '{"2":[29,'], "--history is not valid JSON"),
        (["burst", "-n", "3", "-r", "50", "--history", "[1, 2]"], "--history must be a JSON object"),
        (["burst", "-n", "3", "-r", "50", "--history", '{"7":[1]}'], "priority 7, outside 0..2"),
        (["burst", "-n", "3", "-r", "50", "--history", '{"x":[1]}'], "key 'x' is not a priority"),
        (["burst", "-n", "3", "-r", "50", "--history", '{"1":[-1]}'], "list of drained counts >= 0"),
        (["burst", "-n", "3", "-r", "50", "--history", "{}", "--threshold", "7"], "threshold must be within 1..window size 6"),
        (["burst", "-n", "3", "-r", "5", "--history", "{}"], "need at least 2^3 - 1 = 7"),
        (["quota", "-n", "3", "-r", "2"], "2 records cannot be split exponentially over 3 priorities"),
        (["quota", "-n", "0", "-r", "2"], "Invalid value for '--priorities' / '-n': Input should be greater than or equal to 1"),
        (["quota", "-n", "1000000", "-r", "2"], "Input should be less than or equal to 16"),
    ],
    ids=["bad-json", "not-object", "unknown-priority", "bad-key", "negative-count", "bad-threshold",
         "burst-too-small", "quota-too-small", "no-priorities", "too-many-priorities"],
)
def test_errors_are_one_clear_line(args: list[str], message: str) -> None:
    result = run(*args)
    # A budget the split cannot serve is the quota rule's error (exit 1); everything else is the command line (2).
    assert result.exit_code == (1 if "quota_invalid" in result.stderr else 2), result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kprio: error: "), result.stderr
    assert message in lines[0]
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", ["quota", "burst"])
def test_help_has_an_example(command: str) -> None:
    result = run(command, "--help")
    assert result.exit_code == 0
    assert f"kprio {command} " in result.stdout and "Example" in result.stdout
    assert "--priorities" in result.stdout and "--max-priority" not in result.stdout, "the old name is hidden"


@pytest.mark.parametrize("old", [["--max-priority", "3"], ["--max-priority=3"]])
def test_the_deprecated_max_priority_still_works_and_says_so(old: list[str]) -> None:
    result = run("burst", *old, "-r", "50", "--history", CASE3, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["capacities"] == {"2": 33, "1": 14, "0": 7}
    assert "--max-priority is deprecated" in result.stderr and "--priorities" in result.stderr
