"""When the log changes under kprio (issue 17), on the real broker: nothing silently skipped, nothing twice,
no earlier output lost or overwritten, the other partitions and priorities drained, and the line a person sees."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import NewTopic
from typer.testing import CliRunner

from kprio_core.kafka.client import Deadline, new_admin
from kprio_core.kafka.topics import ensure_topics
from kprio_core.ledger import BatchState, Ledger
from kprio_core.model.results import CheckReport
from orchestration.cli.main import app
from orchestration.dagster import drain_loop
from orchestration.dagster.instance import open_instance
from orchestration.dagster.sensors import tick
from orchestration.runtime.log_changes import reset_partition
from orchestration.runtime.tick import decide
from tests.fixtures.kafka import (
    delete_topics,
    fill,
    generated_records,
    produce_acked,
    wait_until_served,
)
from tests.orchestration.conservation import conservation, lag, published_offsets
from tests.orchestration.ledger_states import commit_as_drained, drained_as_planned
from tests.fixtures.dagster_instances import fresh_instance

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]


def files(root: str, logical: str) -> dict[str, float]:
    """Published file name -> modification time (staging excluded)."""
    return {p.name: p.stat().st_mtime_ns for p in (Path(root) / logical).rglob("*.parquet") if "_staging" not in p.parts}


def set_committed(kafka, group: str, offsets: dict[tuple[str, int], int]) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    admin = new_admin(kafka)
    tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group].result(timeout=30)


def recreate(kafka, topic, priority: int, partitions: int) -> None:
    """Delete one priority topic and create it again, waiting until the cluster serves the new one."""
    admin = new_admin(kafka)
    name = topic.priority_topic(priority)
    delete_topics(kafka, [name])
    ensure_topics(admin, topic, partitions, Deadline(30, kafka.bootstrap_servers), {"retention.ms": "-1"})
    wait_until_served(kafka, [name])


def test_a_recreated_topic_is_held_then_reset_into_a_new_incarnation(make_topic, kprio_env, kafka_settings):
    topic = make_topic(priorities=2, partitions=1, records={1: 30, 0: 30})
    env = kprio_env(topic, planner={"record_budget": 1000, "target_batch_s": None})
    recreated = topic.priority_topic(1)
    with fresh_instance() as instance:
        assert drain_loop.drain(env.defs, instance).ok
        first = files(env.config.drain.output_path, topic.name)
        recreate(kafka_settings, topic, 1, 1)
        fill(kafka_settings, recreated, 12, partitions=1)  # new records below the old committed offset 30
        fill(kafka_settings, topic.priority_topic(0), 7, partitions=1)

        report = drain_loop.drain(env.defs, instance)
        # Held, not "no backlog left": the partition, what changed, and the one command.
        assert not report.ok
        assert f"{recreated}[0] topic recreated" in report.stopped
        assert f"kprio reset {recreated}[0] --to earliest|latest|<offset>" in report.stopped
        assert lag(topic, env.edge)[0] == 0, "the other priority drained on"
        assert [e.state for e in env.ledger.beliefs.log_events(topic.name)] == ["topic recreated"]

        line = reset_partition(env.edge, env.ledger, env.config, recreated, 0, "earliest", now_ms=0)
        # Deleting a topic deletes its group offsets too: the group had none, kprio had committed 30.
        assert line == (f"kprio reset {recreated}[0] --to earliest: committed none -> 0 (kprio committed 30), "
                        "incarnation 2 (was topic recreated)")
        report = drain_loop.drain(env.defs, instance)
        assert report.ok, report.stopped
    after = files(env.config.drain.output_path, topic.name)
    assert {n: t for n, t in after.items() if n in first} == first, "incarnation 1's files are untouched"
    assert any(n.startswith(f"{recreated}+0+0000000000+0000000012+i2") for n in after)
    check = conservation(env.config, topic, env.edge, incarnations={f"{recreated}[0]": 2})
    assert check.ok and check.output == 12 + 37, check
    assert [e.decided_by for e in env.ledger.beliefs.log_events(topic.name)] == ["rule", "person"]


def test_offsets_moved_expired_and_beyond_the_log_are_named_and_never_doubled(make_topic, kprio_env, kafka_settings):
    topic = make_topic(priorities=2, partitions=3, records={1: 90, 0: 60})
    env = kprio_env(topic, planner={"record_budget": 40, "target_batch_s": None})
    hi, lo = topic.priority_topic(1), topic.priority_topic(0)
    with fresh_instance() as instance:
        assert drain_loop.drain(env.defs, instance).ok
        first = files(env.config.drain.output_path, topic.name)
        fill(kafka_settings, hi, 30, partitions=3)  # 40 per partition now
        fill(kafka_settings, lo, 30, partitions=3)
        set_committed(kafka_settings, topic.priority_group(1), {(hi, 0): 5, (hi, 1): 36, (hi, 2): 10_000})
        admin = new_admin(kafka_settings)  # kept alive until its future resolves
        admin.delete_consumer_groups([topic.priority_group(0)])[topic.priority_group(0)].result(timeout=30)

        report = drain_loop.drain(env.defs, instance)
        assert not report.ok
        assert f"{hi}[2] ahead of the log: committed 10000 is beyond the log's end 40" in report.stopped
        assert f"kprio reset {hi}[2]" in report.stopped and f"{hi}[0]" not in report.stopped
        states = {(e.topic, e.partition): (e.state, e.outcome) for e in env.ledger.beliefs.log_events(topic.name)}
        assert states[(hi, 0)] == ("reset back outside kprio", "redrain")
        assert states[(hi, 1)] == ("reset forward outside kprio", "accept")
        assert states[(hi, 2)] == ("ahead of the log", "hold")
        assert {states[(lo, q)] for q in range(3)} == {("committed offsets gone", "restore")}
        skipped = next(e for e in env.ledger.beliefs.log_events(topic.name) if e.state == "reset forward outside kprio")
        assert skipped.note and "[30,36) skipped by the operator" in skipped.note
        assert any(c.startswith(f"{hi}[1] ") and "reset forward outside kprio -> accept" in c
                   for b in env.ledger.batches.find(topic.name) for c in b.plan.log_changes), "shown in the next batch"
        reset_partition(env.edge, env.ledger, env.config, hi, 2, "latest", now_ms=0)
        assert drain_loop.drain(env.defs, instance).ok

    after = files(env.config.drain.output_path, topic.name)
    assert set(first) <= set(after), "no earlier file lost (re-drained ones replaced under the same name)"
    # Priority 0 was restored, never re-drained from its log start; priority 1 [30,36) of partition 1 was skipped
    # by the operator, and partition 2 [30,40) after the reset to latest: each recorded, nothing else missing.
    # hi[2] was reset to latest (40): incarnation 2 starts there and holds nothing yet, incarnation 1's [0,30) stays.
    assert not any("+i2" in n for n in after)
    check = conservation(env.config, topic, env.edge)
    missing = {(t, q, o) for t, q, o in check.missing}
    assert missing == {(hi, 1, o) for o in range(30, 36)} | {(hi, 2, o) for o in range(30, 40)}, check
    assert not (check.doubled or check.in_both or check.beyond), check
    assert lag(topic, env.edge) == {1: 0, 0: 0}


def add_partitions(kafka, name: str, total: int) -> None:
    """Grow ``name`` to ``total`` partitions (admin CreatePartitions), waiting until the cluster serves them."""
    from confluent_kafka.admin import NewPartitions

    admin = new_admin(kafka)
    for f in admin.create_partitions([NewPartitions(name, total)], operation_timeout=30).values():
        f.result(timeout=30)
    wait_until_served(kafka, [name])


def test_partitions_added_in_flight_and_between_ticks_are_drained_from_their_start_within_one_tick(
        make_topic, kprio_env, kafka_settings):
    topic = make_topic(priorities=2, partitions=1, records={1: 10, 0: 10})
    env = kprio_env(topic, planner={"record_budget": 1000, "target_batch_s": None})
    hi, lo = topic.priority_topic(1), topic.priority_topic(0)
    with fresh_instance() as instance:
        planned = tick(instance, env.edge, env.ledger, env.config)  # a batch in flight over partition 0 ...
        instance.add_dynamic_partitions("kprio_batches", list(planned.partitions))
        add_partitions(kafka_settings, hi, 2)  # ... when partition 1 is added and takes records: drained after it
        produce_acked(kafka_settings, hi, [r._replace(partition=1) for r in generated_records(3, start=50)])
        assert drain_loop.drain(env.defs, instance).ok
        first = files(env.config.drain.output_path, topic.name)
        add_partitions(kafka_settings, hi, 3)
        produce_acked(kafka_settings, hi, [r._replace(partition=1 + i % 2)
                                           for i, r in enumerate(generated_records(8, start=100))])
        fill(kafka_settings, lo, 5, partitions=1)

        turn = tick(instance, env.edge, env.ledger, env.config)  # one tick picks the new partitions up
        instance.add_dynamic_partitions("kprio_batches", list(turn.partitions))
        [batch] = [env.ledger.batches.get(b) for b in turn.partitions]
        ranges = {(r.topic, r.partition): (r.start, r.end) for r in batch.plan.offset_ranges() if r.count}
        assert ranges == {(hi, 1): (3, 7), (hi, 2): (0, 4), (lo, 0): (10, 15)}, ranges
        added = [(e.topic, e.partition, e.state, e.outcome) for e in env.ledger.beliefs.log_events(topic.name)]
        assert added == [(hi, 1, "partition added", "drain"), (hi, 2, "partition added", "drain")]
        report = drain_loop.drain(env.defs, instance)
        assert report.ok and report.stopped == "no backlog left", report.stopped

    after = files(env.config.drain.output_path, topic.name)
    assert {n: t for n, t in after.items() if n in first} == first, "nothing else disturbed"
    check = conservation(env.config, topic, env.edge)
    assert check.ok and check.output == 10 + 10 + 3 + 8 + 5, check
    assert lag(topic, env.edge) == {1: 0, 0: 0}


def cli_config(env, tmp_path, monkeypatch) -> str:
    """kprio.yaml of ``env`` in tmp_path, and DAGSTER_HOME there (as tests/orchestration/test_cli_drain.py)."""
    path = tmp_path / "kprio.yaml"
    path.write_text(yaml.safe_dump(env.config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    (tmp_path / "dagster_home").mkdir(exist_ok=True)
    return str(path)


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_a_priority_topic_deleted_while_draining_is_held_and_the_others_drain_on(make_topic, kprio_env,
                                                                                 kafka_settings, tmp_path,
                                                                                 monkeypatch):
    topic = make_topic(priorities=3, partitions=1, records={2: 6, 1: 6, 0: 6})
    env = kprio_env(topic, planner={"record_budget": 1000, "target_batch_s": None})
    path = cli_config(env, tmp_path, monkeypatch)
    gone = topic.priority_topic(1)
    assert invoke("drain", "--until-empty", "--config", path).exit_code == 0
    for p in range(3):
        fill(kafka_settings, topic.priority_topic(p), 4, partitions=1)
    with open_instance(env.config) as instance:  # a batch of every priority just planned ...
        turn = tick(instance, env.edge, env.ledger, env.config)
        instance.add_dynamic_partitions("kprio_batches", list(turn.partitions))
    assert len(turn.partitions) == 1
    admin = new_admin(kafka_settings)  # ... then priority 1's topic is deleted
    for f in admin.delete_topics([gone], operation_timeout=30).values():
        f.result(timeout=30)

    started = time.monotonic()
    result = invoke("drain", "--until-empty", "--config", path)
    # Not "no backlog left": exit 1, the held line names the partition, what changed and the remedy.
    assert result.exit_code == 1, result.output
    assert "no backlog left" not in result.output
    assert "only held partitions are left, they need a person" in result.output
    assert time.monotonic() - started < 60, "held at once, not retried until the loop gives up"
    assert f"{gone}[0] topic deleted: the topic no longer exists on the cluster" in result.output
    assert f"kprio topics create (the topic again), then kprio reset {gone}[0] --to" in result.output
    events = [(e.topic, e.state, e.outcome) for e in env.ledger.beliefs.log_events(topic.name)]
    assert events == [(gone, "topic deleted", "hold")], "held, recorded once"
    # Every other priority drained to zero lag, each record once.
    snap = env.edge.snapshot(topic, now_ms=0, deleted_ok={gone})
    assert snap.deleted == (gone,) and snap.backlog_by_priority() == {2: 0, 1: 0, 0: 0}
    out = published_offsets(env.config.drain.output_path, topic.name)
    for p in (2, 0):
        mine = {k: n for k, n in out.items() if k[0] == topic.priority_topic(p)}
        assert sorted(o for _, _, o in mine) == list(range(10)) and set(mine.values()) == {1}, mine

    doc = json.loads(invoke("lag", "--json", "--config", path).output)
    assert [(d["topic"], d["state"], d["decision"]) for d in doc["deleted"]] == [(gone, "topic deleted", "hold")]

    # Created again later (not by kprio topics create) and written: still held, once, for the person's reset;
    # nothing of the new log is published meanwhile.
    for f in admin.create_topics([NewTopic(gone, 1, 1, config={"retention.ms": "-1"})]).values():
        f.result(timeout=30)
    wait_until_served(kafka_settings, [gone])
    fill(kafka_settings, gone, 3, partitions=1)
    began = time.monotonic()
    result = invoke("drain", "--until-empty", "--config", path)
    assert result.exit_code == 1 and f"then kprio reset {gone}[0] --to" in result.output, result.output
    # At once, not after 120 s waiting for a retry of the in-flight batch that never comes (it read the old log).
    assert "only held partitions are left" in result.output and "retried by itself" not in result.output, result.output
    assert time.monotonic() - began < 60, result.output
    assert [(e.topic, e.state, e.outcome) for e in env.ledger.beliefs.log_events(topic.name)] == events, "still held once"
    assert published_offsets(env.config.drain.output_path, topic.name) == out, "nothing of the new log published"


def test_the_policy_resets_a_recreated_topic_to_earliest_and_a_log_overtaken_to_latest(make_topic, kprio_env,
                                                                                        kafka_settings, tmp_path,
                                                                                        monkeypatch):
    topic = make_topic(priorities=2, partitions=1, records={1: 20, 0: 10})
    env = kprio_env(topic, planner={"record_budget": 1000, "target_batch_s": None},
                    drain={"on_offset_out_of_range": "earliest"})
    path = cli_config(env, tmp_path, monkeypatch)
    hi, lo = topic.priority_topic(1), topic.priority_topic(0)
    with fresh_instance() as instance:
        assert drain_loop.drain(env.defs, instance).ok
        first = files(env.config.drain.output_path, topic.name)
        recreate(kafka_settings, topic, 1, 1)
        fill(kafka_settings, hi, 6, partitions=1)  # below the old committed offset 20

        # Before the tick: kprio lag shows the state and what the policy will do.
        [row] = json.loads(invoke("lag", "--json", "--config", path).output)["priorities"]["1"]["partitions"]
        assert (row["state"], row["decision"]) == ("topic recreated", "reset to earliest")
        assert drain_loop.drain(env.defs, instance).ok  # reset by the policy, drained: no person needed
        [event] = env.ledger.beliefs.log_events(topic.name)
        assert (event.topic, event.state, event.outcome, event.decided_by, event.committed_after) == (
            hi, "topic recreated", "reset to earliest", "policy", 0)
        [newest] = env.ledger.batches.find(topic.name, limit=1)
        assert any(c.startswith(f"{hi}[0] ") and " topic recreated " in c
                   and "-> reset to earliest 0, incarnation 2 (policy)" in c
                   for c in newest.plan.log_changes), newest.plan.log_changes

        # latest: a committed offset beyond the log's end skips the log's records, recorded.
        latest = env.rebuild(drain={**env.config.drain.model_dump(mode="json"), "on_offset_out_of_range": "latest"})
        fill(kafka_settings, lo, 5, partitions=1)  # [10,15): skipped by the reset below
        set_committed(kafka_settings, topic.priority_group(0), {(lo, 0): 500})
        assert drain_loop.drain(latest.defs, instance).ok
        event = env.ledger.beliefs.log_events(topic.name)[-1]
        assert (event.topic, event.state, event.outcome, event.decided_by, event.committed, event.committed_after) == (
            lo, "ahead of the log", "reset to latest", "policy", 500, 15)

    after = files(env.config.drain.output_path, topic.name)
    assert {n: t for n, t in after.items() if n in first} == first, "incarnation 1's files are untouched"
    assert [n for n in after if "+i2" in n] == [n for n in after if n.startswith(f"{hi}+0+0000000000+0000000006+i2")]
    # hi: the new log drained exactly once (incarnation 2); lo: [10,15) skipped by the policy, nothing else missing.
    check = conservation(env.config, topic, env.edge, incarnations={f"{hi}[0]": 2})
    assert check.missing == [(lo, 0, o) for o in range(10, 15)], check
    assert not (check.doubled or check.in_both or check.beyond) and check.output == 6 + 10, check
    assert lag(topic, env.edge) == {1: 0, 0: 0}


def test_kprio_reset_through_the_cli_names_bad_targets_and_releases_the_hold(make_topic, kprio_env, kafka_settings,
                                                                             tmp_path, monkeypatch):
    topic = make_topic(priorities=1, partitions=1, records={0: 10})
    env = kprio_env(topic)
    path = cli_config(env, tmp_path, monkeypatch)
    name = topic.priority_topic(0)
    set_committed(kafka_settings, topic.priority_group(0), {(name, 0): 500})
    ledger_file = Path(env.config.ledger.url.removeprefix("sqlite:///"))
    env.ledger.close()
    ledger_file.unlink()

    # kprio lag is a read command: no ledger yet, none created; what Kafka alone tells is shown.
    shown = invoke("lag", "--json", "--config", path)
    assert shown.exit_code == 0, shown.output
    [row] = json.loads(shown.output)["priorities"]["0"]["partitions"]
    assert (row["state"], row["decision"], row["committed"]) == ("ahead of the log", "hold", 500)
    assert not ledger_file.exists(), "kprio lag created a ledger"

    def refused(target: str, to: str, exit_code: int = 1) -> str:
        result = invoke("reset", target, "--to", to, "--config", path)
        assert result.exit_code == exit_code, result.output
        return result.output

    # The command line's own mistakes are usage errors (exit 2); what the log says of a good one is exit 1.
    assert "'nope-0' is not a priority topic of the configuration" in refused("nope-0[0]", "earliest", 2)
    assert f"{name} has no partition 3 (it has 0) (PARTITION of kprio reset)" in refused(f"{name}[3]", "earliest", 2)
    assert "--to must be earliest, latest or an offset from 0 to 2**63-1, not 'soon'" in refused(f"{name}[0]", "soon", 2)
    assert f"offset 11 is outside the log [0,10]: choose an offset in it, earliest or latest ({name}[0]) " \
           "[reset_refused]" in refused(f"{name}[0]", "11")
    assert "name one partition as topic[partition]" in refused(name, "earliest", 2)
    plan = json.loads(invoke("plan", "--json", "--config", path).output)[0]
    assert plan["action"] == "held", plan

    done = invoke("reset", f"{name}[0]", "--to", "earliest", "--config", path)
    assert done.exit_code == 0, done.output
    assert done.output.strip() == (f"kprio reset {name}[0] --to earliest: committed 500 -> 0, incarnation 2 "
                                   "(was ahead of the log)")
    plan = json.loads(invoke("plan", "--json", "--config", path).output)[0]
    assert plan["action"] == "plan" and plan["plan"]["records"] == 10, plan  # the hold is released
    with Ledger(env.config.ledger.url) as ledger:
        [event] = ledger.beliefs.log_events(topic.name)
        assert (event.decided_by, event.outcome, event.committed_after) == ("person", "reset to earliest", 0)


def test_a_moved_back_offset_re_drains_one_batch_at_a_time_in_a_free_slot(make_topic, kprio_env, kafka_settings):
    topic = make_topic(priorities=1, partitions=1, records={0: 30})
    env = kprio_env(topic, planner={"record_budget": 15, "target_batch_s": None, "max_in_flight": 1})
    name = topic.priority_topic(0)
    with fresh_instance() as instance:
        assert drain_loop.drain(env.defs, instance).ok
        first = files(env.config.drain.output_path, topic.name)
        assert len(first) == 2
        set_committed(kafka_settings, topic.priority_group(0), {(name, 0): 5})
        turn = tick(instance, env.edge, env.ledger, env.config)
        # Only the batch covering offset 5 is re-drained now: one slot, and the later one commits after it.
        assert [r.run_key for r in turn.requests] == ["b-000001.attempt-2"]
        assert [b.batch_id for b in env.ledger.batches.in_flight(topic.name)] == ["b-000001"]
        assert "re-draining b-000001 (then 1 more range(s), one batch at a time)" in turn.skip_reason or any(
            "re-draining b-000001" in h.reason for d in turn.decisions for h in d.holds)
        drain_loop.execute(env.defs, instance, turn.requests[0], "WARNING")
        report = drain_loop.drain(env.defs, instance)
        assert report.ok, report.stopped
        assert [b.batch_id for b in report.batches] == ["b-000002"], "then the next one, alone"
    assert {b.batch_id: b.attempts for b in env.ledger.batches.find(topic.name)} == {"b-000002": 2, "b-000001": 2}
    assert set(files(env.config.drain.output_path, topic.name)) == set(first), "re-drained under the same names"
    check = conservation(env.config, topic, env.edge)
    assert check.ok and check.output == 30, check
    moves = [(e.committed, e.outcome) for e in env.ledger.beliefs.log_events(topic.name)]
    assert moves == [(5, "redrain")], "decided once per move: its second step, from 15, carries the decision on"


def test_a_failed_batch_of_an_earlier_incarnation_is_superseded_never_run_again_and_holds_nothing(
        make_topic, kprio_env, kafka_settings, tmp_path, monkeypatch):
    topic = make_topic(priorities=2, partitions=1, records={1: 30, 0: 30})
    env = kprio_env(topic, planner={"record_budget": 1000, "target_batch_s": None})
    path = cli_config(env, tmp_path, monkeypatch)
    hi = topic.priority_topic(1)
    with fresh_instance() as instance:
        assert drain_loop.drain(env.defs, instance).ok
        fill(kafka_settings, hi, 10, partitions=1)  # incarnation 1 grows to 40: a batch takes [30,40) ...
        turn = tick(instance, env.edge, env.ledger, env.config)
        (old,) = turn.partitions
        first = files(env.config.drain.output_path, topic.name)
        first_bytes = {n: (Path(env.config.drain.output_path) / topic.name).rglob(n).__next__().read_bytes()
                       for n in first}
        recreate(kafka_settings, topic, 1, 1)  # ... then the topic is recreated under it, with new records
        fill(kafka_settings, hi, 12, partitions=1)
        fill(kafka_settings, topic.priority_topic(0), 7, partitions=1)

        # A reset to a new incarnation waits while the batch is in flight (it fails or finishes on its own).
        refused = invoke("reset", f"{hi}[0]", "--to", "earliest", "--config", path)
        assert refused.exit_code == 1 and f"waits for {old} in flight on {hi}[0]" in refused.output, refused.output
        env.ledger.moves.mark_failed(old, "values_match_schema failed (injected)", retry_at=None)
        assert old in {h.batch_id for h in env.ledger.batches.holds(topic.name)}, "held by the failed batch until reset"

        done = invoke("reset", f"{hi}[0]", "--to", "earliest", "--config", path)
        assert done.exit_code == 0 and "incarnation 2" in done.output, done.output
        attempts = env.ledger.batches.get(old).attempts
        report = drain_loop.drain(env.defs, instance)
        assert report.ok, report.stopped  # not held from 30 by the failed batch: the new incarnation drains on
        assert [b.batch_id for b in report.batches if b.batch_id == old] == [], "the failed batch never ran again"

    batch = env.ledger.batches.get(old)
    assert (batch.state.value, batch.attempts) == ("failed", attempts)
    assert env.ledger.batches.holds(topic.name) == []
    said = [e.reason for e in env.ledger.batches.events(old) if e.reason and "superseded" in e.reason]
    assert said == [f"{old} is superseded on {hi}[0]: planned on incarnation 1, the partition is at incarnation 2 "
                    "(its log was replaced and reset); it never runs again and holds no partition (the rest of its "
                    "offsets are planned anew)"], "said once"
    retried = invoke("retry", old, "--config", path)
    assert retried.exit_code == 1, retried.output
    assert f"{old} is superseded on {hi}[0]: planned on incarnation 1, the partition is at incarnation 2" in \
        retried.output
    assert env.ledger.batches.get(old).attempts == attempts
    assert lag(topic, env.edge) == {1: 0, 0: 0}
    after = files(env.config.drain.output_path, topic.name)
    assert {n: t for n, t in after.items() if n in first} == first, "incarnation 1's files untouched"
    assert {n: (Path(env.config.drain.output_path) / topic.name).rglob(n).__next__().read_bytes()
            for n in first} == first_bytes
    check = conservation(env.config, topic, env.edge, incarnations={f"{hi}[0]": 2})
    assert check.ok and check.output == 12 + 37, check


def test_a_commit_of_kprio_that_reached_kafka_before_its_ledger_is_no_move_by_someone_else(make_topic, kprio_env):
    # Kafka is told first, the ledger second: a tick (or a crash) in between sees the group past what the
    # ledger believes. At a checked batch's range end that is kprio's own commit, never "skipped by the operator".
    topic = make_topic(priorities=1, partitions=1, records={0: 30})
    env = kprio_env(topic, planner={"record_budget": 10, "target_batch_s": None})

    def plan_next():
        decision = decide(None, env.edge, env.ledger, env.config, topic, now_s=time.time())
        assert decision.plan is not None, decision.describe()
        return env.ledger.batches.record_plan(decision.plan).batch_id

    commit_as_drained(env.ledger, plan_next(), env.edge, topic)  # [0,10): Kafka and the ledger agree
    second = plan_next()  # [10,20)
    env.ledger.moves.mark_drained(second, drained_as_planned(env.ledger, second))
    env.ledger.moves.mark_checked(second, CheckReport(()))
    env.edge.commit(topic, env.ledger.batches.get(second).plan.offset_ranges())  # Kafka told; the ledger not yet

    decision = decide(None, env.edge, env.ledger, env.config, topic, now_s=time.time())
    [change] = decision.changes
    assert (change.committed, change.believed, str(change.state)) == (20, 10, "ok"), change
    assert not decision.decided and not decision.holds, decision.describe()
    assert [(x.batch.batch_id, str(x.why)) for x in decision.launch] == [(second, "commit")]  # it finishes itself


def test_a_hold_that_asks_a_person_stays_when_the_log_later_grows_past_the_moved_offset(make_topic, kprio_env,
                                                                                       kafka_settings):
    """Someone moved the group to 421, beyond the log's end at 121: held for a person. 450 records later the end
    is at 571, past 421: that alone reads as a forward move (skip [121,421) as the operator's). Records written
    after the move were never seen by whoever moved it: the hold stands until a person decides."""
    topic = make_topic(priorities=1, partitions=1, records={0: 121})
    env = kprio_env(topic, planner={"record_budget": 10_000, "target_batch_s": None})
    name = topic.priority_topic(0)
    with fresh_instance() as instance:
        assert drain_loop.drain(env.defs, instance).ok
        set_committed(kafka_settings, topic.priority_group(0), {(name, 0): 421})
        held = tick(instance, env.edge, env.ledger, env.config)
        assert not held.requests and "ahead of the log" in held.skip_reason, held.skip_reason
        fill(kafka_settings, name, 450, partitions=1)

        report = drain_loop.drain(env.defs, instance)
        assert not report.ok and "they need a person" in report.stopped, report.stopped
        assert "committed 421 is beyond the log's end 121" in report.stopped and "held since" in report.stopped
        assert f"kprio reset {name}[0] --to" in report.stopped
        assert lag(topic, env.edge) == {0: 150}, "nothing drained from 421 on"
        assert not [e for e in env.ledger.beliefs.log_events(topic.name) if e.outcome == "accept"], "no skip recorded"

        # The person decides: drain on from where kprio left off.
        reset_partition(env.edge, env.ledger, env.config, name, 0, "121", now_ms=int(time.time() * 1000))
        assert drain_loop.drain(env.defs, instance).ok
    assert lag(topic, env.edge) == {0: 0}
    check = conservation(env.config, topic, env.edge)
    assert check.ok and check.output == 571, check


def test_retention_under_a_planned_batch_fails_it_once_then_waits_for_the_decision_and_drains_past_the_gap(
        make_topic, kprio_env, dagster_instance):
    """Retention deletes records beyond the start of a planned batch: its read names the gap and splits the range
    off into a failed batch; no retry goes into the gap (each would fail alike); it waits for the one decision the
    hold asks for, ``drain.allow_data_loss``, then is retried by itself, recording the gap; nothing lost or doubled."""
    topic = make_topic(priorities=2, partitions=2, records={1: 12})
    env = kprio_env(topic, recovery={"max_attempts": 3, "backoff_s": 0.5, "backoff_max_s": 0.5})
    name = topic.priority_topic(1)
    turn = tick(dagster_instance, env.edge, env.ledger, env.config)
    dagster_instance.add_dynamic_partitions("kprio_batches", list(turn.partitions))
    env.edge.delete_records({(name, 0): 3})  # under the planned range [0,6) of partition 0
    report = drain_loop.drain(env.defs, dagster_instance)
    assert report.stopped.startswith("only held partitions are left, they need a person"), report.stopped
    assert f"{name}[0] from 0 (offsets [0,3) lost to retention before they were drained; set drain.allow_data_" \
           in report.stopped, report.stopped
    [failed] = env.ledger.batches.find(topic.name, states=[BatchState.FAILED])
    assert "deleted by retention: the log starts at 3" in failed.reason, failed.reason
    assert failed.attempts == 1, "no retry into the gap"
    assert conservation(env.config, topic, env.edge).ok and lag(topic, env.edge) == {1: 3, 0: 0}

    allowed = env.rebuild(drain={**env.config.drain.model_dump(mode="json", by_alias=True), "allow_data_loss": True})
    report = drain_loop.drain(allowed.defs, dagster_instance)  # the person's decision, and no kprio retry
    assert report.ok and report.stopped == "no backlog left", report.stopped
    assert env.ledger.batches.get(failed.batch_id).state is BatchState.COMMITTED
    assert lag(topic, env.edge) == {1: 0, 0: 0}
    check = conservation(env.config, topic, env.edge)
    assert check.ok and check.output == 12 - 3, check
