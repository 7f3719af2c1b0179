"""Every mistake in a configuration's shape, its sections' values, its paths and URLs, and on the command line gets
one line: the table of test_cli_errors.py (see there), its rows for the classes a sweep of new inputs found (YAML
types where others go, booleans as numbers, numbers beyond any use, paths kprio would take literally, passwords hidden
inside a URL's other parts, values Spark, libpq or cron would refuse later, empty and out-of-range arguments), run by
the same machinery (:mod:`tests.orchestration.cli_cases`).
"""

from __future__ import annotations

import pytest

from tests.orchestration.cli_cases import URL_SECRET, C, Case, Ran, assert_one_line, run_all
from tests.orchestration.test_cli_errors import rotating


def section(name: str, **values: object) -> dict:
    return {"config": {name: values}}


SHAPES = rotating([
    ("shape topics null", "topics: must be a list, not nothing (null)", "config_invalid", "a section left empty",
     {"config": {"topics": None}}),
    ("shape topics a mapping", "topics: must be a list, not a mapping", "config_invalid", "one topic without the dash",
     {"config_text": "topics: {name: orders}\n"}),
    ("shape topic a string", "topics.0: must be a mapping of settings, not a string", "config_invalid",
     "pydantic said 'a valid dictionary or instance of TopicSettings', a class the user never wrote",
     {"config_text": "topics: [orders]\n"}),
    ("shape section a list", "planner: must be a mapping of settings, not a list", "config_invalid",
     "a list where a section goes", {"config_text": "planner: [1, 2]\n"}),
    ("shape binary", "planner: must be a mapping of settings", "config_invalid", "a !!binary value",
     {"config_text": "planner: !!binary aGVsbG8=\n"}),
    ("shape python tag", "kprio.yaml line 1", "config_invalid", "a !!python tag: refused by the safe loader",
     {"config_text": "planner: !!python/object:os.system {}\n"}),
    ("shape two documents", "kprio.yaml line 2", "config_invalid", "a second YAML document",
     {"config_text": "planner: {}\n---\nplanner: {}\n"}),
    ("shape UTF-16", "kprio.yaml", "config_invalid", "saved as UTF-16 by an editor",
     {"config_text": "planner: {}\n".encode("utf-16")}),
    ("shape a number key", "1: Keys should be strings", "config_invalid", "a key that is a number",
     {"config_text": "1: 2\n"}),
    ("shape a list key", "kprio.yaml line 1", "config_invalid", "a key that is a list", {"config_text": "? [a, b]\n: 1\n"}),
    ("shape spark conf null", "spark.conf: must be a mapping, not nothing (null)", "config_invalid", "conf: left empty",
     section("spark", conf=None)),
    ("shape ledger url null", "ledger.url: must be a string, not nothing (null)", "config_invalid", "url: left empty",
     section("ledger", url=None)),
    ("shape ledger url a number", "ledger.url: must be a string, not a number", "config_invalid", "a number",
     section("ledger", url=5)),
    ("shape topic name a number", "topics.0.name: must be a string, not a number: put it in quotes", "config_invalid",
     "a bare number",
     {"config": {"topics": [{"name": 42}]}}),
    ("shape replay start a number", "drain.replay_start: must be a string", "config_invalid", "an unquoted date number",
     section("drain", replay_start=20260101)),
    ("shape drain a word", "drain: must be a mapping of settings, not a string", "config_invalid",
     "drain: parquet for drain.format", {"config_text": "drain: parquet\n"}),
    ("shape registry a URL alone", "schema_registry: must be a mapping of settings, not a string", "config_invalid",
     "the URL where the section goes", {"config_text": "schema_registry: http://127.0.0.1:8081\n"}),
    ("shape quota key a word", "rate.quotas.high", "config_invalid", "a priority named by a word",
     {"config": {"rate": {"quotas": {"high": {"records_per_s": 5}}}}}),
])

NUMBERS = rotating([
    ("number priorities yes", "topics.0.priorities: is a boolean (true), not a number", "config_invalid",
     "YAML's yes was read as 1 priority", {"config_text": "topics: [{name: orders, priorities: yes}]\n"}),
    ("number sensor interval true", "sensor.interval_s: is a boolean", "config_invalid", "true as 1 s",
     section("sensor", interval_s=True)),
    ("number lanes on", "ordering.lanes: is a boolean", "config_invalid", "on as 1 lane",
     {"config_text": "ordering: {mode: key, lanes: on}\n"}),
    ("number max age false", "slo.max_age_s: is a boolean", "config_invalid", "a boolean inside a mapping of numbers",
     {"config": {"slo": {"max_age_s": {1: False}}}}),
    ("number priorities huge", "topics.0.priorities: 1e+40 does not fit a 64-bit integer", "config_invalid",
     "beyond any integer", {"config": {"topics": [{"name": "orders", "priorities": 10**40}]}}),
    ("number fetch bytes huge", "spark.fetch_max_bytes", "config_invalid", "1e20 bytes",
     section("spark", fetch_max_bytes=10**20)),
    ("number budget huge", "planner.record_budget", "config_invalid", "a budget beyond 64 bits",
     section("planner", record_budget=10**30)),
    ("number budget huge in exponent form", "planner.record_budget: 1e+30 does not fit a 64-bit integer",
     "config_invalid", "pydantic's 'Unable to parse input string as an integer': the user wrote a number",
     {"config_text": "planner: {record_budget: 1.0e+30}\n"}),
    ("number exponent without a dot", "spark.fetch_max_bytes: 1e+20 does not fit a 64-bit integer", "config_invalid",
     "1e20 is a number in YAML 1.2; PyYAML read it as text, 'unable to parse string as an integer'",
     {"config_text": "spark: {fetch_max_bytes: 1e20}\n"}),
    ("number rate window huge", "rate.window_s: 1e+300 s is longer than a year", "config_invalid",
     "the reported internal error: OverflowError, Python int too large to convert to C int",
     section("rate", window_s=1e300)),
    ("number lease huge", "recovery.lease_s", "config_invalid", "a lease of 1e300 s", section("recovery", lease_s=1e300)),
    ("number backoff huge", "recovery.backoff_max_s", "config_invalid", "a backoff of 1e12 s",
     section("recovery", backoff_max_s=1e12)),
    ("backoff max below start", "recovery: backoff_max_s (1) is shorter than backoff_s (100)", "config_invalid",
     "a longest wait shorter than the first", section("recovery", backoff_s=100, backoff_max_s=1)),
    ("number retention huge", "drain.maintenance.retention_s", "config_invalid", "inside a nested section",
     {"config": {"drain": {"maintenance": {"retention_s": 1e15}}}}),
    ("number watch huge", "sensor.watch_s", "config_invalid", "an optional duration",
     section("sensor", watch_s=1e12)),
    ("number max age huge", "slo.max_age_s", "config_invalid", "a duration inside a mapping",
     {"config": {"slo": {"max_age_s": {1: 1e12}}}}),
    ("number registry timeout bool", "schema_registry.timeout_s: is a boolean", "config_invalid", "in an optional section",
     section("schema_registry", url="http://127.0.0.1:1", timeout_s=True)),
])

PATHS = rotating([
    ("path output tilde", "drain.output_path: starts with '~'", "config_invalid",
     "kprio would make a directory named ~ in the working directory", section("drain", output_path="~/kprio-out")),
    ("path dead letters variable", "drain.dead_letter_path: holds $HOME", "config_invalid", "a $VARIABLE taken literally",
     section("drain", dead_letter_path="$HOME/dead")),
    ("path replay braced variable", "drain.replay_path: holds ${DATA}", "config_invalid", "${VARIABLE}",
     section("drain", replay_path="${DATA}/replay")),
    ("path connect dir tilde", "spark.connect_dir: starts with '~'", "config_invalid", "spark status reported "
     "'stopped (dir .../cwd/~/x)'", section("spark", connect_dir="~/x")),
    ("path output scheme", "drain.output_path: bogus:// is no file system", "config_invalid",
     "a scheme no writer has, accepted in silence", section("drain", output_path="bogus://x/y")),
    ("path ledger tilde", "ledger.url: starts with '~'", "config_invalid", "SQLite does not expand ~",
     section("ledger", url="sqlite:///~/kprio-ledger.db")),
    ("path ledger variable", "ledger.url: holds $HOME", "config_invalid", "nor $HOME",
     section("ledger", url="sqlite:///$HOME/kprio-ledger.db")),
    ("path registry ca missing", "schema_registry.ssl_ca_location: '{tmp}/no-ca.pem'", "config_invalid",
     "accepted in silence, found on the first request", section("schema_registry", url="https://127.0.0.1:1",
                                                                ssl_ca_location="{tmp}/no-ca.pem")),
    ("path registry key not PEM", "schema_registry.ssl_key_location", "config_invalid", "a key that is no PEM",
     {**section("schema_registry", url="https://127.0.0.1:1", ssl_key_location="{tmp}/k.pem"),
      "files": {"k.pem": "not a key"}}),
])

LEDGER = rotating([
    ("ledger password percent-encoded", "ledger.url: holds a password", "config_invalid", "%70 for p",
     section("ledger", url=f"postgresql://u:%70{URL_SECRET}@127.0.0.1:1/db")),
    ("ledger password without user", "ledger.url: holds a password", "config_invalid", "user info ':pw@'",
     section("ledger", url=f"postgresql://:{URL_SECRET}@127.0.0.1:1/db")),
    ("ledger password beside user parameter", "ledger.url: holds a password", "config_invalid", "?user=u&password=",
     section("ledger", url=f"postgresql://127.0.0.1:1/db?user=u&password={URL_SECRET}")),
    ("ledger password parameter capitalised", "ledger.url: holds a password", "config_invalid", "?PassWord=",
     section("ledger", url=f"postgresql+psycopg://u@127.0.0.1:1/db?PassWord={URL_SECRET}")),
    ("ledger password inside options", "ledger.url: holds a password", "config_invalid",
     "?options=-c password=...: accepted, then echoed whole in the ledger_unavailable line",
     section("ledger", url=f"postgresql://u@127.0.0.1:1/db?options=-c%20password%3D{URL_SECRET}")),
    ("ledger password inside the database", "ledger.url: holds a password", "config_invalid",
     "a libpq connection string as the database name: accepted, then echoed whole",
     section("ledger", url=f"postgresql://u@127.0.0.1:1/dbname=x password={URL_SECRET}")),
    ("ledger password twice", "ledger.url: holds a password", "config_invalid", "?password= twice",
     section("ledger", url=f"postgresql://u@127.0.0.1:1/db?password={URL_SECRET}&password={URL_SECRET}")),
    ("ledger socket host password", "ledger.url: holds a password", "config_invalid", "a socket directory as host",
     section("ledger", url=f"postgresql:///db?host=/tmp&password={URL_SECRET}")),
    ("ledger unknown parameter", "ledger.url: bogus is no connection parameter", "config_invalid",
     "the reported internal error: psycopg's ProgrammingError 'invalid connection option'",
     section("ledger", url="postgresql+psycopg://u@127.0.0.1:1/db?bogus=1")),
    ("ledger sslmode bogus", "ledger.url: sslmode=bogus", "config_invalid",
     "was 'the ledger database does not answer' (ledger_unavailable)",
     section("ledger", url="postgresql+psycopg://u@127.0.0.1:1/db?sslmode=bogus")),
    ("ledger in memory", "ledger.url: 'sqlite://' is a SQLite database in memory", "config_invalid",
     "every batch forgotten when the command ends", section("ledger", url="sqlite://")),
    ("ledger memory named", "ledger.url: 'sqlite:///:memory:'", "config_invalid", "the other spelling",
     section("ledger", url="sqlite:///:memory:")),
])

VALUES = rotating([
    ("spark local zero threads", "spark.master: 'local[0]'", "config_invalid", "accepted; Spark refuses 0 threads",
     section("spark", master="local[0]")),
    ("spark local zero with retries", "spark.master: 'local[0,3]'", "config_invalid", "local[N,F] with N 0",
     section("spark", master="local[0,3]")),
    ("spark local-cluster zero", "spark.master: 'local-cluster[0,1,1024]'", "config_invalid", "no worker",
     section("spark", master="local-cluster[0,1,1024]")),
    ("spark standalone port", "spark.master: 'spark://h:99999'", "config_invalid", "a port beyond 65535",
     section("spark", master="spark://h:99999")),
    ("spark standalone no port", "spark.master: 'spark://h'", "config_invalid", "Spark needs the port",
     section("spark", master="spark://h")),
    ("spark conf master", "spark.conf.spark.master: set spark.master", "config_invalid",
     "a second master beside spark.master", section("spark", conf={"spark.master": "local[2]"})),
    ("spark conf password", "spark.conf.spark.ssl.keyPassword: is a credential", "config_invalid",
     "a password in the file", section("spark", conf={"spark.ssl.keyPassword": URL_SECRET})),
    ("registry token in query", "schema_registry.url: holds a credential in its query", "config_invalid",
     "?token= in the registry URL", section("schema_registry", url=f"http://127.0.0.1:1/?token={URL_SECRET}")),
    ("path output ftp", "drain.output_path: ftp:// is no file system", "config_invalid", "ftp://",
     section("drain", output_path="ftp://h/out")),
    ("cron empty", "drain.maintenance.schedule", "config_invalid", "an empty schedule",
     {"config": {"drain": {"maintenance": {"schedule": ""}}}}),
    ("spark remote port beyond", "spark.remote", "config_invalid", "sc://h:99999",
     section("spark", remote="sc://h:99999")),
    ("topics share a Kafka topic", "topics: topics 'a' and 'b' both have the priority topic 'x-0'", "config_invalid",
     "two logical topics whose templates make the same names: drained twice",
     {"config": {"topics": [{"name": "a", "topic_template": "x-{priority}"},
                            {"name": "b", "topic_template": "x-{priority}"}]}}),
    ("topics share a group", "topics: topics 'a' and 'b' both have the consumer group 'g-0'", "config_invalid",
     "one group base for two logical topics: their commits would overwrite each other",
     {"config": {"topics": [{"name": "a", "group": "g"}, {"name": "b", "group": "g"}]}}),
    ("cron in words", "drain.maintenance.schedule: 'every hour' is not a cron schedule", "config_invalid",
     "accepted; the Dagster definitions would not load", {"config": {"drain": {"maintenance": {"schedule": "every hour"}}}}),
    ("cron six fields", "drain.maintenance.schedule", "config_invalid", "seconds: a field neither Dagster nor Airflow has",
     {"config": {"drain": {"maintenance": {"schedule": "0 0 * * * *"}}}}),
])

ARGUMENTS = [
    C("empty config option", ("plan", "--config", ""), "--config", "usage", "was 'is a directory (.)'", exit=2,
      with_config=False, read_only=True),
    C("empty config option with equals", ("lag", "--config="), "--config", "usage", "the --opt= form", exit=2,
      with_config=False, read_only=True),
    C("empty dags folder", ("airflow", "init", "--no-pool", "--dags-folder", ""), "--dags-folder", "usage",
      "wrote kprio_dags.py into the working directory", exit=2, read_only=True),
    C("empty home", ("instance", "init", "--home", ""), "--home", "usage", "wrote dagster.yaml into the working "
      "directory", exit=2, read_only=True),
    C("empty data dir", ("broker", "status", "--data-dir", ""), "--data-dir", "usage", "the working directory",
      exit=2, with_config=False, read_only=True),
    C("empty topic", ("plan", "--topic", ""), "--topic", "usage", "an empty topic", exit=2, read_only=True),
    C("empty log file", ("--log-file", "", "quota", "-n", "3", "-r", "50"), "--log-file", "usage",
      "before the command", exit=2, with_config=False, read_only=True),
    C("simulate ticks huge", "simulate --trace steady --ticks 99999999999", "kprio simulate", "usage",
      "ran for minutes", exit=2, with_config=False, read_only=True),
    C("lag interval huge", "lag --watch --interval 1e30 --iterations 2", "kprio lag", "usage",
      "a sleep that overflows", exit=2, read_only=True),
    C("metrics interval huge", "metrics --interval 1e30", "kprio metrics", "usage", "the same for metrics", exit=2,
      read_only=True),
    C("reset partition beyond 32 bits", "reset orders-2[99999999999999999999] --to earliest", "PARTITION of kprio reset",
      "usage", "a partition number Kafka cannot have", exit=2, read_only=True),
    C("reset offset beyond 64 bits", "reset orders-2[0] --to 99999999999999999999999", "--to of kprio reset", "usage",
      "an offset Kafka cannot have", exit=2, read_only=True),
    C("broker security unknown", "broker start --security bogus", "kprio broker start", "usage",
      "pydantic's 'Value error, ' prefix", exit=2, with_config=False, read_only=True),
    C("instance url options password", ("instance", "show", "--postgres-url",
      f"postgresql://u@h/db?options=-c%20password%3D{URL_SECRET}"), "--postgres-url", "usage",
      "printed whole as a parameter of the storage", exit=2, read_only=True),
    C("instance url database password", ("instance", "show", "--postgres-url",
      f"postgresql://u@h/dbname=x password={URL_SECRET}"), "--postgres-url", "usage",
      "printed whole as the database name", exit=2, read_only=True),
    C("instance init url options password", ("instance", "init", "--home", "{tmp}/home", "--postgres-url",
      f"postgresql://u@127.0.0.1:1/db?options=-c%20password%3D{URL_SECRET}"), "--postgres-url", "usage",
      "nothing written", exit=2, read_only=True),
    C("empty batch id", ("retry", ""), "BATCH_ID of kprio retry", "usage", "an empty argument", exit=2,
      read_only=True),
    C("empty plot path", ("simulate", "--trace", "steady", "--plot", ""), "--plot", "usage",
      "a plot into the working directory", exit=2, with_config=False, read_only=True),
    C("empty metrics host", ("metrics", "--host", ""), "--host", "usage", "an empty address", exit=2, read_only=True),
    C("empty dead letters batch", ("dead-letters", "--batch", ""), "--batch", "usage", "an empty batch id", exit=2,
      read_only=True),
    C("broker data dir a device", "broker stop --data-dir /dev/null", "--data-dir /dev/null", "path_unusable",
      "a device as a directory", with_config=False, read_only=True),
    C("dags folder a device", "airflow init --no-pool --dags-folder /dev/null", "--dags-folder /dev/null",
      "path_unusable", "a device as the dags folder", read_only=True),
    C("instance home a device", "instance init --home /dev/null", "--home /dev/null", "path_unusable",
      "a device as the home", read_only=True),
    C("instance password variable not a name", ("instance", "show", "--postgres-url", "postgresql://u@h/db",
      "--postgres-password-env", "1 bad"), "--postgres-password-env", "usage", "written into dagster.yaml as is",
      exit=2, read_only=True),
    C("help of a command", "plan --help", "", None, "--help still works beside the boundary", with_config=False,
      read_only=True),
    C("help of a subcommand", "broker start --help", "", None, "and of a subcommand", with_config=False, read_only=True),
]

CASES = [*SHAPES, *NUMBERS, *PATHS, *LEDGER, *VALUES, *ARGUMENTS]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """Every case of this module run once (:func:`tests.orchestration.cli_cases.run_all`)."""
    return run_all(CASES, tmp_path_factory)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_bad_value_gives_one_line_naming_what_and_where(case: Case, ran: dict[str, Ran]) -> None:
    assert_one_line(case, ran)
