"""A time window of every priority topic drained again into the replay output: for every driver alike.

Each logical topic's window maps to offsets by offsets-for-times (:meth:`~kprio_core.kafka.KafkaEdge.window_ranges`)
and is drained like a batch (invalid records to the replay's dead letters) into ``drain.replay_path``; no consumer
group offset is touched, so live draining is unaffected. A topic's output is published only when the six
blocking checks passed on it, else :attr:`Replayed.failures` says why. The run's outcome rules
(:mod:`kprio_core.lifecycle.outcome`) decide, with nothing split off: a replay records no batch. A rerun of a
window replaces its files (:func:`window_id` names them).

>>> plan = replay_plan("orders", {1: [OffsetRange("orders-1", 0, 10, 20)]}, 2)
>>> plan.records, plan.records_by_priority()
(10, {1: 10, 0: 0})
>>> from datetime import UTC, datetime
>>> window_id(datetime(2026, 11, 14, 5, tzinfo=UTC), datetime(2026, 11, 14, 6, tzinfo=UTC))
'w-20261114T0500'
>>> window_id(datetime(2026, 11, 14, 5, tzinfo=UTC), datetime(2026, 11, 14, 7, 30, tzinfo=UTC))
'w-20261114T0500-20261114T0730'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from kprio_core.config import KprioConfig
from kprio_core.lifecycle.outcome import FailWhole, RangeDrained, after_checks, after_drain
from kprio_core.model.drain_plan import DrainPlan, PlanMode, PlannedRange
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import CheckReport
from orchestration.runtime.ports import Edge

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPLAY_DEAD_LETTERS = "_dead_letters"
"""Directory under ``drain.replay_path`` holding the invalid records of replays."""
STAMP = "%Y%m%dT%H%M"


class ReplayFailed(Exception):
    """A range of the window could not be read (nothing of that topic was published); one line."""


@dataclass
class Replayed:
    """What a replay did: the merged checks, the topics whose checks failed, the records per priority."""

    report: CheckReport
    failures: dict[str, str] = field(default_factory=dict)
    """Logical topic -> the failed checks' reason: nothing of it was published."""
    records: dict[int, int] = field(default_factory=dict)
    """Output records per priority (all topics)."""
    dead_letters: int = 0
    by_topic: dict[str, int] = field(default_factory=dict)
    """Records drained per logical topic (0 when its window was empty)."""


def window_id(start: datetime, end: datetime) -> str:
    """The output id of a replay window: its start hour, or start and end when it is not one hour (path-safe)."""
    if end - start == timedelta(hours=1):
        return f"w-{start.strftime(STAMP)}"
    return f"w-{start.strftime(STAMP)}-{end.strftime(STAMP)}"


def replay_plan(logical_topic: str, ranges_by_priority: Mapping[int, list[OffsetRange]], n_priorities: int) -> DrainPlan:
    """A plan of explicit ranges (a time window), recorded nowhere: its budget is its own size."""
    planned = tuple(
        PlannedRange(p, r) for p in sorted(ranges_by_priority, reverse=True) for r in ranges_by_priority[p] if r.count
    )
    counts = {p: sum(r.count for r in ranges_by_priority.get(p, [])) for p in range(n_priorities - 1, -1, -1)}
    return DrainPlan(logical_topic=logical_topic, mode=PlanMode.LAG_AWARE, record_budget=max(1, sum(counts.values())),
                     byte_budget=None, quotas=counts, grants=counts, ranges=planned)


def replay_window(config: KprioConfig, session: SparkSession, edge: Edge, start_ms: int, end_ms: int, replay_id: str) -> Replayed:
    """Drain ``[start_ms, end_ms)`` of every logical topic into ``drain.replay_path`` (see the module docstring)."""
    from orchestration.runtime.checks import check_batch
    from spark_jobs.drain import discard, drain_batch, publish

    root = config.drain.replay_path
    dead_root = f"{root.rstrip('/')}/{REPLAY_DEAD_LETTERS}"
    done = Replayed(CheckReport(()), records=dict.fromkeys(range(max(t.priorities for t in config.topics)), 0))
    reports = []
    for topic in config.topics:
        plan = replay_plan(topic.name, edge.window_ranges(topic, start_ms, end_ms), topic.priorities)
        if plan.is_empty:
            done.by_topic[topic.name] = 0
            continue
        # One topic at a time: the topics of a replay share its id, so their staging too.
        result = drain_batch(session, config, topic, replay_id, 1, plan, output_root=root, dead_letter_root=dead_root)
        drained = [RangeDrained(s.range, s.failure is not None, s.error.transient if s.error else None)
                   for s in result.ranges]
        if isinstance(after_drain(drained, may_split=False), FailWhole):
            discard(result, output_root=root, dead_letter_root=dead_root)
            raise ReplayFailed("; ".join(f"{s.range}: {s.failure}" for s in result.failed_ranges[:3]))
        report = check_batch(result.ranges, quality=config.quality, required_fields=topic.required_fields)
        reports.append(report)
        checked = after_checks([s.range for s in result.ranges], passed=report.passed,
                               failing=report.failed_ranges(), may_split=False)
        if isinstance(checked, FailWhole):
            discard(result, output_root=root, dead_letter_root=dead_root)
            done.failures[topic.name] = report.reason()
            continue
        publish(result, output_root=root, dead_letter_root=dead_root)
        for p, (out, bad) in result.by_priority().items():
            done.records[p] = done.records.get(p, 0) + out
            done.dead_letters += bad
        done.by_topic[topic.name] = result.records
    if not reports:  # nothing in the window: the checks of an empty output, which pass
        reports.append(check_batch((), quality=config.quality, required_fields=()))
    done.report = CheckReport.merged(reports)
    return done
