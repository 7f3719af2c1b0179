"""Where a batch's checked rows land, by ``drain.format``: Parquet files, Delta Lake or Iceberg tables.

Every caller that publishes, reads back or lists the output goes through here, so the
formats differ in this module only. Both roots (output and dead letters) are in the chosen
format; the executors stage Parquet files under ``<root>/_staging/`` either way, and the checks
read those staged files before anything is published.

=================  ======================================  ===========================================
                   ``parquet`` (:mod:`spark_jobs.output`)  ``delta`` (:mod:`spark_jobs.delta_table`)
=================  ======================================  ===========================================
a publish          files moved into place one by one        one Delta commit per batch and root
a reader sees      new files as they land (half a batch     the table version before the commit or
                   for a moment, a leftover beside its      after it: whole batches, each offset once
                   replacement)
a publish again    same names: the files are replaced       the run's epoch is the batch's transaction
                                                            in the log: a no-op; a later epoch removes
                                                            and adds in one commit, an earlier one is
                                                            refused
who wrote a row    ``batch_id`` column, file metadata       ``batch_id`` column, the commit's metadata
                                                            (batch, attempt, ranges, check results)
after a lost       the files' names and footers             the table's log (its live files and the
ledger                                                      batches its commits name)
=================  ======================================  ===========================================

``iceberg`` (:mod:`spark_jobs.iceberg_table`) is Delta's column with a snapshot for a commit: one
snapshot per batch and table, the run's epoch in its summary (``kprio.epoch``) as the batch's
fencing token, the tables in the catalog ``drain.iceberg`` names.

>>> import tempfile
>>> from kprio_core.config import DrainSettings
>>> root = tempfile.mkdtemp()
>>> drain = DrainSettings(format="delta", output_path=f"{root}/out", dead_letter_path=f"{root}/dead")
>>> read_rows(drain, "output", "orders").num_rows, live_files(drain, "orders")
(0, ())
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kprio_core.config import DrainSettings, OutputFormat
from kprio_core.errors import TRANSIENT_ERRNOS, LeaseLost, OutputPublishFailed, OutputUnavailable
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import CheckReport, DrainResult
from spark_jobs.layout import DEAD_LETTERS, OUTPUT

if TYPE_CHECKING:
    from spark_jobs.output import LiveFile

CHECKS_KEY = "kprio.checks"
"""Commit metadata of a Delta publish: each check's verdict and numbers."""


@dataclass(frozen=True)
class Publication:
    """What a publish committed: the table versions (Delta; none for Parquet's file moves)."""

    versions: Mapping[str, int] = field(default_factory=dict)
    """Delta: the table version after the publish, per root kind (``output``, ``dead-letters``); Iceberg: the
    snapshot id."""
    already: bool = False
    """Delta, Iceberg: the output table held the batch at this run's epoch already: nothing was written."""
    snapshots: bool = False
    """The versions are Iceberg snapshot ids."""

    def metadata(self) -> dict[str, object]:
        """What a run reports of it: the table versions (Delta), nothing for Parquet.

        >>> Publication({"output": 7, "dead-letters": 2}).metadata()
        {'table_version': 7, 'dead_letter_table_version': 2}
        """
        out: dict[str, object] = {}
        if self.snapshots:
            return {f"{'table' if kind == OUTPUT else 'dead_letter_table'}_snapshot_id": str(v)
                    for kind, v in sorted(self.versions.items(), key=lambda kv: kv[0] != OUTPUT)}
        if OUTPUT in self.versions:
            out["table_version"] = self.versions[OUTPUT]
        if DEAD_LETTERS in self.versions:
            out["dead_letter_table_version"] = self.versions[DEAD_LETTERS]
        return out


def roots(drain: DrainSettings) -> dict[str, str]:
    """The root of each kind: ``{"output": ..., "dead-letters": ...}``."""
    return {OUTPUT: drain.output_path, DEAD_LETTERS: drain.dead_letter_path}


def publish(drain: DrainSettings, result: DrainResult, *, ranges: Iterable[OffsetRange] | None = None,
            incarnations: Mapping[str, int] | None = None, checks: CheckReport | None = None,
            epoch: int | None = None) -> Publication:
    """Publish the staged files of ``ranges`` (default: every range without failure) in ``drain.format``,
    then remove the attempt's staging.

    ``epoch``: the run's lease epoch (default: the attempt), the fencing token the output's own
    system checks. Output and dead letters are one decision: a publish replaces what any earlier
    publish of its ranges left in either root, and never removes a row outside its ranges.

    Delta: the dead-letter table's commit, then the output table's, each carrying the batch, the
    attempt, the ranges, ``checks`` and the batch's transaction at version ``epoch``. The output
    table's commit is the decision: when it holds the batch's transaction at ``epoch`` the publish
    is done (``already``); at a later epoch, a newer run owns the batch and this one is refused
    (:class:`~kprio_core.errors.LeaseLost`, nothing written). A crash between the two commits leaves
    the output table without the batch; the next run (a later epoch) publishes both again, its
    dead letters replacing those of the run that died in one commit. :class:`~kprio_core.errors.
    OutputUnavailable` when the output cannot be written for now, else :class:`~kprio_core.errors.
    OutputPublishFailed`, each naming the batch and the cause.
    """
    from spark_jobs import output

    fence = result.attempt if epoch is None else epoch
    if drain.format is OutputFormat.PARQUET:
        # Idempotent by construction: files named by their ranges, each publish replacing every file of its
        # ranges in both roots (a stale run's late publish leaves the same log's records, each once).
        output.publish(result, output_root=drain.output_path, dead_letter_root=drain.dead_letter_path,
                       ranges=ranges, incarnations=incarnations)
        return Publication()
    if drain.format is OutputFormat.ICEBERG:
        return _publish_iceberg(drain, result, ranges, incarnations, checks, fence)
    from spark_jobs import delta_table

    chosen = list(ranges) if ranges is not None else None
    metadata = {CHECKS_KEY: check_metadata(checks)} if checks is not None else {}
    versions: dict[str, int] = {}
    try:
        decided = delta_table.published_epoch(roots(drain)[OUTPUT], result.logical_topic, result.batch_id)
        if decided is not None and decided >= fence:
            delta_table.refuse_if_stale(decided, fence, result, roots(drain)[OUTPUT])
            output.discard(result, output_root=drain.output_path, dead_letter_root=drain.dead_letter_path)
            return Publication(already=True)
        for kind in (DEAD_LETTERS, OUTPUT):
            done = delta_table.publish(result, root=roots(drain)[kind], kind=kind, ranges=chosen,
                                       incarnations=incarnations, metadata=metadata, epoch=fence)
            if done is not None:
                versions[kind] = done.version
    except LeaseLost:
        raise
    except Exception as err:  # delta-rs raises its own types: typed by their cause below
        raise _publish_failed(result, err) from err
    output.discard(result, output_root=drain.output_path, dead_letter_root=drain.dead_letter_path)
    return Publication(versions)


def _publish_iceberg(drain: DrainSettings, result: DrainResult, ranges: Iterable[OffsetRange] | None,
                     incarnations: Mapping[str, int] | None, checks: CheckReport | None, fence: int) -> Publication:
    """Iceberg: the dead-letter table's snapshot, then the output table's, the decision (as Delta's two commits)."""
    import json

    from spark_jobs import iceberg_table, output

    chosen = list(ranges) if ranges is not None else None
    summary = {CHECKS_KEY: json.dumps(check_metadata(checks))} if checks is not None else {}
    versions: dict[str, int] = {}
    try:
        decided = iceberg_table.published_epoch(drain.iceberg, OUTPUT, result.logical_topic, result.batch_id)
        if decided is not None and decided >= fence:
            iceberg_table.refuse_if_stale(decided, fence, result, ".".join(
                iceberg_table.identifier(drain.iceberg, OUTPUT, result.logical_topic)))
            output.discard(result, output_root=drain.output_path, dead_letter_root=drain.dead_letter_path)
            return Publication(already=True, snapshots=True)
        for kind in (DEAD_LETTERS, OUTPUT):
            done = iceberg_table.publish(drain.iceberg, result, root=roots(drain)[kind], kind=kind, ranges=chosen,
                                         incarnations=incarnations, summary=summary, epoch=fence)
            if done is not None and done.snapshot_id is not None:
                versions[kind] = done.snapshot_id
    except LeaseLost:
        raise
    except Exception as err:  # pyiceberg and the catalog raise their own types: typed by their cause below
        raise _publish_failed(result, err) from err
    output.discard(result, output_root=drain.output_path, dead_letter_root=drain.dead_letter_path)
    return Publication(versions, snapshots=True)


def _publish_failed(result: DrainResult, err: BaseException) -> Exception:
    """The publish's failure typed by its cause: OutputUnavailable when the storage refuses for now."""
    code = err.errno if isinstance(err, OSError) and err.errno else delta_errno(err)
    kind = OutputUnavailable if code in TRANSIENT_ERRNOS else OutputPublishFailed
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return kind(f"publishing batch {result.batch_id!r} attempt {result.attempt} of {result.logical_topic!r}: {first}")


_ERRNO_TEXT = re.compile(r"\(os error (\d+)\)|\[errno (\d+)\]", re.IGNORECASE)
"""Rust's ``(os error 28)``; pyarrow's ``[errno 28]`` when delta-rs read a Python stream that failed."""


def delta_errno(err: BaseException) -> int | None:
    """The errno of a delta-rs error, which carries it in its text only: a workaround at this one place.

    delta-rs raises the object store's I/O errors as ``OSError(message)`` without ``errno``, the number
    only in Rust's rendering of the cause, e.g. ``OSError: Generic LocalFileSystem error: Unable to rename
    file: Function not implemented (os error 38)`` (delta-io/delta-rs#2860), and a failure of the Python
    stream it reads as text (pyarrow's ``[errno 28]``); pyarrow's own errors, and every failure crossing the
    Spark boundary, carry their numbers and ranges as fields and are never read so.

    >>> delta_errno(OSError("Generic LocalFileSystem error: Unable to copy file: No space left on device (os error 28)"))
    28
    >>> delta_errno(OSError("Generic DeltaTable error: version mismatch")) is None
    True
    """
    found = _ERRNO_TEXT.search(str(err))
    return int(found.group(1) or found.group(2)) if found else None


def check_metadata(report: CheckReport) -> dict[str, dict[str, Any]]:
    """Each check's verdict and numbers, as a Delta commit's metadata carries them.

    >>> from kprio_core.model.results import CheckOutcome
    >>> check_metadata(CheckReport((CheckOutcome("offsets_are_unique", True, {"duplicate_rows": 0}),)))
    {'offsets_are_unique': {'passed': True, 'duplicate_rows': 0}}
    """
    return {o.name: {"passed": o.passed, **o.metadata} for o in report.outcomes}


def read_rows(drain: DrainSettings, kind: str, logical_topic: str, *, batch_id: str | None = None,
              columns: Iterable[str] | None = None) -> Any:
    """The published rows of one kind (``output`` or ``dead-letters``) of a topic as a ``pyarrow.Table``
    (empty, with no columns, when nothing is published); Delta: the table's current version."""
    root = roots(drain)[kind]
    if drain.format is OutputFormat.ICEBERG:
        from spark_jobs.iceberg_catalog import read_table as read_iceberg

        return read_iceberg(drain.iceberg, root, kind, logical_topic, batch_id=batch_id, columns=columns)
    if drain.format is OutputFormat.DELTA:
        from spark_jobs.delta_table import read_table as read_delta

        return read_delta(root, logical_topic, batch_id=batch_id, columns=columns)
    from spark_jobs.output import read_table

    return read_table(root, logical_topic, batch_id=batch_id, columns=list(columns) if columns else None)


def live_files(drain: DrainSettings, logical_topic: str) -> tuple[LiveFile, ...]:
    """Every published file of a topic under both roots (Delta, Iceberg: those the tables' current versions hold)."""
    if drain.format is OutputFormat.ICEBERG:
        from spark_jobs.iceberg_catalog import live_files as live_iceberg

        return tuple(f for kind, root in roots(drain).items() for f in live_iceberg(drain.iceberg, root, kind,
                                                                                    logical_topic))
    if drain.format is OutputFormat.DELTA:
        from spark_jobs.delta_table import live_files as live
    else:
        from spark_jobs.output import live_files as live
    return tuple(f for root in roots(drain).values() for f in live(root, logical_topic))


def batch_ids(drain: DrainSettings, logical_topic: str, live: Iterable[LiveFile] | None = None) -> set[str]:
    """Every batch id the published output of a topic names: its live files' writers (``live`` when read
    already) and, for Delta and Iceberg, every batch a commit (a snapshot) in the tables names (a replaced batch
    too)."""
    ids = {f.batch_id for f in (live_files(drain, logical_topic) if live is None else live) if f.batch_id}
    if drain.format is OutputFormat.DELTA:
        from spark_jobs.delta_table import table_batches

        ids |= {b["batch_id"] for root in roots(drain).values() for b in table_batches(root, logical_topic)}
    if drain.format is OutputFormat.ICEBERG:
        from spark_jobs.iceberg_catalog import table_batches as snapshots

        ids |= {b["batch_id"] for kind, root in roots(drain).items() for b in snapshots(drain.iceberg, root, kind,
                                                                                       logical_topic)}
    return ids
