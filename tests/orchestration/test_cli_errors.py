"""Every mistake a user can make gets one line: a table of bad inputs over every ``kprio`` command.

Each case is run once as a real ``kprio`` process (so librdkafka's, the JVM's or py4j's writes to the
file descriptors are seen too), in a directory of its own, with secrets in the environment
(``SECRETS``) and a configuration whose broker and PostgreSQL ports are closed (nothing here needs a
broker, Spark or a database server). Every case asserts:

- the exit code (docs/operations.md, "Errors and exit codes": 1 a failure, 2 the command line);
- a failure is exactly one line on stderr, ``kprio: error: <what> (<where>) [<code>]``, its code the
  case's, naming the setting, option, file, path or variable the case got wrong, and nothing on stdout;
- no secret appears in the output or in any file the command left (a success case checks that too);
- a command that only reads leaves the file system as it found it (every file and directory under
  the case's directory, its working directory and its Dagster home among them, with sizes and times).

The cases are grouped by kind (configuration files, each section's values, environment variables,
ledger URLs, paths, command-line arguments); each says why it is there. A case's ``{tmp}`` is its
directory, ``{ro}`` a read-only file system (a tmpfs mounted read-only: root ignores permission bits).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.fixtures.small_disks import read_only_dir

SECRETS = {
    "KPRIO_KAFKA_SASL_PASSWORD": "sasl-SECRET-4711",
    "KPRIO_LEDGER_PASSWORD": "ledger-SECRET-4712",
    "KPRIO_DAGSTER_PG_PASSWORD": "dagster-SECRET-4713",
}
URL_SECRET = "url-SECRET-4714"
"""A password written into a URL on the command line or in a file: it must not come out either."""
ALL_SECRETS = [*SECRETS.values(), URL_SECRET]

LINE = re.compile(r"^kprio: error: (?P<what>.+) \((?P<where>.+)\) \[(?P<code>[a-z_]+)\]$")


def base_config() -> dict:
    """A whole configuration that loads, every path under the case's directory, nothing that answers."""
    return {
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "timeout_s": 1},
        "topics": [{"name": "orders", "priorities": 3, "partitions": 2}],
        "ledger": {"url": "sqlite:///{tmp}/data/ledger.db"},
        "drain": {"output_path": "{tmp}/data/output", "dead_letter_path": "{tmp}/data/dead",
                  "replay_path": "{tmp}/data/replay"},
        "spark": {"connect_dir": "{tmp}/data/connect"},
    }


def merged(base: dict, change: dict) -> dict:
    out = dict(base)
    for key, value in change.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@dataclass(frozen=True)
class Case:
    """One bad input: the command line, what is set up, and what must come out."""

    id: str
    argv: tuple[str, ...]
    names: str
    """What the error line must name (a setting, option, file, path or variable)."""
    code: str | None
    """The error's code; None for a case that must succeed (it checks secrets and writes only)."""
    why: str
    exit: int = 1
    config: dict | None = None
    """Changes to the base configuration (written to {tmp}/kprio.yaml and passed as --config)."""
    config_text: str | bytes | None = None
    """The whole configuration file instead (raw: bad YAML, bytes that are not UTF-8)."""
    files: dict[str, str | bytes] = field(default_factory=dict)
    """Files to make first, relative to the case's directory."""
    env: dict[str, str] = field(default_factory=dict)
    read_only: bool = False
    """The command only reads: the file system must be unchanged."""
    with_config: bool = True
    """Pass --config {tmp}/kprio.yaml (commands without --config say False)."""
    needs: str | None = None
    """'ro': the case uses the read-only file system; 'ledger': a ledger is made first."""


def C(id: str, argv: str | tuple[str, ...], names: str, code: str | None, why: str, **kw) -> Case:  # noqa: N802
    return Case(id, tuple(argv.split()) if isinstance(argv, str) else argv, names, code, why, **kw)


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
    C("dead letters of no batch, no ledger", "dead-letters --batch b-999999", "ledger.url", "batch_not_found",
      "the reported exit 0 for a batch that does not exist", read_only=True),
    C("dead letters of no batch", "dead-letters --batch b-999999", "b-999999", "batch_not_found",
      "a ledger that does not know the batch", read_only=True, needs="ledger"),
    C("log file under a file", "--log-file {tmp}/afile/kprio.log quota -n 3 -r 50", "--log-file {tmp}/afile/kprio.log",
      "path_unusable", "a log file where none can be", files={"afile": "x"}, with_config=False, read_only=True),
]

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

CASES = [*CONFIG_FILES, *LEDGER_URLS, *ENVIRONMENT, *PATHS, *ARGUMENTS, *SECRETS_OUT]


def test_the_table_covers_every_command_and_names_why() -> None:
    from tests.orchestration.test_cli_common import LEAVES

    run = {" ".join(a for a in case.argv if not a.startswith("-") and "{" not in a and "/" not in a)
           for case in CASES}
    missing = [" ".join(path) for path, _ in LEAVES if not any(r.startswith(" ".join(path)) for r in run)]
    assert not missing, f"no bad input for: {missing}"
    assert len({case.id for case in CASES}) == len(CASES), "case ids are unique"
    assert all(len(case.why) > 5 for case in CASES)


# --------------------------------------------------------------------------------------- running the table


@dataclass
class Ran:
    case: Case
    tmp: Path
    ro: Path | None
    returncode: int
    stdout: str
    stderr: str
    before: dict[str, tuple]
    after: dict[str, tuple]


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under ``root``: its kind, size and modification time."""
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        out[str(path.relative_to(root))] = (path.is_dir(), st.st_size if path.is_file() else 0, st.st_mtime_ns)
    return out


def fill(text: str, tmp: Path, ro: Path | None) -> str:
    return text.replace("{tmp}", str(tmp)).replace("{ro}", str(ro))


def prepare(case: Case, tmp: Path, ro: Path | None) -> tuple[list[str], dict[str, str]]:
    tmp.mkdir(parents=True)
    (tmp / "cwd").mkdir()
    for name, content in case.files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)  # type: ignore[operator]
    config = tmp / "kprio.yaml"
    if case.config_text is not None:
        content = case.config_text
        (config.write_bytes if isinstance(content, bytes) else config.write_text)(content)  # type: ignore[operator]
    else:
        text = yaml.safe_dump(merged(base_config(), case.config or {}), sort_keys=False)
        config.write_text(fill(text, tmp, ro))
    if case.needs == "ledger":
        from kprio_core.ledger import Ledger

        Ledger(f"sqlite:///{tmp}/data/ledger.db").close()
    argv = [fill(a, tmp, ro) for a in case.argv]
    if case.with_config:
        argv += ["--config", str(config)]
    elif case.id.startswith("config "):  # a case whose --config is the bad path itself
        argv += ["--config", fill(case.names, tmp, ro)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KPRIO_", "DAGSTER_"))}
    env.update(SECRETS, DAGSTER_HOME=str(tmp / "dagster_home"), COLUMNS="200")
    env.update({k: fill(v, tmp, ro) for k, v in case.env.items()})
    return argv, env


def run_case(case: Case, tmp: Path, ro: Path | None) -> Ran:
    argv, env = prepare(case, tmp, ro)
    before = snapshot(tmp)
    done = subprocess.run([sys.executable, "-m", "orchestration.cli", *argv], cwd=tmp / "cwd", env=env,
                          capture_output=True, text=True, timeout=120)
    return Ran(case, tmp, ro, done.returncode, done.stdout, done.stderr, before, snapshot(tmp))


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """Every case run once, three at a time (most of a run is the interpreter starting); the cases on a read-only
    file system only where one can be mounted (else a start there would really start a broker)."""
    root = tmp_path_factory.mktemp("bad-inputs")
    with contextlib.ExitStack() as stack:
        try:
            ro: Path | None = stack.enter_context(read_only_dir(root / "read-only"))
        except pytest.skip.Exception:
            ro = None
        chosen = [(i, c) for i, c in enumerate(CASES) if c.needs != "ro" or ro is not None]
        with ThreadPoolExecutor(max_workers=3) as pool:
            runs = list(pool.map(lambda ic: run_case(ic[1], root / f"case-{ic[0]:03d}", ro), chosen))
    return {r.case.id: r for r in runs}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_bad_input_gives_one_line_naming_what_and_where(case: Case, ran: dict[str, Ran]) -> None:
    if case.id not in ran:
        pytest.skip("no read-only file system can be mounted here (it needs root with permission to mount)")
    r = ran[case.id]
    shown = f"exit {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    if case.code is None:
        assert r.returncode == 0 and not lines, shown
    else:
        assert r.returncode == case.exit, shown
        assert len(lines) == 1, shown
        found = LINE.match(lines[0])
        assert found, f"not 'kprio: error: <what> (<where>) [<code>]': {lines[0]}"
        assert found["code"] == case.code, shown
        assert fill(case.names, r.tmp, r.ro) in lines[0], f"the line does not name {case.names!r}: {lines[0]}"
        assert r.stdout == "", shown
    for secret in ALL_SECRETS:
        assert secret not in r.stdout + r.stderr, f"the output shows a secret:\n{shown}"
    for path in r.tmp.rglob("*"):
        if path.is_file():
            content = path.read_bytes()
            # The case's own kprio.yaml may hold the URL's secret: the case wrote it there, as the mistake.
            secrets = SECRETS.values() if path == r.tmp / "kprio.yaml" else ALL_SECRETS
            assert not any(s.encode() in content for s in secrets), f"{path} holds a secret"
    if case.read_only:
        changed = {k for k in r.before.keys() | r.after.keys() if r.before.get(k) != r.after.get(k)}
        assert not changed, f"a command that only reads (or failed before writing) changed {sorted(changed)}"
