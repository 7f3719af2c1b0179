"""A fault that passes heals by itself: a broker outage, a read-only output a person fixes; no kprio command.

The outage is real: the drain's clients reach the session's broker through a relay the test cuts
(``faulty_kafka``, tests/fixtures/faulty_network.py: connections refused, as when the broker or
the network is down), while every other client keeps the broker. The read-only output is a real
read-only mount. The moment the fault lands is forced: the ``kprio drain`` child process is
stopped right before its Kafka commit (``KPRIO_PAUSE_AT``), the fault is made, and the process
resumed into it.

Each case ends with the same process, with no kprio command run by anyone, finishing by itself:
zero lag, conservation over output and dead letters. The retry backoff is a minute: a drain that
waits it out after the fault passed shows as a test that does not finish in time.

The issue's outage lasted 30 s; what the ``--until-empty`` case proves is that an outage the drain's
commit and then its ticks run into heals by itself with no retry wasted into it. Its clients time out
after ``kafka.timeout_s`` = 4 s there (10 s by default), so the failing commit and then two or more of
its ticks (a lag snapshot that fails within 4 s, then a wait of 2 x ``sensor.interval_s``) meet an
outage of 16 s, not a fixed half minute.
"""

from __future__ import annotations

import threading
import time

import pytest
import yaml

from kprio_core.config import parse_config
from kprio_core.ledger import BatchState, Ledger
from kprio_core.lifecycle.loop import Until
from orchestration.dagster import drain_loop
from orchestration.dagster.definitions import build_definitions
from orchestration.services.process import wait_for
from tests.fixtures.postgres import postgres_server  # noqa: F401 (fixture)
from tests.fixtures.small_disks import read_only_dir, read_only_in_place
from tests.fixtures.paused import paused, resume
from tests.orchestration.conservation import conservation, lag
from tests.orchestration.test_recovery import CHILD_TIMEOUT_S, child_config, kill_group, output_of, start

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]

BROKER_TIMEOUT_S = 4
"""``kafka.timeout_s`` of the drains cut off from the broker: a call into the outage fails within this."""
OUTAGE_S = 4 * BROKER_TIMEOUT_S
"""The outage under ``--until-empty`` (a child process, whose ticks the test cannot see): its commit fails within
one call timeout, and each of its ticks after takes at most a call timeout and 2 x ``sensor.interval_s`` (4 s):
two ticks or more meet the outage and hold the failed batch's retry."""
FOLLOW_OUTAGE_S = 30.0
"""Under ``--follow`` (see its test's docstring)."""
HEALED_WITHIN_S = 75.0
"""After the fault passed, the drain finishes within this (the retry's backoff is 60 s: a drain that waited it out
after an outage would not). The drain of what is left takes a few seconds; a loaded 2-core machine, more."""
SLOW_BACKOFF = {"lease_s": 15, "backoff_s": 60, "backoff_max_s": 60, "max_attempts": 3}
LEDGER_LEASE_S = 6
LEDGER_DOWN_S = 1.5 * LEDGER_LEASE_S
"""The ledger (its database, or a SQLite ledger's directory) is down or read-only longer than a lease: the run in
flight cannot renew its lease through it."""


def backlog(make_topic, kprio_env, tmp_path, child_spark, **sections):
    """Two batches of every priority; a child's kprio.yaml for them (``sections`` override its own)."""
    topic = make_topic(priorities=2, partitions=2, records={1: 400, 0: 800}, schema={"i": "long", "amount": "double"})
    env = kprio_env(topic, planner={"record_budget": 600, "target_batch_s": None}, recovery=SLOW_BACKOFF)
    (tmp_path / "home").mkdir()
    config = child_config(env, tmp_path, child_spark)
    raw = yaml.safe_load(config.read_text())
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    config.write_text(yaml.safe_dump(raw))
    return env, topic, config


def stopped(proc) -> bool:
    """Whether the run's worker (a child of ``proc``) stopped at its pause point."""
    return paused(proc) is not None


def assert_done(env, topic) -> None:
    assert lag(topic, env.edge) == dict.fromkeys(range(topic.priorities), 0)
    check = conservation(env.config, topic, env.edge)
    assert check.ok, check
    with Ledger(env.config.ledger.url) as ledger:
        assert ledger.batches.in_flight(topic.name) == []
        assert ledger.batches.find(topic.name, states=[BatchState.FAILED]) == []


@pytest.mark.parametrize(("fault", "point"), [("outage", "before-kafka-commit"), ("hang", "before-kafka-commit")],
                         ids=["refused-at-commit", "hangs-at-commit"])
def test_a_broker_outage_heals_under_until_empty_with_no_command_run(
        make_topic, kprio_env, faulty_kafka, tmp_path, spark, child_spark, fault, point):
    """A broker that refuses (down), or hangs (no answer on open connections: its JVM stopped), when the batch
    commits: the commit fails the batch as transient, and it heals. (A hang during the read heals too, tried with
    the point ``before-drain``: the read may also ride it out; left out of the suite for its 40 s.)"""
    env, topic, config = backlog(make_topic, kprio_env, tmp_path, child_spark,
                                 kafka={"bootstrap_servers": faulty_kafka.bootstrap, "timeout_s": BROKER_TIMEOUT_S})
    proc = start(config, tmp_path, "--until-empty", KPRIO_PAUSE_AT=f"{point}:{topic.name}",
                 KPRIO_CRASH_ONCE=str(tmp_path / "paused"))
    lasts = OUTAGE_S
    try:
        assert wait_for(lambda: stopped(proc) or proc.poll() is not None, CHILD_TIMEOUT_S, interval_s=0.2), \
            output_of(proc)[-2000:]
        with Ledger(env.config.ledger.url) as ledger, getattr(faulty_kafka, fault)():
            began = time.monotonic()
            resume(paused(proc))  # into the fault: its commit finds no broker answering
            wait_for(lambda: any(b.transient for b in ledger.batches.find(topic.name, states=[BatchState.FAILED])),
                     lasts, interval_s=0.5)
            failed = ledger.batches.find(topic.name, states=[BatchState.FAILED])
            time.sleep(max(0.0, lasts - (time.monotonic() - began)))  # the fault lasts its time, whatever happens
            assert proc.poll() is None, "the drain waits the outage out instead of giving up"
        healed = time.monotonic()
        assert proc.wait(timeout=CHILD_TIMEOUT_S) == 0, output_of(proc)[-3000:]
        assert time.monotonic() - healed < HEALED_WITHIN_S, "retried as soon as the broker was back, not after its backoff"
    finally:
        kill_group(proc)
    assert len(failed) == 1, output_of(proc)[-3000:]
    for batch in failed:
        assert batch.transient and "broker" in batch.reason and "\n" not in batch.reason, batch.reason
    assert_done(env, topic)
    with Ledger(env.config.ledger.url) as ledger:
        assert all(ledger.batches.get(b.batch_id).attempts > b.attempts for b in failed), (
            "the failed batch itself was retried")


def test_a_broker_outage_of_30_s_heals_under_follow(make_topic, kprio_env, faulty_kafka, tmp_path, dagster_instance):
    """``kprio drain --follow``'s loop (in this process, on the session's Spark) through the outage.

    Still the issue's 30 s with 10 s call timeouts: the outage lands anywhere in the run in flight (no pause
    point), and with 4 s timeouts and the outage held until that run failed, the run misread the outage as its
    priority topics deleted (a LogChanged failure held for kprio reset; healed only after the 60 s backoff)."""
    topic = make_topic(priorities=2, partitions=2, records={1: 400, 0: 800}, schema={"i": "long", "amount": "double"})
    env = kprio_env(topic, planner={"record_budget": 300, "target_batch_s": None}, recovery=SLOW_BACKOFF)
    raw = env.config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})
    raw["kafka"].update(bootstrap_servers=faulty_kafka.bootstrap, timeout_s=10)
    config = parse_config(raw, "test", env={})
    stop, reports = threading.Event(), []
    follow = threading.Thread(target=lambda: reports.append(drain_loop.drain(
        build_definitions(config), dagster_instance, config=config, until=Until.FOLLOW, stop=stop,
        log_level="WARNING")))
    with Ledger(env.config.ledger.url) as ledger:
        follow.start()
        try:
            assert wait_for(lambda: any(b.lease for b in ledger.batches.in_flight(topic.name)), CHILD_TIMEOUT_S,
                            interval_s=0.1), "a batch in flight"
            with faulty_kafka.outage():
                time.sleep(FOLLOW_OUTAGE_S)  # the outage lasts its 30 s, whatever the drain does meanwhile
            healed = time.monotonic()
            assert wait_for(lambda: lag(topic, env.edge) == {1: 0, 0: 0} and not ledger.batches.in_flight(topic.name)
                            and not ledger.batches.find(topic.name, states=[BatchState.FAILED]),
                            HEALED_WITHIN_S + 30, interval_s=0.5), [b.reason for b in ledger.batches.find(topic.name)]
            assert time.monotonic() - healed < HEALED_WITHIN_S
        finally:
            stop.set()
            follow.join(timeout=120)
    assert not follow.is_alive() and reports and reports[0].ok, reports
    assert_done(env, topic)


def test_a_read_only_output_a_person_fixes_heals_under_until_empty_with_no_command_run(
        make_topic, kprio_env, tmp_path, spark, child_spark):
    out = tmp_path / "mounted" / "out"
    env, topic, config = backlog(make_topic, kprio_env, tmp_path, child_spark,
                                 drain={"output_path": str(out)})
    proc = start(config, tmp_path, "--until-empty", KPRIO_PAUSE_AT=f"before-publish:{topic.name}",
                 KPRIO_CRASH_ONCE=str(tmp_path / "paused"))
    try:
        assert wait_for(lambda: stopped(proc) or proc.poll() is not None, CHILD_TIMEOUT_S, interval_s=0.2), \
            output_of(proc)[-2000:]
        with Ledger(env.config.ledger.url) as ledger, read_only_dir(out):
            resume(paused(proc))  # into a read-only output: its publish is refused
            failed_now = lambda: ledger.batches.find(topic.name, states=[BatchState.FAILED])  # noqa: E731
            assert wait_for(lambda: any(b.transient for b in failed_now()), 60, interval_s=0.5), output_of(proc)[-3000:]
            [failed] = ledger.batches.find(topic.name, states=[BatchState.FAILED])
            time.sleep(5)  # the drain's ticks meanwhile find the output still read-only: none retries into it
            assert ledger.batches.get(failed.batch_id).attempts == failed.attempts
        healed = time.monotonic()  # a person made the output writable again
        assert proc.wait(timeout=CHILD_TIMEOUT_S) == 0, output_of(proc)[-3000:]
        assert time.monotonic() - healed < HEALED_WITHIN_S, "retried as soon as the output took files again"
    finally:
        kill_group(proc)
    assert "read-only" in failed.reason.lower() or "Read-only file system" in failed.reason, failed.reason
    fixed = env.config.model_copy(update={"drain": env.config.drain.model_copy(update={"output_path": str(out)})})
    assert lag(topic, env.edge) == {1: 0, 0: 0}
    check = conservation(fixed, topic, env.edge)
    assert check.ok, check


def test_a_sqlite_ledger_made_read_only_a_person_fixes_heals_under_until_empty_with_no_command_run(
        make_topic, kprio_env, tmp_path, spark, child_spark):
    """The SQLite ledger's directory turns read-only (a remount, a person's chmod) while the drain publishes, for
    longer than a lease (1.5 leases of :data:`LEDGER_LEASE_S`); a person makes it writable again. The drain rides
    it out, no restart."""
    place = tmp_path / "ledger"
    place.mkdir()
    url = f"sqlite:///{place / 'ledger.db'}"
    env, topic, config = backlog(make_topic, kprio_env, tmp_path, child_spark, ledger={"url": url},
                                 recovery={"lease_s": LEDGER_LEASE_S})
    proc = start(config, tmp_path, "--until-empty", KPRIO_PAUSE_AT=f"before-publish:{topic.name}",
                 KPRIO_CRASH_ONCE=str(tmp_path / "paused"))
    try:
        assert wait_for(lambda: stopped(proc) or proc.poll() is not None, CHILD_TIMEOUT_S, interval_s=0.2), \
            output_of(proc)[-2000:]
        with read_only_in_place(place):
            resume(paused(proc))  # into a ledger that takes no write: its moves after the publish fail
            time.sleep(LEDGER_DOWN_S)  # read-only for longer than a lease, whatever the drain does
            assert proc.poll() is None, f"the drain waits for the ledger instead of giving up: {output_of(proc)[-3000:]}"
        healed = time.monotonic()
        assert proc.wait(timeout=CHILD_TIMEOUT_S) == 0, output_of(proc)[-3000:]
        assert time.monotonic() - healed < HEALED_WITHIN_S
    finally:
        kill_group(proc)
    assert "the ledger does not answer" in output_of(proc), output_of(proc)[-3000:]
    fixed = env.config.model_copy(update={"ledger": env.config.ledger.model_copy(update={"url": url})})
    assert lag(topic, env.edge) == {1: 0, 0: 0}
    check = conservation(fixed, topic, env.edge)
    assert check.ok, check
    with Ledger(url) as ledger:
        assert ledger.batches.in_flight(topic.name) == []
        assert ledger.batches.find(topic.name, states=[BatchState.FAILED]) == []


def test_the_ledger_database_down_longer_than_a_lease_heals_under_follow(
        make_topic, kprio_env, postgres_server, dagster_instance):  # noqa: F811
    """The ledger on PostgreSQL; its server stops (as in a crash) while a batch is in flight, and starts again
    later. The follow drain says so in two lines and drains on: the run in flight rides it out on its lease
    (or is taken over with the same ranges once the ledger answers).

    What matters is that the database stays down longer than the lease (it was 20 s against a lease of 10 s): no
    renewal gets through. The lease is 6 s here and the database down for 1.5 leases (9 s), not a fixed 20 s."""
    topic = make_topic(priorities=2, partitions=2, records={1: 400, 0: 800}, schema={"i": "long", "amount": "double"})
    url = postgres_server.url(postgres_server.new_database("heal"))
    env = kprio_env(topic, planner={"record_budget": 300, "target_batch_s": None}, ledger={"url": url},
                    recovery={"lease_s": LEDGER_LEASE_S, "backoff_s": 60, "backoff_max_s": 60})
    stop, reports, said = threading.Event(), [], []
    follow = threading.Thread(target=lambda: reports.append(drain_loop.drain(
        env.defs, dagster_instance, config=env.config, until=Until.FOLLOW, stop=stop, log_level="CRITICAL",
        on_event=said.append)))
    follow.start()
    try:
        assert wait_for(lambda: any(b.lease for b in env.ledger.batches.in_flight(topic.name)), CHILD_TIMEOUT_S,
                        interval_s=0.1), "a batch in flight"
        postgres_server.stop()
        down = time.monotonic()
        try:
            assert wait_for(lambda: any("the ledger does not answer" in line for line in said), 60, interval_s=0.5)
            # Down for LEDGER_DOWN_S, whatever the drain does meanwhile (the ledger, the only witness, is down).
            time.sleep(max(0.0, down + LEDGER_DOWN_S - time.monotonic()))
        finally:
            postgres_server.start()
        assert wait_for(lambda: lag(topic, env.edge) == {1: 0, 0: 0} and not env.ledger.batches.in_flight(topic.name)
                        and not env.ledger.batches.find(topic.name, states=[BatchState.FAILED]),
                        HEALED_WITHIN_S + 30, interval_s=0.5), [b.reason for b in env.ledger.batches.find(topic.name)]
    finally:
        stop.set()
        follow.join(timeout=120)
    assert not follow.is_alive() and reports and reports[0].ok, reports
    assert len(said) == 2 and said[0].startswith("the ledger does not answer: ") and said[1].startswith(
        "the ledger answers again (after "), said
    assert_done(env, topic)
