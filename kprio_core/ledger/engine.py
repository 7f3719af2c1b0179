"""The ledger's SQLAlchemy engine: every SQLite transaction starts with BEGIN IMMEDIATE.

pysqlite defers BEGIN until the first write, so two processes could both read "no overlap"
and then both insert. Taking the write lock at BEGIN makes check-then-insert one atomic step;
the busy timeout makes a second process wait for the lock instead of failing with
"database is locked". Postgres runs at READ COMMITTED so that, once a reservation holds its
topic row lock, its overlap query sees every reservation committed before it. The ledger runs
on those two databases: :func:`insert_for` gives their INSERT, which knows ON CONFLICT.

A PostgreSQL URL names no password (the configuration refuses one); the engine takes it from
``KPRIO_LEDGER_PASSWORD`` when that is set, so it never sits in ``kprio.yaml`` or in a config
Dagster shows.

>>> engine = make_engine("sqlite://")
>>> with engine.begin() as conn:
...     conn.exec_driver_sql("SELECT 1").scalar()
1
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import Connection, Table, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Engine, make_url

from kprio_core.config import ENV_LEDGER_PASSWORD
from kprio_core.errors import ConfigError

DEFAULT_BUSY_TIMEOUT_S = 60.0
POSTGRES_SESSION = {"lock_timeout": "10s", "statement_timeout": "30s", "idle_in_transaction_session_timeout": "60s"}
"""Every PostgreSQL session of the ledger: a row lock waited for at most 10 s, a statement at most 30 s, and a
transaction left open by a process that stopped (a paused VM) aborted by the server after 60 s, its locks
freed. No ledger transaction spans a publish or a Kafka commit, so each is a few statements long."""


def make_engine(url: str | URL, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> Engine:
    """An engine with pool_pre_ping; for SQLite, BEGIN IMMEDIATE, a busy timeout and the parent dir created."""
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        _create_parent_dir(parsed.database)
        engine = create_engine(parsed, pool_pre_ping=True, connect_args={"timeout": busy_timeout_s})
        event.listen(engine, "connect", _leave_begin_to_sqlalchemy)
        event.listen(engine, "begin", _begin_immediate)
        return engine
    if backend == "postgresql":
        password = os.environ.get(ENV_LEDGER_PASSWORD)
        if parsed.password is None and password:
            parsed = parsed.set(password=password)
        options = " ".join(f"-c {name}={value}" for name, value in POSTGRES_SESSION.items())
        return create_engine(parsed, pool_pre_ping=True, isolation_level="READ COMMITTED",
                             connect_args={"options": options})
    shown = parsed.render_as_string(hide_password=True)
    raise ConfigError(f"ledger.url {shown}: the batch ledger runs on SQLite or PostgreSQL, not {backend}")


def database_clock(engine: Engine):  # noqa: ANN201 - a clock: () -> datetime
    """The clock of ``engine``'s database: PostgreSQL's ``clock_timestamp()``, asked on a pooled connection; this
    host's clock for SQLite (the file is on this host, and so is every process that opens it)."""
    from datetime import UTC, datetime

    if engine.dialect.name != "postgresql":
        return lambda: datetime.now(UTC)

    def now() -> datetime:
        with engine.connect() as conn:
            return conn.exec_driver_sql("SELECT clock_timestamp()").scalar_one().astimezone(UTC)

    return now


def ledger_exists(url: str | URL) -> bool:
    """False for a SQLite ledger whose file is not there yet (opening it would create it); True otherwise.

    A read command (``kprio lag``) asks first, so that looking never creates a ledger.

    >>> ledger_exists("sqlite:////nonexistent/kprio/ledger.db"), ledger_exists("sqlite://")
    (False, False)
    >>> ledger_exists("postgresql://kprio@db/kprio")
    True
    """
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return True  # a server's database: its tables are there or created by the first writer
    database = parsed.database
    if not database or database == ":memory:":
        return False
    if database.startswith("file:"):
        database = database[len("file:"):].split("?", 1)[0]
    return Path(database).expanduser().exists()


def insert_for(conn: Connection, table: Table) -> sqlite.Insert | postgresql.Insert:
    """The INSERT of the connection's dialect, with ``on_conflict_do_nothing`` / ``_do_update``."""
    return (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table)


def _create_parent_dir(database: str | None) -> None:
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def _leave_begin_to_sqlalchemy(dbapi_connection, _record) -> None:  # noqa: ANN001 (DBAPI types)
    # isolation_level None stops pysqlite from emitting its own (deferred) BEGIN.
    dbapi_connection.isolation_level = None


def _begin_immediate(conn) -> None:  # noqa: ANN001
    conn.exec_driver_sql("BEGIN IMMEDIATE")
