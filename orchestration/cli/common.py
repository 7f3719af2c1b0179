"""What every ``kprio`` command shares: the ``--config`` option, JSON output, and the paths it is given.

A command raises kprio's typed errors: :mod:`orchestration.cli.boundary` makes each one line. Heavy imports
(Dagster, Spark) happen inside the commands so that ``kprio quota`` answers in a blink.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from kprio_core.config import KprioConfig, TopicSettings
from kprio_core.config.load import load_config_sources
from kprio_core.errors import PathUnusable, UsageError

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        help="Path of kprio.yaml (default: $KPRIO_CONFIG, then ./kprio.yaml, then built-in defaults).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON instead of a table.")]


@contextlib.contextmanager
def using_path(setting: str, path: Path | str, doing: str = "use") -> Iterator[None]:
    """Within the block, an OSError about ``path`` (it, under it, or a directory above it not made) is
    :class:`PathUnusable` naming ``setting`` (``--data-dir``, a configuration key) and the path; others pass."""
    try:
        yield
    except OSError as err:
        if not _about(err.filename, Path(path)):
            raise
        raise PathUnusable.of(err, f"{setting} {path}", path, doing=doing) from None


def _about(filename: object, path: Path) -> bool:
    if filename is None:
        return False
    mine, theirs = Path(os.path.abspath(path)), Path(os.path.abspath(os.fsdecode(filename)))  # type: ignore[arg-type]
    return mine == theirs or mine in theirs.parents or theirs in mine.parents


def existing_directory(setting: str, path: Path | str) -> bool:
    """Whether ``path`` is a directory (False: nothing there; PathUnusable naming ``setting``: a file, or under one)."""
    with using_path(setting, path):
        try:
            mode = Path(path).stat().st_mode
        except FileNotFoundError:
            return False
    if not stat.S_ISDIR(mode):
        raise PathUnusable("is a file, not a directory", where=f"{setting} {path}")
    return True


def config_from(path: Path | None) -> KprioConfig:
    """The configuration (``--config`` or the usual search); the boundary keeps its sources to name them in errors."""
    from orchestration.cli.boundary import RUN

    config, RUN.sources = load_config_sources(path)
    return config


def chosen_topics(settings: KprioConfig, topic: str | None) -> list[TopicSettings]:
    """The logical topic ``--topic`` names (UsageError when the configuration has none of that name), else all."""
    if topic is None:
        return list(settings.topics)
    known = [t.name for t in settings.topics]
    if topic not in known:
        raise UsageError(f"no logical topic named {topic!r} in the configuration (it has {', '.join(known)})",
                         where="--topic")
    return [settings.topic(topic)]


def check_batch_id(batch_id: str, option: str) -> None:
    """UsageError unless ``batch_id`` is a batch id as the ledger writes them (``b-000042``)."""
    from kprio_core.ledger import parse_batch_id

    if parse_batch_id(batch_id) is None:
        raise UsageError(f"{batch_id!r} is not a batch id (like b-000042)", where=option)


def print_json(data: Any) -> None:
    # One write: json.dump writes each token on its own, 0.2 s for the plan of 1,920 partitions.
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
