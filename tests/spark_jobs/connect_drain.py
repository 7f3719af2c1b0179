"""Run drains through a Spark Connect server, in their own process (used by test_connect.py).

Usage: ``python connect_drain.py '<json args>'`` with ``remote`` (``sc://host:port``),
``bootstrap``, ``topic`` (TopicSettings JSON), ``plan`` (DrainPlan JSON), ``output``,
``dead_letters``. Drains the plan twice over the remote session, in partition order (the
fused source) and in key order with small splits (the key-order shuffle), then in key order with a
range on a partition the topic does not have (a failed read stage), publishes the first, reads it
back through the remote session; with ``gap`` (TopicSettings JSON) and ``gap_plan``, drains that plan with Spark's
own Kafka source (``spark.reader: native``), whose log no longer holds part of it; prints one JSON line.
"""

from __future__ import annotations

import json
import os
import sys

from kprio_core.config import KprioConfig, OrderingSettings, SparkSettings, TopicSettings
from kprio_core.model.drain_plan import DrainPlan, PlannedRange
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import DrainResult
from spark_jobs.drain import drain_batch
from spark_jobs.output import publish
from tests.spark_jobs.on_disk import read_dead_letters, read_output
from spark_jobs.session import build_session
from tests.spark_jobs.plans import plan_of


def main(args: dict) -> dict:
    spark = build_session(SparkSettings(remote=args["remote"], arrow_batch_records=50), app_name="kprio-connect-test")
    topic = TopicSettings.model_validate_json(args["topic"])
    plan = DrainPlan.from_json(args["plan"])
    roots = {"output_root": args["output"], "dead_letter_root": args["dead_letters"]}
    config = KprioConfig(kafka={"bootstrap_servers": args["bootstrap"]},
                         drain={"handler": "tests.spark_jobs.handlers_for_tests:record_process"})
    try:
        fused = drain_batch(spark, config, topic, "over-connect", 1, plan, **roots)
        published = publish(fused, **roots)
        rows = read_output(spark, args["output"], topic.name, "over-connect", topic.schema_).collect()
        dead = read_dead_letters(spark, args["dead_letters"], topic.name, "over-connect").collect()
        keyed = config.model_copy(update={"ordering": OrderingSettings(mode="key", lanes=3),
                                          "splits": config.splits.model_copy(update={"max_records": 7})})
        shuffled = drain_batch(spark, keyed, topic, "over-connect-keyed", 1, plan, **roots)
        assert all(".part-" in f for s in DrainResult.from_json(shuffled.to_json()).ranges for f in s.files)
        # A read that fails in the shuffle's read stage: its typed record crosses Connect as its note.
        missing = PlannedRange(0, OffsetRange(topic.priority_topic(0), 7, 0, 5))
        failing = drain_batch(spark, keyed, topic, "over-connect-missing", 1, plan_of(topic, [*plan.ranges, missing]),
                              **roots)
        gap = TopicSettings.model_validate_json(args["gap"])
        native = config.model_copy(update={"spark": SparkSettings(remote=args["remote"], reader="native")})
        lost = drain_batch(spark, native, gap, "over-connect-native", 1, DrainPlan.from_json(args["gap_plan"]), **roots)
        return {
            "session": type(spark).__module__, "lost": lost.to_json(),
            "fused": fused.to_json(), "shuffled": shuffled.to_json(), "failing": failing.to_json(),
            "published": published,
            "offsets": sorted([r.topic, r.partition, r.offset] for r in rows),
            "dead_offsets": sorted([r.topic, r.partition, r.offset] for r in dead),
            "handler_pids": sorted({r.pid for r in rows}), "client_pid": os.getpid(),
        }
    finally:
        spark.stop()


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
