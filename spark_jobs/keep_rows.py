"""A publish never removes a row outside its own ranges: what an overlapped file holds beyond them is kept.

A live file that only partly overlaps the published ranges (a leftover planned otherwise) holds rows no publish
of this batch replaces: they are written to files of their own, named by the part of the range they hold,
before the old file goes. Every format's publish uses it (:mod:`spark_jobs.output`, :mod:`spark_jobs.delta_table`,
:mod:`spark_jobs.iceberg_table`).

>>> from kprio_core.model.offsets import OffsetRange as R
>>> [str(r) for r in outside(R("o-0", 0, 0, 200), [R("o-0", 0, 50, 100), R("o-0", 0, 120, 150)])]
['o-0[0]@[0,50)', 'o-0[0]@[100,120)', 'o-0[0]@[150,200)']
>>> outside(R("o-0", 0, 0, 200), [R("o-0", 0, 0, 300)])
[]
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

from kprio_core.model.offsets import OffsetRange
from spark_jobs.layout import RANGE_KEY


def outside(file_range: OffsetRange, published: Iterable[OffsetRange]) -> list[OffsetRange]:
    """The parts of ``file_range`` that no range of ``published`` (of its partition) covers, in offset order."""
    parts, at = [], file_range.start
    for r in sorted(r for r in published if r.topic_partition == file_range.topic_partition and r.count):
        if r.end <= at or r.start >= file_range.end:
            continue
        if r.start > at:
            parts.append(OffsetRange(file_range.topic, file_range.partition, at, r.start))
        at = max(at, r.end)
    if at < file_range.end:
        parts.append(OffsetRange(file_range.topic, file_range.partition, at, file_range.end))
    return parts


def keep_outside(fs: Any, source: str, pieces: Iterable[OffsetRange],
                 target_of: Callable[[OffsetRange], str]) -> list[tuple[OffsetRange, str, int]]:
    """Write the rows of Parquet ``source`` in each of ``pieces`` to a file ``target_of(piece)`` (metadata kept, the
    piece as its range); ``(piece, path, rows)`` of each file written (a piece without rows gets none)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    with fs.open_input_file(source) as f:
        table = pq.read_table(f)
    metadata = dict(table.schema.metadata or {})
    written = []
    for piece in pieces:
        rows = table.filter(pc.and_(pc.greater_equal(table["offset"], piece.start),
                                    pc.less(table["offset"], piece.end)))
        if not rows.num_rows:
            continue
        rows = rows.replace_schema_metadata({**metadata, RANGE_KEY.encode(): str(piece).encode()})
        target = target_of(piece)
        temporary = f"{target}.{uuid.uuid4().hex[:8]}.tmp"
        with fs.open_output_stream(temporary) as sink:
            pq.write_table(rows, sink)
        fs.move(temporary, target)
        written.append((piece, target, rows.num_rows))
    return written
