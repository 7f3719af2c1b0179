"""The ledger on a real PostgreSQL server: the same rules, the dialect's SQL, and the FOR UPDATE topic lock
under two racing processes.

The throwaway server comes from ``tests.fixtures.postgres`` (initdb + pg_ctl, stopped in ``finally``);
each test gets a database of its own. The module is skipped, saying why, where no server can run.
"""

from __future__ import annotations

import pytest

from kprio_core.errors import BatchBusy, LedgerSchemaOutdated, LedgerUnavailable, RangeConflict
from kprio_core.ledger import BatchState, Ledger
from kprio_core.model.results import CheckOutcome, CheckReport
from tests.fixtures.postgres import PostgresServer, postgres_server  # noqa: F401 (fixture)
from tests.kprio_core.ledger_support import Clock, R, commit_report, drain_check_commit, make_plan, result_for
from tests.kprio_core.test_ledger_persistence import V1_SCHEMA
from tests.kprio_core.test_ledger_race import assert_disjoint, assert_never_taken_twice, race

pytestmark = pytest.mark.slow
S = BatchState


@pytest.fixture
def pg_url(postgres_server: PostgresServer) -> str:  # noqa: F811 (the imported fixture)
    return postgres_server.url(postgres_server.new_database("ledger"))


def test_lifecycle_holds_leases_split_and_derived_state_on_postgres(pg_url: str):
    clock = Clock()
    with Ledger(pg_url, clock=clock) as ledger:
        assert ledger.is_fresh()
        ledger.number_batches_after(500)
        batch = ledger.batches.record_plan(make_plan(R("orders-2", 0, 0, 10), R("orders-2", 1, 0, 10)), max_in_flight=1)
        assert batch.batch_id == "b-000501" and not ledger.is_fresh()
        with pytest.raises(RangeConflict, match="held by batch b-000501"):
            ledger.batches.record_plan(make_plan(R("orders-2", 0, 9, 12)))
        with pytest.raises(RangeConflict, match="priority 2 already has 1 batch"):
            ledger.batches.record_plan(make_plan(R("orders-2", 2, 0, 10)), max_in_flight=1)
        ledger.leases.claim(batch.batch_id, "run-a@h:1", 30)
        with pytest.raises(BatchBusy, match="held by run-a@h:1"):
            ledger.leases.claim(batch.batch_id, "run-b@h:2", 30)

        ledger.moves.mark_drained(batch.batch_id, result_for(batch, 250, seconds=2.0))
        child = ledger.attempts.split(batch.batch_id, [R("orders-2", 1, 0, 10)], "values_match_schema failed",
                                      retry_at=None)
        assert (child.batch_id, child.parent, child.state) == ("b-000502", batch.batch_id, S.FAILED)
        assert [(h.batch_id, h.partition, h.start) for h in ledger.batches.holds("orders")] == [(child.batch_id, 1, 0)]
        with pytest.raises(RangeConflict, match="held from offset 0 by failed batch b-000502"):
            ledger.batches.record_plan(make_plan(R("orders-2", 1, 10, 20)))
        report = CheckReport((CheckOutcome("values_match_schema", False, {"invalid": 3}, (R("orders-2", 1, 0, 10),)),))
        ledger.moves.mark_checked(batch.batch_id, report)
        assert [b.batch_id for b in ledger.batches.ready_to_commit("orders")] == [batch.batch_id]
        clock.tick()
        done = ledger.moves.mark_committed(batch.batch_id, commit_report(ledger.batches.get(batch.batch_id)))
        assert done.committed_at == clock.now and done.lease is None

        drain_check_commit(ledger, ledger.attempts.retry(child.batch_id, reason="automatic retry"), seconds=2.0)
        replayed = ledger.attempts.replay(batch.batch_id)
        assert (replayed.state, replayed.attempts, replayed.replay_of_committed) == (S.PLANNED, 2, True)
        assert ledger.samples.avg_record_bytes("orders") == {"orders-2": 175.0}, "(10 * 250 + 10 * 100) / 20"
        assert ledger.samples.poll_history("orders", 3).counts(2) == [10], (
            "the split-off batch was part of its parent's poll")
        assert ledger.samples.throughput("orders") == 5.0, "20 records in 4 s"
        assert [s.records for s in ledger.samples.drained_since("orders", clock.now)] == [10, 10]
        assert [(s.partition, s.committed) for s in ledger.samples.commits("orders", 5)] == [(0, 10), (1, 10)], (
            "the lag verdict's window: each partition's commits")
        ledger_id = ledger.ledger_id
    with Ledger(pg_url) as again:
        assert again.ledger_id == ledger_id and again.batches.get("b-000502").state is S.COMMITTED


def test_a_ledger_of_the_previous_kprio_on_postgres_is_refused(postgres_server: PostgresServer):  # noqa: F811
    import psycopg

    name = postgres_server.new_database("v1")
    with psycopg.connect(postgres_server.url(name, driver="postgresql")) as conn:
        for statement in V1_SCHEMA.replace("AUTOINCREMENT", "").split(";"):
            if statement.strip():
                conn.execute(statement.replace("INTEGER PRIMARY KEY", "SERIAL PRIMARY KEY"))
    with pytest.raises(LedgerSchemaOutdated, match=r"written by an earlier kprio \(tables kprio_batches, .*"
                                                  r"rename its kprio_\* tables, or point ledger.url at an empty"):
        Ledger(postgres_server.url(name))


def test_two_processes_racing_on_postgres_never_hold_the_same_offsets(pg_url: str):
    Ledger(pg_url).close()
    race(pg_url, seeds=(3, 4))
    with Ledger(pg_url) as ledger:
        assert_disjoint(ledger.batches.reserved_ranges("orders"), "at the end")
        assert_never_taken_twice(ledger, commit_order=False)


def test_of_drivers_claiming_one_run_key_at_once_exactly_one_wins_on_postgres(pg_url: str):
    from tests.kprio_core.test_ledger_launches import assert_one_winner

    assert_one_winner(pg_url)


def test_a_session_waits_a_bounded_time_for_a_lock_a_stopped_process_holds(pg_url: str):
    """A process stopped inside a transaction that locked the topic's row (a paused VM) stalls no other writer for
    good: the server gives up the wait after lock_timeout and says so, and the ledger answers again at once."""
    import time

    import psycopg

    from kprio_core.ledger.engine import POSTGRES_SESSION

    with Ledger(pg_url) as ledger:
        ledger.batches.record_plan(make_plan(R("orders-2", 0, 0, 10)))
        stopped = psycopg.connect(pg_url.replace("postgresql+psycopg", "postgresql"))
        stopped.execute("SELECT logical_topic FROM kprio_topic_locks WHERE logical_topic = 'orders' FOR UPDATE")
        try:
            started = time.monotonic()
            with pytest.raises(LedgerUnavailable, match=r"a row of the ledger stayed locked longer than lock_timeout "
                                                        r"\(10s\) by another session") as err:
                ledger.batches.record_plan(make_plan(R("orders-2", 0, 10, 20)))
            assert err.value.transient and err.value.code == "ledger_unavailable"
            waited = time.monotonic() - started
            assert waited < float(POSTGRES_SESSION["lock_timeout"].removesuffix("s")) + 5, waited
            assert ledger.batches.get("b-000001").state is S.PLANNED, "reads go on meanwhile"
        finally:
            stopped.close()
        assert ledger.batches.record_plan(make_plan(R("orders-2", 0, 10, 20))).batch_id == "b-000002"


def test_leases_expire_by_the_database_clock_not_by_a_host_whose_clock_is_off(pg_url: str, tmp_path):
    """A process on a host whose clock is an hour behind claims a lease of 30 s: by its own clock the lease would
    have ended an hour ago for everyone else. Judged by the database's clock, it holds for 30 s."""
    import os
    import subprocess
    import sys
    from datetime import datetime, timedelta
    from pathlib import Path

    from tests.fixtures.apt import apt_install

    def found() -> str | None:
        """Debian's libfaketime (package faketime): a process's clock moved, the server's left alone."""
        return next((str(p) for p in sorted(Path("/usr/lib").rglob("libfaketime.so.1"))), None)

    if found() is None and (why := apt_install("faketime", missing="no libfaketime",
                                                installed=lambda: found() is not None)):
        pytest.skip(why)
    with Ledger(pg_url) as ledger:
        batch = ledger.batches.record_plan(make_plan(R("orders-2", 0, 0, 10)))
    script = tmp_path / "claim.py"
    script.write_text(f"""
import datetime
from kprio_core.ledger import Ledger
print(datetime.datetime.now(datetime.UTC).isoformat())
with Ledger({pg_url!r}) as ledger:
    print(ledger.leases.claim({batch.batch_id!r}, "run-late@skewed:1", 30).lease.until.isoformat())
""")
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(script)], cwd=repo, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(repo), "LD_PRELOAD": found(), "FAKETIME": "-1h",
                               "FAKETIME_DONT_RESET": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    host_now, until = (datetime.fromisoformat(line) for line in done.stdout.split())
    with Ledger(pg_url) as ledger:
        now = ledger.now()
        assert now - host_now > timedelta(minutes=55), "the subprocess's clock was an hour behind"
        assert timedelta(seconds=0) < until - now <= timedelta(seconds=30), (until, now)
        with pytest.raises(BatchBusy, match="held by run-late@skewed:1"):
            ledger.leases.claim(batch.batch_id, "run-b@h:2", 30)
