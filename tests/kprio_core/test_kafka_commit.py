"""Monotonic commits: the decision table (pure) and the commits on a real broker."""

from __future__ import annotations

import pytest

from kprio_core.errors import KafkaOperationFailed
from kprio_core.kafka import CommitReport, KafkaEdge, decide_commits
from kprio_core.model.offsets import OffsetRange as R

T = "o-2"

CASES = [
    # (current, log_start, ranges, moved, skipped-reason-fragment, why)
    (None, 0, [(0, 10)], (None, 10), None, "first commit of a partition starts at the log start"),
    (10, 0, [(10, 20)], (10, 20), None, "the usual case: the batch follows on"),
    (10, 0, [(10, 20), (20, 30)], (10, 30), None, "two contiguous ranges (input splits) commit their end"),
    (10, 0, [(20, 30), (10, 20)], (10, 30), None, "order of ranges does not matter"),
    (10, 0, [(10, 20), (25, 30)], (10, 20), None, "a hole inside the batch: only the contiguous prefix"),
    (30, 0, [(10, 20)], None, "replay of an older batch", "a replay never moves the offset back"),
    (20, 0, [(10, 20)], None, "replay of an older batch", "re-committing the same batch commits nothing"),
    (5, 0, [(9, 12)], None, "gap", "an earlier batch is not committed: nothing jumps over it"),
    (None, 0, [(3, 12)], None, "gap", "nothing committed and the batch starts past the log start"),
    (4, 10, [(10, 20)], (4, 20), None, "records lost to retention: the batch starts at the log start"),
    (None, 10, [(10, 20)], (None, 20), None, "nothing committed, log start moved: starts there"),
    (4, 10, [(4, 8)], None, "nothing new", "a batch entirely below the log start commits nothing"),
    (10, 0, [(10, 10)], None, None, "an empty range is no commit at all"),
]


@pytest.mark.parametrize(("current", "log_start", "spans", "moved", "skipped", "why"), CASES,
                         ids=[c[-1] for c in CASES])
def test_decide_commits(current, log_start, spans, moved, skipped, why):
    tp = (T, 0)
    got_moved, got_skipped = decide_commits({tp: current}, {tp: log_start}, [R(T, 0, a, b) for a, b in spans])
    assert got_moved.get(tp) == moved, why
    if skipped is None:
        assert tp not in got_skipped, why
    else:
        assert skipped in got_skipped[tp], why


def test_commit_report_says_old_and_new():
    report = CommitReport.of({(T, 0): (None, 5), (T, 1): (3, 9)}, {(T, 2): "gap: ..."})
    assert str(report) == "moved: o-2[0] none->5, o-2[1] 3->9; skipped: o-2[2]: gap: ..."


@pytest.mark.broker
def test_commit_moves_each_priority_group_forward_only(make_topic, kafka_settings):
    topic = make_topic(priorities=2, partitions=2, records={1: 20, 0: 10})
    t1, t0 = topic.priority_topic(1), topic.priority_topic(0)
    with KafkaEdge(kafka_settings) as edge:
        first = edge.commit(topic, [R(t1, 0, 0, 6), R(t1, 1, 0, 4), R(t0, 0, 0, 5)])
        assert first.moves() == {(t1, 0): (None, 6), (t1, 1): (None, 4), (t0, 0): (None, 5)}
        assert first.skipped == ()
        replay = edge.commit(topic, [R(t1, 0, 0, 6), R(t1, 1, 0, 2)])
        assert replay.moved == ()
        assert set(replay.skipped_why()) == {(t1, 0), (t1, 1)}
        nxt = edge.commit(topic, [R(t1, 0, 6, 10)])
        assert nxt.moves() == {(t1, 0): (6, 10)}
        assert edge.committed(topic) == {(t1, 0): 10, (t1, 1): 4, (t0, 0): 5, (t0, 1): None}
        # Each priority commits to its own group: the groups hold exactly their topic's offsets.
        snap = edge.snapshot(topic, now_ms=0, avg_record_bytes={})
        assert snap.backlog_by_priority() == {1: 20 - 10 - 4, 0: 10 - 5}


@pytest.mark.broker
def test_commit_refuses_a_topic_that_is_not_a_priority_topic(make_topic, kafka_settings):
    topic = make_topic(priorities=1, partitions=1)
    with KafkaEdge(kafka_settings) as edge, pytest.raises(KafkaOperationFailed, match="not a priority topic"):
        edge.commit(topic, [R("elsewhere", 0, 0, 1)])


STALE_WRITER = """
import json, pathlib, sys, time
from kprio_core.config import KafkaSettings, TopicSettings
from kprio_core.kafka import KafkaEdge
from kprio_core.errors import KprioError

bootstrap, topic_name, here, kept = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3]), sys.argv[4] == "kept"
topic = TopicSettings(name=topic_name, priorities=1)
tp = (topic.priority_topic(0), 0)

def paused():  # between its read of the group and its write: the worst moment to be overtaken
    (here / "read").touch()
    deadline = time.monotonic() + 60
    while not (here / "go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)

with KafkaEdge(KafkaSettings(bootstrap_servers=bootstrap)) as edge:
    if kept:  # a first write leaves its producer ready: the paused write below takes it
        edge.set_committed(topic, {tp: 10}, expect={tp: None})
    try:
        edge.set_committed(topic, {tp: 20}, expect={tp: 10 if kept else None}, before_write=paused)
        print("wrote 20")
    except KprioError as err:
        print(f"refused: {err}")
"""


@pytest.mark.broker
@pytest.mark.parametrize("producer", ["fresh", "kept"])
def test_a_writer_overtaken_between_its_read_and_its_write_writes_nothing(make_topic, kafka_settings, tmp_path,
                                                                          producer):
    """Process X reads the group (no committed offset) and is overtaken before it writes: this process writes 50.
    X's write would move the group back to 20; the broker refuses it (X was fenced by the newer writer), and
    X, reading again, finds the group moved since its decision and writes nothing. ``kept``: X's write takes the
    producer its first write (10) left ready, started before this process's: it is fenced all the same."""
    import subprocess
    import sys
    from pathlib import Path

    from orchestration.services.process import wait_for

    topic = make_topic(priorities=1, partitions=1, records={0: 60})
    tp = (topic.priority_topic(0), 0)
    script = tmp_path / "stale_writer.py"
    script.write_text(STALE_WRITER)
    repo = Path(__file__).resolve().parents[2]
    x = subprocess.Popen([sys.executable, str(script), kafka_settings.bootstrap_servers, topic.name, str(tmp_path),
                          producer],
                         cwd=repo, env={**__import__("os").environ, "PYTHONPATH": str(repo)},
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert wait_for(lambda: (tmp_path / "read").exists() or x.poll() is not None, 60, interval_s=0.05)
        with KafkaEdge(kafka_settings) as edge:
            edge.set_committed(topic, {tp: 50}, expect={tp: 10 if producer == "kept" else None})
            (tmp_path / "go").touch()
            out, _ = x.communicate(timeout=60)
            assert "refused" in out and "the group moved since the decision" in out, out
            assert edge.committed(topic) == {tp: 50}, "the overtaken writer moved nothing back"
    finally:
        x.kill()


def test_the_producers_kept_are_bounded_and_one_in_use_is_taken_out(monkeypatch):
    """A process keeps at most KEPT_PRODUCERS producers, dropping the least recently used (a test session writes to
    hundreds of groups); a write takes its group's producer out, so no other write of the process shares it."""
    from collections import OrderedDict

    from kprio_core.kafka import commit

    monkeypatch.setattr(commit, "_PRODUCERS", OrderedDict())
    producers = {f"g{i}": object() for i in range(commit.KEPT_PRODUCERS + 5)}
    for group, producer in producers.items():
        commit._keep(("settings", group), producer)
    assert list(commit._PRODUCERS) == [("settings", f"g{i}") for i in range(5, commit.KEPT_PRODUCERS + 5)]
    assert commit._kept(("settings", "g9")) is producers["g9"]
    assert commit._kept(("settings", "g9")) is None  # in use: the next write of g9 starts its own
    commit._keep(("settings", "g9"), producers["g9"])
    commit._keep(("settings", "new"), object())
    # g9, put back after its write, is the most recently used; g5, the least, made room for the new one
    assert list(commit._PRODUCERS)[-2:] == [("settings", "g9"), ("settings", "new")]
    assert ("settings", "g5") not in commit._PRODUCERS and len(commit._PRODUCERS) == commit.KEPT_PRODUCERS


def test_a_forked_child_starts_its_own_producers_and_never_touches_its_parents():
    """A producer's librdkafka threads stay in the parent on a fork: the child keeps none for its writes."""
    import os

    from kprio_core.kafka import commit

    commit._keep(("settings", "forked"), object())
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its kept producers are none of its parent's
        os.write(write, b"none" if commit._kept(("settings", "forked")) is None else b"parent's")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read, 16) == b"none"
    assert commit._kept(("settings", "forked")) is not None  # the parent's is still there


def test_a_transaction_call_blocked_past_its_deadline_is_abandoned_and_the_write_fails_as_unanswered(monkeypatch):
    """librdkafka's send_offsets_to_transaction can block past its timeout once the group's coordinator is gone
    (librdkafka#5456, #5511: it held test_kafka_cluster's drain for good after the leader was killed): the write
    gives up ABANDON_AFTER_S after its deadline with a broker that did not answer, its call left blocked.

    The producer stands in for librdkafka in that state (no broker can be put in it on demand): its
    send_offsets_to_transaction blocks until released, as the real one did."""
    import threading
    import time

    from kprio_core.errors import BrokerUnreachable
    from kprio_core.kafka import commit
    from kprio_core.kafka.client import Deadline

    release = threading.Event()

    class Stuck:
        calls: list[str] = []

        def begin_transaction(self) -> None:
            self.calls.append("begin")

        def send_offsets_to_transaction(self, offsets, metadata, timeout) -> None:  # noqa: ANN001
            self.calls.append(f"send within {timeout:.1f} s")
            release.wait(60)  # ignores its timeout, as librdkafka's did

        def commit_transaction(self, timeout) -> None:  # noqa: ANN001
            self.calls.append("commit")

    monkeypatch.setattr(commit, "ABANDON_AFTER_S", 0.5)
    producer = Stuck()
    began = time.monotonic()
    try:
        with pytest.raises(BrokerUnreachable, match="commit offsets of group g: the client's transaction call did "
                                                    "not return; its producer is abandoned"):
            commit._transaction(producer, {("t", 0): 5}, None, Deadline(1.0, "127.0.0.1:9092"),
                                "commit offsets of group g")
        assert time.monotonic() - began < 30, "given up, not waited for"
        assert producer.calls == ["begin", "send within 1.0 s"]
    finally:
        release.set()


def test_a_transaction_call_that_returns_in_time_raises_what_it_raised():
    """The thread of a transaction's calls hands their error back: a fenced producer's, for write_fenced to retry."""
    from confluent_kafka import KafkaError, KafkaException

    from kprio_core.kafka import commit
    from kprio_core.kafka.client import Deadline

    class Fenced:
        def begin_transaction(self) -> None:
            raise KafkaException(KafkaError(KafkaError._FENCED, "fenced by a newer instance"))

    with pytest.raises(KafkaException, match="fenced by a newer instance"):
        commit._transaction(Fenced(), {("t", 0): 5}, None, Deadline(5.0, "127.0.0.1:9092"), "commit")
