"""kprio on a SASL_SSL cluster (SCRAM-SHA-512 over TLS, as managed clusters run), every client authenticating.

One secured embedded broker for the module (``--security sasl_ssl``: the CA and certificates it made,
user ``kprio`` with SCRAM-SHA-512 and PLAIN), fresh random secrets in the environment. kprio is
configured as a user would configure it: the client settings ``kprio broker start`` prints, the
password from ``KPRIO_KAFKA_SASL_PASSWORD``. Proven here:

- both readers drain to zero lag with conservation, through the Dagster sensor's tick and drain_job
  (the admin client's lag snapshots, the executors' consumers or Spark's Java client, the commits);
- the Airflow trigger finds the backlog on the secured cluster, and Airflow's ``kprio_drain`` DAG (under
  ``dag.test()``: the deferred wait, plan, the mapped drain and commit tasks) drains it to zero lag with
  conservation, every batch committed;
- a wrong password, a mechanism the broker does not enable, a CA that did not sign the broker's
  certificate, a host name the certificate does not hold, a certificate that expired (a second listener
  of the broker, ``EXPIRED``, has one) and a client of another security protocol each fail in one line
  naming the setting, well before the timeout, through the CLI and in a drain's read with either reader;
- no secret is in any file the module wrote (the broker's data dir and log, the ledger, the Dagster
  instance, the output, the Spark event log, the Airflow tasks' logs, Airflow's home), nor in what Airflow
  stored (every row of its metadata database: XComs, serialized DAGs, rendered fields, the audit log), nor
  in a command's output.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from orchestration.cli.main import app
from orchestration.services.broker import BrokerSecurity, Security
from orchestration.services.process import wait_for
from orchestration.services.tls import TlsFiles, make_files
from tests.fixtures.secured_broker import files_holding, secured_kafka
from tests.orchestration.conservation import conservation
from tests.orchestration.secured_drains import drain_to_zero_lag, secured_config

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]

RECORDS = {2: 15, 1: 10, 0: 25}


@pytest.fixture(scope="module")
def module_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sasl-ssl")


@pytest.fixture(scope="module")
def secured(module_dir: Path):
    with secured_kafka(module_dir / "broker", BrokerSecurity(Security.SASL_SSL), expired_listener=True) as kafka:
        yield kafka


@pytest.mark.parametrize("reader", ["python", "native"])
def test_both_readers_drain_a_sasl_ssl_cluster_to_zero_lag_through_the_sensor(secured, module_dir, warm_workers, reader,
                                                                               caplog):
    folder = module_dir / f"drain-{reader}"
    topic = secured.make_topic(f"orders-{reader}", RECORDS)
    drain_to_zero_lag(secured_config(secured, folder, topic, reader=reader), topic, RECORDS, folder)
    assert not [s for s in secured.secrets if s in caplog.text], "a secret reached the logs"


def test_the_airflow_trigger_finds_the_backlog_of_a_sasl_ssl_cluster(secured, module_dir):
    pytest.importorskip("airflow")
    from orchestration.airflow.trigger import KprioLagTrigger, WaitForBatches

    folder = module_dir / "airflow"
    topic = secured.make_topic("orders-airflow", {2: 3})
    config = secured_config(secured, folder, topic)
    folder.mkdir()
    path = folder / "kprio.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})))

    async def first_event(trigger):
        return await anext(trigger.run())

    trigger = KprioLagTrigger(str(path), poll_s=0.2)
    event = asyncio.run(asyncio.wait_for(first_event(trigger), timeout=60))
    assert event.payload["work"] is True
    assert any(line.startswith(f"{topic.name}: ") for line in event.payload["decisions"])
    # What Airflow stores: the trigger's serialized form (the triggerer's table) and the task's XCom value.
    lines = WaitForBatches(task_id="wait", config_path=str(path)).execute({})
    stored = repr(trigger.serialize()) + repr(event.payload) + repr(lines) + path.read_text()
    assert not [s for s in secured.secrets if s in stored]


AIRFLOW_RECORDS = {2: 60, 1: 90, 0: 150}


@pytest.mark.airflow
def test_the_airflow_drain_dag_drains_a_sasl_ssl_cluster_to_zero_lag(secured, module_dir, spark, kprio_dag, monkeypatch,
                                                                      capfd, caplog):
    """kprio_drain under ``dag.test()`` (the trigger deferred and run inline, plan, the mapped drain and commit
    tasks), every client on the secured broker with the secrets from the environment only. The tasks' logs
    (``dag.test()`` writes them to this process's output) are kept in the module's folder for the sweep."""
    pytest.importorskip("airflow")
    from kprio_core.kafka import KafkaEdge
    from kprio_core.ledger import BatchState, Ledger
    from tests.under_airflow.test_dag_runs import drain_to_zero, task_states, xcom

    for name, value in secured.env.items():
        monkeypatch.setenv(name, value)
    folder = module_dir / "airflow-drain"
    topic = secured.make_topic("orders-airflow-drain", AIRFLOW_RECORDS)
    config = secured_config(secured, folder, topic)
    config = config.model_copy(update={"planner": config.planner.model_copy(update={"record_budget": 300})})
    folder.mkdir()
    path = folder / "kprio.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})))

    with KafkaEdge(config.kafka) as edge, Ledger(config.ledger.url) as ledger:
        runs = drain_to_zero(kprio_dag(path, "kprio_drain"), topic, config, edge)
        check = conservation(config, topic, edge)
        assert check.ok and check.expected == sum(AIRFLOW_RECORDS.values()), str(check)
        batches = ledger.batches.find(topic.name)
        assert batches and all(b.state is BatchState.COMMITTED for b in batches)
        assert sum(sum(b.plan.records_by_priority().values()) for b in batches) == sum(AIRFLOW_RECORDS.values())
    for run in runs:
        states = task_states(run)
        assert states["batch.commit"] == states["batch.drain"] and set(states["batch.drain"]) == {"success"}
        assert all(c["state"] == "committed" for c in xcom(run, "batch.commit"))
    out, err = capfd.readouterr()
    task_logs = out + err + caplog.text
    assert "check row_count_matches_plan: passed" in task_logs, "the tasks' logs were not captured"
    (folder / "task-logs.txt").write_text(task_logs)
    assert not [s for s in secured.secrets if s in task_logs], "a secret reached the task logs"


MISTAKES = {
    # name: (environment over the right one, client settings over the printed ones, code, what the line names)
    "wrong-password": ({"KPRIO_KAFKA_SASL_PASSWORD": "not-the-password"}, {}, "sasl_authentication_failed",
                       "the broker refused user 'kprio' (kafka.client.sasl.username) with the password of "
                       "KPRIO_KAFKA_SASL_PASSWORD over SCRAM-SHA-512"),
    "mechanism-not-enabled": ({}, {"sasl.mechanism": "SCRAM-SHA-256"}, "sasl_mechanism_not_enabled",
                              "SASL mechanism SCRAM-SHA-256 (kafka.client.sasl.mechanism) is not enabled on the "
                              "broker, which takes SCRAM-SHA-512, PLAIN"),
    # A mechanism librdkafka never even connects with here (OAUTHBEARER waits for a token): the listener says.
    "mechanism-never-connecting": ({}, {"sasl.mechanism": "OAUTHBEARER", "sasl.username": None},
                                   "sasl_mechanism_not_enabled", "SASL mechanism OAUTHBEARER (kafka.client.sasl.mechanism) "
                                   "is not enabled on the broker, which takes SCRAM-SHA-512, PLAIN"),
    "untrusted-certificate": ({}, {"ssl.ca.location": "OTHER_CA"}, "ssl_certificate_untrusted",
                              "the broker's TLS certificate is not trusted by kafka.client.ssl.ca.location (OTHER_CA)"),
    "hostname-mismatch": ({}, {}, "ssl_hostname_mismatch",
                          "the broker's TLS certificate names 127.0.0.1, not 'localhost'"),
    # The listener whose certificate expired (the module's broker has one besides its client listener).
    "expired-certificate": ({}, {}, "ssl_certificate_expired",
                            "(verified with kafka.client.ssl.ca.location (CA)): the broker's certificate must be "
                            "renewed"),
    # Clients of another security protocol: the broker only closes their connections; kprio asks the listener.
    "plaintext-client": ({}, {"security.protocol": None, "sasl.mechanism": None, "sasl.username": None,
                              "ssl.ca.location": None}, "security_protocol_mismatch",
                         "kafka.client.security.protocol is PLAINTEXT, but the broker's listener speaks SASL_SSL (TLS, "
                         "then SASL: SCRAM-SHA-512, PLAIN)"),
    "sasl-without-tls": ({}, {"security.protocol": "SASL_PLAINTEXT"}, "security_protocol_mismatch",
                         "kafka.client.security.protocol is SASL_PLAINTEXT, but the broker's listener speaks SASL_SSL"),
    "tls-without-sasl": ({}, {"security.protocol": "SSL"}, "security_protocol_mismatch",
                         "kafka.client.security.protocol is SSL, but the broker's listener speaks SASL_SSL"),
}


@pytest.mark.parametrize("mistake", list(MISTAKES))
def test_a_security_mistake_fails_in_one_line_naming_the_setting(secured, module_dir, mistake, monkeypatch):
    env, client, code, named = MISTAKES[mistake]
    other_ca = TlsFiles(module_dir / "other-ca")
    if not other_ca.complete():
        make_files(other_ca, ["127.0.0.1"], "unused-password")
    client = {k: str(other_ca.ca) if v == "OTHER_CA" else v for k, v in client.items()}
    named = named.replace("OTHER_CA", str(other_ca.ca)).replace("(CA)", f"({secured.broker.tls.ca})")
    raw = {"kafka": secured.raw(**client), "topics": [{"name": "orders"}]}
    if mistake == "hostname-mismatch":
        raw["kafka"]["bootstrap_servers"] = secured.broker.bootstrap.replace("127.0.0.1", "localhost")
    if mistake == "expired-certificate":
        raw["kafka"]["bootstrap_servers"] = secured.expired_bootstrap
    path = module_dir / f"{mistake}.yaml"
    path.write_text(yaml.safe_dump(raw))
    for name, value in {**secured.env, **env}.items():
        monkeypatch.setenv(name, value)

    started = time.monotonic()
    result = CliRunner().invoke(app, ["lag", "--config", str(path)])
    took = time.monotonic() - started

    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("kprio: error: ") and lines[0].endswith(f"[{code}]"), lines[0]
    assert named in lines[0]
    # Failed as the broker answered, not after kafka.timeout_s (20 s) as an unreachable broker would.
    assert took < 10, f"took {took:.1f} s"
    assert not [s for s in [*secured.secrets, *env.values()] if s in result.output]


@pytest.mark.parametrize("mistake", ["wrong-password", "plaintext-client", "expired-certificate"])
def test_plan_and_drain_fail_in_the_same_one_line(secured, module_dir, mistake, monkeypatch):
    """The commands that plan and drain meet the mistake in their first client (the admin client's lag snapshot):
    the same line as `kprio lag`, before any Spark job, in seconds."""
    env, client, code, _ = MISTAKES[mistake]
    folder = module_dir / f"commands-{mistake}"
    raw = {"kafka": secured.raw(**client), "topics": [{"name": "orders"}],
           "ledger": {"url": f"sqlite:///{folder / 'ledger.db'}"},
           "drain": {"output_path": str(folder / "output"), "dead_letter_path": str(folder / "dead-letters"),
                     "replay_path": str(folder / "replay")}}
    if mistake == "expired-certificate":
        raw["kafka"]["bootstrap_servers"] = secured.expired_bootstrap
    folder.mkdir()
    path = folder / "kprio.yaml"
    path.write_text(yaml.safe_dump(raw))
    for name, value in {**secured.env, **env}.items():
        monkeypatch.setenv(name, value)
    for command in (["plan"], ["drain", "--until-empty"]):
        started = time.monotonic()
        result = CliRunner().invoke(app, [*command, "--config", str(path)])
        took = time.monotonic() - started
        lines = result.output.strip().splitlines()
        assert result.exit_code == 1 and len(lines) == 1, result.output
        assert lines[0].startswith("kprio: error: ") and f"[{code}]" in lines[0], lines[0]
        assert took < 10, f"kprio {command[0]} took {took:.1f} s"
        assert not [s for s in [*secured.secrets, *env.values()] if s in result.output]


READER_MISTAKES = {
    # name: (environment over the right one, client settings over the printed ones, code)
    "wrong-password": ({"KPRIO_KAFKA_SASL_PASSWORD": "not-the-password"}, {}, "sasl_authentication_failed"),
    "plaintext-client": ({}, {"security.protocol": None, "sasl.mechanism": None, "sasl.username": None,
                              "ssl.ca.location": None}, "security_protocol_mismatch"),
}


@pytest.mark.parametrize("reader", ["python", "native"])
@pytest.mark.parametrize("mistake", list(READER_MISTAKES))
def test_a_security_mistake_fails_a_drains_read_in_one_line_with_either_reader(secured, module_dir, spark, reader,
                                                                               mistake):
    """The readers' own clients (the executors' consumers, Spark's Java client) with settings the admin client did
    not check (the run's secrets, its files): the read fails typed, as the admin client would, not "no broker
    answered" after the timeout. The native reader's Java client waits kafka.timeout_s a try, three tries, for a
    listener that only closes its connections (3 s here), then the driver asks the listener why."""
    from kprio_core.errors import KafkaSecurityFailed
    from kprio_core.model.offsets import OffsetRange
    from spark_jobs.drain import drain_batch
    from tests.spark_jobs.plans import plan_of

    env, client, code = READER_MISTAKES[mistake]
    folder = module_dir / f"read-{reader}-{mistake}"
    topic = secured.make_topic(f"orders-read-{reader}-{mistake}", {0: 3}, priorities=1, partitions=1)
    config = secured_config(secured, folder, topic, reader=reader, client=client, env={**secured.env, **env})
    config = config.model_copy(update={"kafka": config.kafka.model_copy(update={"timeout_s": 3.0})})
    plan = plan_of(topic, {0: [OffsetRange(topic.priority_topic(0), 0, 0, 3)]})

    started = time.monotonic()
    try:
        result = drain_batch(spark, config, topic, f"b-{reader}-{mistake}", 1, plan)
        [failed] = [r.error for r in result.ranges if r.error is not None]
        got, line = failed.error().code, failed.message
    except KafkaSecurityFailed as err:
        got, line = err.code, str(err)
    took = time.monotonic() - started

    assert got == code, line
    assert "\n" not in line and not [s for s in [*secured.secrets, *env.values()] if s in line]
    assert took < 30, f"took {took:.1f} s"


def test_broker_status_prints_the_client_settings_and_names_the_secrets_without_their_values(secured):
    result = CliRunner().invoke(app, ["broker", "status", "--data-dir", str(secured.broker.data_dir)])
    assert result.exit_code == 0, result.output
    assert "SASL_SSL (SCRAM-SHA-512 and PLAIN, user kprio; TLS)" in result.output
    settings = yaml.safe_load(result.output.split("client settings (kprio.yaml):\n", 1)[1].rsplit("secrets", 1)[0])
    assert settings["kafka"]["client"] == {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                                           "sasl.username": "kprio", "ssl.ca.location": str(secured.broker.tls.ca)}
    assert "secrets from the environment: KPRIO_KAFKA_SASL_PASSWORD" in result.output
    assert not [s for s in secured.secrets if s in result.output]


def test_no_secret_is_in_any_file_this_module_wrote(secured, module_dir, spark_files, request):
    """Runs last in the module: the broker's data dir and log, server.properties, the keystores, the
    ledgers, Dagster's instances (runs, event logs), the outputs, the Airflow tests' files and task logs, the
    session's Spark event log and scratch files; and what Airflow stored: its home (the metadata database
    and its write-ahead log, its config, the dags folder, logs), every row of its database read back (XComs
    deserialized, the serialized DAGs, rendered fields, the audit log, Variables, connections)."""
    assert (secured.broker.data_dir / "server.properties").is_file() and secured.broker.log_path.is_file()
    assert list(module_dir.glob("drain-*/dagster/*")), "run the whole module: the sweep reads what its drains wrote"
    # Spark's event log holds the native reader's plan, options and all (its Kafka client's settings redacted).
    assert wait_for(lambda: any(b"orders-native" in f.read_bytes() for f in (spark_files / "events").rglob("*")
                                if f.is_file()), 30), "the native drain is not in Spark's event log"
    roots = [module_dir, spark_files]
    if importlib.util.find_spec("airflow") is not None:
        from tests.fixtures.airflow import stored_by_airflow

        assert (module_dir / "airflow-drain" / "task-logs.txt").is_file(), "run the whole module: the Airflow drain"
        home = request.getfixturevalue("airflow_home").home
        roots.append(home)
        stored = stored_by_airflow(home)
        assert "orders-airflow-drain" in stored["xcom (deserialized)"], "the Airflow drain's XComs are not stored"
        assert "kprio_drain" in stored["serialized_dag (data)"]
        assert {table: [s for s in secured.secrets if s in text] for table, text in stored.items()
                if any(s in text for s in secured.secrets)} == {}
    assert files_holding(roots, secured.secrets) == {}
