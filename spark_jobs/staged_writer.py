"""Write one staged Parquet file with pyarrow: bounded row groups, zstd, a name that says what it holds.

Rows are buffered up to ``row_group_records`` and written as one row group: a writer holds one row group,
never its range. Dictionary encoding only for key and string columns (elsewhere it cost a third more write
time for a larger file: values are nearly all distinct and zstd folds repeats). No statistics for ``value``.

Locally and on HDFS the file is written under a temporary name and renamed when complete, so a second
attempt of the same task (speculation, lost executor) never interleaves and a staged name holds a whole file.
Object stores show an object only once uploaded: written in place.

An ``OSError`` comes back as ``OSError(errno, "<cause>", <path>)`` whatever layer raised it; one the output
cannot take for now (:data:`~kprio_core.errors.TRANSIENT_ERRNOS`) as :class:`~kprio_core.errors.OutputUnavailable`,
so its batch is retried until the storage is back.

>>> import pyarrow as pa, pyarrow.parquet as pq, tempfile
>>> from spark_jobs.layout import filesystem
>>> d = tempfile.mkdtemp()
>>> fs, base = filesystem(d)
>>> schema = pa.schema([("offset", pa.int64()), ("value", pa.binary())])
>>> w = StagedWriter(fs, f"{base}/t/f.parquet", "t/f.parquet", schema, row_group_records=2,
...                  metadata={"kprio.batch_id": "b-1"})
>>> for i in range(5):
...     w.write(pa.record_batch({"offset": [i], "value": [b"v"]}))
>>> w.close() == f"{base}/t/f.parquet", w.rows
(True, 5)
>>> meta = pq.read_metadata(f"{d}/t/f.parquet")
>>> meta.num_row_groups, meta.metadata[b"kprio.batch_id"]
(3, b'b-1')
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from spark_jobs.layout import renames_atomically

NO_STATISTICS = frozenset({"value"})


class StagedWriter:
    """One Parquet file, opened at the first row, renamed into place on :meth:`close`."""

    def __init__(self, fs: Any, path: str, relative: str, schema: Any, *, row_group_records: int,
                 metadata: Mapping[str, str]) -> None:
        self.fs = fs
        self.path = path
        self.relative = relative
        """The path below the staging directory (the name the range's stats list)."""
        self.schema = schema.with_metadata(dict(metadata))
        self.row_group_records = max(1, row_group_records)
        self.rows = 0
        self._buffer: list[Any] = []
        self._buffered = 0
        self._temp = f"{path}.{uuid.uuid4().hex[:12]}.tmp" if renames_atomically(fs) else path
        self._writer: Any = None

    def write(self, batch: Any) -> None:
        """Add rows (a RecordBatch of this file's schema, metadata aside)."""
        if batch.num_rows == 0:
            return
        self._buffer.append(batch)
        self._buffered += batch.num_rows
        self.rows += batch.num_rows
        if self._buffered >= self.row_group_records:
            self._flush()

    def close(self) -> str:
        """Write what is buffered, finish the file and move it to its name; returns that path."""
        self._flush()
        with self._errors():
            if self._writer is None:
                self._open()  # no rows at all: still a valid (empty) file, the caller asked for one
            self._writer.close()
            if self._temp != self.path:
                self.fs.move(self._temp, self.path)
        return self.path

    def abort(self) -> None:
        """Give up: close what is open, never raise (the staged files are discarded with their directory)."""
        try:
            if self._writer is not None:
                self._writer.close()
        except Exception:  # noqa: BLE001 - aborting after another failure: that one is reported
            pass
        self._buffer.clear()

    def _open(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        parent = self.path.rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        self._writer = pq.ParquetWriter(
            self._temp, self.schema, filesystem=self.fs, compression="zstd",
            use_dictionary=[f.name for f in self.schema if f.name == "key" or pa.types.is_string(f.type)],
            write_statistics=[n for n in self.schema.names if n not in NO_STATISTICS],
        )

    def _flush(self) -> None:
        import pyarrow as pa

        if not self._buffer:
            return
        with self._errors():
            if self._writer is None:
                self._open()
            table = pa.Table.from_batches(self._buffer, schema=self.schema)
            self._writer.write_table(table, row_group_size=max(self.row_group_records, table.num_rows))
        self._buffer.clear()
        self._buffered = 0

    def _errors(self) -> contextlib.AbstractContextManager[None]:
        return _with_path(self.path)


@contextlib.contextmanager
def _with_path(path: str) -> Iterator[None]:
    """Re-raise any OSError as ``OSError(errno, strerror, path)``, or as OutputUnavailable (``errno``, never its text).

    >>> import errno
    >>> with _with_path("/out/f.parquet"):
    ...     raise OSError(errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device")
    Traceback (most recent call last):
    ...
    kprio_core.errors.OutputUnavailable: No space left on device: /out/f.parquet
    """
    from kprio_core.errors import TRANSIENT_ERRNOS, OutputUnavailable

    try:
        yield
    except OSError as err:
        code = err.errno
        if err.filename == path:
            named = err
        else:
            cause = os.strerror(code) if code else (err.strerror or str(err))
            named = OSError(code, cause, path)
        if code in TRANSIENT_ERRNOS:
            raise OutputUnavailable(os_error_text(named)) from err
        if named is err:
            raise
        raise named from err


def os_error_text(err: OSError) -> str:
    """``<cause>: <path>`` of an OSError, e.g. ``No space left on device: /out/_staging/...``.

    >>> import errno
    >>> os_error_text(OSError(errno.EROFS, os.strerror(errno.EROFS), "/out/x.parquet"))
    'Read-only file system: /out/x.parquet'
    """
    cause = err.strerror or (os.strerror(err.errno) if err.errno else str(err))
    return f"{cause}: {err.filename}" if err.filename else cause
