"""Fixtures of the ledger tests: a clock the test moves by hand, and a SQLite ledger in a temp dir."""

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
