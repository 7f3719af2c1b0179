"""Every mistake a user can make gets one line: a table of bad inputs over every ``kprio`` command.

Each case is run once by a real ``kprio`` process (so librdkafka's, the JVM's or py4j's writes to the
file descriptors are seen too; the cases that fail on the configuration's load share one process, each with its
own file descriptors 1 and 2), in a directory of its own, with secrets in the environment
(``SECRETS``) and a configuration whose broker and PostgreSQL ports are closed (nothing here needs a
broker, Spark or a database server). Every case asserts:

- the exit code (docs/operations.md, "Errors and exit codes": 1 a failure, 2 the command line);
- a failure is exactly one line on stderr, ``kprio: error: <what> (<where>) [<code>]``, its code the
  case's, naming the setting, option, file, path or variable the case got wrong, and nothing on stdout;
- no secret appears in the output or in any file the command left (a success case checks that too);
- a command that only reads leaves the file system as it found it (every file and directory under
  the case's directory, its working directory and its Dagster home among them, with sizes and times).

The cases are grouped by kind (configuration files, each section's values, environment variables,
ledger URLs, paths; the command-line arguments are in test_cli_errors_arguments.py); each says why it is
there. A case's ``{tmp}`` is its directory, ``{ro}`` a read-only file system (a tmpfs mounted read-only: root
ignores permission bits). The machinery that runs and checks a case is :mod:`tests.orchestration.cli_cases`.
"""

from __future__ import annotations

import pytest

from tests.orchestration.cli_cases import URL_SECRET, C, Case, Ran, assert_one_line, run_all

READ_COMMANDS = ["plan", "lag", "dead-letters", "instance show", "spark status", "topics verify"]
"""Commands that take --config and only read: the configuration cases rotate over them (and ``drain``, which
loads the configuration before it writes anything), so each class of bad file meets several commands."""


def rotating(cases: list[tuple]) -> list[Case]:
    commands = [*READ_COMMANDS, "drain", "airflow init --no-pool --dags-folder {tmp}/dags", "instance init"]
    out = []
    for i, (id, names, code, why, kw) in enumerate(cases):
        command = commands[i % len(commands)]
        # Only the load fails, before any command writes: every one of them must leave the file system alone.
        out.append(C(f"{id} [{command.split(' --')[0]}]", command, names, code, why, read_only=True, **kw))
    return out


CONFIG_FILES = rotating([
    ("config not found", "{tmp}/missing.yaml", "config_invalid", "a --config that names no file",
     {"with_config": False, "files": {}}),
    ("config a directory", "{tmp}/confdir", "config_invalid", "a directory is not 'not found': it says what it is",
     {"files": {"confdir/x": ""}, "with_config": False}),
    ("config /dev/null", "/dev/null", "config_invalid", "a device is no configuration file", {"with_config": False}),
    ("config not UTF-8", "kprio.yaml", "config_invalid", "a Latin-1 file names the file and the byte",
     {"config_text": "topics:\n  - name: caf\xe9\n".encode("latin-1")}),
    ("config bad YAML", "kprio.yaml line 3", "config_invalid", "an unclosed bracket names file, line and column",
     {"config_text": "planner:\n  mode: [lag-aware\n"}),
    ("config tab indentation", "kprio.yaml line", "config_invalid", "YAML forbids tabs",
     {"config_text": "planner:\n\tmode: flipkart\n"}),
    ("config repeated top-level key", "kprio.yaml", "config_invalid", "the second `planner:` silently replaced "
     "the first", {"config_text": "planner: {record_budget: 10}\nplanner: {mode: flipkart}\n"}),
    ("config repeated nested key", "kprio.yaml", "config_invalid", "a repeated key inside a section",
     {"config_text": "drain:\n  format: delta\n  format: parquet\n"}),
    ("config a list", "kprio.yaml", "config_invalid", "the top level must be a mapping",
     {"config_text": "- planner\n- topics\n"}),
    ("config a scalar", "kprio.yaml", "config_invalid", "a file holding one word", {"config_text": "kprio\n"}),
    ("config unknown section", "kprio.yaml", "config_invalid", "a typo in a section name",
     {"config": {"planer": {"mode": "flipkart"}}}),
    ("config unknown key", "kprio.yaml", "config_invalid", "a typo in a key", {"config": {"planner": {"budget": 5}}}),
    ("config wrong type", "kprio.yaml", "config_invalid", "text where a number goes",
     {"config": {"planner": {"record_budget": "lots"}}}),
    ("config out of range", "kprio.yaml", "config_invalid", "a negative budget",
     {"config": {"planner": {"record_budget": -5}}}),
    ("config bad enum", "kprio.yaml", "config_invalid", "a mode that does not exist",
     {"config": {"planner": {"mode": "fastest"}}}),
    ("config section a scalar", "kprio.yaml", "config_invalid", "a section that is a number",
     {"config": {"kafka": 5}}),
    ("config nested client value", "kprio.yaml", "config_invalid", "a mapping as a client setting: one problem, "
     "not one per type of the union", {"config": {"kafka": {"client": {"socket.timeout.ms": {"a": 1}}}}}),
    ("config secret in file", "kprio.yaml", "config_invalid", "a SASL password written in the file",
     {"config": {"kafka": {"client": {"sasl.password": URL_SECRET}}}}),
    ("config secrets section", "kprio.yaml", "config_invalid", "kafka.secrets is filled from the environment only",
     {"config": {"kafka": {"secrets": {"ssl.key.password": URL_SECRET}}}}),
    ("config handler does not import", "kprio.yaml", "config_invalid", "drain.handler: nosuchmodule:fn",
     {"config": {"drain": {"handler": "nosuchmodule:fn"}}}),
    ("config handler no function", "kprio.yaml", "config_invalid", "a module without that function",
     {"config": {"drain": {"handler": "json:no_such_function"}}}),
    ("config handler signature", "kprio.yaml", "config_invalid", "a function that does not take (frames, context)",
     {"config": {"drain": {"handler": "json:dumps"}}}),
    ("config handler without module", "kprio.yaml", "config_invalid", "a function name alone",
     {"config": {"drain": {"handler": "decode_json"}}}),
    ("config replay start not a date", "kprio.yaml", "config_invalid", "drain.replay_start: yesterday",
     {"config": {"drain": {"replay_start": "yesterday"}}}),
    ("config replay start no such day", "kprio.yaml", "config_invalid", "February 30th",
     {"config": {"drain": {"replay_start": "2026-02-30"}}}),
    ("config replay start half hour", "kprio.yaml", "config_invalid", "replay hours start on the hour",
     {"config": {"drain": {"replay_start": "2026-02-03-04:30"}}}),
    ("config quota of no priority", "kprio.yaml", "config_invalid", "rate.quotas keyed by a priority that does not "
     "exist", {"config": {"rate": {"quotas": {7: {"records_per_s": 5}}}}}),
    ("config quota negative priority", "kprio.yaml", "config_invalid", "priority -1",
     {"config": {"rate": {"quotas": {-1: {"records_per_s": 5}}}}}),
    ("config spark remote http", "kprio.yaml", "config_invalid", "spark.remote: http://x",
     {"config": {"spark": {"remote": "http://x"}}}),
    ("config spark remote token", "kprio.yaml", "config_invalid", "a Spark Connect token in the URL is a secret",
     {"config": {"spark": {"remote": f"sc://localhost:15002/;token={URL_SECRET}"}}}),
    ("config spark remote bad port", "kprio.yaml", "config_invalid", "sc://host:port with no number",
     {"config": {"spark": {"remote": "sc://localhost:port"}}}),
    ("config spark master bogus", "kprio.yaml", "config_invalid", "spark.master: bogus://x",
     {"config": {"spark": {"master": "bogus://x"}}}),
    ("config spark master local typo", "kprio.yaml", "config_invalid", "local[two]",
     {"config": {"spark": {"master": "local[two]"}}}),
    ("config topic name illegal", "kprio.yaml", "config_invalid", "a topic name Kafka cannot hold: or ders/x",
     {"config": {"topics": [{"name": "or ders/x"}]}}),
    ("config topic template illegal", "kprio.yaml", "config_invalid", "a template that makes illegal names",
     {"config": {"topics": [{"name": "orders", "topic_template": "{topic}:{priority}"}]}}),
    ("config topic template unknown field", "kprio.yaml", "config_invalid", "{prio} instead of {priority}",
     {"config": {"topics": [{"name": "orders", "topic_template": "{topic}-{prio}-{priority}"}]}}),
    ("config no topics", "kprio.yaml", "config_invalid", "an empty topic list", {"config": {"topics": []}}),
    ("config duplicate topics", "kprio.yaml", "config_invalid", "one logical topic twice",
     {"config": {"topics": [{"name": "a"}, {"name": "a"}]}}),
    ("config roots overlap", "kprio.yaml", "config_invalid", "dead letters inside the output",
     {"config": {"drain": {"dead_letter_path": "{tmp}/data/output/dead"}}}),
    ("config lanes without key mode", "kprio.yaml", "config_invalid", "ordering.lanes with partition mode",
     {"config": {"ordering": {"lanes": 4}}}),
    ("config too many priorities", "kprio.yaml", "config_invalid", "priorities: 1000",
     {"config": {"topics": [{"name": "orders", "priorities": 1000}]}}),
    ("config bootstrap port", "kprio.yaml", "config_invalid", "a broker whose port is no number: librdkafka would "
     "only time out", {"config": {"kafka": {"bootstrap_servers": "localhost:abc"}}}),
    ("config bootstrap empty", "kprio.yaml", "config_invalid", "no broker at all",
     {"config": {"kafka": {"bootstrap_servers": " , "}}}),
])

LEDGER_URLS = [
    C("ledger url with password", "plan", "kprio.yaml", "config_invalid", "user:pass@ in ledger.url",
      config={"ledger": {"url": f"postgresql://kprio:{URL_SECRET}@127.0.0.1:1/kprio"}}, read_only=True),
    C("ledger url password parameter", "lag", "kprio.yaml", "config_invalid", "?password= passed to the driver",
      config={"ledger": {"url": f"postgresql://kprio@127.0.0.1:1/kprio?password={URL_SECRET}"}}, read_only=True),
    C("ledger url sslpassword", "drain", "kprio.yaml", "config_invalid", "a driver's other password parameter",
      config={"ledger": {"url": f"postgresql+psycopg://kprio@127.0.0.1:1/kprio?sslpassword={URL_SECRET}"}},
      read_only=True),
    C("ledger url mysql with password", "plan", "kprio.yaml", "config_invalid", "the reported leak: "
      "mysql://u@127.0.0.1:1/db?password=... echoed whole",
      config={"ledger": {"url": f"mysql://u@127.0.0.1:1/db?password={URL_SECRET}"}}, read_only=True),
    C("ledger url mysql", "plan", "kprio.yaml", "config_invalid", "a database the ledger does not run on",
      config={"ledger": {"url": "mysql://u@127.0.0.1:1/db"}}, read_only=True),
    C("ledger url does not parse", "plan", "kprio.yaml", "config_invalid", "a ledger URL that is no URL",
      config={"ledger": {"url": "ledger.db"}}, read_only=True),
    C("ledger url bad port", "lag", "kprio.yaml", "config_invalid", "a port that is no number",
      config={"ledger": {"url": "postgresql://u@db:port/kprio"}}, read_only=True),
    C("ledger url unknown driver", "plan", "kprio.yaml", "config_invalid", "postgresql+nosuchdriver",
      config={"ledger": {"url": "postgresql+nosuchdriver://u@127.0.0.1:1/kprio"}}, read_only=True),
    C("ledger postgres down [plan]", "plan", "ledger.url postgresql+psycopg://kprio@127.0.0.1:1/kprio",
      "ledger_unavailable", "the most common production failure: the ledger's PostgreSQL is down",
      config={"ledger": {"url": "postgresql+psycopg://kprio@127.0.0.1:1/kprio"}}, read_only=True),
    C("ledger postgres down [lag]", "lag", "ledger.url postgresql+psycopg://kprio@127.0.0.1:1/kprio",
      "ledger_unavailable", "the same for kprio lag",
      config={"ledger": {"url": "postgresql+psycopg://kprio@127.0.0.1:1/kprio"}}, read_only=True),
    C("ledger postgres down psycopg2", "plan", "ledger.url postgresql+psycopg2://kprio@127.0.0.1:1/kprio",
      "ledger_unavailable", "the other driver's error maps the same",
      config={"ledger": {"url": "postgresql+psycopg2://kprio@127.0.0.1:1/kprio"}}, read_only=True),
    C("ledger postgres down [dead-letters --batch]", "dead-letters --batch b-000001",
      "ledger.url postgresql+psycopg://kprio@127.0.0.1:1/kprio", "ledger_unavailable",
      "asking the ledger whether a batch exists", config={"ledger": {"url": "postgresql+psycopg://kprio@127.0.0.1:1/kprio"}},
      read_only=True),
    C("ledger postgres down [reset]", "reset orders-2[0] --to earliest",
      "ledger.url postgresql+psycopg://kprio@127.0.0.1:1/kprio", "ledger_unavailable",
      "a person's decision needs the ledger: nothing is committed without it",
      config={"ledger": {"url": "postgresql+psycopg://kprio@127.0.0.1:1/kprio"}}, read_only=True),
    C("ledger under a file [plan]", "plan", "ledger.url sqlite:///{tmp}/afile/ledger.db", "path_unusable",
      "a SQLite path under a file", config={"ledger": {"url": "sqlite:///{tmp}/afile/ledger.db"}},
      files={"afile": "x"}, read_only=True),
    C("ledger under a file [lag]", "lag", "ledger.url sqlite:///{tmp}/afile/sub/ledger.db", "path_unusable",
      "deeper under a file", config={"ledger": {"url": "sqlite:///{tmp}/afile/sub/ledger.db"}}, files={"afile": "x"},
      read_only=True),
    C("ledger a directory [plan]", "plan", "ledger.url sqlite:///{tmp}/adir", "ledger_unusable",
      "a directory as the database", config={"ledger": {"url": "sqlite:///{tmp}/adir"}}, files={"adir/x": ""},
      read_only=True),
    C("ledger a text file [plan]", "plan", "ledger.url sqlite:///{tmp}/notes.txt", "ledger_unusable",
      "a text file as the database", config={"ledger": {"url": "sqlite:///{tmp}/notes.txt"}},
      files={"notes.txt": "not a database\n" * 100}, read_only=True),
    C("ledger a text file [lag]", "lag", "ledger.url sqlite:///{tmp}/notes.txt", "ledger_unusable",
      "the same for kprio lag", config={"ledger": {"url": "sqlite:///{tmp}/notes.txt"}},
      files={"notes.txt": "not a database\n" * 100}, read_only=True),
    C("ledger a text file [dead-letters --batch]", "dead-letters --batch b-000001",
      "ledger.url sqlite:///{tmp}/notes.txt", "ledger_unusable", "asking it for a batch",
      config={"ledger": {"url": "sqlite:///{tmp}/notes.txt"}}, files={"notes.txt": "x" * 200}, read_only=True),
    C("ledger in /proc [plan]", "plan", "127.0.0.1:1", "broker_unreachable", "a SQLite path where nothing can be "
      "made: plan reads no ledger (none exists), writes none, and says what it could not reach",
      config={"ledger": {"url": "sqlite:////proc/kprio/ledger.db"}}, read_only=True),
    C("ledger in a read-only directory [plan]", "plan", "127.0.0.1:1", "broker_unreachable",
      "no ledger yet on a read-only mount: plan creates none", config={"ledger": {"url": "sqlite:///{ro}/ledger.db"}},
      read_only=True, needs="ro"),
]

ENVIRONMENT = [
    C("env timeout garbage", "plan", "KPRIO_KAFKA_TIMEOUT_S in the environment", "config_invalid",
      "the reported case: blamed on the file", env={"KPRIO_KAFKA_TIMEOUT_S": "garbage"}, read_only=True),
    C("env timeout zero", "lag", "KPRIO_KAFKA_TIMEOUT_S in the environment", "config_invalid", "a timeout of 0 s",
      env={"KPRIO_KAFKA_TIMEOUT_S": "0"}, read_only=True),
    C("env isolation level as client setting", "plan", "KPRIO_KAFKA_ISOLATION_LEVEL in the environment",
      "config_invalid", "a client setting kprio owns", env={"KPRIO_KAFKA_ISOLATION_LEVEL": "read_uncommitted"},
      read_only=True),
    C("env bootstrap bad", "lag", "KPRIO_BOOTSTRAP_SERVERS in the environment", "config_invalid",
      "the override of kafka.bootstrap_servers named as such", env={"KPRIO_BOOTSTRAP_SERVERS": "broker-1:90x2"},
      read_only=True),
    C("env config missing", "plan", "KPRIO_CONFIG", "config_invalid", "KPRIO_CONFIG naming no file",
      env={"KPRIO_CONFIG": "{tmp}/nowhere.yaml"}, with_config=False, read_only=True),
    C("env config a directory", "lag", "KPRIO_CONFIG", "config_invalid", "KPRIO_CONFIG naming a directory",
      env={"KPRIO_CONFIG": "{tmp}"}, with_config=False, read_only=True),
    C("env log file under a file", "quota -n 3 -r 50", "KPRIO_LOG_FILE {tmp}/afile/kprio.log", "path_unusable",
      "KPRIO_LOG_FILE where no file can be", env={"KPRIO_LOG_FILE": "{tmp}/afile/kprio.log"}, files={"afile": "x"},
      with_config=False, read_only=True),
    C("env debug off", "plan", "kprio.yaml", "config_invalid", "KPRIO_DEBUG=0 is no debugging: one line",
      env={"KPRIO_DEBUG": "0"}, config={"planner": {"record_budget": 0}}, read_only=True),
]

PATHS = [
    C("airflow dags folder under a file", "airflow init --no-pool --dags-folder {tmp}/afile/dags",
      "--dags-folder {tmp}/afile/dags", "path_unusable", "the reported traceback", files={"afile": "x"}),
    C("airflow dags folder a file", "airflow init --no-pool --dags-folder {tmp}/afile", "--dags-folder {tmp}/afile",
      "path_unusable", "a file as the dags folder", files={"afile": "x"}),
    C("airflow dags folder in /proc", "airflow init --no-pool --dags-folder /proc/kprio-dags",
      "--dags-folder /proc/kprio-dags", "path_unusable", "a place where nothing can be made"),
    C("airflow dags folder read-only", "airflow init --no-pool --dags-folder {ro}/dags", "--dags-folder {ro}/dags",
      "path_unusable", "a read-only mount", needs="ro"),
    C("airflow foreign dag file", "airflow init --no-pool --dags-folder {tmp}/dags", "{tmp}/dags/kprio_dags.py",
      "file_exists", "a kprio_dags.py kprio did not write", files={"dags/kprio_dags.py": "# mine\n"},
      read_only=True),
    C("instance home under a file", "instance init --home {tmp}/afile/home", "--home {tmp}/afile/home",
      "path_unusable", "the reported traceback", files={"afile": "x"}),
    C("instance home a file", "instance init --home {tmp}/afile", "--home {tmp}/afile", "path_unusable",
      "a file as the home", files={"afile": "x"}),
    C("instance home in /proc", "instance init --home /proc/kprio-home", "--home /proc/kprio-home", "path_unusable",
      "a place where nothing can be made"),
    C("instance home read-only", "instance init --home {ro}/home", "--home {ro}/home", "path_unusable",
      "a read-only mount", needs="ro"),
    C("instance yaml exists", "instance init --home {tmp}/home", "{tmp}/home/dagster.yaml", "file_exists",
      "an existing dagster.yaml is kept", files={"home/dagster.yaml": "telemetry: {enabled: false}\n"},
      read_only=True),
    C("broker status data dir a file", "broker status --data-dir {tmp}/afile", "--data-dir {tmp}/afile",
      "path_unusable", "the reported traceback", files={"afile": "x"}, with_config=False, read_only=True),
    C("broker status under a file", "broker status --data-dir {tmp}/afile/b", "--data-dir {tmp}/afile/b",
      "path_unusable", "under a file", files={"afile": "x"}, with_config=False, read_only=True),
    C("broker stop data dir a file", "broker stop --data-dir {tmp}/afile", "--data-dir {tmp}/afile",
      "path_unusable", "stop is a read when nothing runs", files={"afile": "x"}, with_config=False, read_only=True),
    C("broker stop nothing there", "broker stop --data-dir {tmp}/nobroker", "", None,
      "the reported write: stop made a data dir that did not exist", with_config=False, read_only=True),
    C("broker status nothing there", "broker status --data-dir {tmp}/nobroker", "", None,
      "status of nothing: says stopped, makes nothing", with_config=False, read_only=True),
    C("broker start data dir a file", "broker start --data-dir {tmp}/afile", "--data-dir {tmp}/afile",
      "path_unusable", "before any JVM starts", files={"afile": "x"}, with_config=False, read_only=True),
    C("broker start under a file", "broker start --data-dir {tmp}/afile/b", "--data-dir {tmp}/afile/b",
      "path_unusable", "the reported traceback", files={"afile": "x"}, with_config=False, read_only=True),
    C("broker start in /proc", "broker start --data-dir /proc/kprio-broker", "--data-dir /proc/kprio-broker",
      "path_unusable", "a place where nothing can be made", with_config=False, read_only=True),
    C("broker start read-only", "broker start --data-dir {ro}/broker", "--data-dir {ro}/broker", "path_unusable",
      "a read-only mount", with_config=False, needs="ro"),
    C("registry status data dir a file", "registry status --data-dir {tmp}/afile", "--data-dir {tmp}/afile",
      "path_unusable", "as the broker's", files={"afile": "x"}, with_config=False, read_only=True),
    C("registry stop data dir a file", "registry stop --data-dir {tmp}/afile", "--data-dir {tmp}/afile",
      "path_unusable", "stop is a read when nothing runs", files={"afile": "x"}, with_config=False, read_only=True),
    C("registry stop nothing there", "registry stop --data-dir {tmp}/noregistry", "", None,
      "stop of nothing makes no data dir", with_config=False, read_only=True),
    C("registry start under a file", "registry start --data-dir {tmp}/afile/b", "--data-dir {tmp}/afile/b",
      "path_unusable", "before any JVM starts", files={"afile": "x"}, with_config=False, read_only=True),
    C("spark status connect dir a file", "spark status", "spark.connect_dir {tmp}/afile", "path_unusable",
      "the reported traceback", config={"spark": {"connect_dir": "{tmp}/afile"}}, files={"afile": "x"},
      read_only=True),
    C("spark status under a file", "spark status", "spark.connect_dir {tmp}/afile/c", "path_unusable",
      "under a file", config={"spark": {"connect_dir": "{tmp}/afile/c"}}, files={"afile": "x"}, read_only=True),
    C("spark stop under a file", "spark stop", "spark.connect_dir {tmp}/afile/c", "path_unusable",
      "stop with nothing running", config={"spark": {"connect_dir": "{tmp}/afile/c"}}, files={"afile": "x"},
      read_only=True),
    C("spark status nothing there", "spark status", "", None, "status of nothing makes nothing", read_only=True),
    C("spark stop nothing there", "spark stop", "", None, "stop of nothing makes nothing", read_only=True),
    C("spark start connect dir a file", "spark start", "spark.connect_dir {tmp}/afile", "path_unusable",
      "before any JVM starts", config={"spark": {"connect_dir": "{tmp}/afile"}}, files={"afile": "x"},
      read_only=True),
    C("spark start in /proc", "spark start", "spark.connect_dir /proc/kprio-connect", "path_unusable",
      "a place where nothing can be made", config={"spark": {"connect_dir": "/proc/kprio-connect"}}),
    C("simulate plot into a directory", "simulate --trace steady --ticks 5 --plot {tmp}/plots", "--plot {tmp}/plots",
      "path_unusable", "the reported traceback", files={"plots/old.png": ""}, with_config=False, read_only=True),
    C("simulate plot under a file", "simulate --trace steady --ticks 5 --plot {tmp}/afile/p.png",
      "--plot {tmp}/afile/p.png", "path_unusable", "under a file", files={"afile": "x"}, with_config=False,
      read_only=True),
    C("simulate plot read-only", "simulate --trace steady --ticks 5 --plot {ro}/p.png", "--plot {ro}/p.png",
      "path_unusable", "a read-only mount", with_config=False, needs="ro"),
    C("simulate trace file missing", "simulate --trace-file {tmp}/nope.json", "{tmp}/nope.json", "trace_invalid",
      "a trace file that is not there", with_config=False, read_only=True),
    C("simulate trace file a directory", "simulate --trace-file {tmp}", "{tmp}", "trace_invalid",
      "a directory as the trace", with_config=False, read_only=True),
    C("simulate trace file not JSON", "simulate --trace-file {tmp}/t.json", "{tmp}/t.json", "trace_invalid",
      "a trace that is no JSON", files={"t.json": "{budget: 3"}, with_config=False, read_only=True),
    C("dead letters root a file", "dead-letters", "drain.dead_letter_path {tmp}/afile", "path_unusable",
      "the reported 'no dead letters'", config={"drain": {"dead_letter_path": "{tmp}/afile"}}, files={"afile": "x"},
      read_only=True),
    C("dead letters root under a file", "dead-letters", "drain.dead_letter_path {tmp}/afile/dead", "path_unusable",
      "under a file", config={"drain": {"dead_letter_path": "{tmp}/afile/dead"}}, files={"afile": "x"},
      read_only=True),
    C("tables root a file", "tables maintain", "drain.output_path", "path_unusable",
      "the reported 'nothing published' (exit 0) for an output root that is a file",
      config={"drain": {"format": "delta", "output_path": "{tmp}/afile"}}, files={"afile": "x"}, read_only=True),
    C("tables delta root holds parquet files", "tables maintain", "drain.format", "maintenance_failed",
      "the reported 'nothing published' (exit 0) for a Delta root that holds Parquet files: another format's output",
      config={"drain": {"format": "delta"}},
      files={"data/output/orders/priority=0/orders-0+0+0000000000+0000000010.parquet": "x"}, read_only=True),
    C("dead letters of no batch, no ledger", "dead-letters --batch b-999999", "ledger.url", "batch_not_found",
      "the reported exit 0 for a batch that does not exist", read_only=True),
    C("dead letters of no batch", "dead-letters --batch b-999999", "b-999999", "batch_not_found",
      "a ledger that does not know the batch", read_only=True, needs="ledger"),
    C("log file under a file", "--log-file {tmp}/afile/kprio.log quota -n 3 -r 50", "--log-file {tmp}/afile/kprio.log",
      "path_unusable", "a log file where none can be", files={"afile": "x"}, with_config=False, read_only=True),
]

CASES = [*CONFIG_FILES, *LEDGER_URLS, *ENVIRONMENT, *PATHS]


def test_the_table_covers_every_command_and_names_why() -> None:
    from tests.orchestration.test_cli_common import LEAVES
    from tests.orchestration.test_cli_errors_arguments import CASES as ARGUMENT_CASES

    table = [*CASES, *ARGUMENT_CASES]
    run = {" ".join(a for a in case.argv if not a.startswith("-") and "{" not in a and "/" not in a)
           for case in table}
    missing = [" ".join(path) for path, _ in LEAVES if not any(r.startswith(" ".join(path)) for r in run)]
    assert not missing, f"no bad input for: {missing}"
    assert len({case.id for case in table}) == len(table), "case ids are unique"
    assert all(len(case.why) > 5 for case in table)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """Every case of this module run once (:func:`tests.orchestration.cli_cases.run_all`)."""
    return run_all(CASES, tmp_path_factory)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_bad_input_gives_one_line_naming_what_and_where(case: Case, ran: dict[str, Ran]) -> None:
    assert_one_line(case, ran)
