"""Launch claims: the driver that decided to launch a run key first launches it; any other one does not.

Two drivers ticking at once may decide the same run key. The claim is one ``INSERT ... ON CONFLICT DO NOTHING``
(SQLite: under BEGIN IMMEDIATE; Postgres: the second waits for the first), so exactly one wins. It lasts ``claim_s``
(renewed until the run exists and dedupes its key) and ends early when its owner is known dead.

>>> from datetime import UTC, datetime, timedelta
>>> from kprio_core.ledger import Ledger
>>> from kprio_core.model.drain_plan import DrainPlan, PlannedRange
>>> from kprio_core.model.offsets import OffsetRange
>>> r = PlannedRange(2, OffsetRange("orders-2", 0, 0, 29), est_bytes=5800)
>>> t = [datetime(2026, 1, 1, tzinfo=UTC)]
>>> ledger = Ledger("sqlite://", clock=lambda: t[0])
>>> b = ledger.batches.record_plan(DrainPlan("orders", "lag-aware", 50, None, {2: 29}, {2: 29}, (r,)))
>>> ledger.launches.claim(b.batch_id, "b-000001", "@host-a:11", 30).owner
'@host-a:11'
>>> ledger.launches.claim(b.batch_id, "b-000001", "@host-b:22", 30).owner   # b loses: a launches it
'@host-a:11'
>>> ledger.launches.claim(b.batch_id, "b-000001", "@host-b:22", 30, take_over={"@host-a:11"}).owner
'@host-b:22'
>>> t[0] += timedelta(seconds=31)   # b's claim expired: a may claim again
>>> ledger.launches.claim(b.batch_id, "b-000001", "@host-a:11", 30).owner
'@host-a:11'
>>> sorted(ledger.launches.claims("orders"))
['b-000001']
>>> ledger.close()
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import delete, select, update

from kprio_core.ledger.codec import from_us
from kprio_core.ledger.engine import insert_for
from kprio_core.ledger.rows import batch_row
from kprio_core.ledger.schema import batches, launches
from kprio_core.ledger.store import Repository
from kprio_core.model.records import LaunchClaim

_US = 1_000_000


class Launches(Repository):
    """Who launches each run key: claim one, read the live claims."""

    def claim(self, batch_id: str, run_key: str, owner: str, claim_s: float, *,
                     take_over: Collection[str] = ()) -> LaunchClaim:
        """Claim the launch of ``run_key`` (a run of ``batch_id``) for ``owner`` until now + ``claim_s``.

        Returns the claim after the call: ``owner``'s if free, expired, already its own (renewed) or held by one in
        ``take_over`` (known dead); else the other owner's live claim, unchanged (that driver launches it).
        """
        if not owner or claim_s <= 0:
            raise ValueError(f"a launch claim needs an owner and claim_s > 0, got {owner!r}, {claim_s}")
        with self._store.tx() as (conn, numbering):
            now = self._store.now_us()
            until = now + round(claim_s * _US)
            key = batch_row(conn, numbering, batch_id).id
            conn.execute(delete(launches).where(launches.c.until_us <= now, launches.c.run_key != run_key))
            conn.execute(insert_for(conn, launches).values(
                run_key=run_key, batch_id=key, owner=owner, claimed_us=now, until_us=until).on_conflict_do_nothing())
            row = conn.execute(select(launches).where(launches.c.run_key == run_key).with_for_update()).one()
            if row.owner != owner and (row.until_us <= now or row.owner in take_over):
                conn.execute(update(launches).where(launches.c.run_key == run_key).values(
                    batch_id=key, owner=owner, claimed_us=now, until_us=until))
            elif row.owner == owner:
                conn.execute(update(launches).where(launches.c.run_key == run_key).values(until_us=until))
            row = conn.execute(select(launches).where(launches.c.run_key == run_key)).one()
            return LaunchClaim(row.run_key, numbering.batch_id(row.batch_id), row.owner, from_us(row.claimed_us),
                               from_us(row.until_us))

    def claims(self, logical_topic: str) -> dict[str, LaunchClaim]:
        """The unexpired launch claims of the topic's batches, by run key."""
        now = self._store.now_us()
        query = (select(launches).join(batches, batches.c.id == launches.c.batch_id)
                 .where(batches.c.logical_topic == logical_topic, launches.c.until_us > now))
        with self._store.tx() as (conn, numbering):
            return {r.run_key: LaunchClaim(r.run_key, numbering.batch_id(r.batch_id), r.owner, from_us(r.claimed_us),
                                           from_us(r.until_us)) for r in conn.execute(query)}
