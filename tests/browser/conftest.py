"""Headless Chromium for the browser tests, driven by Playwright.

Chromium comes from Debian (``/usr/bin/chromium``), never from ``playwright install``: when it
is missing, the fixture installs it with apt-get (the CI machine runs as root). The tests are
skipped, saying why, only where that cannot work (not root, no apt-get, the install failed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
APT_TIMEOUT_S = 900


def install_chromium() -> str | None:
    """Install Debian's chromium; None when it worked, else why it could not."""
    if os.geteuid() != 0:
        return f"{CHROMIUM} is missing and installing it with apt-get needs root"
    if shutil.which("apt-get") is None:
        return f"{CHROMIUM} is missing and there is no apt-get to install it"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium"]):
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return f"`{' '.join(cmd)}` did not finish within {APT_TIMEOUT_S} s"
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            return f"`{' '.join(cmd)}` failed with exit code {proc.returncode}: {tail[0]}"
    return None if CHROMIUM.exists() else f"apt-get installed chromium but {CHROMIUM} is still missing"


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """Path of the Chromium binary, installed on first use when missing."""
    if not CHROMIUM.exists():
        why = install_chromium()
        if why is not None:
            pytest.skip(f"Chromium unavailable: {why}")
    return str(CHROMIUM)


@pytest.fixture(scope="module")
def browser(chromium_path: str) -> Iterator[object]:
    """One headless Chromium per test module (request it after fixtures that run Dagster in process:
    Playwright's sync API keeps an asyncio loop running on the main thread while it is open)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=chromium_path, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser) -> Iterator[object]:
    """A fresh 1440x900 page; every wait has a deadline."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()
