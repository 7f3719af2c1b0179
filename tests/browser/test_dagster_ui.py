"""The Dagster UI on a demo instance, in headless Chromium: asset graph, sensor, checks of a drained batch.

A small demo (60 orders, two batches) drains on the session broker and Spark into a fresh
Dagster home; then ``dagster dev`` (webserver + daemon) serves that instance, and the pages
the README shows are opened and asserted on. Their screenshots are saved to docs/screenshots/.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestration.demo.run import DemoOptions, DemoResult, run_demo
from orchestration.services.process import free_port, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.broker, pytest.mark.spark, pytest.mark.dagster]

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "docs" / "screenshots"
LOCATION = "kprio"
START_TIMEOUT_S = 240
STOP_TIMEOUT_S = 30
CHECKS = ("offsets_are_contiguous", "offsets_are_unique", "offsets_within_plan", "required_fields_present",
          "row_count_matches_plan", "values_match_schema")


@pytest.fixture(scope="module")
def demo_instance(kafka_bootstrap: str, spark, tmp_path_factory: pytest.TempPathFactory) -> DemoResult:
    """A Dagster instance whose demo drained two batches (60 orders, budget 100, burst after batch 1)."""
    root = tmp_path_factory.mktemp("ui-demo")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KPRIO_BOOTSTRAP_SERVERS", kafka_bootstrap)
        mp.setenv("DAGSTER_HOME", str(root / "unused-home"))  # run_demo points it at the demo's home; restored
        result = run_demo(DemoOptions(records=60, data_dir=root / "demo", record_budget=100, steady_waves=1,
                                      burst_after=1))
    assert result.ok, result.to_dict()
    assert len(result.batches) == 2
    return result


def graphql(url: str, query: str, timeout_s: float = 5.0) -> dict:
    request = urllib.request.Request(f"{url}/graphql", data=json.dumps({"query": query}).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return json.loads(response.read())


LOCATIONS = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus " \
            "locationOrLoadError { __typename ... on PythonError { message } } } } } }"


def location_state(url: str) -> tuple[str, str | None]:
    """("loaded" | "error" | "waiting", error message) of the kprio code location."""
    try:
        entries = graphql(url, LOCATIONS)["data"]["workspaceOrError"]["locationEntries"]
    except (urllib.error.URLError, OSError, KeyError, TypeError, ValueError):
        return "waiting", None
    for entry in entries:
        if entry["name"] == LOCATION and entry["loadStatus"] == "LOADED":
            loaded = entry["locationOrLoadError"] or {}
            if loaded.get("__typename") == "PythonError":
                return "error", loaded.get("message")
            return "loaded", None
    return "waiting", None


def log_tail(path: Path, lines: int = 15) -> str:
    text = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(text[-lines:])


@pytest.fixture(scope="module")
def dagster_ui(demo_instance: DemoResult, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``dagster dev`` on the demo instance, in its own process group; its URL once the code location loaded."""
    work = tmp_path_factory.mktemp("dagster-dev")
    workspace = work / "workspace.yaml"
    workspace.write_text(
        "load_from:\n  - python_module:\n      module_name: orchestration.definitions\n"
        f"      location_name: {LOCATION}\n      working_directory: {REPO}\n"
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = work / "dagster-dev.log"
    env = {**os.environ, "DAGSTER_HOME": str(demo_instance.layout.dagster_home),
           "KPRIO_CONFIG": str(demo_instance.layout.config_file)}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dagster", "dev", "-w", str(workspace), "-h", "127.0.0.1", "-p", str(port)],
            cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: webserver, daemon and code servers die together
        )
    try:
        state: list[tuple[str, str | None]] = [("waiting", None)]

        def ready() -> bool:
            if proc.poll() is not None:
                return True
            state[0] = location_state(url)
            return state[0][0] != "waiting"

        up = wait_for(ready, START_TIMEOUT_S, interval_s=0.5)
        if proc.poll() is not None:
            pytest.fail(f"dagster dev exited with code {proc.returncode}:\n{log_tail(log)}")
        if not up:
            pytest.fail(f"dagster dev did not load the {LOCATION} code location within {START_TIMEOUT_S} s:\n"
                        f"{log_tail(log)}")
        if state[0][0] == "error":
            pytest.fail(f"the {LOCATION} code location failed to load: {state[0][1]}")
        # Mark the first-visit community dialog as seen: it would cover the pages in the screenshots.
        assert graphql(url, "mutation { setNuxSeen }")["data"]["setNuxSeen"] is True
        yield url
    finally:
        stop_group(proc)


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM the process group, SIGKILL it after the deadline."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=STOP_TIMEOUT_S)
            # dagster dev is gone; its children share the group and may linger a moment.
            if wait_for(lambda: not group_alive(proc.pid), STOP_TIMEOUT_S):
                return
        except subprocess.TimeoutExpired:
            continue
    if group_alive(proc.pid):
        raise AssertionError(f"dagster dev's process group {proc.pid} survived SIGKILL")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def shot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    page.screenshot(path=str(path))
    return path


def test_asset_graph_shows_drained_batch_and_committed_offsets(dagster_ui: str, page) -> None:
    from playwright.sync_api import expect

    page.goto(f"{dagster_ui}/locations/{LOCATION}/asset-groups/kprio", wait_until="domcontentloaded")
    expect(page.get_by_text("drained_batch", exact=True).first).to_be_visible()
    expect(page.get_by_text("committed_offsets", exact=True).first).to_be_visible()
    expect(page.get_by_text("replayed_window", exact=True).first).to_be_visible()
    # The drained_batch node sums up its blocking checks on the graph itself.
    expect(page.get_by_text("6 / 6 Passed").first).to_be_visible()
    expect(page.get_by_text("2 partitions").first).to_be_visible()
    assert shot(page, "asset-graph.png").stat().st_size > 10_000


def test_sensor_page_shows_priority_lag_sensor_running(dagster_ui: str, page) -> None:
    from playwright.sync_api import expect

    page.goto(f"{dagster_ui}/locations/{LOCATION}/sensors/priority_lag_sensor", wait_until="domcontentloaded")
    expect(page.get_by_text("priority_lag_sensor").first).to_be_visible()
    running = page.locator("tr", has=page.get_by_text("Running", exact=True))
    expect(running.locator("input[type=checkbox]")).to_be_checked()
    # The daemon ticked it on this instance: the demo left no backlog, so the tick says so.
    expect(page.get_by_text('"no backlog"').first).to_be_visible(timeout=120_000)
    assert shot(page, "sensor.png").stat().st_size > 10_000


def test_checks_of_a_drained_batch_are_visible_as_passed(dagster_ui: str, page) -> None:
    from playwright.sync_api import expect

    page.goto(f"{dagster_ui}/assets/drained_batch?view=checks", wait_until="domcontentloaded")
    for name in CHECKS:
        expect(page.get_by_text(name, exact=True).first).to_be_visible()
    expect(page.get_by_text("Succeeded", exact=True)).to_have_count(len(CHECKS))
    expect(page.get_by_text("blocking").first).to_be_visible()
    expect(page.get_by_text("Passed", exact=True).first).to_be_visible()
    assert shot(page, "checks.png").stat().st_size > 10_000

