"""Topics written by transactional producers: markers, aborted records and open transactions in the drain.

Offsets that hold no record (commit and abort markers, aborted records under read_committed) are
counted as ``no_record``, never lost and never a failure; the rows are exactly what a plain
read_committed consumer sees; both readers agree.
"""

from __future__ import annotations

import pytest

from kprio_core.config import KafkaSettings
from kprio_core.model.offsets import OffsetRange
from spark_jobs.drain import drain_batch
from tests.fixtures.transactions import TransactionalWriter, visible_offsets
from tests.spark_jobs.on_disk import assert_conserved, staged_rows
from tests.spark_jobs.plans import plan_of, watermarks, whole_plan
from tests.spark_jobs.test_drain import READERS, _config, _roots

pytestmark = [pytest.mark.broker, pytest.mark.spark]


def _write(kafka_settings, name: str) -> dict[str, list[int]]:
    """Partition 0: plain, committed, aborted, plain, committed (ends on a commit marker); partition 1: aborted, committed."""
    kinds: dict[str, list[int]] = {"committed": [], "aborted": [], "plain": []}
    with TransactionalWriter(kafka_settings, name) as tx:
        kinds["plain"] += tx.plain(0, 5)
        kinds["committed"] += tx.committed(0, 10)
        kinds["aborted"] += tx.aborted(0, 7)
        kinds["plain"] += tx.plain(0, 3)
        kinds["committed"] += tx.committed(0, 4)
        kinds["aborted"] += tx.aborted(1, 5)
        kinds["committed"] += tx.committed(1, 5)
    return kinds


def _records(kafka_settings, name: str, partitions: int, *, committed_only: bool = True) -> set[tuple[str, int, int]]:
    return {(name, p, o) for p in range(partitions)
            for o in visible_offsets(kafka_settings, name, p, committed_only=committed_only)}


@READERS
def test_markers_and_aborted_records_are_no_record_not_loss(spark, kafka_settings, make_topic, tmp_path, reader):
    topic = make_topic(priorities=1, partitions=2)
    name = topic.priority_topic(0)
    _write(kafka_settings, name)
    highs = {p: high for p, (_, high) in watermarks(kafka_settings, name, 2).items()}
    config = _config(kafka_settings, tmp_path, reader=reader)
    records = _records(kafka_settings, name, 2)
    assert len(records) == 27  # 5 + 10 + 3 + 4 on partition 0, 5 on partition 1: what a read_committed consumer sees

    result = drain_batch(spark, config, topic, "tx", 1, whole_plan(kafka_settings, topic))

    assert [s.failure for s in result.ranges] == [None, None]
    assert all(s.complete for s in result.ranges) and result.lost_offsets == 0
    # Each partition's offsets: records, plus a marker per transaction, plus the aborted records.
    by_partition = {s.range.partition: s for s in result.ranges}
    assert (by_partition[0].range.end, by_partition[0].no_record) == (highs[0], 3 + 7)
    assert (by_partition[1].range.end, by_partition[1].no_record) == (highs[1], 2 + 5)
    rows = staged_rows(result, _roots(config))
    assert_conserved(result, rows, records)
    assert not any(r["key"].startswith(b"aborted") for r in rows["output"] + rows["dead-letters"])


def test_read_uncommitted_drains_aborted_records_too(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=2)
    name = topic.priority_topic(0)
    kinds = _write(kafka_settings, name)
    uncommitted = KafkaSettings.model_validate({**kafka_settings.model_dump(), "isolation_level": "read_uncommitted"})
    config = _config(uncommitted, tmp_path)
    records = _records(kafka_settings, name, 2, committed_only=False)
    assert len(records) == 27 + len(kinds["aborted"])

    result = drain_batch(spark, config, topic, "tx-uncommitted", 1, whole_plan(kafka_settings, topic))

    assert all(s.complete for s in result.ranges)
    assert sorted(s.no_record for s in result.ranges) == [2, 3]  # the markers only
    rows = staged_rows(result, _roots(config))
    assert_conserved(result, rows, records)
    assert sum(r["key"].startswith(b"aborted") for r in rows["output"]) == len(kinds["aborted"])


@READERS
def test_a_range_of_markers_only_and_a_range_ending_on_a_marker(spark, kafka_settings, make_topic, tmp_path, reader):
    topic = make_topic(priorities=1, partitions=1)
    name = topic.priority_topic(0)
    with TransactionalWriter(kafka_settings, name) as tx:
        first = tx.committed(0, 3)  # offsets 0..2, marker at 3
        aborted = tx.aborted(0, 2)  # offsets 4..5, marker at 6
        second = tx.committed(0, 2)  # offsets 7..8, marker at 9
    assert (first, aborted, second) == ([0, 1, 2], [4, 5], [7, 8])
    config = _config(kafka_settings, tmp_path, reader=reader)
    ranges = [OffsetRange(name, 0, 0, 4),  # ends on a commit marker
              OffsetRange(name, 0, 4, 7),  # only aborted records and their marker: no record at all
              OffsetRange(name, 0, 7, 10)]  # the tail, ending on the last marker (the high watermark is 10)

    result = drain_batch(spark, config, topic, "markers", 1, plan_of(topic, {0: ranges}))

    assert [(s.output, s.no_record, s.complete) for s in result.ranges] == [(3, 1, True), (0, 3, True), (2, 1, True)]
    assert_conserved(result, staged_rows(result, _roots(config)), {(name, 0, o) for o in first + second})


def test_a_range_into_an_open_transaction_fails_without_waiting_for_it(spark, kafka_settings, make_topic, tmp_path):
    """A plan ends at the last stable offset; a range planned past it (by hand) fails at once, naming it."""
    topic = make_topic(priorities=1, partitions=1)
    name = topic.priority_topic(0)
    with TransactionalWriter(kafka_settings, name) as tx:
        tx.committed(0, 3)  # 0..2, marker 3
        opened = tx.open(0, 4)  # 4..7, open: the last stable offset is 4
        config = _config(kafka_settings, tmp_path)
        done = drain_batch(spark, config, topic, "open", 1, plan_of(topic, {0: [OffsetRange(name, 0, 0, 4)]}))
        past = drain_batch(spark, config, topic, "past", 1, plan_of(topic, {0: [OffsetRange(name, 0, 4, 8)]}))
    assert opened == [4, 5, 6, 7]
    assert [(s.output, s.no_record, s.complete) for s in done.ranges] == [(3, 1, True)]
    [stats] = past.ranges
    assert "end of partition at last stable offset 4" in stats.failure
