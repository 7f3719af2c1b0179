"""The newer parts held to the core's contract: the table of test_cli_errors.py (see there) for the classes closed in
general (every YAML document, every number, every URL, every file a setting names) and for the lineage transport,
the schema registry and the Iceberg catalog, whose settings were checked less than Kafka's and the ledger's; and two
commands that failed in many lines or late (a log file that cannot be written, ``kprio demo``'s options). Run by the
same machinery (:mod:`tests.orchestration.cli_cases`): the cases that fail on the configuration's load in one
``kprio`` process, the others each in its own.
"""

from __future__ import annotations

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.orchestration.cli_cases import URL_SECRET, C, Case, Ran, assert_one_line, run_all
from tests.orchestration.test_cli_errors import rotating

BASE = 'kafka: {bootstrap_servers: "127.0.0.1:1", timeout_s: 1}\n'
"""The start of a raw configuration file (``config_text`` is written as it is)."""


def bomb(levels: int = 9) -> str:
    """A YAML alias bomb of under a kilobyte: 9 aliases of 9 aliases ... expand to 9**9 (387 million) values."""
    lines = ["lineage:", "  transport:", "    type: file", "    a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"    a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def nested(depth: int) -> str:
    """Block mappings ``depth`` levels deep under ``planner``."""
    return "".join(f"{'  ' * i}k{i}:\n" for i in range(depth)) + f"{'  ' * depth}x: 1\n"


def section(name: str, **values: object) -> dict:
    return {"config": {name: values}}


def lineage(**transport: object) -> dict:
    return {"config": {"lineage": {"enabled": True, "transport": transport}}}


def catalog(**properties: object) -> dict:
    return {"config": {"drain": {"format": "iceberg", "iceberg": {"catalog": properties}}}}


ENCRYPTED_KEY = ec.generate_private_key(ec.SECP256R1()).private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw"))
KEY_PEM = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n-----END PRIVATE KEY-----\n"
DIGITS_400 = "9" * 400

YAML = rotating([
    ("yaml key twice on one line", "key 'record_budget' is given twice (first on line 2)", "config_invalid",
     "accepted, keeping the last, while a key repeated on two lines was refused",
     {"config_text": BASE + "planner: {record_budget: 10, record_budget: 20}\n"}),
    ("yaml key twice in a list's mapping", "key 'name' is given twice", "config_invalid", "inside a flow list",
     {"config_text": BASE + "topics: [{name: a, priorities: 3, name: b}]\n"}),
    ("yaml nested thousands deep", "nests deeper than 50 levels", "config_invalid",
     "RecursionError: an internal error, exit 3", {"config_text": BASE + "planner: " + "[" * 5000 + "]" * 5000 + "\n"}),
    ("yaml block mappings nested deep", "nests deeper than 50 levels", "config_invalid", "the same in block style",
     {"config_text": BASE + "planner:\n" + "".join("  " + line + "\n" for line in nested(60).splitlines())}),
    ("yaml alias bomb", "once its aliases are expanded", "config_invalid",
     "a kilobyte of aliases of aliases hung the load", {"config_text": BASE + bomb()}),
    ("yaml alias inside its anchor", "the alias *a is inside the value &a names: a loop", "config_invalid",
     "a recursive value no setting can hold", {"config_text": BASE + "lineage: {transport: &a {type: file, x: *a}}\n"}),
    ("yaml number of 5000 digits", "a number of 5,000 digits: no setting takes one", "config_invalid",
     "ValueError of Python's int conversion: an internal error, exit 3",
     {"config_text": BASE + f"planner: {{record_budget: {'9' * 5000}}}\n"}),
])

NUMBERS = rotating([
    ("number beyond any float", "topics.0.priorities: a number of over 300 digits does not fit a 64-bit integer",
     "config_invalid", "OverflowError formatting the message: an internal error, exit 3",
     {"config": {"topics": [{"name": "orders", "priorities": int(DIGITS_400)}]}}),
    ("number infinite in a client setting", "kafka.client.socket.timeout.ms: Input should be a finite number",
     "config_invalid", "1.0e+400 reads as infinite",
     {"config_text": 'kafka: {bootstrap_servers: "127.0.0.1:1", client: {socket.timeout.ms: 1.0e+400}}\n'}),
    ("number huge as a key", "slo.max_age_s: a key: a number of over 300 digits", "config_invalid",
     "a priority of 400 digits was named in full in a line of over 400 characters",
     {"config_text": BASE + f"slo: {{max_age_s: {{{DIGITS_400}: 10}}}}\n"}),
    ("number huge in the lineage transport", "lineage.transport.timeout: a number of over 300 digits",
     "config_invalid", "accepted in silence: an untyped value", lineage(type="http", url="http://127.0.0.1:1",
                                                                        timeout=int(DIGITS_400))),
    ("number huge in a client setting", "kafka.client.socket.timeout.ms: a number of over 300 digits",
     "config_invalid", "accepted, then handed to librdkafka", {"config": {"kafka": {"client": {
         "socket.timeout.ms": int(DIGITS_400)}}}}),
    ("number duration as text", "rate.window_s: 1e+30 s is longer than a year", "config_invalid",
     "a quoted number skipped the bound pydantic's conversion came after", section("rate", window_s="1e30")),
])

URLS = rotating([
    ("lineage url api key", "lineage.transport: transport.url holds a credential in its query (api_key=)",
     "config_invalid", "accepted in silence: the ledger and registry URLs refuse such secrets",
     lineage(type="http", url=f"http://127.0.0.1:1/api/v1/lineage?api_key={URL_SECRET}")),
    ("lineage authorization header", "OPENLINEAGE__TRANSPORT__CUSTOM_HEADERS__AUTHORIZATION", "config_invalid",
     "an Authorization header in kprio.yaml, accepted",
     lineage(type="http", url="http://127.0.0.1:1", custom_headers={"Authorization": f"Bearer {URL_SECRET}"})),
    ("lineage api key header", "transport.custom_headers.X-API-Key holds a secret", "config_invalid", "another header",
     lineage(type="http", url="http://127.0.0.1:1", custom_headers={"X-API-Key": URL_SECRET})),
    ("lineage kafka password", "transport.config.sasl.password holds a secret", "config_invalid",
     "a Kafka transport's password, accepted", lineage(type="kafka", topic="lineage", config={
         "bootstrap.servers": "127.0.0.1:1", "sasl.password": URL_SECRET})),
    ("lineage url port", "transport.url has a port that is not a number", "config_invalid",
     "failed at the first commit's emit", lineage(type="http", url="http://127.0.0.1:port")),
    ("lineage url password", "transport.url holds a password", "config_invalid", "user info",
     lineage(type="http", url=f"http://kprio:{URL_SECRET}@127.0.0.1:1")),
    ("lineage type typo", "transport.type: 'htp' is no transport of openlineage-python's", "config_invalid",
     "accepted, failing at the first commit", lineage(type="htp", url="http://127.0.0.1:1")),
    ("lineage composite child typo", "transport.transports.audit.type: 'fiel'", "config_invalid",
     "a composite's transports too", lineage(type="composite", transports={"audit": {"type": "fiel"}})),
    ("lineage file path tilde", "lineage.transport: transport.log_file_path starts with '~'", "config_invalid",
     "the first commit wrote into a directory named ~", lineage(type="file", log_file_path="~/lineage.jsonl")),
    ("lineage tls path variable", "transport.sslContext.caCertPath holds $HOME", "config_invalid",
     "a path in camel case, taken literally", lineage(type="http", url="http://127.0.0.1:1",
                                                      sslContext={"caCertPath": "$HOME/ca.pem"})),
    ("lineage http without url", "lineage.transport: openlineage-python refuses it: `url` key not passed",
     "config_invalid", "accepted, failing after the first commit", lineage(type="http")),
    ("lineage kafka without config", "`config` not passed to KafkaConfig", "config_invalid",
     "a required setting of another transport", lineage(type="kafka", topic="lineage")),
    ("lineage composite child incomplete", "`url` key not passed", "config_invalid", "inside a composite",
     lineage(type="composite", transports={"audit": {"type": "http"}})),
    ("lineage bad enumerated value", "'zip' is not a valid HttpCompression", "config_invalid",
     "a value openlineage-python's model refuses", lineage(type="http", url="http://127.0.0.1:1", compression="zip")),
    ("lineage own class missing", "cannot import my_lineage.Transport (No module named 'my_lineage')",
     "config_invalid", "a dotted class path that does not import", lineage(type="my_lineage.Transport")),
    ("kafka client url secret", "kafka.client.sasl.oauthbearer.token.endpoint.url: holds a credential in its query "
     "(client_secret=)", "config_invalid", "a Kafka client's URL: the same check as every URL's",
     {"config": {"kafka": {"client": {"sasl.oauthbearer.token.endpoint.url":
                                      f"https://idp.example/token?client_secret={URL_SECRET}"}}}}),
    ("spark conf url password", "spark.conf.spark.jars.repositories: holds a password", "config_invalid",
     "a repository's password in a Spark setting's URL, accepted", section("spark", conf={
         "spark.jars.repositories": f"https://kprio:{URL_SECRET}@repo.example/maven"})),
    ("registry url port", "schema_registry.url: has a port that is not a number", "config_invalid",
     "accepted in silence, failing on the first schema", section("schema_registry", url="http://127.0.0.1:port/x")),
    ("registry url api key", "schema_registry.url: holds a credential in its query (api_key=)", "config_invalid",
     "api_key was no credential word", section("schema_registry", url=f"http://127.0.0.1:1/?api_key={URL_SECRET}")),
    ("registry ca holds a key", "schema_registry.ssl_ca_location: '{tmp}/ca.pem': holds a private key",
     "config_invalid", "Kafka's is refused; the registry's was accepted",
     {**section("schema_registry", url="https://127.0.0.1:1", ssl_ca_location="{tmp}/ca.pem"),
      "files": {"ca.pem": KEY_PEM}}),
    ("registry key encrypted", "KPRIO_SCHEMA_REGISTRY_SSL_KEY_PASSWORD", "config_invalid",
     "an encrypted key without its password: found on the first request",
     {**section("schema_registry", url="https://127.0.0.1:1", ssl_certificate_location="{tmp}/c.pem",
                ssl_key_location="{tmp}/k.pem"),
      "files": {"c.pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", "k.pem": ENCRYPTED_KEY}}),
    ("catalog type typo", "drain.iceberg.catalog.type: 'sqll' is no catalog type of pyiceberg's", "config_invalid",
     "accepted, failing at the first publish", catalog(type="sqll", uri="sqlite:///{tmp}/data/catalog.db")),
    ("catalog uri tilde", "drain.iceberg.catalog.uri: starts with '~'", "config_invalid",
     "the first drain made a directory named ~", catalog(type="sql", uri="sqlite:///~/catalog.db")),
    ("catalog uri port", "drain.iceberg.catalog.uri: has a port that is not a number", "config_invalid",
     "a REST catalog's", catalog(type="rest", uri="http://127.0.0.1:port/catalog")),
    ("catalog uri token", "drain.iceberg.catalog.uri: holds a credential in its query (token=)", "config_invalid",
     "a token in a REST catalog's URL", catalog(type="rest", uri=f"http://127.0.0.1:1/catalog?token={URL_SECRET}")),
    ("catalog warehouse variable", "drain.iceberg.catalog.warehouse: holds $HOME", "config_invalid",
     "taken literally", catalog(type="sql", uri="sqlite:///{tmp}/data/catalog.db", warehouse="$HOME/warehouse")),
])

COMMANDS = [
    C("log file full", "--log-file /dev/full topics verify", "127.0.0.1:1", "broker_unreachable",
      "a log file whose writes fail: Python logging's traceback per line, 886 lines", read_only=True),
    C("log file full from the environment", "lag", "127.0.0.1:1", "broker_unreachable", "KPRIO_LOG_FILE alike",
      env={"KPRIO_LOG_FILE": "/dev/full"}, read_only=True),
    C("demo security of a cluster", "demo --security sasl_ssl", "kprio demo --security", "usage",
      "found after the progress bars started, and the data dir made", exit=2, read_only=True),
    C("demo kept broker without its secrets", "demo --security ssl --keep-broker --data-dir {tmp}/demo",
      "KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD", "demo_failed", "the same, before anything starts", with_config=False,
      read_only=True),
    C("trace file nested deep", "simulate --trace-file {tmp}/t.json", "{tmp}/t.json", "trace_invalid",
      "RecursionError: an internal error, exit 3", files={"t.json": "[" * 100_000 + "]" * 100_000},
      with_config=False, read_only=True),
    C("trace file number of 5000 digits", "simulate --trace-file {tmp}/t.json", "{tmp}/t.json", "trace_invalid",
      "ValueError of Python's int conversion: exit 3", files={"t.json": f'{{"budget": {"9" * 5000}}}'},
      with_config=False, read_only=True),
    C("trace file not UTF-8", "simulate --trace-file {tmp}/t.json", "{tmp}/t.json: is not UTF-8 text",
      "trace_invalid", "UnicodeDecodeError: exit 3", files={"t.json": b"\xff\xfe{}"}, with_config=False,
      read_only=True),
    C("history number of 5000 digits", ("burst", "-n", "3", "-r", "50", "--history", f'{{"2": [{"9" * 5000}]}}'),
      "--history", "usage", "ValueError of Python's int conversion: exit 3", exit=2, with_config=False,
      read_only=True),
    C("yaml merge key", "spark status", "", None, "YAML's << was refused: it merges, the mapping's own keys winning",
      config_text=BASE + "topics:\n  - &orders {name: orders, priorities: 3, partitions: 2}\n"
                         "  - {<<: *orders, name: refunds}\n", read_only=True),
]

CASES = [*YAML, *NUMBERS, *URLS, *COMMANDS]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """Every case of this module run once (:func:`tests.orchestration.cli_cases.run_all`)."""
    return run_all(CASES, tmp_path_factory)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_part_held_to_the_contract_gives_one_line(case: Case, ran: dict[str, Ran]) -> None:
    assert_one_line(case, ran)


def test_the_ids_are_unique_and_say_why() -> None:
    assert len({case.id for case in CASES}) == len(CASES)
    assert all(len(case.why) > 5 for case in CASES)
