"""Exactly-once topics end to end: the sensor's loop drains transactional priority topics to zero lag.

Every record a read_committed consumer sees is drained once, no aborted record is, committed
offsets pass trailing transaction markers, and a transaction left open holds back only the
records behind it: every other partition and priority keeps committing.
"""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from orchestration.cli.main import app
from orchestration.dagster import drain_loop
from tests.fixtures.transactions import TransactionalWriter
from tests.orchestration.conservation import conservation, published_offsets

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]


def _committed(env, topic) -> dict[tuple[str, int], tuple[int, int]]:
    """(committed, high watermark) per partition (an empty partition never committed: 0)."""
    return {(p.topic, p.partition): (p.committed or 0, p.high_watermark)
            for p in env.edge.snapshot(topic, now_ms=0).partitions}


def _aborted_in_output(env, topic, aborted: set[tuple[str, int, int]]) -> set:
    return aborted & (set(published_offsets(env.config.drain.output_path, topic.name))
                      | set(published_offsets(env.config.drain.dead_letter_path, topic.name)))


def test_transactional_priorities_drain_to_zero_lag_with_every_committed_record_once(
        make_topic, kprio_env, dagster_instance):
    topic = make_topic(priorities=3, partitions=2)
    env = kprio_env(topic, planner={"record_budget": 25})
    aborted: set[tuple[str, int, int]] = set()
    for p in range(3):
        name = topic.priority_topic(p)
        with TransactionalWriter(env.config.kafka, name) as tx:
            for q in range(2):
                tx.plain(q, 2)
                tx.committed(q, 6 + p)
                aborted |= {(name, q, o) for o in tx.aborted(q, 3)}
                tx.plain(q, 1)
                tx.committed(q, 4)  # every partition ends on a commit marker

    report = drain_loop.drain(env.defs, dagster_instance)

    assert report.ok, report.stopped
    assert report.stopped == "no backlog left"
    assert {b.state.value for b in report.batches} == {"committed"}
    assert report.records() == {2: 2 * 15, 1: 2 * 14, 0: 2 * 13}
    # Zero lag: every committed offset passed the trailing commit marker.
    assert all(committed == high for committed, high in _committed(env, topic).values())
    check = conservation(env.config, topic, env.edge)
    assert check.ok, str(check)
    assert check.expected == 2 * (15 + 14 + 13)
    assert not _aborted_in_output(env, topic, aborted)
    # The markers and aborted records were counted, not lost.
    batches = env.ledger.batches.find(topic.name)
    assert sum(b.drain.no_record_offsets for b in batches if b.drain) == 3 * 2 * (3 + 3)
    assert sum(b.drain.lost_offsets for b in batches if b.drain) == 0


def test_an_open_transaction_holds_back_only_its_own_records(make_topic, kprio_env, dagster_instance):
    topic = make_topic(priorities=3, partitions=2, records={2: 6})
    env = kprio_env(topic)
    bulk = topic.priority_topic(0)
    with TransactionalWriter(env.config.kafka, bulk) as tx:
        before = tx.committed(0, 6)  # 0..5, marker 6
        tx.plain(1, 5)
        opened = tx.open(0, 4)  # 7..10: the last stable offset of bulk[0] stays 7 while this is open
        tx.plain(0, 3)  # 11..13, behind the open transaction
        assert before == list(range(6)) and opened == [7, 8, 9, 10]

        # Several ticks while the transaction stays open: urgent records keep committing.
        first = drain_loop.drain(env.defs, dagster_instance)
        assert first.ok and first.stopped == "no backlog left", first.stopped
        assert first.records() == {2: 6, 0: 6 + 5}
        lag = {(p.topic, p.partition): p for p in env.edge.snapshot(topic, now_ms=0).partitions}
        assert (lag[(bulk, 0)].committed, lag[(bulk, 0)].readable_end, lag[(bulk, 0)].behind_open_transaction) == \
            (7, 7, 7)
        assert lag[(bulk, 0)].backlog == 0
        urgent = topic.priority_topic(2)
        with TransactionalWriter(env.config.kafka, urgent) as more:
            more.plain(0, 4)
            more.committed(1, 3)
        second = drain_loop.drain(env.defs, dagster_instance)
        assert second.ok and second.records() == {2: 7}
        assert all(c == h for (t, _), (c, h) in _committed(env, topic).items() if t == urgent)
        assert env.ledger.batches.holds(topic.name) == []

        tx.commit_open()

    third = drain_loop.drain(env.defs, dagster_instance)
    assert third.ok and third.stopped == "no backlog left"
    assert third.records() == {0: 4 + 3}
    assert all(committed == high for committed, high in _committed(env, topic).values()), _committed(env, topic)
    check = conservation(env.config, topic, env.edge)
    assert check.ok, str(check)


def test_kprio_lag_shows_what_waits_behind_an_open_transaction(make_topic, kprio_env, tmp_path):
    topic = make_topic(priorities=2, partitions=1, records={1: 3})
    env = kprio_env(topic)
    path = tmp_path / "kprio.yaml"
    path.write_text(yaml.safe_dump(env.config.model_dump(mode="json", by_alias=True, exclude={"kafka": {"secrets"}})))
    with TransactionalWriter(env.config.kafka, topic.priority_topic(0)) as tx:
        tx.committed(0, 2)  # 0..1, marker 2
        tx.open(0, 5)  # 3..7
        result = CliRunner().invoke(app, ["lag", "--json", "--config", str(path)], catch_exceptions=False)
        table = CliRunner().invoke(app, ["lag", "--config", str(path)], env={"COLUMNS": "200"},
                                   catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    [part] = doc["priorities"]["0"]["partitions"]
    assert (part["backlog"], part["last_stable_offset"], part["high_watermark"], part["behind_open_transaction"]) == \
        (3, 3, 8, 5)
    assert part["open_transaction_age_s"] is not None and part["open_transaction_age_s"] >= 0
    assert doc["priorities"]["0"]["behind_open_transactions"] == 5
    assert doc["priorities"]["1"]["backlog"] == 3 and doc["priorities"]["1"]["behind_open_transactions"] == 0
    assert "5 from 3, open" in table.output
