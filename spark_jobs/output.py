"""The life of a drain's files: staged, published (or discarded, or swept), listed and read back.

Layout and names: :mod:`spark_jobs.layout`. Every operation goes through ``pyarrow.fs``.

**What readers see.** Readers read ``<root>/<logical>/`` (:func:`read_table`); a drain writes only below
``<root>/_staging/``. Files appear under ``<root>/<logical>/`` only through :func:`publish`, called after the
blocking checks passed: a reader never sees an unchecked row, nor a partly written file.

**Why publish is safe.** Publish moves the chosen ranges' staged files into place one at a time, then removes
live files of the same partitions overlapping a published range under another name (leftovers of a crashed
attempt or lost ledger), then the staging directories. A move is an atomic rename locally and on HDFS; on
object stores a copy then a delete. Across files a publish is not atomic: a reader mid-publish may see new
files beside old ones, even the same offsets twice for a moment (tell them apart by the ``kprio.range`` /
``kprio.batch_id`` file metadata). New files go in before old ones go out, so published offsets are never
absent; a crash part-way is finished by the retry's publish (same names, same overlaps). A leftover that
partly overlaps keeps its other rows in a file of their own (:mod:`spark_jobs.keep_rows`).

**Who may publish.** Parquet has no transaction to refuse a stale writer, so a publish is idempotent instead:
files are named by their planned range and every publish replaces every file of its ranges in both roots, so
the last publish of a range leaves its rows, each offset once, in one root or the other. The run asks the ledger
whether it still holds the batch right before; two simultaneous publishes of the same ranges can leave one's
output beside the other's dead letters only when the handler decides a record differently each time. Delta
and Iceberg tables refuse the stale publish itself (:mod:`spark_jobs.delta_table`).

>>> import tempfile, pyarrow as pa
>>> from spark_jobs.layout import filesystem
>>> root = tempfile.mkdtemp()
>>> prepare_staging({"output": root}, "b-7", 1)
('/.../_staging/b-7.1',)
>>> [name for name, _ in staging_dirs(root)]
['b-7.1']
>>> sweep_staging([root], keep=lambda batch_id, attempt: False)
('/.../_staging/b-7.1',)
"""

from __future__ import annotations

import errno
import shutil
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kprio_core.errors import TRANSIENT_ERRNOS, OutputPublishFailed, OutputUnavailable
from kprio_core.model.offsets import OffsetRange
from kprio_core.model.results import DrainResult
from spark_jobs.layout import (
    ATTEMPT_KEY,
    BATCH_KEY,
    DEAD_LETTERS,
    OUTPUT,
    PRIORITY_DIR,
    STAGING,
    RangeFile,
    filesystem,
    parse_staging_name,
    staging_dir,
)


def prepare_staging(roots: Mapping[str, str], batch_id: str, attempt: int) -> tuple[str, ...]:
    """Create the attempt's staging directory under each root, proven writable by a probe file; returns them.

    Else :class:`~kprio_core.errors.OutputUnavailable` naming root, path and cause, before any Spark job.
    """
    from spark_jobs.staged_writer import os_error_text

    made = []
    for kind, root in roots.items():
        stage = staging_dir(root, batch_id, attempt)
        try:
            fs, path = filesystem(stage)
            fs.create_dir(path, recursive=True)
            probe = f"{path}/.probe-{uuid.uuid4().hex[:8]}"
            with fs.open_output_stream(probe) as out:
                out.write(b"kprio")
            fs.delete_file(probe)
        except OSError as err:
            cause = os_error_text(err) if err.filename else f"{os_error_text(err)}: {stage}"
            raise OutputUnavailable(f"the {kind} root {root} {unwritable(err)}: {cause}") from err
        made.append(stage)
    return tuple(made)


def unwritable(err: OSError) -> str:
    """What is wrong with a root a write to it failed with ``err``: full, read-only, forbidden, or unwritable.

    >>> import errno
    >>> [unwritable(OSError(e, "")) for e in (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EIO)]
    ['is full', 'is read-only', 'is not writable (permission denied)', 'cannot be written']
    """
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return "is full"
    if err.errno == errno.EROFS:
        return "is read-only"
    if err.errno in (errno.EACCES, errno.EPERM):
        return "is not writable (permission denied)"
    return "cannot be written"


PROBE_BYTES = 4096
"""What :func:`probe` writes: a block, so a full disk refuses it (an empty file may still fit)."""


def probe(roots: Iterable[str], need_bytes: int = 0) -> str | None:
    """None when each root takes a small file now and, on a local disk, has ``need_bytes`` free; else what is wrong.

    A cheap check that a cause which failed a drain (full disk, read-only mount) is gone, so the drain loop
    retries at once. ``need_bytes`` (the waiting batches' estimate) tells a disk with a few KiB free from one
    with room for a batch.

    >>> import tempfile
    >>> probe([tempfile.mkdtemp()]) is None
    True
    >>> probe(["/proc/kprio-cannot-be-here"])
    'the output root /proc/kprio-cannot-be-here cannot be written'
    >>> probe([tempfile.mkdtemp()], need_bytes=2**62)
    'the output root ... is full (... bytes free, the waiting batches need about 4611686018427387904)'
    """
    for root in roots:
        fs, base = filesystem(root)
        path = f"{base}/_kprio_probe_{uuid.uuid4().hex}"
        try:
            fs.create_dir(base, recursive=True)
            with fs.open_output_stream(path) as out:
                out.write(b"\0" * PROBE_BYTES)
        except OSError as err:
            return f"the output root {root} {unwritable(err)}"
        finally:
            try:
                fs.delete_file(path)
            except OSError:
                pass
        if need_bytes and fs.type_name == "local":
            free = shutil.disk_usage(base).free
            if free < need_bytes:
                return f"the output root {root} is full ({free} bytes free, the waiting batches need about {need_bytes})"
    return None


def publish(result: DrainResult, *, output_root: str, dead_letter_root: str,
            ranges: Iterable[OffsetRange] | None = None, incarnations: Mapping[str, int] | None = None
            ) -> tuple[str, ...]:
    """Move the staged files of ``ranges`` (default: every range without failure) into place; the published paths.

    Then remove overlapping live files of the same incarnation (``incarnations``: per ``topic[partition]``, 1 when
    absent) and the staging. OutputPublishFailed, or OutputUnavailable for now, names the batch and the cause.
    """
    chosen = set(ranges) if ranges is not None else {s.range for s in result.ranges if s.failure is None}
    stats = [s for s in result.ranges if s.range in chosen]
    roots = {OUTPUT: output_root, DEAD_LETTERS: dead_letter_root}
    published: list[str] = []
    stage = base = rel = ""
    try:
        for kind, root in roots.items():
            fs, base = filesystem(root)
            stage = staging_dir(base, result.batch_id, result.attempt)
            names: set[str] = set()
            for s in stats:
                for rel in _files_of(s.files, kind):
                    _replace(fs, f"{stage}/{rel}", f"{base}/{rel}")
                    published.append(f"{base}/{rel}")
                    names.add(rel)
            _remove_overlapping(fs, base, result.logical_topic, stats, names, incarnations or {})
        discard(result, output_root=output_root, dead_letter_root=dead_letter_root)
    except OSError as err:
        if err.errno == errno.EXDEV:  # a layout mistake, not a passing fault: a person moves the mount
            raise OutputPublishFailed(
                f"publishing batch {result.batch_id!r} attempt {result.attempt} of {result.logical_topic!r}: the "
                f"staging directory {stage} and the output directory {base}/{rel.rsplit('/', 1)[0]} are on different "
                f"file systems; a publish renames staged files into place, so everything below {base} must be on one "
                "file system (a separate mount below the output root is a layout mistake)") from err
        # An output that cannot be written for now (full, read-only, ...) passes by itself (pyarrow sets errno).
        unavailable = err.errno in TRANSIENT_ERRNOS
        raise (OutputUnavailable if unavailable else OutputPublishFailed)(
            f"publishing batch {result.batch_id!r} attempt {result.attempt} of {result.logical_topic!r}: {err}"
        ) from err
    return tuple(published)


def _files_of(files: Iterable[str], kind: str) -> list[str]:
    prefix = f"{kind}/"
    return [f[len(prefix):] for f in files if f.startswith(prefix)]


def _replace(fs: Any, source: str, target: str) -> None:
    """Move ``source`` onto ``target``, replacing it (filesystems that refuse to, get it deleted first)."""
    import pyarrow.fs as pafs

    fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
    try:
        fs.move(source, target)
    except OSError:
        if fs.get_file_info(target).type != pafs.FileType.File:
            raise
        fs.delete_file(target)
        fs.move(source, target)


def _remove_overlapping(fs: Any, base: str, logical_topic: str, stats: Sequence[Any], keep: set[str],
                        incarnations: Mapping[str, int]) -> None:
    """Delete live files (same incarnation) overlapping a published range, unless just published, keeping their
    rows outside it first (:func:`spark_jobs.keep_rows.keep_outside`): never a row outside the publish's ranges."""
    import pyarrow.fs as pafs

    from spark_jobs.keep_rows import keep_outside, outside

    published = [s.range for s in stats]
    listed: dict[int, list[Any]] = {}
    for s in stats:
        rel_dir = f"{logical_topic}/priority={s.priority}"
        if s.priority not in listed:
            listed[s.priority] = fs.get_file_info(pafs.FileSelector(f"{base}/{rel_dir}", allow_not_found=True))
        for info in listed[s.priority]:
            name = RangeFile.parse(info.base_name)
            if name is None or f"{rel_dir}/{info.base_name}" in keep or not name.range.overlaps(s.range):
                continue
            if name.incarnation != incarnations.get(f"{s.range.topic}[{s.range.partition}]", 1):
                continue
            if fs.get_file_info(info.path).type != pafs.FileType.File:
                continue  # removed already, for another range of this publish on the same partition
            pieces = outside(name.range, published)
            if pieces:
                keep_outside(fs, info.path, pieces, lambda piece, n=name, d=rel_dir: f"{base}/{d}/" + RangeFile(
                    n.topic, n.partition, piece.start, piece.end, n.part, n.incarnation).file_name)
            fs.delete_file(info.path)


def discard(batch: DrainResult | tuple[str, int], *, output_root: str, dead_letter_root: str) -> tuple[str, ...]:
    """Remove the staging directories of one attempt (``result``, or ``(batch id, attempt)``); returns them."""
    batch_id, attempt = (batch.batch_id, batch.attempt) if isinstance(batch, DrainResult) else batch
    removed = []
    for root in (output_root, dead_letter_root):
        fs, base = filesystem(root)
        path = staging_dir(base, batch_id, attempt)
        if _delete_dir(fs, path):
            removed.append(path)
    return tuple(removed)


def staging_dirs(root: str) -> list[tuple[str, str]]:
    """``(name, path)`` of every staging directory under ``root``."""
    import pyarrow.fs as pafs

    fs, base = filesystem(root)
    infos = fs.get_file_info(pafs.FileSelector(f"{base}/{STAGING}", allow_not_found=True))
    return sorted((i.base_name, i.path) for i in infos if i.type == pafs.FileType.Directory)


def sweep_staging(roots: Iterable[str], keep: Callable[[str, int], bool]) -> tuple[str, ...]:
    """Remove staging directories whose ``(batch id, attempt)`` ``keep`` rejects, or not so named; returns them."""
    removed = []
    for root in roots:
        fs, _ = filesystem(root)
        for name, path in staging_dirs(root):
            parsed = parse_staging_name(name)
            if (parsed is None or not keep(*parsed)) and _delete_dir(fs, path):
                removed.append(path)
    return tuple(removed)


def _delete_dir(fs: Any, path: str) -> bool:
    import pyarrow.fs as pafs

    if fs.get_file_info(path).type != pafs.FileType.Directory:
        return False
    fs.delete_dir(path)
    return True


@dataclass(frozen=True, slots=True)
class LiveFile:
    """A published file: where it is, the range it holds (from its name), who wrote it (its metadata)."""

    root: str
    path: str
    """The file's path inside ``root``'s filesystem."""
    priority: int
    topic: str
    partition: int
    start: int
    end: int
    part: int | None
    batch_id: str | None
    attempt: int | None
    incarnation: int = 1

    @property
    def range(self) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, self.start, self.end)


def live_files(root: str, logical_topic: str) -> tuple[LiveFile, ...]:
    """Every published file of a logical topic under ``root`` (each footer is read for its metadata)."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    fs, base = filesystem(root)
    out = []
    for prio in fs.get_file_info(pafs.FileSelector(f"{base}/{logical_topic}", allow_not_found=True)):
        m = PRIORITY_DIR.match(prio.base_name)
        if m is None or prio.type != pafs.FileType.Directory:
            continue
        for info in fs.get_file_info(pafs.FileSelector(prio.path)):
            name = RangeFile.parse(info.base_name)
            if name is None:
                continue
            with fs.open_input_file(info.path) as f:
                meta = pq.read_metadata(f).metadata or {}
            batch_id, attempt = meta.get(BATCH_KEY.encode()), meta.get(ATTEMPT_KEY.encode())
            out.append(LiveFile(root, info.path, int(m.group(1)), name.topic, name.partition, name.start, name.end,
                                name.part, batch_id.decode() if batch_id is not None else None,
                                int(attempt) if attempt is not None else None, name.incarnation))
    return tuple(sorted(out, key=lambda f: (f.topic, f.partition, f.start, f.end, f.part or 0, f.path)))


def read_table(root: str, logical_topic: str, *, batch_id: str | None = None,
               columns: Sequence[str] | None = None) -> Any:
    """The published rows of a topic under ``root`` as a ``pyarrow.Table`` (output or dead letters; no Spark).

    >>> import tempfile
    >>> read_table(tempfile.mkdtemp(), "orders").num_rows
    0
    """
    import pyarrow as pa
    import pyarrow.dataset as ds
    import pyarrow.fs as pafs

    fs, base = filesystem(root)
    topic_dir = f"{base}/{logical_topic}"
    # Hidden directories (``_``, ``.``: Hadoop's convention for work in progress) are never read.
    files = [i.path for i in fs.get_file_info(pafs.FileSelector(topic_dir, recursive=True, allow_not_found=True))
             if i.type == pafs.FileType.File and RangeFile.parse(i.base_name) is not None
             and not any(part.startswith(("_", ".")) for part in i.path[len(topic_dir) + 1:].split("/")[:-1])]
    if not files:
        return pa.table({})
    dataset = ds.dataset(files, filesystem=fs, format="parquet")
    where = None if batch_id is None else ds.field("batch_id") == batch_id
    return dataset.to_table(columns=list(columns) if columns else None, filter=where)
