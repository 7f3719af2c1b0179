"""Helpers of the config tests (test_config.py, test_config_secrets.py); their ``in_tmp`` fixture is in conftest.py."""

from __future__ import annotations

from pathlib import Path


def write(path: Path, text: str | bytes = "") -> Path:
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path

