"""The run's heartbeat: it renews its lease token, and says the lease is lost when it is.

Lost means another run holds the batch (taken over, or a retry moved it to a later attempt),
or renewals kept failing for longer than the lease: by then another run may hold it, and the run
must stop before it publishes or commits (the ledger would refuse its stale token anyway).
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from pathlib import Path

import pytest

from kprio_core.errors import LeaseLost
from kprio_core.ledger import Ledger
from kprio_core.ledger.gate import TRANSACTIONS
from orchestration.runtime.leases import Heartbeat
from orchestration.services.process import wait_for
from tests.kprio_core.ledger_support import make_plan

A, B = "run-a@host:1", "run-b@host:2"
LEASE_S = 0.6  # renewed every 0.2 s


def wait_lost(heartbeat: Heartbeat, timeout_s: float = 10.0) -> bool:
    return heartbeat.lost.wait(timeout_s)


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


def test_it_renews_the_lease_while_the_run_works(url: str):
    with Ledger(url) as ledger:
        batch = ledger.batches.record_plan(make_plan((0, 10)))
        token = ledger.leases.claim(batch.batch_id, A, LEASE_S).token
        with Heartbeat(ledger.leases, batch.batch_id, token, LEASE_S) as heartbeat:
            time.sleep(3 * LEASE_S)
            assert not heartbeat.lost.is_set()
            heartbeat.check()
            assert ledger.batches.get(batch.batch_id).lease.owner == A, "renewed: nobody could take it over"


@pytest.mark.parametrize("meanwhile", ["taken over", "retried"])
def test_a_lease_another_run_holds_is_lost(url: str, meanwhile: str):
    with Ledger(url) as ledger:
        batch = ledger.batches.record_plan(make_plan((0, 10)))
        token = ledger.leases.claim(batch.batch_id, A, LEASE_S).token
        with Heartbeat(ledger.leases, batch.batch_id, token, LEASE_S) as heartbeat:
            if meanwhile == "taken over":
                ledger.leases.claim(batch.batch_id, B, 30, take_over={A})
            else:
                ledger.attempts.retry(batch.batch_id, reason="an operator's retry", take_over={A})
                ledger.leases.claim(batch.batch_id, A, 30)  # the same owner, but attempt 2: attempt 1's lease is gone
            assert wait_lost(heartbeat)
            with pytest.raises(LeaseLost, match=rf"the lease of {A} \(attempt 1, epoch {token.epoch}\) is lost "
                                                r".*stops without publishing"):
                heartbeat.check()


def test_renewals_failing_for_longer_than_the_lease_lose_it(url: str, tmp_path: Path):
    with Ledger(url) as ledger:
        batch = ledger.batches.record_plan(make_plan((0, 10)))
        token = ledger.leases.claim(batch.batch_id, A, LEASE_S).token
    moved = tmp_path / "elsewhere.db"
    Path(url.removeprefix("sqlite:///")).rename(moved)  # its ledger is gone: each renewal fails
    with Ledger(url) as gone, Heartbeat(gone.leases, batch.batch_id, token, LEASE_S) as heartbeat:
        started = time.monotonic()
        assert wait_lost(heartbeat)
        assert time.monotonic() - started >= LEASE_S, "one failed renewal alone does not lose it"
        assert heartbeat.why.startswith("not renewed for ") and f"longer than its {LEASE_S:g} s" in heartbeat.why


def test_a_pause_point_never_stops_the_heartbeat_inside_a_ledger_transaction(url: str):
    """A renewal is a write transaction: a process stopped inside one would hold SQLite's write lock, and the
    run taking its batch over would wait for it."""
    with Ledger(url) as ledger:
        batch = ledger.batches.record_plan(make_plan((0, 10)))
        token = ledger.leases.claim(batch.batch_id, A, LEASE_S).token
        claimed = lease_until(url)
        with TRANSACTIONS.closed():  # as a pause point closes it while the process is stopped
            with Heartbeat(ledger.leases, batch.batch_id, token, LEASE_S):
                time.sleep(0.5)
                assert lease_until(url) == claimed, "the heartbeat renewed while the process was paused"
        assert wait_for(lambda: lease_until(url) > claimed, 10), "and it renews once the pause is over"


def lease_until(url: str) -> int:
    """The batch's lease end as the file holds it, read beside the ledger (a closed gate stops the ledger's reads)."""
    with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db:
        return db.execute("SELECT lease_until_us FROM kprio_batches").fetchone()[0]
