"""The lag verdict and freshness in ``kprio lag`` (JSON, table, ``--watch``), each state from a real scenario.

One topic is drained for real (the loop on the session's Spark, a real Dagster instance); then, with the
ledger's commits as the verdict's window and the broker's present:

- caught up: every priority OK, freshness passes;
- records arrive and nothing drains them for longer than the expected cadence: STOP (the drain stopped),
  and the urgent priority's freshness objective fails, its likely cause "no commit lately";
- the group's offset of the bulk priority moved back outside kprio (Kafka's admin API): REWIND, until the
  drain took the records again, while the other priority keeps its own verdict; and a move back kprio holds
  for ``kprio reset`` (below what kprio drained): REWIND with the hold's words, the other priority OK;
- a batch fails its checks (a record that is no JSON, ``quality.invalid: block``) and holds its partition:
  ERR, with the hold's words;
- ``kprio lag --watch`` draws the same per-priority verdicts;
- in the Dagster instance, the stopped drain fails ``priority_lag``'s freshness check (ERROR severity, the
  breach's line) and its materialization shows the STOP verdict.
"""

from __future__ import annotations

import json
import time

import dagster as dg
import pytest
import yaml
from typer.testing import CliRunner

from kprio_core.lifecycle.loop import Until
from orchestration.cli.main import app
from orchestration.dagster import drain_loop
from orchestration.dagster.freshness import check_name
from tests.fixtures.kafka import fill

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster]

runner = CliRunner()


def write(env, tmp_path, **sections) -> str:
    raw = env.config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    path = tmp_path / f"kprio-{len(list(tmp_path.glob('kprio-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def move_group(kafka_settings, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Move a consumer group's committed offsets as an operator does (``kafka-consumer-groups --reset-offsets``):
    Kafka's admin API, outside kprio."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(kafka_settings.client_config())  # kept until the answer: a client gone takes its future
    tps = [TopicPartition(t, p, o) for (t, p), o in offsets.items()]
    moved = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group].result(timeout=60)
    assert [tp.error for tp in moved.topic_partitions] == [None] * len(tps)


def lag_json(config: str) -> dict:
    result = runner.invoke(app, ["lag", "--config", config, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def until(config: str, holds, timeout_s: float = 30.0) -> dict:
    """``kprio lag --json`` until its document satisfies ``holds`` (the last one fails the test)."""
    deadline = time.monotonic() + timeout_s
    while True:
        doc = lag_json(config)
        if holds(doc) or time.monotonic() > deadline:
            return doc
        time.sleep(0.5)


def test_each_verdict_from_a_real_scenario(make_topic, kprio_env, kafka_settings, dagster_instance, tmp_path):
    now_ms = int(time.time() * 1000)
    topic = make_topic(priorities=2, partitions=1, records={1: 30, 0: 60}, base_ts_ms=now_ms)
    env = kprio_env(topic, verdict={"expected_commit_s": 1, "stop_factor": 2}, slo={"max_age_s": {1: 2}},
                    quality={"invalid": "block"}, recovery={"max_attempts": 1})
    report = drain_loop.drain(env.defs, dagster_instance, config=env.config, until=Until.EMPTY, log_level="WARNING")
    assert report.ok, report.stopped
    quick = write(env, tmp_path)

    caught_up = lag_json(quick)
    for p in ("1", "0"):
        assert caught_up["priorities"][p]["verdict"]["state"] == "OK", caught_up["priorities"][p]
    assert caught_up["priorities"]["1"]["freshness"]["status"] == "pass"

    # The drain stopped: records arrive and nothing commits them for longer than 2 cadences of 1 s.
    fill(kafka_settings, topic.priority_topic(1), 10, 1, base_ts_ms=int(time.time() * 1000))
    stopped = until(quick, lambda d: d["priorities"]["1"]["verdict"]["state"] == "STOP"
                    and d["priorities"]["1"]["freshness"]["status"] == "fail")
    urgent = stopped["priorities"]["1"]
    assert urgent["verdict"]["state"] == "STOP", urgent
    assert "10 records waiting, no commit for" in urgent["verdict"]["reason"]
    assert "priority 1 committed nothing meanwhile" in urgent["verdict"]["reason"]
    assert urgent["partitions"][0]["verdict"] == "STOP"
    assert urgent["freshness"]["status"] == "fail" and urgent["freshness"]["cause"] == "no commit lately"
    assert urgent["freshness"]["line"].startswith(f"{topic.name} priority 1: oldest pending record ")
    assert stopped["priorities"]["0"]["verdict"]["state"] == "OK", "caught up: nothing waits on it"

    # The same stopped drain in a real Dagster instance: priority_lag's freshness check fails, ERROR severity.
    evaluated = env.defs.resolve_job_def("priority_lag_job").execute_in_process(instance=dagster_instance)
    assert evaluated.success
    [check] = evaluated.get_asset_check_evaluations()
    assert check.check_name == check_name(topic.name, 1)
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert check.description.startswith(f"{topic.name} priority 1: oldest pending record ")
    assert "likely cause: no commit lately" in check.description
    assert check.metadata["cause"].value == "no commit lately"
    shown = dagster_instance.get_latest_materialization_event(dg.AssetKey("priority_lag")).asset_materialization
    assert shown.metadata[f"{topic.name}_p1_verdict"].value == "STOP"
    assert shown.metadata[f"{topic.name}_p1_backlog"].value == 10

    table = runner.invoke(app, ["lag", "--config", quick], terminal_width=200)
    assert table.exit_code == 0, table.output
    assert "STOP" in table.stdout and f"priority 1: STOP: {topic.priority_topic(1)}[0]: 10 records" in table.stdout
    assert "priority 1: freshness fail: " in table.stdout

    # The bulk priority's group moved back by a person with Kafka's admin API, outside kprio; a slow cadence
    # (records younger than 30 min at a caught-up partition are not late) keeps STOP out of both priorities.
    slow = write(env, tmp_path, verdict={"expected_commit_s": 600})
    t0 = topic.priority_topic(0)
    move_group(kafka_settings, topic.priority_group(0), {(t0, 0): 20})
    moved = lag_json(slow)["priorities"]
    rewound = moved["0"]
    assert rewound["verdict"]["state"] == "REWIND", rewound
    assert "committed offset moved back from 60 to 20" in rewound["verdict"]["reason"]
    assert rewound["partitions"][0]["state"] == "reset back outside kprio"
    assert moved["1"]["verdict"]["state"] == "OK", "the other priority keeps its own verdict"

    # The drain takes the records moved back again (kprio's rule for a reset back), and the verdict is OK again.
    report = drain_loop.drain(env.defs, dagster_instance, config=env.config, until=Until.EMPTY, log_level="WARNING")
    assert report.ok, report.stopped
    assert lag_json(slow)["priorities"]["0"]["verdict"]["state"] == "OK"

    # A record that is no JSON fails its batch's checks (quality.invalid: block): the partition is held, ERR.
    fill(kafka_settings, t0, [("k", "not json {", int(time.time() * 1000), 0)], 1)
    drain_loop.drain(env.defs, dagster_instance, config=env.config, until=Until.ONCE, log_level="WARNING")
    held = lag_json(slow)["priorities"]["0"]
    assert held["verdict"]["state"] == "ERR", held
    assert f"{t0}[0]: 1 records waiting, held: {t0}[0] from 60 by b-" in held["verdict"]["reason"], held["verdict"]
    assert "kprio retry" in held["verdict"]["reason"]

    watched = runner.invoke(app, ["lag", "--config", slow, "--watch", "--interval", "0.2", "--iterations", "2"],
                            terminal_width=200)
    assert watched.exit_code == 0, watched.output
    assert "redraw 2" in watched.stdout and "ERR" in watched.stdout and topic.name in watched.stdout


def test_a_group_moved_back_and_held_for_the_move_is_rewind_and_the_other_priority_keeps_its_verdict(
        make_topic, kprio_env, kafka_settings, dagster_instance, tmp_path):
    now_ms = int(time.time() * 1000)
    topic = make_topic(priorities=2, partitions=1, records={1: 30, 0: 30}, base_ts_ms=now_ms)
    t1, group = topic.priority_topic(1), topic.priority_group(1)
    move_group(kafka_settings, group, {(t1, 0): 10})  # a consumer took [0,10) before kprio
    env = kprio_env(topic, verdict={"expected_commit_s": 600})
    report = drain_loop.drain(env.defs, dagster_instance, config=env.config, until=Until.EMPTY, log_level="WARNING")
    assert report.ok, report.stopped
    config = write(env, tmp_path)
    assert {p: d["verdict"]["state"] for p, d in lag_json(config)["priorities"].items()} == {"1": "OK", "0": "OK"}

    # An operator moves priority 1's group back to 5, below what kprio drained ([10,30)): no batch of kprio's to
    # re-drain [5,10) with, so its tick holds the partition for kprio reset.
    move_group(kafka_settings, group, {(t1, 0): 5})
    moved = lag_json(config)["priorities"]
    assert moved["1"]["verdict"]["state"] == "REWIND", moved["1"]
    assert f"{t1}[0]: committed offset moved back from 30 to 5 " in moved["1"]["verdict"]["reason"]
    assert moved["0"]["verdict"]["state"] == "OK", moved["0"]

    drain_loop.drain(env.defs, dagster_instance, config=env.config, until=Until.ONCE, log_level="WARNING")
    held = lag_json(config)["priorities"]
    assert held["1"]["verdict"]["state"] == "REWIND", held["1"]
    assert "committed offset moved back from 30 to 5" in held["1"]["verdict"]["reason"]
    assert "waits for kprio reset" in held["1"]["verdict"]["reason"], "the hold's words, for the person it waits for"
    assert held["1"]["partitions"][0]["verdict"] == "REWIND"
    assert held["0"]["verdict"] == {"state": "OK", "reason": "1 partition OK, 0 records waiting"}


def test_watch_and_json_do_not_go_together(tmp_path):
    (tmp_path / "kprio.yaml").write_text(yaml.safe_dump({"topics": [{"name": "orders"}]}))
    result = runner.invoke(app, ["lag", "--config", str(tmp_path / "kprio.yaml"), "--watch", "--json"])
    assert result.exit_code == 2
    assert "give either --watch or --json (kprio lag) [usage]" in result.output
