"""Real filesystems that refuse writes: a read-only directory and a tiny disk that fills up.

As root (a container, CI) permission bits do not stop writes, so both are tmpfs mounts when the
process may mount (unmounted in ``finally``). Without root, a read-only directory is a plain
``chmod 555``; a full disk then cannot be made and the test that needs one is skipped, saying why.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _mount(path: Path, options: str) -> bool:
    if os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True)
    return done.returncode == 0


def _umount(path: Path) -> None:
    subprocess.run(["umount", str(path)], check=True, capture_output=True)


@contextlib.contextmanager
def read_only_dir(path: Path) -> Iterator[Path]:
    """``path``, a directory that refuses writes (a read-only tmpfs as root, mode 555 otherwise)."""
    path.mkdir(parents=True, exist_ok=True)
    if _mount(path, "ro,size=1m"):
        try:
            yield path
        finally:
            _umount(path)
        return
    if os.geteuid() == 0:
        pytest.skip("running as root without permission to mount: no way to make a read-only directory")
    path.chmod(0o555)
    try:
        yield path
    finally:
        path.chmod(0o755)


@contextlib.contextmanager
def tiny_disk(path: Path, size: str = "64k") -> Iterator[Path]:
    """``path``, a directory on a tmpfs of ``size`` bytes: writing more fails with ENOSPC."""
    path.mkdir(parents=True, exist_ok=True)
    if not _mount(path, f"size={size}"):
        pytest.skip("a full disk needs a tiny tmpfs mount, which needs root with permission to mount")
    try:
        yield path
    finally:
        _umount(path)
