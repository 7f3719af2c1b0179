"""Where a drain's files go: names that say what a file holds, staging directories, filesystems.

Both roots (``drain.output_path`` and ``drain.dead_letter_path``) have the same layout, as Kafka
Connect's S3 sink names its objects::

    <root>/<logical>/priority=<p>/<topic>+<partition>+<start:010d>+<end:010d>.parquet     published
    <root>/_staging/<batch id>.<attempt>/<logical>/priority=<p>/<same name>              being drained

``[start, end)`` is the planned range the file holds, so a rerun writes the same name (it replaces), and a
file overlapping a newly published range is a leftover of another life. Several tasks holding one range (the
shuffle path) each write a part: ``...+<end:010d>.part-<k>.parquet``. ``+`` never occurs in a topic name.

The topic's incarnation is part of a file's identity: a topic recreated (or a log truncated) starts its
offsets again and is drained, after a recorded reset, as incarnation 2, 3, ...: ``...+<end:010d>+i2.parquet``.
Incarnation 1 keeps the plain names; a publish replaces and removes files of its own incarnation only.

Every filesystem operation goes through ``pyarrow.fs`` (:func:`filesystem`).

>>> name = RangeFile("orders-2", 0, 0, 1500)
>>> name.file_name
'orders-2+0+0000000000+0000001500.parquet'
>>> RangeFile.parse("orders-2+0+0000000000+0000001500.part-3.parquet")
RangeFile(topic='orders-2', partition=0, start=0, end=1500, part=3, incarnation=1)
>>> RangeFile.parse("part-00000.parquet") is None
True
>>> RangeFile("orders-2", 0, 0, 40, incarnation=2).file_name
'orders-2+0+0000000000+0000000040+i2.parquet'
>>> RangeFile.parse("orders-2+0+0000000000+0000000040+i2.part-1.parquet")
RangeFile(topic='orders-2', partition=0, start=0, end=40, part=1, incarnation=2)
>>> relative_path("orders", 2, name)
'orders/priority=2/orders-2+0+0000000000+0000001500.parquet'
>>> staging_dir("/data/out", "b-000042", 3), parse_staging_name("b-000042.3")
('/data/out/_staging/b-000042.3', ('b-000042', 3))
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from kprio_core.model.offsets import OffsetRange

OUTPUT, DEAD_LETTERS = "output", "dead-letters"
"""The two roots, as a range's staged ``files`` name them (``output/<path>``, ``dead-letters/<path>``)."""
STAGING = "_staging"
PRIORITY_DIR = re.compile(r"^priority=(\d+)$")
_FILE = re.compile(r"^(?P<topic>.+)\+(?P<partition>\d+)\+(?P<start>\d+)\+(?P<end>\d+)"
                   r"(?:\+i(?P<incarnation>\d+))?(?:\.part-(?P<part>\d+))?\.parquet$")

BATCH_KEY = "kprio.batch_id"
ATTEMPT_KEY = "kprio.attempt"
RANGE_KEY = "kprio.range"
"""Parquet key-value metadata of every file: who wrote it and which planned range it holds."""


@dataclass(frozen=True, slots=True, order=True)
class RangeFile:
    """The name of one file: the planned range it holds (and its part on the shuffle path)."""

    topic: str
    partition: int
    start: int
    end: int
    part: int | None = None
    incarnation: int = 1

    @property
    def range(self) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, self.start, self.end)

    @property
    def file_name(self) -> str:
        part = "" if self.part is None else f".part-{self.part}"
        incarnation = "" if self.incarnation == 1 else f"+i{self.incarnation}"
        return f"{self.topic}+{self.partition}+{self.start:010d}+{self.end:010d}{incarnation}{part}.parquet"

    @classmethod
    def parse(cls, name: str) -> RangeFile | None:
        """The name's fields, or None for a file kprio did not name."""
        m = _FILE.match(name)
        if m is None:
            return None
        part, incarnation = m.group("part"), m.group("incarnation")
        return cls(m.group("topic"), int(m.group("partition")), int(m.group("start")), int(m.group("end")),
                   None if part is None else int(part), 1 if incarnation is None else int(incarnation))


def relative_path(logical_topic: str, priority: int, name: RangeFile) -> str:
    """Path of a file below a root (published) or below a staging directory (staged)."""
    return f"{logical_topic}/priority={priority}/{name.file_name}"


def staging_name(batch_id: str, attempt: int) -> str:
    return f"{batch_id}.{attempt}"


def parse_staging_name(name: str) -> tuple[str, int] | None:
    """``(batch id, attempt)`` of a staging directory's name, or None for another name."""
    batch_id, dot, attempt = name.rpartition(".")
    return (batch_id, int(attempt)) if dot and batch_id and attempt.isdigit() else None


def staging_dir(root: str, batch_id: str, attempt: int) -> str:
    """The staging directory of one attempt of a batch under ``root``."""
    return f"{root.rstrip('/')}/{STAGING}/{staging_name(batch_id, attempt)}"


def absolute(root: str) -> str:
    """``root`` with a local relative path made absolute (executors have other working directories)."""
    return root if "://" in root or root.startswith("file:") else os.path.abspath(root)


def filesystem(uri: str) -> tuple[Any, str]:
    """``(pyarrow FileSystem, path inside it)`` for a local path or a ``file:``, ``s3:``, ``gs:``, ``hdfs:`` URI."""
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(absolute(uri))
    return fs, path.rstrip("/") or "/"


def renames_atomically(fs: Any) -> bool:
    """Whether a rename replaces a file in one step (local, HDFS), or is a copy (object stores)."""
    return fs.type_name in ("local", "hdfs")
