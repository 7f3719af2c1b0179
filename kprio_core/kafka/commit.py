"""Monotonic, fenced commits: a batch's ``until`` offsets move each priority group forward, never backwards.

Every offset kprio writes to a group (commit, log change's move, adoption) is a Kafka transaction of the
group's own transactional id (:func:`write_fenced`): the broker refuses a fenced writer, so a run paused past
its lease or another driver's stale write never moves a group once another writer went on.

Only a contiguous prefix is committed, from where the group stands (its committed offset, or the log start when
nothing is committed or retention deleted the rest). A replay of an old batch, or a batch whose predecessor is
not committed yet, commits nothing for that partition and says why.

>>> from kprio_core.model.offsets import OffsetRange as R
>>> moved, skipped = decide_commits(
...     current={("o-2", 0): 10, ("o-2", 1): 30, ("o-2", 2): None, ("o-2", 3): 5},
...     log_start={("o-2", 0): 0, ("o-2", 1): 0, ("o-2", 2): 0, ("o-2", 3): 0},
...     ranges=[R("o-2", 0, 10, 20), R("o-2", 0, 20, 25), R("o-2", 1, 10, 20), R("o-2", 2, 0, 7),
...             R("o-2", 3, 9, 12)])
>>> moved
{('o-2', 0): (10, 25), ('o-2', 2): (None, 7)}
>>> skipped[("o-2", 1)]
'already committed at 30, the batch ends at 20 (replay of an older batch)'
>>> skipped[("o-2", 3)]
'gap: the group stands at 5 but the batch starts at 9 (an earlier batch is not committed yet)'
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from kprio_core.config import KafkaSettings, TopicSettings
from kprio_core.errors import KafkaOperationFailed
from kprio_core.kafka.client import Deadline, kafka_failure
from kprio_core.kafka.reads import GroupOffsets
from kprio_core.model.offsets import OffsetRange, TopicPartitionKey
from kprio_core.model.results import CommitReport

__all__ = ["CommitReport", "decide_commits", "group_of", "transactional_id", "write_fenced"]


def decide_commits(current: Mapping[TopicPartitionKey, int | None], log_start: Mapping[TopicPartitionKey, int],
                   ranges: Iterable[OffsetRange]) -> tuple[dict[TopicPartitionKey, tuple[int | None, int]],
                                                           dict[TopicPartitionKey, str]]:
    """Per partition, the offset to commit (old, new) or the reason to commit nothing."""
    by_partition: dict[TopicPartitionKey, list[OffsetRange]] = defaultdict(list)
    for r in ranges:
        if r.count:
            by_partition[r.topic_partition].append(r)
    moved: dict[TopicPartitionKey, tuple[int | None, int]] = {}
    skipped: dict[TopicPartitionKey, str] = {}
    for tp, rs in sorted(by_partition.items()):
        rs.sort()
        old = current.get(tp)
        # Where the group stands: records below the log start are gone, so the batch may start there.
        stands = max(old if old is not None else 0, log_start.get(tp, 0))
        if rs[0].start > stands:
            at = old if old is not None else f"the log start {stands} (nothing committed)"
            skipped[tp] = (f"gap: the group stands at {at} but the batch starts at {rs[0].start} "
                           "(an earlier batch is not committed yet)")
            continue
        end = stands
        for r in rs:
            if r.start > end:
                break  # a hole inside the batch: commit only the contiguous prefix
            end = max(end, r.end)
        if old is not None and end <= old:
            skipped[tp] = f"already committed at {old}, the batch ends at {rs[-1].end} (replay of an older batch)"
        elif end <= stands:
            skipped[tp] = f"nothing new: the batch ends at {rs[-1].end}, at or below the log start {stands}"
        else:
            moved[tp] = (old, end)
    return moved, skipped


FENCE_TRIES = 5
"""Reads and writes of one group's offsets tried, each time another kprio writer of the group fenced this one."""
_GROUP_LOCKS: dict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
"""The writers of one process take turns per group (two of its own would only fence each other)."""
ABANDON_AFTER_S = 5.0
"""How long past its deadline a transaction's calls may block before they are abandoned (:func:`_transaction`)."""
KEPT_PRODUCERS = 32
"""Producers kept per process, least recently used dropped: one per group of a few logical topics."""
_PRODUCERS: OrderedDict[tuple[str, str], Any] = OrderedDict()
"""Each group's transactional producer (keyed by a settings digest): out while in use, back only after a good write."""
_PRODUCERS_LOCK = threading.Lock()
_INHERITED: list[OrderedDict[tuple[str, str], Any]] = []
"""A forked child's producers of its parent: never used (their threads stayed in the parent) nor destroyed."""


def _forget_in_child() -> None:
    global _PRODUCERS, _PRODUCERS_LOCK
    _INHERITED.append(_PRODUCERS)
    _PRODUCERS, _PRODUCERS_LOCK = OrderedDict(), threading.Lock()


os.register_at_fork(after_in_child=_forget_in_child)


def transactional_id(group: str) -> str:
    """The transactional id of every kprio offset write to ``group``: the broker fences the older writer.

    >>> transactional_id("orders-2")
    'kprio-offsets:orders-2'
    """
    return f"kprio-offsets:{group}"


Decide = Callable[[dict[TopicPartitionKey, int | None]], dict[TopicPartitionKey, int]]
"""From the group's committed offsets now, the offsets to write (empty: write nothing)."""


def write_fenced(kafka: KafkaSettings, groups: GroupOffsets, group: str, partitions: Iterable[TopicPartitionKey],
                 decide: Decide, deadline: Deadline, *, before_write: Callable[[], None] | None = None
                 ) -> dict[TopicPartitionKey, int]:
    """Read ``group``'s committed offsets of ``partitions``, write what ``decide`` makes of them; what was written.

    Starting the producer of the group's :func:`transactional_id` fences every earlier writer before the read, so
    no write lands between read and write. ``before_write`` (a run's check it still holds its batch) runs just
    before each write, even of nothing. A fenced try reads again, up to :data:`FENCE_TRIES` times. The producer is
    kept for the next write (starting one costs up to half a second): a kept producer started before this read, so
    its write succeeds only while no writer started after it; one whose write fails is dropped, tried with a new one.
    """
    from confluent_kafka import KafkaError, KafkaException

    from kprio_core.kafka.client import client_config, new_producer

    wanted = sorted(partitions)
    what = f"commit offsets of group {group}"
    key = (hashlib.sha256(repr(sorted(client_config(kafka).items())).encode()).hexdigest(), group)  # no secret kept
    tries, kept = 0, True  # the first try may take the producer an earlier write left; every later one starts anew
    while tries < FENCE_TRIES:
        with _GROUP_LOCKS[(kafka.bootstrap_servers, group)]:
            producer = _kept(key) if kept else None
            reused, kept = producer is not None, False
            tries += not reused
            try:
                if producer is None:
                    producer = new_producer(kafka, transactional_id=transactional_id(group))
                    _bounded(partial(producer.init_transactions, deadline.left(what)), deadline, what)
                offsets = decide(groups.fetch(group, wanted, deadline))
                if before_write is not None:
                    before_write()  # even with nothing to write: a writer that lost its batch hears it here
                if offsets:
                    _transaction(producer, offsets, groups.metadata(group), deadline, what)
                _keep(key, producer)  # ready for the next write (no transaction open)
                return offsets
            except KafkaException as exc:
                error = exc.args[0]
                if reused or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                              KafkaError.INVALID_PRODUCER_EPOCH):
                    continue  # another writer of the group started meanwhile (or a kept producer failed): anew
                raise kafka_failure(exc, what=what, bootstrap=deadline.bootstrap, timeout_s=deadline.timeout_s) from None
    raise KafkaOperationFailed(f"{what} on {deadline.bootstrap}: fenced by another writer of the group {FENCE_TRIES} "
                               "times in a row (another kprio commits to it without pause)")


def _kept(key: tuple[str, str]) -> Any:
    with _PRODUCERS_LOCK:
        return _PRODUCERS.pop(key, None)


def _keep(key: tuple[str, str], producer: Any) -> None:
    with _PRODUCERS_LOCK:
        _PRODUCERS[key] = producer
        while len(_PRODUCERS) > KEPT_PRODUCERS:
            _PRODUCERS.popitem(last=False)


def _transaction(producer: Any, offsets: Mapping[TopicPartitionKey, int], metadata: Any, deadline: Deadline,
                 what: str) -> None:
    """Write ``offsets`` to the group ``metadata`` names in one transaction of ``producer``, by ``deadline``.

    The calls run in a thread of their own (as a new producer's ``init_transactions`` does): librdkafka's
    ``send_offsets_to_transaction`` can block past its timeout once the group's coordinator is gone
    (confluentinc/librdkafka#5456 and #5511; seen with a kept producer when the coordinator's node was killed),
    which held the run for ever. Still blocked :data:`ABANDON_AFTER_S` after the deadline, they are abandoned with
    the producer (never used again; a newer writer fences it) and the write fails as a broker that did not answer.
    """
    from confluent_kafka import TopicPartition

    def write() -> None:
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())],
                                             metadata, deadline.left(what))
        producer.commit_transaction(deadline.left(what))

    _bounded(write, deadline, what)


def _bounded(call: Callable[[], None], deadline: Deadline, what: str) -> None:
    """``call()`` (a producer's transaction calls) in a daemon thread, given up :data:`ABANDON_AFTER_S` after
    ``deadline``; its exception is raised here. A daemon thread, not an executor's: a call that never returns must
    not keep the process from exiting."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as err:  # noqa: BLE001 - handed to the caller's thread
            raised.append(err)

    thread = threading.Thread(target=run, name="kprio-offsets-transaction", daemon=True)
    thread.start()
    thread.join(max(deadline.remaining(), 0.0) + ABANDON_AFTER_S)
    if thread.is_alive():
        raise deadline.ran_out(what, "the client's transaction call did not return; its producer is abandoned")
    if raised:
        raise raised[0]


def group_of(topic: TopicSettings, name: str) -> str:
    """The consumer group of a priority topic; KafkaOperationFailed for a topic not of ``topic``."""
    try:
        return topic.priority_group(topic.priority_of_topic(name))
    except KeyError:
        raise KafkaOperationFailed(
            f"cannot commit {name}: it is not a priority topic of {topic.name!r} "
            f"({sorted(topic.priority_topics().values())})"
        ) from None
