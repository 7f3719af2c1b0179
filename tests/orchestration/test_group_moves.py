"""A consumer group moved outside kprio while ``kprio drain --follow`` drains (issue 53): converged, isolated, once.

Someone moves a priority's group with Kafka's admin API (what ``kafka-consumer-groups --reset-offsets``
does): back, forward, to the earliest or the latest offset, one partition or the whole group. Each case
forces the move at a named point of the batch in flight: a real ``kprio drain --follow`` child process is
stopped there (``KPRIO_PAUSE_AT``, orchestration/runtime/faults.py: the drain itself at a point of its tick, the warm
worker executing the run at a point of a run, while the drain ticks on), the group is moved, the process resumed:

- ``after-snapshot``: the tick took its lag snapshot and plans from it after the move (a stale plan);
- ``before-publish``: the batch drained its ranges, publishes after the move;
- ``before-kafka-commit``: the batch published, commits after the move.

On both readers, whatever the move, the drain must converge to zero lag on its own, every record once in
the output or recorded as skipped by the operator, nothing beyond the committed offsets; the priority not
moved is never held (no batch with a range of it fails) and its ranges commit with the batch that carried
them; no more batches fail than moves were made; and the move is decided (and recorded) once.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

import pytest

from kprio_core.kafka.client import new_admin
from kprio_core.ledger import BatchState, Ledger
from orchestration.services.process import wait_for
from tests.fixtures.kafka import fill
from tests.fixtures.paused import paused, resume
from tests.orchestration.conservation import conservation
from tests.orchestration.test_recovery import (
    CHILD_TIMEOUT_S,
    assert_converges,
    child_config,
    finish,
    kill_group,
    output_of,
    start,
)

pytestmark = [pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster, pytest.mark.slow]

FIRST, MORE = 120, 60
"""Records per priority drained before the move (committed history a move back re-drains), then produced after."""


@dataclass(frozen=True)
class Move:
    point: str
    how: str
    """back (29 offsets: inside a drained batch), forward (25 offsets), earliest, latest."""
    partitions: str
    """one (partition 0) or all (the whole group)."""
    reader: str
    moved: int
    """The priority whose group is moved; the other one must never be held."""

    def __str__(self) -> str:
        return f"{self.how}-{self.partitions}-p{self.moved}-at-{self.point}-{self.reader}"


MOVES = [
    Move("after-snapshot", "back", "all", "python", 1),
    Move("before-publish", "back", "one", "native", 0),
    Move("before-kafka-commit", "back", "all", "python", 0),
    Move("before-kafka-commit", "earliest", "one", "native", 1),
    Move("before-publish", "forward", "all", "python", 1),
    Move("after-snapshot", "latest", "all", "native", 0),
]


def move_group(kafka, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Move ``group`` to ``offsets`` with Kafka's admin API (AlterConsumerGroupOffsets), as an operator's tool does."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    admin = new_admin(kafka)
    tps = [TopicPartition(t, q, o) for (t, q), o in sorted(offsets.items())]
    admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[group].result(timeout=30)


def target(how: str, committed: int, high: int) -> int:
    return {"back": committed - 29, "forward": committed + 25, "earliest": 0, "latest": high}[how]


@pytest.mark.parametrize("move", MOVES, ids=str)
def test_a_group_moved_while_a_batch_is_in_flight_converges_and_holds_no_other_priority(
        move, make_topic, kprio_env, kafka_settings, tmp_path, spark, child_spark):
    topic = make_topic(priorities=2, partitions=2, records={1: FIRST, 0: FIRST}, schema={"i": "long", "amount": "double"})
    env = kprio_env(topic, planner={"record_budget": 100, "target_batch_s": None},
                    recovery={"lease_s": 60, "backoff_s": 0.2, "backoff_max_s": 1}, spark={"reader": move.reader})
    (tmp_path / "home").mkdir()
    config = child_config(env, tmp_path, child_spark)
    finish(config, tmp_path)  # the history a move back re-drains: several committed batches over both priorities
    for p in (1, 0):
        fill(kafka_settings, topic.priority_topic(p), MORE, partitions=2)
    name, other = topic.priority_topic(move.moved), topic.priority_topic(1 - move.moved)
    moved = [(name, 0)] if move.partitions == "one" else [(name, 0), (name, 1)]

    proc = start(config, tmp_path, "--follow", KPRIO_PAUSE_AT=f"{move.point}:{topic.name}",
                 KPRIO_CRASH_ONCE=str(tmp_path / "paused"))
    try:
        assert wait_for(lambda: paused(proc), CHILD_TIMEOUT_S, interval_s=0.2), output_of(proc)[-2000:]
        stopped = paused(proc)
        snap = {(p.topic, p.partition): p for p in env.edge.snapshot(topic, now_ms=0).partitions}
        offsets = {tp: target(move.how, snap[tp].committed, snap[tp].high_watermark) for tp in moved}
        move_group(kafka_settings, topic.priority_group(move.moved), offsets)
        resume(stopped)
        with Ledger(env.config.ledger.url) as ledger:
            assert_converges(proc, env, topic, ledger)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, output_of(proc)[-3000:]
    finally:
        if proc.poll() is None:
            resume(paused(proc))
        kill_group(proc)

    with Ledger(env.config.ledger.url) as ledger:
        batches = ledger.batches.find(topic.name)
        failed = {e.batch_id for e in ledger.batches.events(logical_topic=topic.name)
                  if e.to_state is BatchState.FAILED}
        events = ledger.beliefs.log_events(topic.name)
    # No more failed batches than moves; what failed is the moved priority's ranges alone (split off its batch).
    assert len(failed) <= 1, [(b.batch_id, b.reason) for b in batches if b.batch_id in failed]
    by_id = {b.batch_id: b for b in batches}
    assert all(r.topic == name for b in failed for r in by_id[b].plan.offset_ranges()), "another priority failed"
    # The other priority was never held: its every range was committed with the batch that carried it.
    theirs = [b for b in batches if any(r.topic == other for r in b.plan.offset_ranges())]
    assert theirs and all(b.state is BatchState.COMMITTED and b.batch_id not in failed for b in theirs)
    # Decided once per move: one recorded change per moved partition (none when a commit of kprio's overtook a
    # forward move), and none on another priority.
    assert {e.topic for e in events} <= {name}, [e.line() for e in events]
    assert all(sum(1 for e in events if (e.topic, e.partition) == tp) <= 1 for tp in moved), [e.line() for e in events]
    if move.how in ("back", "earliest"):
        assert sorted((e.topic, e.partition, e.outcome) for e in events) == [(t, q, "redrain") for t, q in moved]
    # Every record once in the output, or recorded as skipped by whoever moved the group forward.
    check = conservation(env.config, topic, env.edge)
    skipped = [(e.topic, e.partition, e.believed, e.committed) for e in events if e.outcome == "accept"]
    assert all(any((t, q) == (st, sq) and lo <= o < hi for st, sq, lo, hi in skipped) for t, q, o in check.missing), (
        check, skipped)
    assert not (check.doubled or check.in_both or check.beyond or check.not_records), check
