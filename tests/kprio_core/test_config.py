"""kprio.yaml: where it is found, one clear message per bad file, templates and output roots, a file that is no
config. Environment overrides and secrets are in test_config_secrets.py; the ``in_tmp`` fixture is in conftest.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kprio_core.config import KprioConfig, config_path, load_config, parse_config
from kprio_core.errors import ConfigError
from tests.kprio_core.config_support import write

# --------------------------------------------------------------------------------- where from

def test_built_in_defaults_without_any_file(in_tmp: Path):
    assert config_path(None, env={}) is None
    cfg = load_config(env={})
    assert [t.name for t in cfg.topics] == ["demo"]
    assert cfg.kafka.bootstrap_servers == "127.0.0.1:9092"
    assert cfg.ledger.url == "sqlite:///./kprio-data/ledger.db"


@pytest.mark.parametrize(
    ("explicit", "env_file", "cwd_file", "winner", "why"),
    [
        (True, True, True, "explicit", "1. --config beats everything"),
        (False, True, True, "env", "2. $KPRIO_CONFIG beats ./kprio.yaml"),
        (False, False, True, "cwd", "3. ./kprio.yaml when nothing else is given"),
        (True, False, False, "explicit", "4. --config alone"),
    ],
)
def test_file_precedence(in_tmp: Path, explicit: bool, env_file: bool, cwd_file: bool, winner: str, why: str):
    files = {
        name: write(in_tmp / f"{name}.yaml", f"topics: [{{name: from-{name}}}]\n")
        for name in ("explicit", "env")
    }
    if cwd_file:
        write(in_tmp / "kprio.yaml", "topics: [{name: from-cwd}]\n")
    env = {"KPRIO_CONFIG": str(files["env"])} if env_file else {}
    cfg = load_config(files["explicit"] if explicit else None, env=env)
    assert [t.name for t in cfg.topics] == [f"from-{winner}"]


def test_a_missing_file_names_the_path(in_tmp: Path):
    with pytest.raises(ConfigError, match=r"^configuration file not found \(.*nowhere\.yaml, named by KPRIO_CONFIG\)$"):
        load_config(None, env={"KPRIO_CONFIG": str(in_tmp / "nowhere.yaml")})


def test_an_empty_file_means_defaults(in_tmp: Path):
    cfg = load_config(write(in_tmp / "empty.yaml", "# nothing yet\n"), env={})
    assert cfg == KprioConfig()


def test_a_full_file_is_read(in_tmp: Path):
    path = write(
        in_tmp / "kprio.yaml",
        """
kafka:
  bootstrap_servers: broker-1:9092,broker-2:9092
  client: {security.protocol: SASL_SSL, sasl.mechanism: PLAIN, sasl.username: kprio}
  timeout_s: 5
topics:
  - name: orders
    priorities: 4
    partitions: 6
    schema: {id: string, amount: double}
    required_fields: [id]
planner: {record_budget: 1000, byte_budget: null, mode: flipkart, window_size: 6, maxed_out_threshold: 4}
rate:
  quotas: {3: {records_per_s: 500}}
ordering: {mode: key, lanes: 8}
ledger: {url: "postgresql+psycopg://kprio@db/kprio"}
""",
    )
    cfg = load_config(path, env={"KPRIO_KAFKA_SASL_PASSWORD": "pw"})  # PLAIN logs in with a user and a password
    assert cfg.kafka.client_config() == {
        "bootstrap.servers": "broker-1:9092,broker-2:9092",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "kprio",
        "sasl.password": "pw",
    }
    orders = cfg.topic("orders")
    assert (orders.priorities, orders.partitions, orders.required_fields) == (4, 6, ("id",))
    assert orders.schema_ == {"id": "string", "amount": "double"}
    assert (cfg.planner.record_budget, cfg.planner.byte_budget, cfg.planner.mode) == (1000, None, "flipkart")
    assert cfg.rate.quotas[3].records_per_s == 500
    assert (cfg.ordering.mode, cfg.ordering.lanes) == ("key", 8)
    assert cfg.ledger.url.startswith("postgresql+psycopg://")
    with pytest.raises(ConfigError, match=r"no logical topic named 'payments' \(known: \['orders'\]\)"):
        cfg.topic("payments")


# --------------------------------------------------------------------------------- one message per bad file

BAD_FILES = [
    ("planner: {record_budget: lots}\n", "planner.record_budget: Input should be a valid integer", "wrong type"),
    ("planner: {burst: 3}\n", "planner.burst: Extra inputs are not permitted", "unknown key"),
    ("planner: {record_budget: -5}\n", "planner.record_budget: Input should be greater than or equal to 1", "negative budget"),
    ("planner: {byte_budget: 0}\n", "planner.byte_budget: Input should be greater than or equal to 1", "zero byte budget"),
    (
        "topics: [{name: orders, schema: {amount: double}, required_fields: [id]}]\n",
        "topics.0: required_fields ['id'] are not in the schema ['amount']",
        "required field not in the schema",
    ),
    (
        "planner: {window_size: 4, maxed_out_threshold: 5}\n",
        "planner: maxed_out_threshold (5) cannot exceed window_size (4)",
        "threshold larger than the window",
    ),
    ("topics: []\n", "topics: Tuple should have at least 1 item", "no topic at all"),
    ("topics: [{name: a}, {name: a}]\n", "logical topic names must be unique, repeated: ['a']", "duplicate topics"),
    ("ordering: {lanes: 4}\n", "ordering: ordering.lanes > 1 needs ordering.mode 'key'", "lanes without key mode"),
    ("rate: {quotas: {2: {records_per_s: 0}}}\n", "rate.quotas.2.records_per_s: Input should be greater than 0", "zero rate"),
    ("planner: {mode: fastest}\n", "planner.mode: Input should be 'lag-aware' or 'flipkart'", "unknown burst mode"),
    ("- just\n- a list\n", "the top level must be a mapping of sections, not a list", "not a mapping"),
    ("kafka: 5\n", "kafka: must be a mapping, not a number", "kafka section of the wrong type"),
    ("kafka: {client: [security.protocol]}\n", "kafka.client: must be a mapping, not a list", "client section of the wrong type"),
    # What can be checked at load is checked at load (docs/configuration.md), not on a broker or in a Spark task.
    ("drain: {handler: 'nosuchmodule:fn'}\n", "drain.handler: cannot import 'nosuchmodule'", "handler that does not import"),
    ("drain: {handler: 'json:dumps'}\n", "drain.handler: signature (obj, *, skipkeys=False, ...) does not accept "
     "(frames, context)", "handler of another signature"),
    ("drain: {handler: decode_json}\n", "drain.handler: expected 'module:function'", "handler without its module"),
    ("drain: {replay_start: yesterday}\n", "drain.replay_start: 'yesterday' is not a UTC hour", "replay start no date"),
    ("drain: {replay_start: '2026-02-30'}\n", "drain.replay_start: '2026-02-30' is not a UTC hour", "no such day"),
    ("rate: {quotas: {7: {records_per_s: 5}}}\n", "rate.quotas names priority 7, but the topics have priorities 0..2",
     "quota of a priority that does not exist"),
    ("spark: {remote: 'http://x'}\n", "spark.remote: is not a Spark Connect URL", "spark connect URL of another scheme"),
    ("spark: {remote: 'sc://x:port'}\n", "spark.remote: is not a Spark Connect URL: its port", "spark connect port"),
    ("spark: {master: 'bogus://x'}\n", "spark.master: 'bogus://x' is not a master URL Spark accepts", "bad master"),
    ("spark: {master: 'local[two]'}\n", "spark.master: 'local[two]' is not a master URL", "bad local master"),
    ("topics: [{name: 'or ders/x'}]\n", "topics.0: priority topic 'or ders/x-0' (topic_template '{topic}-{priority}') "
     "is not a legal Kafka topic name: only letters", "topic name Kafka cannot hold"),
    ("topics: [{name: orders, topic_template: '{topic}:{priority}'}]\n", "is not a legal Kafka topic name",
     "template making illegal names"),
    ("planner: {record_budget: 10}\nplanner: {mode: flipkart}\n", "key 'planner' is given twice (first on line 1)",
     "a repeated top-level key"),
    ("planner:\n  mode: flipkart\n  mode: lag-aware\n", "key 'mode' is given twice (first on line 2)",
     "a repeated nested key"),
    ("kafka: {client: {socket.timeout.ms: {a: 1}}}\n", "kafka.client.socket.timeout.ms: must be one of str, "
     "int, float, bool, not a mapping", "nested mapping as a client value: one problem"),
    ("ledger: {url: 'mysql://u@127.0.0.1:1/db'}\n", "ledger.url: the batch ledger runs on SQLite or PostgreSQL, "
     "not mysql", "ledger of another database"),
    ("ledger: {url: 'sqlite:/x'}\n", "ledger.url: is not a SQLAlchemy URL", "ledger URL that does not parse"),
    ("ledger: {url: 'postgresql+nosuchdriver://u@h/db'}\n", "ledger.url: SQLAlchemy has no driver", "unknown driver"),
    ("kafka: {bootstrap_servers: 'b-1:9092,localhost:abc'}\n", "kafka.bootstrap_servers: 'localhost:abc': the port "
     "is not a number", "a broker whose port is no number"),
    ("kafka: {timeout_s: .inf}\n", "kafka.timeout_s: Input should be a finite number", "an infinite timeout"),
    ("drain: {output_path: ''}\n", "drain.output_path: is empty", "an empty output path"),
]


@pytest.mark.parametrize(("text", "message", "why"), BAD_FILES, ids=[c[2] for c in BAD_FILES])
def test_a_bad_file_gives_one_message_naming_the_key(in_tmp: Path, text: str, message: str, why: str):
    path = write(in_tmp / "kprio.yaml", text)
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    shown = str(err.value)
    assert shown.endswith(f" ({path})") or shown.endswith(f" ({path} line {shown.rsplit(' line ', 1)[-1]}")
    assert message in shown
    assert "\n" not in shown, "one line"
    assert err.value.code == "config_invalid"


def test_bad_yaml_names_the_line(in_tmp: Path):
    path = write(in_tmp / "kprio.yaml", "planner:\n  record_budget: 10\n  mode: [lag-aware\n")
    with pytest.raises(ConfigError, match=r"^not valid YAML: .* \(.*kprio\.yaml line 4 column 1\)$"):
        load_config(path, env={})


def test_bad_yaml_indentation_names_the_line(in_tmp: Path):
    path = write(in_tmp / "kprio.yaml", "planner:\n  record_budget: 10\n mode: flipkart\n")
    with pytest.raises(ConfigError, match=r"^not valid YAML: .*line 3 column 2\)$"):
        load_config(path, env={})


def test_parse_config_names_its_source():
    with pytest.raises(ConfigError, match=r"^kafka.bootstrap_servers: must be a string, not a number: put it in quotes "
                                          r"to keep it as text \(YAML reads 42, 1e3 or 0x10 as a number\) "
                                          r"\(dagster run config\)$"):
        parse_config({"kafka": {"bootstrap_servers": 9092}}, "dagster run config", env={})


# --------------------------------------------------------------------------------- templates

@pytest.mark.parametrize(
    ("topic", "expected_topics", "expected_groups", "why"),
    [
        (
            {"name": "orders"},
            ["orders-0", "orders-1", "orders-2"],
            ["kprio-orders-0", "kprio-orders-1", "kprio-orders-2"],
            "defaults",
        ),
        (
            {"name": "orders", "group": "billing", "priorities": 2},
            ["orders-0", "orders-1"],
            ["billing-0", "billing-1"],
            "own group base",
        ),
        (
            {"name": "orders", "topic_template": "prio.{priority}.{topic}", "group_template": "{group}.{topic}.p{priority}"},
            ["prio.0.orders", "prio.1.orders", "prio.2.orders"],
            ["kprio-orders.orders.p0", "kprio-orders.orders.p1", "kprio-orders.orders.p2"],
            "templates may use {topic} and {group}",
        ),
    ],
)
def test_templates_name_topics_and_groups(topic: dict, expected_topics: list[str], expected_groups: list[str], why: str):
    t = parse_config({"topics": [topic]}, env={}).topics[0]
    assert list(t.priority_topics().values()) == expected_topics
    assert [t.priority_group(p) for p in range(t.priorities)] == expected_groups
    assert t.priority_of_topic(expected_topics[-1]) == t.priorities - 1
    with pytest.raises(ValueError, match=rf"priorities 0..{t.priorities - 1}, got {t.priorities}"):
        t.priority_topic(t.priorities)


@pytest.mark.parametrize(
    ("field", "template", "message"),
    [
        ("topic_template", "{topic}.p", "must contain '{priority}'"),
        ("group_template", "{group}", "must contain '{priority}'"),
        ("topic_template", "{topic}.{prio}.{priority}", "unknown field {prio}"),
        ("topic_template", "{group}-{priority}", "unknown field {group}"),
        ("group_template", "{group}-{priority}-{0}", "unknown field {0}"),
    ],
)
def test_a_bad_template_is_refused_at_load(field: str, template: str, message: str):
    with pytest.raises(ConfigError) as err:
        parse_config({"topics": [{"name": "orders", field: template}]}, "kprio.yaml", env={})
    assert f"topics.0.{field}" in str(err.value) and message in str(err.value)
    assert "more)" not in str(err.value), "one bad template is one problem"


@pytest.mark.parametrize(("drain", "message"), [
    ({"dead_letter_path": "./kprio-data/output/"},
     "drain.output_path ('./kprio-data/output') and drain.dead_letter_path ('./kprio-data/output/') are the same "
     "directory: give each its own directory"),
    ({"output_path": "s3://lake/kprio", "dead_letter_path": "s3://lake/kprio/dead"},
     "drain.output_path ('s3://lake/kprio') and drain.dead_letter_path ('s3://lake/kprio/dead') overlap: the second "
     "is inside the first"),
    ({"replay_path": "."}, "drain.output_path ('./kprio-data/output') and drain.replay_path ('.') overlap: the first "
     "is inside the second"),
])
def test_overlapping_output_roots_are_refused_naming_both_settings(drain: dict, message: str):
    with pytest.raises(ConfigError) as err:
        parse_config({"topics": [{"name": "orders"}], "drain": drain}, "kprio.yaml", env={})
    assert message in str(err.value)


def test_sibling_output_roots_and_other_buckets_are_fine():
    config = parse_config({"topics": [{"name": "orders"}], "drain": {
        "output_path": "s3://lake/out", "dead_letter_path": "s3://lake/out-dead", "replay_path": "s3://replays/out"}},
        env={})
    assert config.drain.dead_letter_path == "s3://lake/out-dead"


def test_more_problems_are_counted_not_listed():
    with pytest.raises(ConfigError) as err:
        bad = {"planner": {"record_budget": -5, "mode": "x"}, "topics": [{"name": "a", "required_fields": ["id"]}]}
        parse_config(bad, env={})
    assert err.value.what.endswith("(and 2 more)")


# --------------------------------------------------------------------------------- the file itself

@pytest.mark.parametrize(("make", "message"), [
    (lambda d: d, "is a directory, not a configuration file"),
    (lambda d: Path("/dev/null"), "is not a regular file"),
    (lambda d: write(d / "latin1.yaml", "planner: {mode: flipkart}\n# caf\xe9\n".encode("latin-1")),
     "is not UTF-8 text (byte 0xe9 on line 2)"),
    (lambda d: write(d / "file") / "kprio.yaml", "cannot read the configuration file: a part of it is a file"),
], ids=["a directory", "a device", "not UTF-8", "under a file"])
def test_a_file_that_is_no_config_says_what_it_is_and_where(in_tmp: Path, make, message: str):
    path = make(in_tmp)
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert err.value.what == message or err.value.what.startswith(message), err.value
    assert err.value.where == str(path)


def test_the_transport_and_catalog_types_are_the_libraries_own():
    """lineage.transport's type and drain.iceberg.catalog's are checked against kprio's lists, so validating a
    configuration imports neither openlineage-python (0.4 s) nor pyiceberg (0.8 s): the lists are theirs. (Loading
    one that turns lineage on imports openlineage-python: its model checks the transport, next test.)"""
    from kprio_core.config import LINEAGE_TRANSPORTS
    from kprio_core.config.drain import ICEBERG_CATALOG_TYPES

    transport = pytest.importorskip("openlineage.client.transport")
    catalog = pytest.importorskip("pyiceberg.catalog")
    assert sorted(LINEAGE_TRANSPORTS) == sorted(transport.get_default_factory().transports)
    assert sorted(ICEBERG_CATALOG_TYPES) == sorted(t.value for t in catalog.CatalogType)


def test_a_lineage_transport_is_checked_at_load_by_openlineage_s_own_model_once_its_environment_completed_it(
        in_tmp: Path, monkeypatch: pytest.MonkeyPatch):
    """An HTTP transport without its URL fails at load, not after the first commit; the URL kept out of the file in
    OPENLINEAGE__TRANSPORT__URL (where a URL with a password goes) completes it, as openlineage-python merges it."""
    pytest.importorskip("openlineage.client")
    path = write(in_tmp / "kprio.yaml", "lineage: {enabled: true, transport: {type: http}}\n")
    monkeypatch.delenv("OPENLINEAGE__TRANSPORT__URL", raising=False)
    with pytest.raises(ConfigError) as err:
        load_config(path, env={})
    assert err.value.what == "lineage.transport: openlineage-python refuses it: `url` key not passed to HttpConfig"
    assert err.value.where == str(path)
    monkeypatch.setenv("OPENLINEAGE_DISABLED", "true")  # its client then builds no transport: nothing to refuse
    assert load_config(path, env={}).lineage.transport == {"type": "http"}
    monkeypatch.delenv("OPENLINEAGE_DISABLED")
    monkeypatch.setenv("OPENLINEAGE__TRANSPORT__URL", "http://127.0.0.1:1")
    assert load_config(path, env={}).lineage.transport == {"type": "http"}


def test_a_number_in_exponent_form_is_a_number_as_yaml_1_2_reads_it(in_tmp: Path):
    """``record_budget: 1e3`` is 1000 (PyYAML, a YAML 1.1 reader, took ``1e3`` as text and the budget was refused as
    "a string"); a float that is a whole number fits an integer setting, one with a fraction does not."""
    path = write(in_tmp / "kprio.yaml", "planner: {record_budget: 1e3}\nspark: {fetch_max_bytes: 5E6}\n"
                                        "kafka: {timeout_s: 2.5e1}\n")
    config = load_config(path, env={})
    assert (config.planner.record_budget, config.spark.fetch_max_bytes, config.kafka.timeout_s) == (1000, 5_000_000, 25.0)
    write(in_tmp / "kprio.yaml", "planner: {record_budget: 5e-1}\n")
    with pytest.raises(ConfigError, match="planner.record_budget: Input should be a valid integer, got a number with a "
                                          "fractional part"):
        load_config(path, env={})
