"""Launch claims: of many drivers claiming one run key at once, exactly one wins (SQLite here; Postgres in
test_ledger_postgres.py), an expired claim or a dead owner's is taken over, and expired claims are dropped."""

from __future__ import annotations

import threading
from datetime import timedelta

from kprio_core.ledger import Ledger
from tests.kprio_core.ledger_support import Clock, make_plan


def claim_at_once(url: str, batch_id: str, run_key: str, owners: list[str]) -> list[str]:
    """Every owner claims ``run_key`` at the same moment, each on its own connection; the owner each one saw."""
    start, seen = threading.Barrier(len(owners)), {}

    def claim(owner: str) -> None:
        with Ledger(url) as ledger:
            start.wait()
            seen[owner] = ledger.launches.claim(batch_id, run_key, owner, 30).owner

    threads = [threading.Thread(target=claim, args=(o,)) for o in owners]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [seen[o] for o in owners]


def assert_one_winner(url: str) -> None:
    with Ledger(url) as ledger:
        batch = ledger.batches.record_plan(make_plan((0, 10)))
    owners = [f"@host-{i}:{100 + i}" for i in range(6)]
    seen = claim_at_once(url, batch.batch_id, batch.batch_id, owners)
    assert len(set(seen)) == 1 and seen[0] in owners, seen  # every driver sees the same single winner


def test_of_drivers_claiming_one_run_key_at_once_exactly_one_wins(url: str):
    assert_one_winner(url)


def test_a_claim_expires_is_taken_over_from_a_dead_owner_and_is_forgotten_once_expired(ledger: Ledger,
                                                                                      clock: Clock):
    batch = ledger.batches.record_plan(make_plan((0, 10)))
    b = batch.batch_id
    assert ledger.launches.claim(b, b, "@a:1", 30).owner == "@a:1"
    assert ledger.launches.claim(b, b, "@b:2", 30).owner == "@a:1", "a live claim of another driver stands"
    assert ledger.launches.claim(b, b, "@a:1", 30).until == clock.now + timedelta(seconds=30), "its owner renews it"
    assert ledger.launches.claim(b, b, "@b:2", 30, take_over={"@a:1"}).owner == "@b:2", "a dead owner's is taken"
    clock.tick(31)
    assert ledger.launches.claims("orders") == {}, "an expired claim stops nobody"
    assert ledger.launches.claim(b, f"{b}.attempt-2", "@a:1", 30).owner == "@a:1"
    assert set(ledger.launches.claims("orders")) == {f"{b}.attempt-2"}, "expired claims are deleted"
