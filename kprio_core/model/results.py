"""What the steps of a batch hand on: range stats, the drain result, check outcomes, the commit report.

Frozen, stored in the ledger as JSON (pydantic): no step re-parses another's dict. 28 records out, 2 dead letters:

>>> from kprio_core.model.offsets import OffsetRange
>>> s = RangeStats(2, OffsetRange("orders-2", 0, 0, 30), output=28, dead=2, distinct=30, first=0, last=29,
...                bytes=6000)
>>> s.written, s.expected, s.missing, s.duplicates, s.complete
(30, 30, 0, 0, True)
>>> r = DrainResult("b-000007", 1, "orders", (s,), staging="/out/_staging/b-000007.1", seconds=1.5)
>>> r.records, r.dead, r.by_priority()
(28, 2, {2: (28, 2)})
>>> DrainResult.from_json(r.to_json()) == r
True

A failed range carries the :class:`ErrorRecord` its executor wrote; the driver rebuilds the typed error from it:

>>> from kprio_core.errors import OutputUnavailable
>>> rec = ErrorRecord.of(OutputUnavailable("No space left on device: /out/_staging/b-7.1/x.parquet"),
...                      where=OffsetRange("orders-2", 0, 0, 30))
>>> rec.kind, rec.transient, str(rec.where)
('OutputUnavailable', True, 'orders-2[0]@[0,30)')
>>> err = rec.error()
>>> type(err).__name__, err.code, str(err)
('OutputUnavailable', 'output_unavailable', 'No space left on device: /out/_staging/b-7.1/x.parquet')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import TypeAdapter

from kprio_core import errors
from kprio_core.model.offsets import OffsetRange, TopicPartitionKey
from kprio_core.model.ordering import Ordering
from kprio_core.model.priority import Priority


@dataclass(frozen=True, slots=True)
class ErrorRecord:
    """Why a range's drain failed, as its task wrote it: ``kind`` (a class of :mod:`kprio_core.errors`; another
    exception is ``TaskFailed`` naming its type), message, where, and ``transient`` judged where it happened."""

    kind: str
    message: str
    transient: bool = False
    where: OffsetRange | None = None
    """The range (a split, or the planned range) being read or written when it failed."""

    @classmethod
    def of(cls, err: BaseException, where: OffsetRange | None = None) -> ErrorRecord:
        """The record of ``err``: a kprio error as it is; any other exception as TaskFailed naming its type.

        >>> ErrorRecord.of(ValueError("offset 9 seen after 12"))
        ErrorRecord(kind='TaskFailed', message='ValueError: offset 9 seen after 12', transient=False, where=None)
        """
        if isinstance(err, errors.KprioError):
            kind, message = type(err).__name__, str(err)
        else:
            kind, message = "TaskFailed", f"{type(err).__name__}: {err}"
        if not isinstance(getattr(errors, kind, None), type):
            kind = "TaskFailed"  # a KprioError defined outside kprio_core.errors: the driver knows its base only
            message = f"{type(err).__name__}: {message}"
        return cls(kind, " ".join(message.split()), errors.is_transient(err), where)

    def error(self) -> errors.KprioError:
        """The typed error again (its message as recorded; a kind this version does not know becomes TaskFailed)."""
        cls = getattr(errors, self.kind, None)
        if not (isinstance(cls, type) and issubclass(cls, errors.KprioError)):
            cls = errors.TaskFailed
        rebuilt = cls.__new__(cls)
        Exception.__init__(rebuilt, self.message)  # bypass custom __init__s: the message is final
        return rebuilt

    def to_json(self) -> str:
        """One line of JSON, how a record travels where only text does (a failed Spark stage's traceback).

        >>> rec = ErrorRecord("RangeIncomplete", "range t[0]@[4,9) is incomplete", False, OffsetRange("t", 0, 4, 9))
        >>> rec.to_json()
        '{"kind":"RangeIncomplete","message":"range t[0]@[4,9) is incomplete","transient":false,\
"where":{"topic":"t","partition":0,"start":4,"end":9}}'
        >>> ErrorRecord.from_json(rec.to_json()) == rec
        True
        """
        return _ERROR.dump_json(self).decode()

    @classmethod
    def from_json(cls, text: str | bytes | Mapping[str, object]) -> ErrorRecord:
        """The record of :meth:`to_json`'s text (or of its already decoded object)."""
        if isinstance(text, Mapping):
            return _ERROR.validate_python(text)
        return _ERROR.validate_json(text)


@dataclass(frozen=True, slots=True)
class RangeStats:
    """What one planned range produced, counted on the rows written: a correct drain writes every record read exactly
    once, to the output or the dead letters (``written == distinct == expected``, the range less ``no_record`` and
    ``lost``); its ``outside`` and ``invalid_in_output`` are 0 (audits of other frames fill them)."""

    priority: Priority
    range: OffsetRange
    output: int
    """Rows written to the output."""
    dead: int
    """Rows written to the dead-letter output (invalid records)."""
    distinct: int
    """Distinct offsets among the rows of both outputs that lie inside ``range``."""
    first: int | None
    """Lowest offset written inside the range (None: none)."""
    last: int | None
    """Highest offset written inside the range (None: none)."""
    bytes: int = 0
    """Key plus value bytes of every record written."""
    outside: int = 0
    """Rows attributed to this range whose offsets lie outside it."""
    invalid_in_output: int = 0
    """Output rows that carry an error (a correct drain sends those to the dead letters)."""
    nulls: tuple[tuple[str, int], ...] = ()
    """Output rows with a null required field, per field (tombstones excepted unless configured)."""
    lost: tuple[OffsetRange, ...] = ()
    """Offsets the log no longer held (retention, delete-records, truncation), recorded by ``drain.allow_data_loss``."""
    no_record: int = 0
    """Offsets with no record for the read (transaction markers, aborted, compacted): normal, never lost."""
    failure: str | None = None
    """Why the drain of this range failed (its task raised), one line naming the range: the range is not proven."""
    error: ErrorRecord | None = None
    """The failure's cause as the task recorded it (typed; None for a range that did not fail)."""
    files: tuple[str, ...] = ()
    """Staged files holding this range's rows (output and dead letters), relative to the staging root."""

    @property
    def written(self) -> int:
        """Rows in both outputs."""
        return self.output + self.dead

    @property
    def expected(self) -> int:
        """Rows a complete drain writes: the records the read found (the range less lost and no-record offsets)."""
        return self.range.count - sum(g.count for g in self.lost) - self.no_record

    @property
    def missing(self) -> int:
        """Offsets of the range absent from both outputs (a hole or a short tail)."""
        return max(0, self.expected - self.distinct)

    @property
    def duplicates(self) -> int:
        """Rows beyond one per distinct offset."""
        return max(0, self.written - self.outside - self.distinct)

    @property
    def complete(self) -> bool:
        """Every expected offset once, nothing else, and the drain did not fail."""
        return (self.failure is None and self.missing == 0 and self.duplicates == 0 and self.outside == 0
                and self.written - self.outside == self.expected)

    @property
    def invalid_ratio(self) -> float:
        """Dead letters per record written (0.0 for an empty range)."""
        return self.dead / self.written if self.written else 0.0


@dataclass(frozen=True)
class DrainResult:
    """A drained attempt of a batch: per-range stats and where its rows are staged (not yet published)."""

    batch_id: str
    attempt: int
    logical_topic: str
    ranges: tuple[RangeStats, ...]
    staging: str
    """Root of this attempt's staged files; :func:`spark_jobs.output.publish` moves them into place."""
    seconds: float = 0.0
    """Wall time of the drain (read, handler, write), the ledger's throughput measure."""
    record_seconds: float | None = None
    """The records' share of ``seconds``: the tasks' time on records over their cores, without the job's fixed cost.
    None where the drain cannot tell (the key-order shuffle reads in another stage; unknown cluster cores)."""
    reader: str = "python"
    ordering: Ordering = Ordering.PARTITION
    lanes: int = 1

    @property
    def records(self) -> int:
        """Rows written to the output."""
        return sum(r.output for r in self.ranges)

    @property
    def dead(self) -> int:
        """Rows written to the dead letters."""
        return sum(r.dead for r in self.ranges)

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.ranges)

    @property
    def lost_offsets(self) -> int:
        return sum(g.count for r in self.ranges for g in r.lost)

    @property
    def no_record_offsets(self) -> int:
        """Offsets that held no record (markers, aborted and compacted records), over every range."""
        return sum(r.no_record for r in self.ranges)

    @property
    def failed_ranges(self) -> tuple[RangeStats, ...]:
        """Ranges whose drain failed."""
        return tuple(r for r in self.ranges if r.failure is not None)

    def by_priority(self) -> dict[Priority, tuple[int, int]]:
        """``(output rows, dead letters)`` per priority, most urgent first."""
        totals: dict[Priority, tuple[int, int]] = {}
        for r in self.ranges:
            out, dead = totals.get(r.priority, (0, 0))
            totals[r.priority] = (out + r.output, dead + r.dead)
        return dict(sorted(totals.items(), reverse=True))

    def written_by_priority(self) -> dict[Priority, int]:
        """Records drained per priority (output and dead letters: both were consumed)."""
        return {p: out + dead for p, (out, dead) in self.by_priority().items()}

    def to_json(self) -> str:
        return _DRAIN.dump_json(self).decode()

    @classmethod
    def from_json(cls, text: str | bytes) -> DrainResult:
        return _DRAIN.validate_json(text)


@dataclass(frozen=True)
class CheckOutcome:
    """The verdict of one named check, its numbers, and the ranges it failed (for failure isolation)."""

    name: str
    passed: bool
    metadata: Mapping[str, int | float | str] = field(default_factory=dict)
    failed_ranges: tuple[OffsetRange, ...] = ()
    """The planned ranges that broke this check (empty when it passed, or when it cannot say which)."""
    description: str = ""

    def failure(self) -> str:
        """One line saying what failed and where, for the ledger's reason and the run's error.

        >>> CheckOutcome("values_match_schema", False, {"invalid_records": 7},
        ...              (OffsetRange("orders-0", 1, 0, 20),)).failure()
        'values_match_schema failed on orders-0[1]@[0,20) (invalid_records=7)'
        """
        where = ""
        if self.failed_ranges:
            named = ", ".join(str(r) for r in self.failed_ranges[:3])
            more = f" and {len(self.failed_ranges) - 3} more" if len(self.failed_ranges) > 3 else ""
            where = f" on {named}{more}"
        numbers = ", ".join(f"{k}={v}" for k, v in self.metadata.items())
        return f"{self.name} failed{where} ({numbers})"


@dataclass(frozen=True)
class CheckReport:
    """Every check of one drained attempt."""

    outcomes: tuple[CheckOutcome, ...]

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outcomes)

    @property
    def failed(self) -> tuple[CheckOutcome, ...]:
        return tuple(o for o in self.outcomes if not o.passed)

    def failed_ranges(self) -> tuple[OffsetRange, ...]:
        """Every range some check failed on, sorted (the batch keeps the others)."""
        return tuple(sorted({r for o in self.failed for r in o.failed_ranges}))

    @classmethod
    def merged(cls, reports: Sequence[CheckReport]) -> CheckReport:
        """One report over several (a replay checks each logical topic's output): a check passes when it
        passed everywhere; its numbers are summed, its failed ranges joined.

        >>> a = CheckReport((CheckOutcome("offsets_are_unique", True, {"duplicate_rows": 0}),))
        >>> b = CheckReport((CheckOutcome("offsets_are_unique", False, {"duplicate_rows": 2},
        ...                               (OffsetRange("o-1", 0, 0, 5),)),))
        >>> print(CheckReport.merged([a, b]).reason())
        offsets_are_unique failed on o-1[0]@[0,5) (duplicate_rows=2)
        """
        names: dict[str, list[CheckOutcome]] = {}
        for report in reports:
            for o in report.outcomes:
                names.setdefault(o.name, []).append(o)
        merged = []
        for name, outcomes in names.items():
            numbers: dict[str, int | float | str] = {}
            for o in outcomes:
                for key, value in o.metadata.items():
                    before = numbers.get(key)
                    summable = isinstance(value, int | float) and isinstance(before, int | float)
                    numbers[key] = before + value if summable else numbers.get(key, value)  # type: ignore[operator]
            merged.append(CheckOutcome(name, all(o.passed for o in outcomes), numbers,
                                       tuple(sorted({r for o in outcomes for r in o.failed_ranges})),
                                       outcomes[0].description))
        return cls(tuple(merged))

    def outcome(self, name: str) -> CheckOutcome:
        for o in self.outcomes:
            if o.name == name:
                return o
        raise KeyError(f"no check named {name!r} (known: {[o.name for o in self.outcomes]})")

    def reason(self) -> str:
        """Why the attempt failed, one clause per failed check."""
        return "; ".join(o.failure() for o in self.failed)

    def to_json(self) -> str:
        return _CHECKS.dump_json(self).decode()

    @classmethod
    def from_json(cls, text: str | bytes) -> CheckReport:
        return _CHECKS.validate_json(text)


@dataclass(frozen=True, slots=True)
class CommitMove:
    """One partition's committed offset moved forward."""

    topic: str
    partition: int
    old: int | None
    new: int


@dataclass(frozen=True, slots=True)
class CommitSkip:
    """One partition left alone by a commit, and why."""

    topic: str
    partition: int
    why: str


@dataclass(frozen=True)
class CommitReport:
    """What a commit moved (old -> new per partition) and what it left alone, with why.

    >>> rep = CommitReport.of({("o-2", 0): (None, 7)}, {("o-2", 1): "already committed at 30"})
    >>> str(rep)
    'moved: o-2[0] none->7; skipped: o-2[1]: already committed at 30'
    >>> CommitReport.from_json(rep.to_json()) == rep
    True
    """

    moved: tuple[CommitMove, ...] = ()
    skipped: tuple[CommitSkip, ...] = ()

    @classmethod
    def of(cls, moved: Mapping[TopicPartitionKey, tuple[int | None, int]],
           skipped: Mapping[TopicPartitionKey, str]) -> CommitReport:
        return cls(
            tuple(CommitMove(t, p, old, new) for (t, p), (old, new) in sorted(moved.items())),
            tuple(CommitSkip(t, p, why) for (t, p), why in sorted(skipped.items())),
        )

    def moves(self) -> dict[TopicPartitionKey, tuple[int | None, int]]:
        """``(old, new)`` committed offset per moved partition."""
        return {(m.topic, m.partition): (m.old, m.new) for m in self.moved}

    def skipped_why(self) -> dict[TopicPartitionKey, str]:
        return {(s.topic, s.partition): s.why for s in self.skipped}

    def __str__(self) -> str:
        moved = ", ".join(f"{m.topic}[{m.partition}] {m.old if m.old is not None else 'none'}->{m.new}"
                          for m in self.moved)
        skipped = ", ".join(f"{s.topic}[{s.partition}]: {s.why}" for s in self.skipped)
        return f"moved: {moved or 'nothing'}; skipped: {skipped or 'nothing'}"

    def to_json(self) -> str:
        return _COMMIT.dump_json(self).decode()

    @classmethod
    def from_json(cls, text: str | bytes) -> CommitReport:
        return _COMMIT.validate_json(text)


_ERROR: TypeAdapter[ErrorRecord] = TypeAdapter(ErrorRecord)
_DRAIN: TypeAdapter[DrainResult] = TypeAdapter(DrainResult)
_CHECKS: TypeAdapter[CheckReport] = TypeAdapter(CheckReport)
_COMMIT: TypeAdapter[CommitReport] = TypeAdapter(CommitReport)
