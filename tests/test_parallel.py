"""The two workers' scheduling (tests/fixtures/parallel.py): a module the host must run never goes to the guest,
the guest stops once only the host's modules are left, and the host runs its own modules (a deployment's last) before
shared ones.

The scheduler runs on xdist's own scheduling code; the workers are stand-ins that record what they were sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("xdist")

from tests.fixtures.parallel import PLACEMENT, SHARED, HostScheduling  # noqa: E402 (after the skip)

MODULES = {
    "tests/a.py": "host:now:tests/a.py",
    "tests/b.py": "any:now:tests/b.py",
    "tests/c.py": "host:late:tests/c.py",
    "tests/d.py": "any:now:tests/d.py",
    "tests/e.py": "host:now:tests/e.py",
}
COLLECTION = [f"{module}::test_{n}" for module in MODULES for n in range(3)]


class Worker:
    """What xdist's scheduler needs of a worker: its id, and what it was sent to run."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[str] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(COLLECTION[i] for i in indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def scheduler(tmp_path: Path) -> tuple[HostScheduling, Worker, Worker]:
    (tmp_path / SHARED).mkdir()
    (tmp_path / SHARED / PLACEMENT).write_text(json.dumps(MODULES))
    config = SimpleNamespace(getvalue=lambda name: ["popen", "popen"] if name == "tx" else None,
                             option=SimpleNamespace(loadscopereorder=False),
                             _tmp_path_factory=SimpleNamespace(getbasetemp=lambda: tmp_path))
    sched = HostScheduling(config, log=None)
    host, guest = Worker("gw0"), Worker("gw1")
    for node in (host, guest):
        sched.add_node(node)
        sched.add_node_collection(node, COLLECTION)
    return sched, host, guest


def finish_all(sched: HostScheduling, *workers: Worker) -> None:
    """Each worker completes what it was sent, one test at a time, until neither gets more."""
    done = {w: 0 for w in workers}
    while any(done[w] < len(w.sent) for w in workers):
        for w in workers:
            if done[w] < len(w.sent):
                sched.mark_test_complete(w, COLLECTION.index(w.sent[done[w]]))
                done[w] += 1


def modules(worker: Worker) -> list[str]:
    return list(dict.fromkeys(nodeid.split("::")[0] for nodeid in worker.sent))


def test_the_host_runs_its_modules_and_the_guest_only_shared_ones(tmp_path: Path) -> None:
    sched, host, guest = scheduler(tmp_path)
    sched.schedule()
    finish_all(sched, host, guest)
    assert sorted(host.sent + guest.sent) == sorted(COLLECTION)  # each test once
    assert set(modules(guest)) <= {"tests/b.py", "tests/d.py"}
    assert {"tests/a.py", "tests/c.py", "tests/e.py"} <= set(modules(host))
    # The host's own modules first, the deployment's last of them, then shared ones.
    own = [m for m in modules(host) if MODULES[m].startswith("host:")]
    assert modules(host)[:3] == own and own[-1] == "tests/c.py"
    assert guest.shutting_down and host.shutting_down and sched.tests_finished


def test_a_guest_with_nothing_left_it_may_run_stops_while_the_host_works_on(tmp_path: Path) -> None:
    sched, host, guest = scheduler(tmp_path)
    sched.schedule()
    # The guest finishes its shared modules first: only the host's are left, and it is told to stop.
    finish_all(sched, guest)
    assert guest.shutting_down and not host.shutting_down
    assert set(modules(guest)) <= {"tests/b.py", "tests/d.py"}
    finish_all(sched, host)
    assert sorted(host.sent + guest.sent) == sorted(COLLECTION) and sched.tests_finished
