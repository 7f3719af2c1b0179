"""Every mistake on the command line gets one line: the table of test_cli_errors.py (see there), its rows of
command-line arguments (unknown options, commands and values, values out of range, topics the configuration has
not) and of secrets in URLs given as arguments, run by the same machinery (:mod:`tests.orchestration.cli_cases`).
"""

from __future__ import annotations

import pytest

from tests.orchestration.cli_cases import URL_SECRET, C, Case, Ran, assert_one_line, run_all

ARGUMENTS = [
    C("unknown option", "plan --bogus", "kprio plan", "usage", "the reported five-line box", exit=2,
      with_config=False, read_only=True),
    C("unknown root option", "--bogus plan", "kprio", "usage", "before the command", exit=2, with_config=False,
      read_only=True),
    C("unknown command", "plna", "kprio", "usage", "a typo in the command", exit=2, with_config=False,
      read_only=True),
    C("unknown subcommand", "broker strat", "kprio broker", "usage", "a typo in the subcommand", exit=2,
      with_config=False, read_only=True),
    C("missing option", "quota -n 3", "kprio quota", "usage", "--max-records missing", exit=2, with_config=False,
      read_only=True),
    C("missing argument", "reset --to earliest", "kprio reset", "usage", "the partition missing", exit=2,
      read_only=True),
    C("option without value", "lag --topic", "kprio lag", "usage", "--topic at the end", exit=2, with_config=False,
      read_only=True),
    C("not a number", "quota -n three -r 50", "kprio quota", "usage", "text for a number", exit=2,
      with_config=False, read_only=True),
    C("priorities huge", "quota -n 1000000 -r 5", "kprio quota", "usage", "the reported int-digits traceback",
      exit=2, with_config=False, read_only=True),
    C("priorities zero", "burst -n 0 -r 5 --history {}", "kprio burst", "usage", "no priority at all", exit=2,
      with_config=False, read_only=True),
    C("budget zero", "quota -n 3 -r 0", "kprio quota", "usage", "no budget", exit=2, with_config=False,
      read_only=True),
    C("budget too small", "quota -n 3 -r 2", "", "quota_invalid", "the split's own rule (exit 1, not usage)",
      with_config=False, read_only=True),
    C("bad enum", "quota -n 3 -r 50 --mode fastest", "kprio quota", "usage", "a mode that does not exist", exit=2,
      with_config=False, read_only=True),
    C("history not JSON", ("burst", "-n", "3", "-r", "50", "--history", "{2: [1"), "--history", "usage",
      "a poll history that is no JSON", exit=2, with_config=False, read_only=True),
    C("history priority outside", ("burst", "-n", "3", "-r", "50", "--history", '{"9": [1]}'), "--history",
      "usage", "a priority the levels do not have", exit=2, with_config=False, read_only=True),
    C("threshold over window", ("burst", "-n", "3", "-r", "50", "--history", "{}", "--threshold", "9"),
      "kprio burst", "usage", "threshold larger than the window", exit=2, with_config=False, read_only=True),
    C("window zero", ("burst", "-n", "3", "-r", "50", "--history", "{}", "--window-size", "0"), "kprio burst",
      "usage", "an empty window", exit=2, with_config=False, read_only=True),
    C("simulate both traces", "simulate --trace steady --trace-file x.json", "kprio simulate", "usage",
      "two traces", exit=2, with_config=False, read_only=True),
    C("simulate unknown trace", "simulate --trace nope", "'nope'", "trace_invalid", "a trace that is not built in",
      with_config=False, read_only=True),
    C("simulate unknown policy", "simulate --trace steady --policy fifo", "--policy", "usage",
      "a policy that does not exist", exit=2, with_config=False, read_only=True),
    C("simulate ticks zero", "simulate --ticks 0", "kprio simulate", "usage", "no ticks", exit=2,
      with_config=False, read_only=True),
    C("reset bad partition", "reset orders-2 --to earliest", "PARTITION of kprio reset", "usage",
      "no [partition]", exit=2, read_only=True),
    C("reset bad target", "reset orders-2[0] --to yesterday", "--to of kprio reset", "usage",
      "neither earliest, latest nor an offset", exit=2, read_only=True),
    C("reset unknown topic", "reset payments-2[0] --to earliest", "PARTITION of kprio reset", "usage",
      "a partition of no configured priority topic", exit=2, read_only=True),
    C("spark timeout negative", "spark start --timeout -1", "kprio spark start", "usage", "a negative wait",
      exit=2, read_only=True),
    C("broker timeout zero", "broker stop --timeout 0", "kprio broker stop", "usage", "no time to stop",
      exit=2, with_config=False, read_only=True),
    C("retry not a batch id", "retry batch-7", "BATCH_ID of kprio retry", "usage", "a batch id is b-NNNNNN",
      exit=2, read_only=True),
    C("dead letters not a batch id", "dead-letters --batch 42", "--batch", "usage", "a batch id is b-NNNNNN",
      exit=2, read_only=True),
    C("dead letters negative limit", "dead-letters --limit -1", "kprio dead-letters", "usage",
      "a negative limit", exit=2, read_only=True),
    C("unknown topic [lag]", "lag --topic payments", "--topic", "usage", "a logical topic the configuration has "
      "not", exit=2, read_only=True),
    C("unknown topic [plan]", "plan --topic payments", "--topic", "usage", "the same for plan", exit=2,
      read_only=True),
    C("unknown topic [dead-letters]", "dead-letters --topic payments", "--topic", "usage", "and dead-letters",
      exit=2, read_only=True),
    C("unknown topic [drain]", "drain --topic payments", "--topic", "usage", "and drain", exit=2, read_only=True),
    C("unknown topic [tables maintain]", "tables maintain --topic payments", "--topic", "usage",
      "and tables maintain: before any table is opened", exit=2, read_only=True),
    C("unknown topic [topics verify]", "topics verify --topic payments", "--topic", "usage", "and topics",
      exit=2, read_only=True),
    C("broker port out of range", "broker start --port 70000", "kprio broker start", "usage", "port 70000",
      exit=2, with_config=False, read_only=True),
    C("broker nodes zero", "broker start --nodes 0", "kprio broker start", "usage", "a cluster of no node",
      exit=2, with_config=False, read_only=True),
    C("spark port zero", "spark start --port 0", "kprio spark start", "usage", "port 0 is no port", exit=2, read_only=True),
    C("drain max batches zero", "drain --max-batches 0", "kprio drain", "usage", "zero batches", exit=2,
      read_only=True),
    C("drain metrics port out of range", "drain --follow --metrics-port 70000", "kprio drain", "usage",
      "port 70000", exit=2, read_only=True),
    C("metrics port out of range", "metrics --port 70000", "kprio metrics", "usage", "port 70000", exit=2,
      read_only=True),
    C("lag watch and json", "lag --watch --json", "kprio lag", "usage", "a redrawn table is no JSON", exit=2,
      read_only=True),
    C("lag iterations without watch", "lag --iterations 2", "kprio lag", "usage", "redraws of no --watch",
      exit=2, read_only=True),
    C("demo records too few", "demo --records 3", "kprio demo", "usage", "fewer records than the demo needs",
      exit=2, with_config=False, read_only=True),
    C("demo bad format", "demo --format csv", "kprio demo", "usage", "an output format that does not exist",
      exit=2, with_config=False, read_only=True),
    C("demo bad cluster config", "demo", "kprio.yaml", "config_invalid", "the demo loads its --config before it "
      "starts anything", config={"kafka": {"timeout_s": "soon"}}, read_only=True),
    C("topics create unsized", "topics create", "kprio.yaml", "config_invalid",
      "partitions are needed to create topics", config={"topics": [{"name": "orders"}]}, read_only=True),
    C("instance both urls", ("instance", "show", "--postgres-url", "postgresql://u@h/db", "--postgres-url-env", "X"),
      "kprio instance", "usage", "two storages", exit=2, read_only=True),
    C("instance url not postgres", ("instance", "show", "--postgres-url", "mysql://u@h/db"), "--postgres-url",
      "usage", "another database", exit=2, read_only=True),
    C("instance url not a url", ("instance", "show", "--postgres-url", f"u:{URL_SECRET}@h/db"), "--postgres-url",
      "usage", "no scheme: the text is not echoed (it holds a password)", exit=2, read_only=True),
    C("instance url bad port", ("instance", "show", "--postgres-url", f"postgresql://u:{URL_SECRET}@h:x/db"),
      "--postgres-url", "usage", "a port that is no number", exit=2, read_only=True),
    C("instance url without database", ("instance", "show", "--postgres-url", "postgresql://u@h"), "--postgres-url",
      "usage", "no database", exit=2, read_only=True),
    C("instance url env unset", ("instance", "init", "--home", "{tmp}/home", "--postgres-url-env", "NO_SUCH_VAR"),
      "--postgres-url-env", "config_invalid", "a variable that holds no URL: nothing written", read_only=True),
]

SECRETS_OUT = [
    C("instance show url password parameter", ("instance", "show", "--postgres-url",
      f"postgresql://u@127.0.0.1:1/db?password={URL_SECRET}"), "", None, "the reported leak: printed under "
      "'No password is written here'", read_only=True),
    C("instance show url user info", ("instance", "show", "--postgres-url", f"postgresql://u:{URL_SECRET}@h/db"),
      "", None, "the password of the user info", read_only=True),
    C("instance init storage down", ("instance", "init", "--home", "{tmp}/home", "--postgres-url",
      f"postgresql://u:{URL_SECRET}@127.0.0.1:1/db?sslpassword={URL_SECRET}"), "--postgres-url",
      "dagster_storage_unavailable", "the reported wall of retries and the dagster.yaml left behind: one line, "
      "nothing written", read_only=True),
    C("instance init storage down, password from env", ("instance", "init", "--home", "{tmp}/home", "--postgres-url",
      "postgresql://u@127.0.0.1:1/db", "--postgres-password-env", "KPRIO_DAGSTER_PG_PASSWORD"), "--postgres-url",
      "dagster_storage_unavailable", "the password from its variable, never shown", read_only=True),
    C("instance init storage url env down", ("instance", "init", "--home", "{tmp}/home", "--postgres-url-env",
      "DAGSTER_PG_URL"), "--postgres-url-env DAGSTER_PG_URL", "dagster_storage_unavailable",
      "the whole URL from a variable", env={"DAGSTER_PG_URL": f"postgresql+psycopg2://u:{URL_SECRET}@127.0.0.1:1/db"},
      read_only=True),
]

CASES = [*ARGUMENTS, *SECRETS_OUT]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """Every case of this module run once (:func:`tests.orchestration.cli_cases.run_all`)."""
    return run_all(CASES, tmp_path_factory)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_bad_input_gives_one_line_naming_what_and_where(case: Case, ran: dict[str, Ran]) -> None:
    assert_one_line(case, ran)
