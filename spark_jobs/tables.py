"""Where a batch's checked rows land: one interface, :class:`Output`, and one module per format behind it.

``drain.format`` names the format (:func:`output_of`; registry :data:`kprio_core.extras.OUTPUT_FORMATS`): Parquet
files moved into place one by one (:mod:`spark_jobs.formats.parquet`: a reader may meet half a batch for a moment;
idempotent, files named by their ranges), or a Delta Lake or Iceberg table per logical topic and root, one commit
per batch (:mod:`~spark_jobs.formats.delta`, :mod:`~spark_jobs.formats.iceberg`: whole batches, each offset once;
the run's epoch is the fencing token: same epoch a no-op, later replaces, earlier refused). Every caller goes
through it, so formats differ in their modules only. Both roots are in the chosen format; every format stages
Parquet files under ``<root>/_staging/`` (:mod:`spark_jobs.output`), which the checks read before any publish.

>>> import tempfile
>>> from kprio_core.config import DrainSettings
>>> root = tempfile.mkdtemp()
>>> drain = DrainSettings(format="delta", output_path=f"{root}/out", dead_letter_path=f"{root}/dead")
>>> read_rows(drain, "output", "orders").num_rows, live_files(drain, "orders"), output_of(drain).versions
(0, (), 'log entries')
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from kprio_core.config import DrainSettings
from kprio_core.errors import TRANSIENT_ERRNOS, LeaseLost, OutputPublishFailed, OutputUnavailable
from kprio_core.extras import OUTPUT_FORMATS
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import CheckReport, DrainResult
from spark_jobs.layout import DEAD_LETTERS, OUTPUT

if TYPE_CHECKING:
    from spark_jobs.maintenance import Figures, Maintained
    from spark_jobs.output import LiveFile

CHECKS_KEY = "kprio.checks"
"""Commit metadata (Delta) or snapshot summary (Iceberg) of a publish: each check's verdict and numbers."""


@dataclass(frozen=True)
class Publication:
    """What a publish committed: the tables' versions per root kind (none for Parquet's file moves)."""

    versions: Mapping[str, int | str] = field(default_factory=dict)
    key: str = "version"
    """What a version is (``version``: Delta's; ``snapshot_id``: Iceberg's)."""
    already: bool = False
    """The output table held the batch at this run's epoch already: nothing was written."""

    def metadata(self) -> dict[str, object]:
        """What a run reports of it, the output table's first.

        >>> Publication({"dead-letters": 2, "output": 7}).metadata()
        {'table_version': 7, 'dead_letter_table_version': 2}
        """
        return {f"{'table' if kind == OUTPUT else 'dead_letter_table'}_{self.key}": v
                for kind, v in sorted(self.versions.items(), key=lambda kv: kv[0] != OUTPUT)}


class Output(Protocol):
    """An output format over the roots of ``drain`` (a frozen value, :func:`output_of`): what its publish makes of
    the staged files, and how they are read, kept and shown."""

    drain: DrainSettings
    tables: ClassVar[bool]
    """It keeps tables, whose upkeep runs by itself (:meth:`maintain`); Parquet files have none."""
    versions: ClassVar[str]
    """What a table's versions are called (the maintenance's report: ``log entries``, ``snapshots``)."""
    data_dir: ClassVar[str]
    """Below a topic's directory, the one holding its ``priority=<p>`` directories (Iceberg's ``data``)."""
    duckdb_extensions: ClassVar[tuple[str, ...]]
    """The DuckDB extensions :meth:`scan_sql` needs, in the order they load."""

    def publish(self, result: DrainResult, *, ranges: Iterable[OffsetRange] | None = None,
                incarnations: Mapping[str, int] | None = None, checks: CheckReport | None = None,
                epoch: int | None = None) -> Publication:
        """Publish the staged rows and dead letters of ``ranges`` (default: every range without failure) as one
        decision fenced by ``epoch`` (default: the attempt), then remove the attempt's staging."""

    def read_rows(self, kind: str, logical_topic: str, *, batch_id: str | None = None,
                  columns: Iterable[str] | None = None) -> Any:
        """The published rows of ``kind`` as a ``pyarrow.Table`` (empty, no columns, when nothing is published)."""

    def live_files(self, kind: str, logical_topic: str) -> tuple[LiveFile, ...]:
        """Every published file of ``kind`` (a table's: those its current version holds)."""

    def publishes(self, kind: str, logical_topic: str) -> list[dict[str, Any]]:
        """The publishes the output records, oldest first: what a lost ledger adopts (none for files without a log)."""

    def figures(self, kind: str, logical_topic: str) -> Figures | None:
        """The output's size as a reader meets it: files, bytes, versions (None: no table yet)."""

    def maintain(self, kind: str, logical_topic: str, now: float) -> Maintained | None:
        """Compact, then remove what no version within ``drain.maintenance`` needs (None: no table)."""

    def scan_sql(self, kind: str, logical_topic: str) -> str:
        """DuckDB's table function over the published rows."""

    def data_files(self, kind: str, logical_topic: str) -> list[str]:
        """The data files of the current state: what an engine without a reader of the format reads."""

    def describe(self, logical_topic: str, publishes: list[dict[str, Any]]) -> list[str]:
        """What a report shows of the output and its ``publishes`` (none for files)."""

    def how_to_query(self, logical_topic: str) -> list[str]:
        """How a person reads the output with other tools."""


def output_of(drain: DrainSettings) -> Output:
    """The format ``drain.format`` names, over ``drain``'s roots."""
    module, _, name = OUTPUT_FORMATS[drain.format.value].implementation.partition(":")
    return getattr(importlib.import_module(module), name)(drain)


def roots(drain: DrainSettings) -> dict[str, str]:
    """The root of each kind: ``{"output": ..., "dead-letters": ...}``."""
    return {OUTPUT: drain.output_path, DEAD_LETTERS: drain.dead_letter_path}


def publish(drain: DrainSettings, result: DrainResult, **how: Any) -> Publication:
    """:meth:`Output.publish` in ``drain.format``."""
    return output_of(drain).publish(result, **how)


def read_rows(drain: DrainSettings, kind: str, logical_topic: str, **which: Any) -> Any:
    """:meth:`Output.read_rows` in ``drain.format``."""
    return output_of(drain).read_rows(kind, logical_topic, **which)


def live_files(drain: DrainSettings, logical_topic: str) -> tuple[LiveFile, ...]:
    """Every published file of a topic under both roots."""
    out = output_of(drain)
    return tuple(f for kind in (OUTPUT, DEAD_LETTERS) for f in out.live_files(kind, logical_topic))


def batch_ids(drain: DrainSettings, logical_topic: str, live: Iterable[LiveFile] | None = None) -> set[str]:
    """Every batch id the published output names: live files' writers (``live`` if read) and recorded publishes'."""
    out = output_of(drain)
    ids = {f.batch_id for f in (live_files(drain, logical_topic) if live is None else live) if f.batch_id}
    return ids | {b["batch_id"] for kind in (OUTPUT, DEAD_LETTERS) for b in out.publishes(kind, logical_topic)}


class TableOutput:
    """What the table formats share: the publish into two tables as one decision, and its report.

    A format says how it reads the epoch a table holds and how it commits."""

    drain: DrainSettings
    tables: ClassVar[bool] = True
    data_dir: ClassVar[str] = ""
    version_key: ClassVar[str] = "version"
    version_word: ClassVar[str] = "version"
    history: ClassVar[str] = ""
    """Where a person finds every publish (``DeltaTable(path).history()``)."""

    def publish(self, result: DrainResult, *, ranges: Iterable[OffsetRange] | None = None,
                incarnations: Mapping[str, int] | None = None, checks: CheckReport | None = None,
                epoch: int | None = None) -> Publication:
        """The dead-letter table's commit, then the output table's: the output's is the decision.

        When it holds the batch at ``epoch`` the publish is done (``already``); a later epoch refuses this run
        (:func:`refuse_if_stale`). A crash between the commits leaves the output without the batch: the next run
        publishes both again. :class:`~kprio_core.errors.OutputUnavailable` when the output cannot be written for
        now, else :class:`~kprio_core.errors.OutputPublishFailed`, each naming the batch and the cause.
        """
        from spark_jobs.output import discard

        fence = result.attempt if epoch is None else epoch
        chosen = list(ranges) if ranges is not None else None
        versions: dict[str, int | str] = {}
        try:
            decided = self.held_epoch(result)
            if decided is None or decided < fence:
                for kind in (DEAD_LETTERS, OUTPUT):
                    done = self.commit(kind, result, chosen, incarnations, checks, fence)
                    if done is not None:
                        versions[kind] = done
            else:
                refuse_if_stale(decided, fence, result, self.label(OUTPUT, result.logical_topic))
        except LeaseLost:
            raise
        except Exception as err:  # delta-rs, pyiceberg and the catalogs raise their own types: typed by their cause
            raise publish_failed(result, err) from err
        discard(result, output_root=self.drain.output_path, dead_letter_root=self.drain.dead_letter_path)
        return Publication(versions, self.version_key, already=decided is not None and decided >= fence)

    def held_epoch(self, result: DrainResult) -> int | None:
        """The epoch the output table holds the batch at (None: no table, or no publish of it)."""
        raise NotImplementedError

    def label(self, kind: str, logical_topic: str) -> str:
        """The table as a person finds it (``Delta table /data/out/orders``)."""
        raise NotImplementedError

    def commit(self, kind: str, result: DrainResult, ranges: list[OffsetRange] | None,
               incarnations: Mapping[str, int] | None, checks: CheckReport | None, fence: int) -> int | str | None:
        """One table's commit of the batch; its version (None: nothing to publish, nothing to replace)."""
        raise NotImplementedError

    def headline(self, logical_topic: str, publishes: int, batches: int) -> str:
        raise NotImplementedError

    def describe(self, logical_topic: str, publishes: list[dict[str, Any]]) -> list[str]:
        """The output table and its publishes, the first three with the ranges each published."""
        lines = [self.headline(logical_topic, len(publishes), len({e["batch_id"] for e in publishes}))]
        for entry in publishes[:3]:
            ranges = entry["ranges"]
            shown = ", ".join(ranges[:2]) + (f" and {len(ranges) - 2} more" if len(ranges) > 2 else "")
            lines.append(f"  {self.version_word} {entry[self.version_key]}: {entry['batch_id']} attempt "
                         f"{entry['attempt']}: {shown}")
        if len(publishes) > 3:
            lines.append(f"  ... {len(publishes) - 3} more ({self.history})")
        return lines

    def root_of(self, kind: str) -> str:
        return roots(self.drain)[kind]


def refuse_if_stale(held: int, epoch: int, result: DrainResult, table: str) -> None:
    """Raise :class:`~kprio_core.errors.LeaseLost` when ``table`` holds the batch at a later epoch (a newer run)."""
    if held > epoch:
        raise LeaseLost(f"the publish of batch {result.batch_id} refused by the {table}: it holds the batch at epoch "
                        f"{held}, newer than this run's {epoch} (another run owns the batch now); nothing was written")


def publish_failed(result: DrainResult, err: BaseException) -> Exception:
    """The publish's failure typed by its cause: OutputUnavailable when the storage refuses for now."""
    code = err.errno if isinstance(err, OSError) and err.errno else delta_errno(err)
    kind = OutputUnavailable if code in TRANSIENT_ERRNOS else OutputPublishFailed
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return kind(f"publishing batch {result.batch_id!r} attempt {result.attempt} of {result.logical_topic!r}: {first}")


_ERRNO_TEXT = re.compile(r"\(os error (\d+)\)|\[errno (\d+)\]", re.IGNORECASE)
"""Rust's ``(os error 28)``; pyarrow's ``[errno 28]`` when delta-rs read a Python stream that failed."""


def delta_errno(err: BaseException) -> int | None:
    """The errno of a delta-rs error, which carries it in its text only: a workaround at this one place.

    delta-rs raises I/O errors as ``OSError(message)`` without ``errno``, the number only in the text
    (delta-io/delta-rs#2860); everything else carries numbers and ranges as fields and is never read so.

    >>> delta_errno(OSError("Generic LocalFileSystem error: Unable to copy file: No space left on device (os error 28)"))
    28
    >>> delta_errno(OSError("Generic DeltaTable error: version mismatch")) is None
    True
    """
    found = _ERRNO_TEXT.search(str(err))
    return int(found.group(1) or found.group(2)) if found else None


def check_metadata(report: CheckReport) -> dict[str, dict[str, Any]]:
    """Each check's verdict and numbers, as a publish's commit carries them.

    >>> from kprio_core.model.results import CheckOutcome
    >>> check_metadata(CheckReport((CheckOutcome("offsets_are_unique", True, {"duplicate_rows": 0}),)))
    {'offsets_are_unique': {'passed': True, 'duplicate_rows': 0}}
    """
    return {o.name: {"passed": o.passed, **o.metadata} for o in report.outcomes}
