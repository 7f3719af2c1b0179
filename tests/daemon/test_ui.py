"""The Dagster UI of a running kprio deployment, in headless Chromium: what a user sees and clicks.

The package's deployment (``dagster dev`` with the daemon, the shipped dagster.yaml, Spark
Connect) drains the package's ``bulk`` topic; then the pages docs/operations.md shows are opened and
asserted on, and a backfill is launched the way a user does it: from the asset page
(Materialize... -> Custom partitions -> Launch backfill) and from the job page (Materialize
all...). Each must be exactly one drain per chosen batch, end Succeeded, and leave the committed
offsets and the output as they were. Both are launched before either is waited for: the backfill
daemon's loop is a fixed 30 s, and two backfills run side by side as two users' would.

Screenshots go to the test's temporary directory; with ``KPRIO_REFRESH_SCREENSHOTS=1`` they
replace those docs/operations.md shows (docs/screenshots/).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.fixtures.daemon import DRAIN_TIMEOUT_S, Daemon
from tests.fixtures.dagster_dev import LOCATION, REPO, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.broker, pytest.mark.dagster, pytest.mark.deployment("dagster")]

CHECKS = ("offsets_are_contiguous", "offsets_are_unique", "offsets_within_plan", "required_fields_present",
          "row_count_matches_plan", "values_match_schema")


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if os.environ.get("KPRIO_REFRESH_SCREENSHOTS") == "1":
        return REPO / "docs" / "screenshots"
    return tmp_path_factory.mktemp("screenshots")


def shot(page, directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    page.screenshot(path=str(path))
    return path


@pytest.fixture(scope="module")
def drained(bulk_drained):
    """The ``bulk`` topic, with backlogs of every priority drained by the sensor's runs (four batches)."""
    return bulk_drained


def test_asset_graph_shows_drained_batch_and_committed_offsets(kprio_daemon, drained, page, screenshots) -> None:
    from playwright.sync_api import expect

    page.goto(f"{kprio_daemon.deployment.url}/locations/{LOCATION}/asset-groups/kprio", wait_until="domcontentloaded")
    # The package's first page: a cold browser lays out the whole graph (seconds on a loaded 2-core machine).
    expect(page.get_by_text("drained_batch", exact=True).first).to_be_visible()
    for name in ("committed_offsets", "replayed_window"):
        expect(page.get_by_text(name, exact=True).first).to_be_visible()
    # The drained_batch node sums up its blocking checks on the graph itself.
    expect(page.get_by_text("6 / 6 Passed").first).to_be_visible()
    expect(page.get_by_text(re.compile(r"^\d+ partitions$")).first).to_be_visible()
    assert shot(page, screenshots, "asset-graph.png").stat().st_size > 10_000


def test_sensor_page_shows_priority_lag_sensor_running_and_ticking(kprio_daemon, drained, page, screenshots) -> None:
    from playwright.sync_api import expect

    page.goto(f"{kprio_daemon.deployment.url}/locations/{LOCATION}/sensors/priority_lag_sensor",
              wait_until="domcontentloaded")
    expect(page.get_by_text("priority_lag_sensor").first).to_be_visible()
    running = page.locator("tr", has=page.get_by_text("Running", exact=True))
    expect(running.locator("input[type=checkbox]")).to_be_checked()
    # The daemon ticks it: the tick table lists evaluations (runs it requested, or none).
    expect(page.get_by_text(re.compile(r"^\d+ runs? requested$")).first).to_be_visible()
    assert shot(page, screenshots, "sensor.png").stat().st_size > 10_000


def test_checks_of_a_drained_batch_are_visible_as_passed(kprio_daemon, drained, page, screenshots) -> None:
    from playwright.sync_api import expect

    page.goto(f"{kprio_daemon.deployment.url}/assets/drained_batch?view=checks", wait_until="domcontentloaded")
    for name in CHECKS:
        expect(page.get_by_text(name, exact=True).first).to_be_visible()
    expect(page.get_by_text("Succeeded", exact=True)).to_have_count(len(CHECKS))
    expect(page.get_by_text("blocking").first).to_be_visible()
    assert shot(page, screenshots, "checks.png").stat().st_size > 10_000


ENTRIES = {  # where a user starts a backfill, its button, and which of the drained batches it picks
    "asset-page": ("assets/drained_batch", "Materialize…", slice(0, 2)),
    "job-page": (f"locations/{LOCATION}/jobs/drain_job", "Materialize all…", slice(2, 4)),
}


def backfill_dialog(kprio_daemon: Daemon, page, entry: str, button: str, ids: list[str]):
    """Open ``entry``'s ``button`` and pick ``ids`` as custom partitions: the dialog, ready to launch."""
    from playwright.sync_api import expect

    page.goto(f"{kprio_daemon.deployment.url}/{entry}", wait_until="domcontentloaded")
    page.get_by_role("button", name=button).click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_text("Partition selection")).to_be_visible()
    dialog.get_by_text("Select a partition or create one").click()
    for batch_id in ids:
        page.get_by_role("menuitem", name=f"{batch_id} {batch_id}").click()
    page.keyboard.press("Escape")  # closes the partition menu, not the dialog
    expect(page.get_by_placeholder("Filter partitions")).to_be_hidden()
    expect(dialog.get_by_text(f"{len(ids)} partitions", exact=True)).to_be_visible()  # (one would be a plain run)
    return dialog


def test_backfills_launched_in_the_ui_are_one_drain_per_batch_and_change_nothing(
    kprio_daemon, drained, page, screenshots
) -> None:
    from playwright.sync_api import expect

    launched = {}
    for name, (entry, button, picks) in ENTRIES.items():
        ids = kprio_daemon.batch_ids(drained)[picks]
        assert len(ids) == 2, kprio_daemon.batch_ids(drained)
        before = kprio_daemon.before_redrain(drained, ids)
        known = {b["id"] for b in kprio_daemon.deployment.backfills()}
        dialog = backfill_dialog(kprio_daemon, page, entry, button, ids)
        if name == "asset-page":
            shot(page, screenshots, "backfill.png")
        dialog.get_by_role("button", name="Launch backfill").click()
        expect(page.get_by_text(re.compile(r"^Created backfill"))).to_be_visible()
        [backfill] = wait_until(lambda: [b for b in kprio_daemon.deployment.backfills() if b["id"] not in known], 30,
                                what=f"the backfill the {name} dialog created")
        assert sorted(backfill["partitionNames"]) == ids, name
        launched[name] = (backfill, ids, before)

    for name, (backfill, ids, before) in launched.items():
        statuses = kprio_daemon.deployment.backfill_runs_done(backfill["id"], ids, DRAIN_TIMEOUT_S)
        assert statuses == dict.fromkeys(ids, "SUCCESS"), name
        kprio_daemon.assert_redrained_once(drained, ids, before, backfill["id"])
