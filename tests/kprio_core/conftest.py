"""Fixtures of the ledger tests (a clock the test moves by hand, and a SQLite ledger in a temp dir) and of the config
tests (an empty directory to run in)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kprio_core.ledger import Ledger
from tests.kprio_core.ledger_support import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'deep' / 'dir' / 'ledger.db'}"


@pytest.fixture
def ledger(url: str, clock: Clock) -> Iterator[Ledger]:
    with Ledger(url, clock=clock) as led:
        yield led


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty directory so a stray ./kprio.yaml of the repo can never leak in."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
