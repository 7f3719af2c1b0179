"""A range's failure crosses from the executors as a typed record, and whether it passes by itself is its type's.

Real broker, real local Spark: the drain's stats rows carry, for every failed range, the error's
class in kprio_core.errors, its message, where it happened and its transient flag; the driver
rebuilds the typed error from that record, reading no text.
"""

from __future__ import annotations

import json
import os

import pytest

from kprio_core.config import KprioConfig
from kprio_core.errors import HandlerError, KafkaOperationFailed, OutputUnavailable, RangeIncomplete
from kprio_core.model.drain_plan import PlannedRange
from kprio_core.model.offsets import OffsetRange
from spark_jobs.drain import drain_batch
from tests.fixtures.small_disks import tiny_disk
from tests.spark_jobs.plans import plan_of, whole_plan

pytestmark = [pytest.mark.broker, pytest.mark.spark]


def _config(kafka_settings, tmp_path, **kw) -> KprioConfig:
    return KprioConfig(kafka=kafka_settings, **{
        "drain": {"handler": "spark_jobs.handlers:decode_json", "output_path": str(tmp_path / "out"),
                  "dead_letter_path": str(tmp_path / "dead")},
        "spark": {"arrow_batch_records": 16}, **kw})


def test_each_failed_range_carries_its_typed_error_and_where(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=2, records={0: 40}, schema={"i": "long"})
    name = topic.priority_topic(0)
    missing = PlannedRange(0, OffsetRange(name, 7, 0, 5))  # the topic has no partition 7
    short = PlannedRange(0, OffsetRange(name, 1, 0, 25))  # partition 1 holds 20 records
    plan = plan_of(topic, [r for r in whole_plan(kafka_settings, topic).ranges if r.range.partition == 0]
                   + [short, missing])
    config = _config(kafka_settings, tmp_path, drain={
        "handler": "tests.spark_jobs.handlers_for_tests:drops_a_row_on_partition_zero",
        "output_path": str(tmp_path / "out"), "dead_letter_path": str(tmp_path / "dead")})
    result = drain_batch(spark, config, topic, "typed", 1, plan)
    errors = {s.range.partition: s.error for s in result.ranges}

    assert (errors[7].kind, errors[7].transient, errors[7].where) == ("KafkaOperationFailed", False, missing.range)
    assert isinstance(errors[7].error(), KafkaOperationFailed)
    assert str(errors[7].error()) == f"topic {name} has no partition 7 (it has 0..1)"
    assert (errors[0].kind, errors[0].transient) == ("HandlerError", False)
    assert isinstance(errors[0].error(), HandlerError) and "answered a frame of" in str(errors[0].error())
    assert (errors[1].kind, errors[1].where) == ("RangeIncomplete", short.range)
    assert isinstance(errors[1].error(), RangeIncomplete) and not errors[1].transient
    # The one line people read is still there, and says the same as the record.
    assert all(s.failure.endswith(s.error.message) for s in result.failed_ranges)


def test_a_full_disk_on_an_executor_is_output_unavailable_which_passes_by_itself(spark, kafka_settings, make_topic,
                                                                                  tmp_path):
    bad = [(f"k{i}", os.urandom(500).hex(), None, 0) for i in range(300)]  # dead letters, not compressible
    good = [(f"k{i}", json.dumps({"i": i}), None, 1) for i in range(50)]
    topic = make_topic(priorities=1, partitions=2, schema={"i": "long"}, records={0: bad + good})
    with tiny_disk(tmp_path / "small") as small:
        config = _config(kafka_settings, tmp_path, drain={
            "handler": "spark_jobs.handlers:decode_json", "output_path": str(tmp_path / "out"),
            "dead_letter_path": str(small)})
        result = drain_batch(spark, config, topic, "full", 1, whole_plan(kafka_settings, topic))
    [failed] = result.failed_ranges
    assert (failed.error.kind, failed.error.transient, failed.error.where) == ("OutputUnavailable", True,
                                                                                failed.range)
    rebuilt = failed.error.error()
    assert isinstance(rebuilt, OutputUnavailable) and rebuilt.code == "output_unavailable" and rebuilt.transient
    assert str(rebuilt).startswith(f"No space left on device: {small}/_staging/full.1/")


def test_a_read_stage_failure_of_the_key_order_shuffle_is_typed_too(spark, kafka_settings, make_topic, tmp_path):
    topic = make_topic(priorities=1, partitions=1, records={0: 10})
    name = topic.priority_topic(0)
    short = OffsetRange(name, 0, 0, 12)
    config = _config(kafka_settings, tmp_path, ordering={"mode": "key", "lanes": 3}, splits={"max_records": 4})
    result = drain_batch(spark, config, topic, "shuffled", 1, plan_of(topic, {0: [short]}))
    [stats] = result.ranges
    assert (stats.error.kind, stats.error.where, stats.error.transient) == ("RangeIncomplete", short, False)
    assert isinstance(stats.error.error(), RangeIncomplete)
