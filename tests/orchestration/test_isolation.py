"""Failure isolation: poison records are quarantined, a broken partition holds only itself, urgent data keeps flowing.

Real broker, real Spark, a real Dagster instance; every test checks conservation over the
output and the dead letters against the committed offsets.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kprio_core.kafka.produce import Record, produce
from kprio_core.ledger import BatchState
from orchestration.cli.main import app
from orchestration.dagster import drain_loop
from orchestration.dagster.sensors import tick
from tests.fixtures.kafka import BASE_TS_MS, fill
from tests.orchestration.conservation import conservation, lag
from tests.orchestration.dagster_env import read_all_dead_letters

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]

SCHEMA = {"i": "long", "amount": "double"}
POISON = [
    (b"not json at all", "value is not JSON"),
    (b"\xff\xfe\xfd not utf-8", "value is not JSON"),
    (b"[1, 2, 3]", "value is a JSON list"),
    (b'{"i": "seven", "amount": 1.5}', "field 'i'"),
    (b'{"amount": 2.5}', "required field 'i'"),
]
"""One of each kind of bad record the default JSON handler meets, with a word its error names."""


def good(i: int, partition: int) -> Record:
    return Record(f"k{i}", json.dumps({"i": i, "amount": i * 1.5}), BASE_TS_MS + i, partition)


def produce_with_poison(kafka_settings, topic_name: str, *, partitions: int, good_per_partition: int,
                        poison_at: dict[int, list[bytes]]) -> dict[tuple[str, int, int], bytes]:
    """Good records on every partition with the given poison values in the middle; the poison's offsets."""
    where = {}
    for partition in range(partitions):
        bad = poison_at.get(partition, [])
        half = good_per_partition // 2
        records = [good(i, partition) for i in range(half)]
        records += [Record(f"bad{j}", value, BASE_TS_MS, partition) for j, value in enumerate(bad)]
        records += [good(i, partition) for i in range(half, good_per_partition)]
        produce(kafka_settings, topic_name, records)
        for j, value in enumerate(bad):
            where[(topic_name, partition, half + j)] = value
    return where


def test_poison_in_priority_0_is_quarantined_while_a_burst_of_priority_2_drains(
    make_topic, kprio_env, dagster_instance, kafka_settings, spark, tmp_path, monkeypatch
):
    topic = make_topic(priorities=3, partitions=2, records={1: 40}, schema=SCHEMA, required_fields=("i",))
    p0 = topic.priority_topic(0)
    poison = produce_with_poison(kafka_settings, p0, partitions=2, good_per_partition=150,
                                 poison_at={0: [v for v, _ in POISON[:3]], 1: [v for v, _ in POISON[3:]]})
    env = kprio_env(topic, planner={"record_budget": 120, "target_batch_s": None})

    first = drain_loop.drain(env.defs, dagster_instance, max_batches=1)
    assert [b.state for b in first.batches] == [BatchState.COMMITTED]
    fill(kafka_settings, topic.priority_topic(2), 30, partitions=2)  # the burst arrives mid-drain

    # The whole drain through the CLI: one command, exit 0, no operator step.
    config_file = tmp_path / "kprio.yaml"
    config_file.write_text(json.dumps(env.config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    result = CliRunner().invoke(app, ["drain", "--until-empty", "--json", "--config", str(config_file)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["ok"] and summary["stopped"] == "no backlog left"
    # Priority 2's burst went in the very next batch, next to priority 0's bulk.
    assert summary["batches"][0]["records"].get("2") == 30

    assert lag(topic, env.edge) == {2: 0, 1: 0, 0: 0}
    check = conservation(env.config, topic, env.edge)
    assert check.ok, check
    assert check.dead_letters == len(POISON) and check.output == 300 + 40 + 30
    dead = read_all_dead_letters(spark, env.config.drain.dead_letter_path, topic)
    assert [(t, q, o) for t, q, o, _ in dead] == sorted(poison)
    # Each dead letter keeps its raw bytes and says what was wrong with it.
    errors = {poison[(t, q, o)]: error for t, q, o, error in dead}
    for value, word in POISON:
        assert word in errors[value], (value, errors[value])


def test_a_partition_above_the_invalid_ratio_waits_alone_while_every_other_partition_drains(
    make_topic, kprio_env, dagster_instance, kafka_settings, spark
):
    topic = make_topic(priorities=3, partitions=2, records={2: 20, 1: 30}, schema=SCHEMA, required_fields=("i",))
    p0 = topic.priority_topic(0)
    # Partition 0 of priority 0: a broken producer (40 bad of 80); partition 1: clean.
    produce_with_poison(kafka_settings, p0, partitions=1, good_per_partition=40, poison_at={0: [b"garbage"] * 40})
    produce(kafka_settings, p0, [good(i, 1) for i in range(50)])
    env = kprio_env(topic, planner={"record_budget": 500, "target_batch_s": None},
                    recovery={"max_attempts": 2, "backoff_s": 0.1, "backoff_max_s": 0.2, "lease_s": 15})

    report = drain_loop.drain(env.defs, dagster_instance)

    assert not report.ok
    assert f"{p0}[0] from 0" in report.stopped and "kprio retry" in report.stopped
    snap = {(p.topic, p.partition): p.backlog for p in env.edge.snapshot(topic, now_ms=0).partitions}
    assert {tp: n for tp, n in snap.items() if n} == {(p0, 0): 80}  # only the broken partition waits
    held = [b for b in env.ledger.batches.find(topic.name, states=[BatchState.FAILED])]
    assert len(held) == 1 and held[0].attempts == 2
    assert [r.range.topic_partition for r in held[0].plan.ranges] == [(p0, 0)]
    assert "values_match_schema" in held[0].reason and f"{p0}[0]" in held[0].reason
    check = conservation(env.config, topic, env.edge)
    assert check.ok, check
    # The sensor's skip reason names the held partition and the remedy.
    reason = tick(dagster_instance, env.edge, env.ledger, env.config).skip_reason
    assert f"{p0}[0] from 0 by {held[0].batch_id}" in reason and f"kprio retry {held[0].batch_id}" in reason

    # The operator decides these are to be quarantined after all, and retries the batch.
    fixed = env.rebuild(quality={"max_invalid_ratio": 1.0})
    outcome = drain_loop.redrain(fixed.defs, dagster_instance, held[0].batch_id)
    assert outcome.success and outcome.state is BatchState.COMMITTED, outcome
    assert lag(topic, env.edge) == {2: 0, 1: 0, 0: 0}
    check = conservation(env.config, topic, env.edge)
    assert check.ok and check.dead_letters == 40, check


def test_a_spark_job_dying_on_priority_0_holds_priority_2_one_attempt_at_most(
    make_topic, kprio_env, dagster_instance, kafka_settings, spark
):
    """The drain of a mixed batch dies as a whole (its Python worker killed on priority 0's records): the
    failure splits the batch by priority, then by partition, so every part whose records are fine commits."""
    topic = make_topic(priorities=3, partitions=2, records={2: 20, 1: 30, 0: 40}, schema=SCHEMA)
    env = kprio_env(topic, planner={"record_budget": 500, "target_batch_s": None},
                    drain={"handler": "tests.spark_jobs.handlers_for_tests:kills_its_worker_on_priority_0"},
                    recovery={"max_attempts": 1, "backoff_s": 0.1, "backoff_max_s": 0.2, "lease_s": 15})

    report = drain_loop.drain(env.defs, dagster_instance)

    # Splitting spends no attempt: each part of priority 0 that cannot be split further fails once, and waits.
    assert not report.ok and "kprio retry" in report.stopped
    assert lag(topic, env.edge) == {2: 0, 1: 0, 0: 40}
    batches = env.ledger.batches.find(topic.name)
    shown = [(b.batch_id, b.state.value, b.attempts, [str(r.range) for r in b.plan.ranges], b.reason) for b in batches]
    urgents = [b for b in batches if {r.priority for r in b.plan.ranges} == {2}]
    assert len(urgents) == 1, shown  # once (of 3 full runs) two batches of priority 2 alone: the ledger, to see why
    [urgent] = urgents
    assert (urgent.batch_id, urgent.state, urgent.attempts) == ("b-000001", BatchState.COMMITTED, 2), urgent
    assert {r.priority for b in batches if b.state is BatchState.COMMITTED for r in b.plan.ranges} == {2, 1}
    held = env.ledger.batches.find(topic.name, states=[BatchState.FAILED])
    assert {r.range.topic_partition for b in held for r in b.plan.ranges} == {
        (topic.priority_topic(0), 0), (topic.priority_topic(0), 1)}
    assert all(len(b.plan.ranges) == 1 for b in held), "bisected down to one partition each"
    assert all("Python worker exited unexpectedly (crashed) [spark_job_failed]" in b.reason for b in held), held
    splits = [e.reason for b in batches for e in env.ledger.batches.events(b.batch_id)
              if e.reason and "retried apart" in e.reason]
    assert splits, "the failure split the batch"
    check = conservation(env.config, topic, env.edge)
    assert check.ok, check
