"""The ledger's identity (``kprio_meta``): schema version, a random ledger id, where batch numbers start.

A batch's number is its autoincrement key plus an offset kept here, so a ledger replacing a lost one numbers
after it (no dialect-specific sequence). Key 7 of a ledger numbered after 500 is ``b-000507``:

>>> n = Numbering(first=501)
>>> n.batch_id(7), n.key("b-000507")
('b-000507', 7)
>>> n.key("b-000500")
Traceback (most recent call last):
...
kprio_core.errors.BatchNotFound: the ledger has no batch b-000500 (its batches are numbered from b-000501)

A database with kprio tables but no schema v2 identity was written by the previous kprio:

>>> print(outdated_message("sqlite:////data/ledger.db", "was written by an earlier kprio (no kprio_meta)"))
the ledger at sqlite:////data/ledger.db was written by an earlier kprio (no kprio_meta); this kprio \
reads ledger schema v2 only. Either drain it empty with the previous kprio (until no batch is in \
flight or failed), or move it aside (mv /data/ledger.db /data/ledger.db.v1): a new ledger adopts \
the committed offsets from Kafka and the output already written, and loses nothing.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, exists, inspect, select, update
from sqlalchemy.engine import make_url

from kprio_core.errors import BatchNotFound, LedgerNotFresh, LedgerSchemaOutdated
from kprio_core.ledger.codec import from_us
from kprio_core.ledger.commit_samples import backfill
from kprio_core.ledger.schema import (
    ADDED_IN_V2,
    COLUMNS_ADDED_IN_V2,
    METADATA,
    SCHEMA_VERSION,
    batches,
    commit_samples,
    meta,
)
from kprio_core.model.records import format_batch_id, parse_batch_id


@dataclass(frozen=True, slots=True)
class Numbering:
    """Batch number = autoincrement key + ``first`` - 1."""

    first: int

    def batch_id(self, key: int) -> str:
        return format_batch_id(key + self.first - 1)

    def key(self, batch_id: str) -> int:
        """The key of ``batch_id``, or :class:`BatchNotFound` when it cannot be one of this ledger's."""
        number = parse_batch_id(batch_id)
        if number is None:
            raise BatchNotFound(f"{batch_id!r} is not a ledger batch id (expected like 'b-000042')")
        if number < self.first:
            raise BatchNotFound(
                f"the ledger has no batch {batch_id} (its batches are numbered from {format_batch_id(self.first)})"
            )
        return number - self.first + 1


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a ledger is: its random id, schema, first batch number, and whether it adopted an earlier life."""

    ledger_id: str
    schema_version: int
    first_batch: int
    created_at: datetime
    adopted_at: datetime | None
    adopted_note: str | None


def open_schema(conn: Connection, url: str, now_us: int) -> None:
    """Create the schema v2 tables and identity in an empty database; refuse any other kprio schema.

    An older v2 ledger gets :data:`ADDED_IN_V2` tables (commit samples backfilled) and :data:`COLUMNS_ADDED_IN_V2`
    columns: additive (earlier rows read as they meant), so no version bump and no upgrade step.
    """
    inspector = inspect(conn)
    names = set(inspector.get_table_names())
    if meta.name in names:
        version = conn.execute(select(meta.c.schema_version)).scalar()
        if version == SCHEMA_VERSION:
            missing = [t for t in ADDED_IN_V2 if t.name not in names]
            if missing:
                METADATA.create_all(conn, tables=missing)
            add_missing_columns(conn, inspector)
            if commit_samples in missing:
                backfill(conn)
            return
        if version is None:
            raise LedgerSchemaOutdated(outdated_message(url, "has an empty kprio_meta table (no ledger identity)"))
        found = (f"was written by a newer kprio (ledger schema v{version}); upgrade kprio to use it, or"
                 if version > SCHEMA_VERSION else f"has ledger schema v{version}")
        raise LedgerSchemaOutdated(outdated_message(url, found))
    old = sorted(n for n in names if n.startswith("kprio_"))
    if old:
        found = f"was written by an earlier kprio (tables {', '.join(old)}, no kprio_meta)"
        raise LedgerSchemaOutdated(outdated_message(url, found))
    METADATA.create_all(conn)
    conn.execute(
        meta.insert().values(
            id=1, schema_version=SCHEMA_VERSION, ledger_id=secrets.token_hex(8), first_batch=1, created_us=now_us
        )
    )


def add_missing_columns(conn: Connection, inspector) -> None:  # noqa: ANN001 - SQLAlchemy's Inspector
    """ALTER TABLE ... ADD COLUMN for each column of :data:`COLUMNS_ADDED_IN_V2` the database lacks."""
    for table, names in COLUMNS_ADDED_IN_V2:
        have = {c["name"] for c in inspector.get_columns(table.name)}
        for name in names:
            if name in have:
                continue
            column = table.c[name]
            kind = column.type.compile(dialect=conn.dialect)
            default = column.server_default.arg if column.server_default is not None else None
            tail = f" NOT NULL DEFAULT {default}" if default is not None and not column.nullable else ""
            conn.exec_driver_sql(f"ALTER TABLE {table.name} ADD COLUMN {name} {kind}{tail}")


def outdated_message(url: str, found: str) -> str:
    """What is wrong with the ledger at ``url`` (password hidden) and the two ways out."""
    parsed = make_url(url)
    path = parsed.database if parsed.get_backend_name() == "sqlite" else None
    if path and path != ":memory:" and not path.startswith("file:"):
        aside = f"mv {path} {path}.v1"
    else:
        aside = "rename its kprio_* tables, or point ledger.url at an empty database"
    return (
        f"the ledger at {parsed.render_as_string(hide_password=True)} {found}; this kprio reads ledger schema "
        f"v{SCHEMA_VERSION} only. Either drain it empty with the previous kprio (until no batch is in flight or "
        f"failed), or move it aside ({aside}): a new ledger adopts the committed offsets from Kafka and the "
        "output already written, and loses nothing."
    )


def read_numbering(conn: Connection, *, lock: bool = False) -> Numbering:
    """The ledger's numbering; ``lock`` (a shared row lock on Postgres) keeps it fixed until commit."""
    query = select(meta.c.first_batch).where(meta.c.id == 1)
    if lock:
        query = query.with_for_update(read=True)
    return Numbering(int(conn.execute(query).scalar_one()))


def read_identity(conn: Connection) -> Identity:
    row = conn.execute(select(meta).where(meta.c.id == 1)).one()
    adopted = None if row.adopted_us is None else from_us(row.adopted_us)
    return Identity(row.ledger_id, row.schema_version, row.first_batch, from_us(row.created_us), adopted,
                    row.adopted_note)


def has_batches(conn: Connection) -> bool:
    return bool(conn.execute(select(exists().where(batches.c.id.is_not(None)))).scalar())


def number_after(conn: Connection, n: int) -> None:
    """Number the next batch ``n + 1`` or above; only while no batch was ever recorded."""
    first = int(conn.execute(select(meta.c.first_batch).where(meta.c.id == 1).with_for_update()).scalar_one())
    # Under the row lock: a record_plan either committed before (and is seen here) or waits.
    if has_batches(conn):
        raise LedgerNotFresh(
            f"cannot number batches after b-{n:06d}: this ledger has recorded batches already "
            "(numbering is fixed once the first batch exists)"
        )
    conn.execute(update(meta).where(meta.c.id == 1).values(first_batch=max(first, n + 1)))
