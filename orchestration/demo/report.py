"""The demo's report: per priority records, dead letters, batches, waits in batches and checks; conservation.

A record's wait: the batches between the first that could have drained it (planned after it arrived) and the
one that did (0: that very one). Two waves of orders-2[0]: 10 records from the start, drained by batches 1 and 2;
4 more arriving before batch 2, drained by batch 3 (one a dead letter):

>>> from kprio_core.model.offsets import OffsetRange as R
>>> arrivals = [Arrival(2, 1, (R("o-2", 0, 0, 10),)), Arrival(2, 2, (R("o-2", 0, 10, 14),), poison=1)]
>>> drains = [Drained(1, "b-000001", 2, (R("o-2", 0, 0, 6),), True),
...           Drained(2, "b-000002", 2, (R("o-2", 0, 6, 10),), True),
...           Drained(3, "b-000003", 2, (R("o-2", 0, 10, 14),), True, dead=1)]
>>> waits = wait_counts(arrivals, drains)
>>> dict(waits[2])
{0: 6, 1: 8}
>>> row = priority_rows(arrivals, drains, priorities=3)[0]
>>> row.records, row.dead_letters, row.batches, row.median_wait, row.max_wait, row.checks
(14, 1, 3, 1, 1, '3/3')

Conservation (docs/architecture.md, Invariants): every produced offset exactly once in the output or the dead
letters, never both; committed == high watermark. Offsets 0 and 2 in the output, 1 in the dead letters:

>>> tp = ("o-2", 0)
>>> c = check_conservation({tp: 0}, {tp: 3}, {tp: 3}, [("o-2", 0, 0), ("o-2", 0, 2)], [("o-2", 0, 1)])
>>> c.ok, c.line()
(True, 'conservation: OK: 3 of 3 produced offsets exactly once in the output (2) or the dead letters (1), never both; committed == high watermark on 1 of 1 partitions')

Offset 1 in both outputs, offset 2 in neither, offset 0 twice in the output, and the commit short:

>>> c = check_conservation({tp: 0}, {tp: 3}, {tp: 2}, [("o-2", 0, 0), ("o-2", 0, 0), ("o-2", 0, 1)], [("o-2", 0, 1)])
>>> c.ok, c.in_both, c.missing, c.duplicated
(False, 1, 1, 1)
>>> c.line()
'conservation: FAILED: 0 of 3 produced offsets exactly once in the output (0) or the dead letters (0) (1 missing, 1 duplicated, 1 in both the output and the dead letters); committed == high watermark on 0 of 1 partitions (o-2[0]: committed 2, high watermark 3)'
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kprio_core.model.offsets import OffsetRange
from kprio_core.model.priority import Priority, most_urgent_first
from orchestration.demo.producer import Arrival

if TYPE_CHECKING:
    from kprio_core.ledger import Batch
    from kprio_core.model.results import CheckReport

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class Drained:
    """What one batch planned of one priority, whether all its checks passed, whether it committed (only then did it
    drain its records), and ``dead``: how many went to the dead letters."""

    batch_no: int
    batch_id: str
    priority: Priority
    ranges: tuple[OffsetRange, ...]
    checks_passed: bool
    dead: int = 0
    committed: bool = True

    @property
    def records(self) -> int:
        return sum(r.count for r in self.ranges)


def checks_passed(checks: CheckReport | None) -> bool:
    """True when a batch has a check report and every check passed."""
    return checks is not None and bool(checks.outcomes) and checks.passed


def drains_of(batches: Iterable[Batch]) -> list[Drained]:
    """The demo's batches (numbered 1.. in ledger order) split by priority; empty ranges left out."""
    from kprio_core.ledger import BatchState
    from kprio_core.model.records import batch_number

    ordered = sorted(batches, key=lambda b: batch_number(b.batch_id))
    out: list[Drained] = []
    for no, batch in enumerate(ordered, start=1):
        by_p: dict[Priority, list[OffsetRange]] = {}
        for planned in batch.plan.ranges:
            if planned.range.count:
                by_p.setdefault(planned.priority, []).append(planned.range)
        dead = {p: d for p, (_, d) in batch.drain.by_priority().items()} if batch.drain is not None else {}
        ok, committed = checks_passed(batch.checks), batch.state is BatchState.COMMITTED
        out += [Drained(no, batch.batch_id, p, tuple(rs), ok, dead.get(p, 0), committed)
                for p, rs in sorted(by_p.items(), reverse=True)]
    return out


def _overlap(a: OffsetRange, b: OffsetRange) -> int:
    if a.topic_partition != b.topic_partition:
        return 0
    return max(0, min(a.end, b.end) - max(a.start, b.start))


def wait_counts(arrivals: Sequence[Arrival], drains: Sequence[Drained]) -> dict[Priority, Counter[int]]:
    """Per priority: wait in batches -> number of records that waited that long."""
    out: dict[Priority, Counter[int]] = {}
    for arrival in arrivals:
        counter = out.setdefault(arrival.priority, Counter())
        for d in drains:
            if not d.committed:
                continue
            n = sum(_overlap(a, r) for a in arrival.ranges for r in d.ranges)
            if n:
                counter[d.batch_no - arrival.first_batch] += n
    return out


def median_low(counts: Counter[int]) -> int | None:
    """The lower median of a histogram (None when empty).

    >>> median_low(Counter({0: 6, 1: 8})), median_low(Counter({0: 7, 1: 7})), median_low(Counter())
    (1, 0, None)
    """
    n = sum(counts.values())
    if not n:
        return None
    seen, target = 0, (n - 1) // 2
    for value in sorted(counts):
        seen += counts[value]
        if seen > target:
            return value
    raise AssertionError("unreachable: the histogram's counts add up to n")


@dataclass(frozen=True)
class PriorityRow:
    """One line of the demo's table: ``records`` drained (output and dead letters), ``dead_letters`` of them."""

    priority: Priority
    produced: int
    records: int
    dead_letters: int
    batches: int
    median_wait: int | None
    max_wait: int | None
    checks_ok: int

    @property
    def checks(self) -> str:
        return f"{self.checks_ok}/{self.batches}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "priority": self.priority,
            "produced": self.produced,
            "records": self.records,
            "dead_letters": self.dead_letters,
            "batches": self.batches,
            "median_wait_batches": self.median_wait,
            "max_wait_batches": self.max_wait,
            "checks_passed": self.checks_ok,
        }


def priority_rows(arrivals: Sequence[Arrival], drains: Sequence[Drained], priorities: int) -> list[PriorityRow]:
    """The table's rows, most urgent first: records and dead letters of committed batches, batches and checks of all."""
    waits = wait_counts(arrivals, drains)
    rows = []
    for p in most_urgent_first(priorities):
        mine = [d for d in drains if d.priority == p]
        done = [d for d in mine if d.committed]
        counts = waits.get(p, Counter())
        rows.append(PriorityRow(
            priority=p,
            produced=sum(a.records for a in arrivals if a.priority == p),
            records=sum(d.records for d in done),
            dead_letters=sum(d.dead for d in done),
            batches=len(mine),
            median_wait=median_low(counts),
            max_wait=max(counts) if counts else None,
            checks_ok=sum(1 for d in mine if d.checks_passed),
        ))
    return rows


@dataclass(frozen=True)
class Conservation:
    """Produced offsets vs. the output, the dead letters and the committed offsets: each produced offset is one of
    ``in_output``, ``in_dead_letters`` (once there, not in the other), ``missing``, ``in_both``, ``duplicated``;
    ``outside`` counts rows of offsets the demo never produced."""

    produced: int
    in_output: int
    in_dead_letters: int
    missing: int
    duplicated: int
    in_both: int
    outside: int
    partitions: int
    committed_at_high: int
    mismatches: tuple[str, ...] = field(default=())

    @property
    def exactly_once(self) -> int:
        return self.in_output + self.in_dead_letters

    @property
    def ok(self) -> bool:
        return (self.exactly_once == self.produced and not self.missing and not self.duplicated
                and not self.in_both and not self.outside and self.committed_at_high == self.partitions)

    def line(self) -> str:
        problems = [f"{n:,} {what}" for n, what in (
            (self.missing, "missing"), (self.duplicated, "duplicated"),
            (self.in_both, "in both the output and the dead letters"),
            (self.outside, "not produced by the demo")) if n]
        out = f" ({', '.join(problems)})" if problems else ", never both"
        shown = self.mismatches[:3] + (("...",) if len(self.mismatches) > 3 else ())
        bad = f" ({'; '.join(shown)})" if self.mismatches else ""
        return (f"conservation: {'OK' if self.ok else 'FAILED'}: {self.exactly_once:,} of {self.produced:,} produced "
                f"offsets exactly once in the output ({self.in_output:,}) or the dead letters "
                f"({self.in_dead_letters:,}){out}; committed == high watermark on "
                f"{self.committed_at_high} of {self.partitions} partitions{bad}")

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "produced": self.produced, "exactly_once": self.exactly_once,
                "in_output": self.in_output, "in_dead_letters": self.in_dead_letters,
                "missing": self.missing, "duplicated": self.duplicated, "in_both": self.in_both,
                "outside": self.outside, "partitions": self.partitions,
                "committed_at_high_watermark": self.committed_at_high,
                "mismatches": list(self.mismatches), "line": self.line()}


def _count(rows: Iterable[tuple[str, int, int]]) -> Counter[tuple[str, int, int]]:
    return Counter((topic, int(partition), int(offset)) for topic, partition, offset in rows)


def check_conservation(start: Mapping[TopicPartition, int], high: Mapping[TopicPartition, int],
                       committed: Mapping[TopicPartition, int | None],
                       output: Iterable[tuple[str, int, int]],
                       dead_letters: Iterable[tuple[str, int, int]] = ()) -> Conservation:
    """Compare the produced offsets ``[start, high)`` per partition with the (topic, partition, offset) rows of
    the output and of the dead letters, and the committed offsets with the high watermarks."""
    out, dead = _count(output), _count(dead_letters)
    produced = in_output = in_dead = missing = duplicated = in_both = 0
    for tp, hw in high.items():
        for offset in range(start.get(tp, 0), hw):
            produced += 1
            n_out, n_dead = out.get((*tp, offset), 0), dead.get((*tp, offset), 0)
            if n_out and n_dead:
                in_both += 1
            elif n_out + n_dead == 0:
                missing += 1
            elif n_out + n_dead > 1:
                duplicated += 1
            elif n_out:
                in_output += 1
            else:
                in_dead += 1
    outside = sum(1 for (t, q, o) in out.keys() | dead.keys() if not start.get((t, q), 0) <= o < high.get((t, q), 0))
    mismatches = tuple(f"{t}[{q}]: committed {committed.get((t, q))}, high watermark {hw}"
                       for (t, q), hw in sorted(high.items()) if committed.get((t, q)) != hw
                       and not (committed.get((t, q)) is None and hw == start.get((t, q), 0)))
    return Conservation(produced, in_output, in_dead, missing, duplicated, in_both, outside, len(high),
                        len(high) - len(mismatches), mismatches)


def render_table(rows: Sequence[PriorityRow], *, title: str) -> Any:
    """The rich Table of the rows."""
    from rich.table import Table

    table = Table(title=title, caption="records = drained (output and dead letters); wait = batches between a "
                                       "record's arrival and the batch that drained it (0: the first batch after "
                                       "it arrived); checks = batches whose blocking checks all passed")
    for name in ("priority", "records", "dead letters", "batches", "median wait", "max wait", "checks passed"):
        table.add_column(name, justify="right")
    for r in rows:
        table.add_row(str(r.priority), f"{r.records:,}", f"{r.dead_letters:,}", str(r.batches),
                      "-" if r.median_wait is None else str(r.median_wait),
                      "-" if r.max_wait is None else str(r.max_wait), r.checks)
    return table
