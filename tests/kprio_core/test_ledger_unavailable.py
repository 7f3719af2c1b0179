"""A SQLite ledger whose place fails for a while (its directory made read-only, then fixed) is unavailable for now,
never unusable, and takes writes again once fixed, through the very connections that saw the fault.

Real files on a real read-only bind mount of the ledger's directory (root with permission to mount; skipped
elsewhere, saying why): SQLite cannot make its journal there (``SQLITE_CANTOPEN`` on a file it had open) and opens
the file read-only for a new connection (``SQLITE_READONLY``, for as long as that connection lives).
"""

from __future__ import annotations

import pytest

from kprio_core.errors import LedgerUnavailable
from kprio_core.ledger import BatchState, Ledger
from tests.fixtures.small_disks import read_only_in_place
from tests.kprio_core.ledger_support import make_plan


def test_a_sqlite_ledger_whose_directory_turns_read_only_is_unavailable_and_writes_again_once_fixed(tmp_path):
    place = tmp_path / "ledger"
    place.mkdir()
    url = f"sqlite:///{place / 'ledger.db'}"
    with Ledger(url) as running:
        first = running.batches.record_plan(make_plan((0, 10)))
        with read_only_in_place(place):
            # A process that had it open (a drain running): it waits for the ledger, as for a database down.
            with pytest.raises(LedgerUnavailable) as seen:
                running.batches.record_plan(make_plan((10, 20)))
            assert seen.value.transient and "\n" not in str(seen.value), seen.value
            # One that opens it meanwhile (a driver's tick, a heartbeat's own connection): SQLite opens it read-only.
            late = Ledger(url)
            with pytest.raises(LedgerUnavailable):
                late.batches.record_plan(make_plan((10, 20)))
        # Fixed by a person: both write again, no restart (the connections that failed were not kept).
        second = running.batches.record_plan(make_plan((10, 20)))
        with late:
            third = late.batches.record_plan(make_plan((20, 30)))
        assert [b.state for b in running.batches.find()] == [BatchState.PLANNED] * 3
        assert sorted(b.batch_id for b in running.batches.find()) == [first.batch_id, second.batch_id, third.batch_id]
