"""The batch ledger on a SQLite file: reading back, restarts, its identity and numbering, and schemas of other
kprio versions."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from kprio_core.config import LedgerSettings
from kprio_core.errors import BatchNotFound, LedgerNotFresh, LedgerSchemaOutdated, RangeConflict
from kprio_core.ledger import BatchState, Ledger
from kprio_core.ledger.meta import outdated_message
from kprio_core.model.drain_plan import BurstDecision, DrainPlan, PlannedRange
from kprio_core.model.offsets import OffsetRange
from tests.kprio_core.ledger_support import Clock, R, make_plan, result_for

S = BatchState


# --------------------------------------------------------------------------------- reading

def test_unknown_and_malformed_ids_are_not_found(ledger: Ledger):
    with pytest.raises(BatchNotFound, match="no batch b-000009"):
        ledger.batches.get("b-000009")
    with pytest.raises(BatchNotFound, match="'42' is not a ledger batch id"):
        ledger.moves.mark_failed("42", "x", retry_at=None)
    with pytest.raises(BatchNotFound):
        ledger.batches.events("b-000003")


def test_listing_filters_and_orders(ledger: Ledger):
    a = ledger.batches.record_plan(make_plan((0, 10)))
    b = ledger.batches.record_plan(make_plan((0, 10), topic="payments"))
    c = ledger.batches.record_plan(make_plan(R("orders-2", 1, 10, 20)))
    ledger.moves.mark_failed(a.batch_id, "x", retry_at=None)
    ids = lambda bs: [x.batch_id for x in bs]  # noqa: E731
    assert ids(ledger.batches.find()) == [c.batch_id, b.batch_id, a.batch_id], "newest first"
    assert ids(ledger.batches.find("orders")) == [c.batch_id, a.batch_id]
    assert ids(ledger.batches.find(states=[S.FAILED])) == [a.batch_id]
    assert ids(ledger.batches.find(limit=1)) == [c.batch_id]
    assert ids(ledger.batches.in_flight()) == [b.batch_id, c.batch_id], "oldest first"
    assert ids(ledger.batches.in_flight("payments")) == [b.batch_id]
    assert ledger.batches.reserved_ranges("orders") == [OffsetRange("orders-2", 1, 10, 20)]
    assert ledger.batches.reserved_ranges("nobody") == []


def test_plan_round_trips_with_every_decision(ledger: Ledger):
    plan = DrainPlan(
        logical_topic="orders",
        mode="flipkart",
        record_budget=50,
        byte_budget=4096,
        quotas={2: 29, 1: 14, 0: 7},
        grants={2: 43, 1: 0, 0: 7},
        ranges=(PlannedRange(2, R("orders-2", 0, 0, 43), 4000), PlannedRange(0, R("orders-0", 1, 3, 10))),
        burst=BurstDecision(2, 14, "priority 2 maxed out 4 of the last 6 batches"),
        lost=(R("orders-0", 1, 0, 3),),
        backlog_before={2: 100, 1: 0, 0: 10},
        snapshot_taken_at_ms=1_735_787_045_000,
    )
    assert ledger.batches.get(ledger.batches.record_plan(plan).batch_id).plan == plan


def test_ranges_are_stored_once(ledger: Ledger):
    batch = ledger.batches.record_plan(make_plan((0, 10), (20, 30)))
    ledger.moves.mark_drained(batch.batch_id, result_for(batch))
    with ledger._engine.begin() as conn:
        plan_json = conn.exec_driver_sql("SELECT plan_json FROM kprio_batches").scalar()
        columns = {row[1] for row in conn.exec_driver_sql("PRAGMA table_info(kprio_batches)")}
        tables = {row[0] for row in conn.exec_driver_sql("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert '"ranges"' not in plan_json and "orders-2" not in plan_json, "ranges live in kprio_ranges only"
    assert not {"records", "est_bytes"} & columns
    assert {t for t in tables if t.startswith("kprio_")} == {
        "kprio_meta", "kprio_batches", "kprio_ranges", "kprio_events", "kprio_topic_locks", "kprio_partitions",
        "kprio_log_events", "kprio_launches", "kprio_commit_samples"}


def test_from_settings_creates_the_parent_directory(tmp_path: Path):
    target = tmp_path / "a" / "b" / "ledger.db"
    with Ledger.from_settings(LedgerSettings(url=f"sqlite:///{target}")) as led:
        led.batches.record_plan(make_plan((0, 1)))
    assert target.is_file()


def test_repr_hides_a_database_password():
    led = Ledger.__new__(Ledger)
    led._url = "postgresql+psycopg://kprio:s3cret@db:5432/kprio"
    assert "s3cret" not in repr(led) and "kprio:***@db" in repr(led)


# --------------------------------------------------------------------------------- restarts

def test_a_restarted_process_sees_the_truth(url: str, clock: Clock):
    first = Ledger(url, clock=clock)
    drained = first.batches.record_plan(make_plan((0, 10)))
    first.moves.mark_drained(drained.batch_id, result_for(drained))
    failed = first.batches.record_plan(make_plan(R("orders-2", 1, 10, 20)))
    first.moves.mark_failed(failed.batch_id, "handler raised ValueError", retry_at=None)
    ledger_id = first.ledger_id
    first.close()  # the process dies here: nothing else is written

    restarted = Ledger(url, clock=clock)
    assert restarted.ledger_id == ledger_id
    assert [(b.batch_id, b.state) for b in restarted.batches.in_flight()] == [(drained.batch_id, S.DRAINED)]
    assert restarted.batches.get(failed.batch_id).reason == "handler raised ValueError"
    assert restarted.batches.reserved_ranges("orders") == [OffsetRange("orders-2", 0, 0, 10)], (
        "a dead run keeps its ranges")
    assert [h.batch_id for h in restarted.batches.holds("orders")] == [failed.batch_id]
    with pytest.raises(RangeConflict):
        restarted.batches.record_plan(make_plan((5, 6)))
    restarted.moves.mark_failed(drained.batch_id, "run died before the checks", retry_at=None)
    assert restarted.batches.reserved_ranges("orders") == []
    assert restarted.batches.record_plan(make_plan(R("orders-2", 2, 0, 10))).batch_id == "b-000003"
    restarted.close()


def test_two_open_ledgers_on_one_file_see_each_other(url: str):
    a, b = Ledger(url), Ledger(url)
    try:
        batch = a.batches.record_plan(make_plan((0, 10)))
        with pytest.raises(RangeConflict, match=batch.batch_id):
            b.batches.record_plan(make_plan((9, 11)))
        b.moves.mark_failed(batch.batch_id, "stopped from process b", retry_at=None)
        assert a.batches.get(batch.batch_id).state is S.FAILED
        assert a.ledger_id == b.ledger_id
    finally:
        a.close()
        b.close()


# --------------------------------------------------------------------------------- identity

def test_a_new_ledger_has_a_random_id_and_is_fresh_until_it_records(tmp_path: Path, clock: Clock):
    with Ledger(f"sqlite:///{tmp_path / 'a.db'}", clock=clock) as a, Ledger(f"sqlite:///{tmp_path / 'b.db'}") as b:
        assert len(a.ledger_id) == 16 and int(a.ledger_id, 16) >= 0 and a.ledger_id != b.ledger_id
        assert a.is_fresh() and a.identity().created_at == clock.now and a.identity().schema_version == 2
        a.batches.record_plan(make_plan((0, 10)))
        assert not a.is_fresh()
        b.mark_adopted("adopted committed offsets of orders-2[0..2] and 3 output files")
        assert not b.is_fresh() and b.identity().adopted_note.startswith("adopted committed offsets")


# (numberings asked, after adoption, next batch id, why)
NUMBERING_CASES = [
    ((), False, "b-000001", "1. a new ledger numbers from 1"),
    ((500,), False, "b-000501", "2. after an earlier life's b-000500"),
    ((500, 100), False, "b-000501", "3. numbering never goes back"),
    ((500, 700), False, "b-000701", "4. the larger earlier life wins"),
    ((42,), True, "b-000043", "5. adopting first does not prevent numbering before the first batch"),
]


@pytest.mark.parametrize(("after", "adopted", "next_id", "why"), NUMBERING_CASES, ids=[c[3] for c in NUMBERING_CASES])
def test_batch_numbers_follow_an_earlier_life(ledger: Ledger, after, adopted, next_id, why):
    if adopted:
        ledger.mark_adopted("earlier life adopted")
    for n in after:
        ledger.number_batches_after(n)
    first = ledger.batches.record_plan(make_plan((0, 10)))
    second = ledger.batches.record_plan(make_plan((10, 20)))
    assert first.batch_id == next_id and ledger.batches.get(next_id) == first
    assert int(second.batch_id[2:]) == int(next_id[2:]) + 1
    assert [e.batch_id for e in ledger.batches.events()] == [first.batch_id, second.batch_id]
    with pytest.raises(LedgerNotFresh, match="has recorded batches already"):
        ledger.number_batches_after(10_000)


def test_ids_below_the_first_number_are_not_found(ledger: Ledger):
    ledger.number_batches_after(500)
    ledger.batches.record_plan(make_plan((0, 10)))
    with pytest.raises(BatchNotFound, match=r"no batch b-000001 \(its batches are numbered from b-000501\)"):
        ledger.batches.get("b-000001")


# --------------------------------------------------------------------------------- other schemas

V1_SCHEMA = """
CREATE TABLE kprio_batches (id INTEGER PRIMARY KEY AUTOINCREMENT, logical_topic VARCHAR(255) NOT NULL,
  state VARCHAR(16) NOT NULL, plan_json TEXT NOT NULL, records BIGINT NOT NULL, est_bytes BIGINT NOT NULL,
  created_us BIGINT NOT NULL, updated_us BIGINT NOT NULL, attempts INTEGER NOT NULL,
  replay_of_committed BOOLEAN NOT NULL, reason TEXT, drain_stats_json TEXT, check_results_json TEXT,
  commit_report_json TEXT);
CREATE TABLE kprio_ranges (id INTEGER PRIMARY KEY, batch_id INTEGER NOT NULL REFERENCES kprio_batches (id),
  topic VARCHAR(255) NOT NULL, kafka_partition INTEGER NOT NULL, start_offset BIGINT NOT NULL,
  end_offset BIGINT NOT NULL, priority INTEGER NOT NULL, est_bytes BIGINT NOT NULL);
CREATE TABLE kprio_events (id INTEGER PRIMARY KEY AUTOINCREMENT, batch_id INTEGER NOT NULL, from_state VARCHAR(16),
  to_state VARCHAR(16) NOT NULL, attempt INTEGER NOT NULL, at_us BIGINT NOT NULL, reason TEXT);
CREATE TABLE kprio_drained_topics (batch_id INTEGER NOT NULL, topic VARCHAR(255) NOT NULL,
  logical_topic VARCHAR(255) NOT NULL, records BIGINT NOT NULL, bytes BIGINT NOT NULL, drained_us BIGINT NOT NULL,
  PRIMARY KEY (batch_id, topic));
CREATE TABLE kprio_topic_locks (logical_topic VARCHAR(255) PRIMARY KEY);
CREATE TABLE kprio_topic_state (logical_topic VARCHAR(255) NOT NULL, name VARCHAR(255) NOT NULL,
  value_json TEXT NOT NULL, updated_us BIGINT NOT NULL, PRIMARY KEY (logical_topic, name));
INSERT INTO kprio_batches VALUES (1, 'orders', 'committed', '{}', 10, 1000, 0, 0, 1, FALSE, NULL, NULL, NULL, NULL);
"""


def test_a_ledger_of_the_previous_kprio_is_refused_with_what_to_do(tmp_path: Path):
    path = tmp_path / "ledger.db"
    with sqlite3.connect(path) as conn:
        conn.executescript(V1_SCHEMA)
    before = path.read_bytes()
    with pytest.raises(LedgerSchemaOutdated) as err:
        Ledger(f"sqlite:///{path}")
    message = str(err.value)
    assert err.value.code == "ledger_schema_outdated"
    assert f"the ledger at sqlite:///{path} was written by an earlier kprio (tables kprio_batches, " in message
    assert "kprio_topic_state, no kprio_meta)" in message
    assert "drain it empty with the previous kprio" in message and f"(mv {path} {path}.v1)" in message
    assert "a new ledger adopts the committed offsets from Kafka and the output already written" in message
    assert message.endswith("and loses nothing.")
    assert path.read_bytes() == before, "the refused file is left as it was"
    path.rename(f"{path}.v1")  # what the message says to do
    with Ledger(f"sqlite:///{path}") as fresh:
        assert fresh.is_fresh()


def test_a_newer_schema_is_refused_and_passwords_stay_hidden(url: str):
    with Ledger(url) as led, led._engine.begin() as conn:
        conn.exec_driver_sql("UPDATE kprio_meta SET schema_version = 3")
    with pytest.raises(LedgerSchemaOutdated, match=r"written by a newer kprio \(ledger schema v3\); upgrade kprio"):
        Ledger(url)
    message = outdated_message("postgresql+psycopg://kprio:s3cret@db:5432/kprio", "was written by an earlier kprio")
    assert "s3cret" not in message and "kprio:***@db" in message and "point ledger.url at an empty database" in message
