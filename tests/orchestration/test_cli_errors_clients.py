"""Every mistake in the Kafka settings gets one line naming the setting and where it came from: the table of
test_cli_errors.py (see there) for the ``kafka`` section, its client settings and the files they name, the
environment's overrides (each checked as the file's value is, and named by its variable), and a broker that does not
answer (named by ``kafka.bootstrap_servers``, its value and the file or variable it came from), run by the same
machinery (:mod:`tests.orchestration.cli_cases`).
"""

from __future__ import annotations

import pytest

from tests.orchestration.cli_cases import URL_SECRET, C, Case, Ran, assert_one_line, run_all
from tests.orchestration.test_cli_errors import rotating

PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
SSL = {"security.protocol": "SSL"}


def client(**settings: object) -> dict:
    return {"config": {"kafka": {"client": {k.replace("_", "."): v for k, v in settings.items()}}}}


KAFKA = rotating([
    ("kafka bootstrap no port", "kafka.bootstrap_servers: 'nohost': no port", "config_invalid",
     "librdkafka would default to 9092, Kafka's Java client (Spark's reader) refuses it",
     {"config": {"kafka": {"bootstrap_servers": "nohost"}}}),
    ("kafka bootstrap http scheme", "kafka.bootstrap_servers: 'http://a:1'", "config_invalid",
     "a URL's scheme that is no security protocol", {"config": {"kafka": {"bootstrap_servers": "http://a:1"}}}),
    ("kafka bootstrap a list", "kafka.bootstrap_servers: must be a string, not a list", "config_invalid",
     "YAML's list where a comma-separated string goes", {"config": {"kafka": {"bootstrap_servers": ["a:1", "b:2"]}}}),
    ("kafka bootstrap trailing comma", "kafka.bootstrap_servers", "config_invalid", "an empty entry",
     {"config": {"kafka": {"bootstrap_servers": "127.0.0.1:1,"}}}),
    ("kafka bootstrap port zero", "kafka.bootstrap_servers: 'a:0'", "config_invalid", "port 0",
     {"config": {"kafka": {"bootstrap_servers": "a:0"}}}),
    ("kafka timeout huge", "kafka.timeout_s", "config_invalid", "1e30 s: the clients' timers overflowed and the "
     "command hung", {"config": {"kafka": {"timeout_s": 1e30}}}),
    ("kafka timeout over an hour", "kafka.timeout_s", "config_invalid", "milliseconds written as seconds",
     {"config": {"kafka": {"timeout_s": 30000}}}),
    ("kafka timeout a boolean", "kafka.timeout_s: is a boolean", "config_invalid", "YAML's yes read as 1 s",
     {"config_text": "kafka: {timeout_s: yes}\n"}),
    ("kafka timeout with unit", "kafka.timeout_s", "config_invalid", "10s", {"config": {"kafka": {"timeout_s": "10s"}}}),
    ("kafka timeout nan", "kafka.timeout_s", "config_invalid", ".nan", {"config_text": "kafka: {timeout_s: .nan}\n"}),
    ("kafka isolation level bogus", "kafka.isolation_level", "config_invalid", "a level Kafka does not have",
     {"config": {"kafka": {"isolation_level": "serializable"}}}),
    ("kafka null client value", "kafka.client.client.id: must be one of str, int, float, bool, not nothing",
     "config_invalid", "one problem, not one per type of the union", client(client_id=None)),
    ("kafka client list value", "kafka.client.a: must be one of", "config_invalid", "a list as a value",
     client(a=[1])),
    ("kafka client a list", "kafka.client: must be a mapping, not a list", "config_invalid", "a list of settings",
     {"config": {"kafka": {"client": ["security.protocol=SSL"]}}}),
    ("kafka sasl mechanism unknown", "kafka.client.sasl.mechanism: 'SCRAM-SHA-999' is no SASL mechanism",
     "config_invalid", "librdkafka said 'sasl.username and sasl.password must be set'",
     client(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-999")),
    ("kafka sasl mechanisms alias unknown", "kafka.client.sasl.mechanisms", "config_invalid", "the plural alias",
     client(security_protocol="SASL_PLAINTEXT", sasl_mechanisms="FOO")),
    ("kafka security protocol unknown", "kafka.client.security.protocol: 'TLS'", "config_invalid", "TLS for SSL",
     client(security_protocol="TLS")),
    ("kafka setting name capitalised", "kafka.client.Security.Protocol: librdkafka's setting names are lower case",
     "config_invalid", "librdkafka said 'No such configuration property'", client(Security_Protocol="SSL")),
    ("kafka bootstrap in client", "kafka.client.bootstrap.servers: kprio sets bootstrap.servers itself",
     "config_invalid", "it silently replaced kafka.bootstrap_servers, and the errors named the wrong broker",
     client(bootstrap_servers="x:1")),
    ("kafka ca missing", "kafka.client.ssl.ca.location: '/nonexistent/ca.pem': no such file", "config_invalid",
     "librdkafka said 'error:05880020:x509 certificate routines::BIO lib'",
     client(**SSL, ssl_ca_location="/nonexistent/ca.pem")),
    ("kafka ca not PEM", "kafka.client.ssl.ca.location: '{tmp}/ca.pem': holds no PEM certificate: it takes "
     "the certificates of the CAs", "config_invalid",
     "librdkafka said 'no certificate or crl found'", {**client(**SSL, ssl_ca_location="{tmp}/ca.pem"),
                                                       "files": {"ca.pem": "hello\n"}}),
    ("kafka certificate missing", "kafka.client.ssl.certificate.location: '{tmp}/c.pem'", "config_invalid",
     "librdkafka said 'SSL routines::system lib'",
     client(**SSL, ssl_certificate_location="{tmp}/c.pem", ssl_key_location="{tmp}/k.pem")),
    ("kafka key missing", "kafka.client.ssl.key.location: '{tmp}/k.pem'", "config_invalid",
     "librdkafka blamed ssl.certificate.location ('PEM lib')",
     {**client(**SSL, ssl_certificate_location="{tmp}/c.pem", ssl_key_location="{tmp}/k.pem"), "files": {"c.pem": PEM}}),
    ("kafka key a directory", "kafka.client.ssl.key.location: '{tmp}/keys': is a directory", "config_invalid",
     "a directory where the key file goes", {**client(**SSL, ssl_key_location="{tmp}/keys"), "files": {"keys/k": ""}}),
    ("kafka keystore missing", "kafka.client.ssl.keystore.location: '{tmp}/ks.p12'", "config_invalid",
     "librdkafka asked for the password of a file that is not there", client(**SSL, ssl_keystore_location="{tmp}/ks.p12")),
    ("kafka keystore without password", "kafka.client.ssl.keystore.location: '{tmp}/ks.p12': a keystore needs its "
     "password: set KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD in the environment", "config_invalid", "librdkafka's message said not where it goes",
     {**client(**SSL, ssl_keystore_location="{tmp}/ks.p12"), "files": {"ks.p12": "x"}}),
    ("kafka sasl password without user", "kafka.client.sasl.username: not set: SCRAM-SHA-512 logs in with a user "
     "name and a password", "config_invalid", "librdkafka said 'sasl.username and "
     "sasl.password must be set' at the first client (KPRIO_KAFKA_SASL_PASSWORD is in every case's environment)",
     client(security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512")),
    ("kafka crl missing", "kafka.client.ssl.crl.location", "config_invalid", "the CRL file",
     client(**SSL, ssl_crl_location="{tmp}/crl.pem")),
    ("kafka keytab missing", "kafka.client.sasl.kerberos.keytab", "config_invalid", "librdkafka blamed its build",
     client(security_protocol="SASL_PLAINTEXT", sasl_mechanism="GSSAPI", sasl_kerberos_keytab="{tmp}/no.keytab")),
    ("kafka assertion key missing", "kafka.client.sasl.oauthbearer.assertion.private.key.file", "config_invalid",
     "accepted in silence, found only on a broker", client(sasl_oauthbearer_assertion_private_key_file="{tmp}/no.pem")),
    ("kafka secret key pem in file", "kafka.client.ssl.key.pem: is a secret", "config_invalid",
     "an inline key in the file", client(ssl_key_pem=URL_SECRET)),
    ("kafka keystore password in file", "KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD", "config_invalid",
     "names the variable", client(ssl_keystore_password=URL_SECRET)),
    ("kafka java truststore", "kafka.client.ssl.truststore.location: is a setting of Kafka's Java client only",
     "config_invalid", "the Java client's name for ssl.ca.location", client(ssl_truststore_location="/x.jks")),
])

BROKER = [
    C("broker down [plan]", "plan", "kafka.bootstrap_servers 127.0.0.1:1 in {tmp}/kprio.yaml", "broker_unreachable",
      "the where was the command ('kprio plan'): it names the setting, its value and the file", read_only=True),
    C("broker down [lag]", "lag --json", "kafka.bootstrap_servers 127.0.0.1:1 in {tmp}/kprio.yaml",
      "broker_unreachable", "the same for lag", read_only=True),
    C("broker down [topics verify]", "topics verify", "kafka.bootstrap_servers 127.0.0.1:1 in {tmp}/kprio.yaml",
      "broker_unreachable", "and topics verify", read_only=True),
    C("broker down [drain]", "drain --once", "kafka.bootstrap_servers 127.0.0.1:1 in {tmp}/kprio.yaml",
      "broker_unreachable", "and drain, before it writes anything", read_only=True),
    C("broker down [reset]", "reset orders-2[99] --to earliest", "kafka.bootstrap_servers 127.0.0.1:1",
      "broker_unreachable", "reset asks the cluster before it opens the ledger: no ledger is left behind",
      read_only=True),
    C("broker down [metrics]", "metrics --interval 1", "kafka.bootstrap_servers 127.0.0.1:1", "broker_unreachable",
      "metrics reads the cluster first", read_only=True),
    C("broker down, default address", "plan", "kafka.bootstrap_servers 127.0.0.1:9092, the default: not set in",
      "broker_unreachable", "an empty file is the defaults: the line says the address was not set",
      config_text="# nothing yet\n", env={"KPRIO_KAFKA_TIMEOUT_S": "1"}, read_only=True),
    C("broker down, no file", "lag", "kafka.bootstrap_servers 127.0.0.1:9092, the built-in default", "broker_unreachable",
      "no configuration file at all", with_config=False, env={"KPRIO_KAFKA_TIMEOUT_S": "1"}, read_only=True),
    C("broker down from the environment", "plan", "KPRIO_BOOTSTRAP_SERVERS 127.0.0.1:2 in the environment",
      "broker_unreachable", "the address came from the environment, not the file",
      env={"KPRIO_BOOTSTRAP_SERVERS": "127.0.0.1:2"}, read_only=True),
    C("client setting unknown", "plan", "kafka.client in {tmp}/kprio.yaml", "config_invalid",
      "librdkafka refuses it when a client is built: the where was the command", read_only=True,
      **client(bogus_setting="1")),
    C("client value librdkafka refuses", "lag", "kafka.client in {tmp}/kprio.yaml", "config_invalid",
      "a number that is no number", read_only=True, **client(socket_timeout_ms="abc")),
    C("client boolean librdkafka refuses", "plan", "kafka.client in {tmp}/kprio.yaml", "config_invalid",
      "maybe for a boolean", read_only=True, **client(enable_ssl_certificate_verification="maybe")),
]

ENVIRONMENT = [C(f"env {id}", "plan" if i % 2 else "lag", names, code, why, env=env, read_only=True, **kw)
               for i, (id, env, names, code, why, kw) in enumerate([
    ("bootstrap without port", {"KPRIO_BOOTSTRAP_SERVERS": "nohost"}, "KPRIO_BOOTSTRAP_SERVERS in the environment",
     "config_invalid", "the reported case: the file's check was not applied to the variable", {}),
    ("bootstrap blank", {"KPRIO_BOOTSTRAP_SERVERS": "  "}, "KPRIO_BOOTSTRAP_SERVERS in the environment",
     "config_invalid", "spaces only", {}),
    ("bootstrap scheme", {"KPRIO_BOOTSTRAP_SERVERS": "kafka://b:1"}, "KPRIO_BOOTSTRAP_SERVERS in the environment",
     "config_invalid", "a scheme that is no protocol", {}),
    ("timeout negative", {"KPRIO_KAFKA_TIMEOUT_S": "-1"}, "KPRIO_KAFKA_TIMEOUT_S in the environment",
     "config_invalid", "a negative timeout", {}),
    ("timeout huge", {"KPRIO_KAFKA_TIMEOUT_S": "1e30"}, "KPRIO_KAFKA_TIMEOUT_S in the environment",
     "config_invalid", "the command hung", {}),
    ("timeout over an hour", {"KPRIO_KAFKA_TIMEOUT_S": "7200"}, "KPRIO_KAFKA_TIMEOUT_S in the environment",
     "config_invalid", "milliseconds for seconds", {}),
    ("crl missing", {"KPRIO_KAFKA_SSL_CRL_LOCATION": "{tmp}/crl.pem"}, "KPRIO_KAFKA_SSL_CRL_LOCATION in the environment",
     "config_invalid", "a file setting from the environment", {}),
    ("timeout inf", {"KPRIO_KAFKA_TIMEOUT_S": "inf"}, "KPRIO_KAFKA_TIMEOUT_S in the environment",
     "config_invalid", "infinity", {}),
    ("timeout with unit", {"KPRIO_KAFKA_TIMEOUT_S": "10s"}, "KPRIO_KAFKA_TIMEOUT_S in the environment",
     "config_invalid", "a unit", {}),
    ("security protocol", {"KPRIO_KAFKA_SECURITY_PROTOCOL": "TLS"}, "KPRIO_KAFKA_SECURITY_PROTOCOL in the environment",
     "config_invalid", "was librdkafka's refusal at the first client, named by the command", {}),
    ("sasl mechanism", {"KPRIO_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "KPRIO_KAFKA_SASL_MECHANISM": "SCRAM-SHA-999"},
     "KPRIO_KAFKA_SASL_MECHANISM in the environment", "config_invalid", "the misleading 'must be set'", {}),
    ("ca missing", {"KPRIO_KAFKA_SECURITY_PROTOCOL": "SSL", "KPRIO_KAFKA_SSL_CA_LOCATION": "/nonexistent/ca.pem"},
     "KPRIO_KAFKA_SSL_CA_LOCATION in the environment", "config_invalid", "the file check from the environment", {}),
    ("keystore without password", {"KPRIO_KAFKA_SSL_KEYSTORE_LOCATION": "{tmp}/ks.p12"},
     "KPRIO_KAFKA_SSL_KEYSTORE_PASSWORD", "config_invalid", "the password's variable is named",
     {"files": {"ks.p12": "x"}}),
    ("java setting", {"KPRIO_KAFKA_SSL_TRUSTSTORE_LOCATION": "/x.jks"},
     "KPRIO_KAFKA_SSL_TRUSTSTORE_LOCATION in the environment", "config_invalid", "the variable alone, not the file", {}),
    ("setting unknown", {"KPRIO_KAFKA_BOGUS_SETTING": "1"}, "KPRIO_KAFKA_BOGUS_SETTING in the environment",
     "config_invalid", "librdkafka's refusal names the variable among the places", {}),
    ("no setting name", {"KPRIO_KAFKA_": "x"}, "KPRIO_KAFKA_ in the environment", "config_invalid",
     "the prefix alone", {}),
    ("bootstrap through the client prefix", {"KPRIO_KAFKA_BOOTSTRAP_SERVERS": "x:1"},
     "KPRIO_KAFKA_BOOTSTRAP_SERVERS in the environment", "config_invalid", "replaced KPRIO_BOOTSTRAP_SERVERS", {}),
    ("config a device", {"KPRIO_CONFIG": "/dev/null"}, "/dev/null, named by KPRIO_CONFIG", "config_invalid",
     "a device through the variable", {"with_config": False}),
    ("log file a directory", {"KPRIO_LOG_FILE": "{tmp}"}, "KPRIO_LOG_FILE {tmp}", "path_unusable",
     "a directory as the log file", {}),
])]

CASES = [*KAFKA, *BROKER, *ENVIRONMENT]


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """Every case of this module run once (:func:`tests.orchestration.cli_cases.run_all`)."""
    return run_all(CASES, tmp_path_factory)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_bad_kafka_setting_gives_one_line_naming_it_and_where_it_came_from(case: Case, ran: dict[str, Ran]) -> None:
    assert_one_line(case, ran)
