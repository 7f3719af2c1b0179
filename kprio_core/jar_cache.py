"""The local cache of Java artifacts kprio runs with: where a set of jars lives, and whether it is whole.

``scripts/setup.sh`` resolves the sets (:mod:`orchestration.services.jars`) into :func:`cache_dir`; this module only
reads it. A set is whole when its ``classpath.txt``, written last, lists jars that all exist.

>>> s = JarSet("spark-sql-kafka", "4.2.0", ("org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0",))
>>> s.key, set_dir(s).name
('spark-sql-kafka-4.2.0', 'spark-sql-kafka-4.2.0')
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ENV_CACHE = "KPRIO_CACHE_DIR"
"""Overrides where resolved jars are kept (default ``~/.cache/kprio``)."""

CLASSPATH_FILE = "classpath.txt"


@dataclass(frozen=True)
class JarSet:
    """A named set of Maven coordinates (``group:artifact:version``) resolved together."""

    name: str
    version: str
    artifacts: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


def cache_dir() -> Path:
    """Where resolved jar sets live: ``$KPRIO_CACHE_DIR`` or ``~/.cache/kprio``."""
    return Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "kprio").expanduser()


def set_dir(jars: JarSet) -> Path:
    return cache_dir() / "jars" / jars.key


def cached(jars: JarSet) -> list[Path] | None:
    """The jars of a completely resolved set, or None when it is not (wholly) in the cache."""
    listing = set_dir(jars) / CLASSPATH_FILE
    if not listing.is_file():
        return None
    paths = [Path(line) for line in listing.read_text().splitlines() if line.strip()]
    return paths if paths and all(p.is_file() for p in paths) else None
