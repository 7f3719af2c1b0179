"""The ledger on a real PostgreSQL server: the SELECT ... FOR UPDATE topic lock under two racing processes.

A throwaway cluster is created with the server binaries of the machine (initdb + pg_ctl, as the
``postgres`` user when run as root) and stopped in ``finally``; the module is skipped, saying why,
where no PostgreSQL server binaries are installed.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kprio_core.errors import RangeConflict
from kprio_core.ledger import BatchState, Ledger
from kprio_core.offsets import OffsetRange
from tests.kprio_core.test_ledger_race import assert_disjoint, plan_of, race

pytestmark = pytest.mark.slow


def _server_bin() -> Path | None:
    found = shutil.which("initdb") or next(iter(sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)), None)
    return Path(found).parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pg_url() -> Iterator[str]:
    pytest.importorskip("psycopg", reason="the psycopg driver is not installed")
    bin_dir = _server_bin()
    if bin_dir is None:
        pytest.skip("no PostgreSQL server binaries (initdb) on this machine")
    as_user: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="kprio-pg-"))
    if os.geteuid() == 0:  # the server refuses to run as root
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres", "postgres")
    data, port = root / "data", _free_port()

    def run(*cmd: str) -> None:
        subprocess.run([*as_user, *cmd], check=True, capture_output=True, timeout=120)

    started = False
    try:
        run(str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        run(
            str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "-t", "60",
            "-o", f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start",
        )  # fmt: skip
        started = True
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        if started:
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "-t", "60", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_ledger(pg_url: str) -> Iterator[Ledger]:
    with Ledger(pg_url) as ledger:
        with ledger._engine.begin() as conn:  # each test starts from empty tables
            conn.exec_driver_sql(
                "TRUNCATE kprio_events, kprio_drained_topics, kprio_ranges, kprio_batches, "
                "kprio_topic_locks, kprio_topic_state RESTART IDENTITY"
            )
        yield ledger


def test_lifecycle_conflicts_state_and_averages_on_postgres(pg_ledger: Ledger):
    batch = pg_ledger.record_plan(plan_of(OffsetRange("orders-2", 0, 0, 10)))
    assert batch.batch_id == "b-000001"
    with pytest.raises(RangeConflict, match="held by batch b-000001"):
        pg_ledger.record_plan(plan_of(OffsetRange("orders-2", 0, 9, 12)))
    with pytest.raises(RangeConflict, match="max_in_flight=1"):
        pg_ledger.record_plan(plan_of(OffsetRange("orders-2", 0, 10, 12)), max_in_flight=1)
    pg_ledger.mark_drained(batch.batch_id, {"ranges": [{"topic": "orders-2", "records": 10, "bytes": 2500}]})
    pg_ledger.mark_checked(batch.batch_id, {})
    pg_ledger.mark_committed(batch.batch_id, {})
    replayed = pg_ledger.replay(batch.batch_id)
    assert (replayed.state, replayed.attempts, replayed.replay_of_committed) == (BatchState.PLANNED, 2, True)
    assert pg_ledger.avg_record_bytes("orders") == {"orders-2": 250.0}
    pg_ledger.save_state("orders", "rate", {"samples": [1, 2]})
    pg_ledger.save_state("orders", "rate", {"samples": [3]})
    assert pg_ledger.load_state("orders", "rate") == {"samples": [3]}


def test_two_processes_racing_on_postgres_never_hold_the_same_offsets(pg_ledger: Ledger, pg_url: str):
    race(pg_url, seeds=(3, 4))
    assert_disjoint(pg_ledger.reserved_ranges("orders"), "at the end")
    # Event keys come from a sequence, so they are insert order, not commit order; a release can
    # only appear earlier than it committed, never later, so any overlap seen here is real.
    plans = {b.batch_id: b.plan.offset_ranges() for b in pg_ledger.batches()}
    flying: set[str] = set()
    for event in pg_ledger.events(logical_topic="orders"):
        if event.to_state.in_flight:
            flying.add(event.batch_id)
            assert_disjoint([r for b in flying for r in plans[b]], f"after event {event.seq}")
        else:
            flying.discard(event.batch_id)
