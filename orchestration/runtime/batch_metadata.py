"""What a run of a batch reports: its events, one-line failure reasons, step timings and the drained batch's numbers.

Plain values any driver shows as it likes; a path or Markdown says so by type (:class:`PathText`,
:class:`Markdown`, both ``str``), for the Dagster adapter to render.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from kprio_core.config import KprioConfig
from kprio_core.ledger import Batch
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import CheckReport, DrainResult, RangeStats


class Log(Protocol):
    def info(self, msg: str) -> None: ...
    def warning(self, msg: str) -> None: ...


@dataclass(frozen=True)
class Checked:
    """The blocking checks' verdicts on the batch's output (this run's, or the published one's)."""

    report: CheckReport


@dataclass(frozen=True)
class Drained:
    """The batch's output is published: its numbers (:func:`drained_metadata`)."""

    metadata: dict[str, object]


@dataclass(frozen=True)
class Committed:
    """A batch's offsets are committed: this run's batch, or a later one that only waited for it (``note`` says)."""

    batch_id: str
    metadata: dict[str, object]
    note: str | None = None


Event = Checked | Drained | Committed


class RunFailed(Exception):
    """The run fails with this one line (the batch marked failed, or left as the rules say); its cause chained."""


class PathText(str):
    """A metadata value that is a path (of the output)."""


class Markdown(str):
    """A metadata value written in Markdown."""


def per_priority(prefix: str, values: Mapping[int, int]) -> dict[str, int]:
    """``{2: 5, 0: 1}`` -> ``{"<prefix>_p2": 5, "<prefix>_p0": 1}`` (most urgent first).

    >>> per_priority("records", {0: 1, 2: 5})
    {'records_p2': 5, 'records_p0': 1}
    """
    return {f"{prefix}_p{p}": int(values[p]) for p in sorted(values, reverse=True)}


def failure_reason(result: DrainResult, ranges: Collection[OffsetRange] | None = None) -> str:
    """One line for the ranges whose drain failed (of ``ranges``, when given): where and why, the first few named.

    >>> from kprio_core.model.results import RangeStats
    >>> r = OffsetRange("tx-0", 0, 0, 224)
    >>> s = RangeStats(0, r, 0, 0, 0, None, None, failure=f"{r}: range {r} is incomplete: 1 of 224 offsets missing")
    >>> failure_reason(DrainResult("b-1", 1, "tx", (s,), staging=""))
    'drain failed: range tx-0[0]@[0,224) is incomplete: 1 of 224 offsets missing'
    """
    failed = [s for s in result.failed_ranges if ranges is None or s.range in ranges]
    head = "; ".join(_range_failure(s.range, s.failure or "") for s in failed[:3])
    more = f" (and {len(failed) - 3} more ranges)" if len(failed) > 3 else ""
    return f"drain failed: {head}{more}"


def _range_failure(rng: OffsetRange, failure: str) -> str:
    """``<range>: <cause>``, naming the range once even when the cause names it already."""
    cause = failure.removeprefix(f"{rng}: ")
    return cause if str(rng) in cause else f"{rng}: {cause}"


def one_line(text: str, limit: int = 500) -> str:
    """A failure's message as one line (Spark and gRPC errors span pages), cut at ``limit`` characters.

    >>> one_line("\\n  Py4JJavaError: An error occurred\\n  at org.apache...", limit=20)
    'Py4JJavaError: An...'
    """
    first = next((line.strip() for line in text.splitlines() if line.strip()), text)
    return first if len(first) <= limit else first[: limit - 3] + "..."


@dataclass
class Timings:
    """Seconds per step of one run, for the metadata (latency is what users feel)."""

    steps: dict[str, float] = field(default_factory=dict)

    def time(self, step: str, started: float) -> None:
        self.steps[step] = round(self.steps.get(step, 0.0) + time.monotonic() - started, 3)

    def metadata(self) -> dict[str, float]:
        return {f"{step}_s": s for step, s in self.steps.items()}


def drained_metadata(config: KprioConfig, batch: Batch, result: DrainResult, kept: Sequence[RangeStats],
                     split: Sequence[str], timings: Timings) -> dict[str, object]:
    """The drained batch's numbers: records, dead letters and lag per priority, sizes, losses, steps' seconds."""
    topic = config.topic(batch.logical_topic)
    out = {p: 0 for p in range(topic.priorities)}
    dead = dict(out)
    for s in kept:
        out[s.priority] += s.output
        dead[s.priority] += s.dead
    meta: dict[str, object] = per_priority("records", out)
    meta.update(per_priority("dead_letters", dead))
    meta.update(per_priority("lag_before", batch.plan.backlog_before))
    meta.update(
        records=sum(out.values()), dead_letters=sum(dead.values()),
        bytes=sum(s.bytes for s in kept), data_lost=sum(g.count for s in kept for g in s.lost),
        offsets_without_record=sum(s.no_record for s in kept),
        planned_records=sum(s.range.count for s in kept), record_budget=batch.plan.record_budget,
        ranges=len(kept), attempt=batch.attempts,
        logical_topic=topic.name, mode=batch.plan.mode.value,
        output=PathText(f"{config.drain.output_path}/{topic.name}"),
        **timings.metadata(),
    )
    if result.record_seconds is not None:  # the records' share of drain_s: the rate the next batches are sized by
        meta["drain_records_s"] = round(result.record_seconds, 3)
    if split:
        meta["split_off"] = ", ".join(split)
    meta.update({f"due_p{p}": why for p, why in batch.plan.due.items()})  # why the objectives took these records
    if batch.plan.log_changes:  # changes of the log kprio did not make, and what was decided
        meta["log_changes"] = Markdown("\n".join(f"- {c}" for c in batch.plan.log_changes))
    return meta
