"""The ledger's SQLAlchemy engine: every SQLite transaction starts with BEGIN IMMEDIATE.

pysqlite defers BEGIN until the first write, so two processes could both read "no overlap" and insert; the lock
at BEGIN makes check-then-insert atomic, the busy timeout makes others wait, not fail "database is locked".
Postgres runs at READ COMMITTED so that, once a reservation holds its topic row lock, its overlap query sees every
reservation committed before it.

A PostgreSQL password comes only from ``KPRIO_LEDGER_PASSWORD``, never ``kprio.yaml`` or a Dagster config.

The database's errors map by type to kprio's (:func:`ledger_failure`, on SQLAlchemy's ``handle_error``):
:class:`LedgerUnavailable` (transient; the SQLite connection is dropped, as SQLite keeps a file it opened
read-only so) or :class:`LedgerUnusable`, each naming ``ledger.url`` without its password.

>>> engine = make_engine("sqlite://")
>>> with engine.begin() as conn:
...     conn.exec_driver_sql("SELECT 1").scalar()
1
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from sqlalchemy import Connection, Table, create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Engine, ExceptionContext, make_url
from sqlalchemy.exc import ArgumentError, OperationalError

from kprio_core.config import ENV_LEDGER_PASSWORD
from kprio_core.errors import ConfigError, KprioError, LedgerUnavailable, LedgerUnusable, PathUnusable, os_reason
from kprio_core.urls import shown_url

DEFAULT_BUSY_TIMEOUT_S = 60.0
POSTGRES_SESSION = {"lock_timeout": "10s", "statement_timeout": "30s", "idle_in_transaction_session_timeout": "60s"}
"""Every ledger PostgreSQL session: a transaction left open by a stopped process (a paused VM) is aborted after
60 s, its locks freed. No ledger transaction spans a publish or a Kafka commit, so each is a few statements."""


def make_engine(url: str | URL, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> Engine:
    """An engine with pool_pre_ping and kprio's errors; for SQLite, BEGIN IMMEDIATE, a busy timeout, the dir made."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ConfigError("is not a SQLAlchemy URL", where="ledger.url") from None
    where = f"ledger.url {shown_url(parsed)}"
    backend = parsed.get_backend_name()
    try:
        if backend == "sqlite":
            _create_parent_dir(parsed.database, where)
            engine = create_engine(parsed, pool_pre_ping=True, connect_args={"timeout": busy_timeout_s})
            event.listen(engine, "connect", _leave_begin_to_sqlalchemy)
            event.listen(engine, "begin", _begin_immediate)
        elif backend == "postgresql":
            password = os.environ.get(ENV_LEDGER_PASSWORD)
            if parsed.password is None and password:
                parsed = parsed.set(password=password)
            options = " ".join(f"-c {name}={value}" for name, value in POSTGRES_SESSION.items())
            engine = create_engine(parsed, pool_pre_ping=True, isolation_level="READ COMMITTED",
                                   connect_args={"options": options})
        else:
            raise ConfigError(f"the batch ledger runs on SQLite or PostgreSQL, not {backend}", where=where)
    except ImportError as err:
        raise ConfigError(f"the database driver of {parsed.drivername} is not installed ({err.name})",
                          where=where) from None

    opened: list[bool] = []  # once a connection to the database was made (a later CANTOPEN is its place failing)
    event.listen(engine, "connect", lambda *_: opened or opened.append(True))

    def mapped(context: ExceptionContext) -> None:
        if not context.is_pre_ping:  # a failed pre-ping is the pool's to handle: it reconnects
            failure = ledger_failure(context.sqlalchemy_exception, context.original_exception, parsed, where,
                                     opened=bool(opened))
            if failure is not None:
                if backend == "sqlite" and _reopen(context.original_exception):
                    # SQLite keeps a file it opened read-only so: drop the connection, the next one reopens it.
                    _roll_back(context)
                    context.is_disconnect = True
                raise failure from context.original_exception

    event.listen(engine, "handle_error", mapped)
    return engine


_SQLITE_UNAVAILABLE = {sqlite3.SQLITE_BUSY: "the database is locked by another process",
                       sqlite3.SQLITE_LOCKED: "the database is locked",
                       sqlite3.SQLITE_READONLY: "the database cannot be written (read-only)",
                       sqlite3.SQLITE_FULL: "the disk is full",
                       sqlite3.SQLITE_IOERR: "the disk failed to read or write"}
_SQLITE_UNUSABLE = {sqlite3.SQLITE_NOTADB: "the file is not a SQLite database",
                    sqlite3.SQLITE_CORRUPT: "the SQLite database is corrupt"}
_PG_UNUSABLE = {"28": "the server refused the login: check the user in ledger.url and KPRIO_LEDGER_PASSWORD",
                "3D": "the database named in ledger.url does not exist on the server"}
"""SQLSTATE classes of a connection refused for a reason that will not pass by itself."""
_PG_LOCK_TIMEOUT = "55P03"
"""lock_not_available: a lock waited for longer than the session's lock_timeout (:data:`POSTGRES_SESSION`)."""
_PG_UNAVAILABLE = {"08", "53", "57"}
"""SQLSTATE classes of a server that cannot serve for now: connection exception, insufficient resources, operator
intervention (shut down, starting up). A connection that never reached the server has no SQLSTATE at all."""


def ledger_failure(wrapped: BaseException | None, err: BaseException, url: URL, where: str, *,
                   opened: bool = False) -> KprioError | None:
    """kprio's error for the database's driver error ``err`` by type and code; None for others (bugs stay as they
    are). ``opened``: open before, a SQLite file it cannot open now passes once fixed (:class:`LedgerUnavailable`);
    never opened, it is a setting (:class:`LedgerUnusable`)."""
    if isinstance(err, sqlite3.Error):
        code = getattr(err, "sqlite_errorcode", 0) & 0xFF  # the primary result code
        if code == sqlite3.SQLITE_CANTOPEN:
            why = f"SQLite cannot open the database file: {_cannot_open(url.database)}"
            return LedgerUnavailable(f"{why} (it could before)", where=where) if opened else LedgerUnusable(
                why, where=where)
        if code in _SQLITE_UNUSABLE:
            return LedgerUnusable(_SQLITE_UNUSABLE[code], where=where)
        if code in _SQLITE_UNAVAILABLE:
            return LedgerUnavailable(_SQLITE_UNAVAILABLE[code], where=where)
        return None
    if isinstance(wrapped, OperationalError):  # the DBAPI's OperationalError, whatever the driver
        sqlstate = getattr(err, "sqlstate", None) or getattr(err, "pgcode", None)  # psycopg 3, psycopg2
        if sqlstate and sqlstate[:2] in _PG_UNUSABLE:
            return LedgerUnusable(f"{_PG_UNUSABLE[sqlstate[:2]]} (SQLSTATE {sqlstate})", where=where)
        if not sqlstate or sqlstate[:2] in _PG_UNAVAILABLE:
            said = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
            return LedgerUnavailable(f"the ledger database does not answer: {said}", where=where)
        if sqlstate == _PG_LOCK_TIMEOUT:
            return LedgerUnavailable(f"a row of the ledger stayed locked longer than lock_timeout "
                                     f"({POSTGRES_SESSION['lock_timeout']}) by another session (a process stopped "
                                     "inside a transaction?)", where=where)
    return None  # a deadlock, a constraint, ...: the ledger's own to handle


def _roll_back(context: ExceptionContext) -> None:
    """End the failed statement and its transaction before the connection is dropped: a SQLite connection closed
    with a statement open keeps its file locks (the write lock of its ``BEGIN IMMEDIATE``) until the process ends."""
    try:
        cursor = getattr(context.execution_context, "cursor", None)
        if cursor is not None:
            cursor.close()
        dbapi = context.connection.connection.dbapi_connection if context.connection is not None else None
        if dbapi is not None and dbapi.in_transaction:
            dbapi.execute("ROLLBACK")
    except sqlite3.Error:
        pass  # the connection is dropped all the same


def _reopen(err: BaseException) -> bool:
    """A SQLite error after which the connection is dropped (one opened read-only would refuse writes for good)."""
    code = getattr(err, "sqlite_errorcode", 0) & 0xFF
    return code in (sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL)


def _cannot_open(database: str | None) -> str:
    """Why SQLite could not open ``database``, from the file system (SQLite's own error does not say)."""
    path = Path(database or "").expanduser()
    if path.is_dir():
        return "it is a directory"
    try:
        os.stat(path.parent)
    except OSError as err:
        return os_reason(err)
    if not path.parent.is_dir():
        return "a part of it is a file, not a directory"
    return "permission denied, or the file system is read-only"


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
    """False for a SQLite ledger whose file is not there yet; True otherwise. Read commands ask first, so that
    looking (``kprio lag``) never creates a ledger.

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
    try:
        Path(database).expanduser().stat()
    except FileNotFoundError:
        return False
    except OSError as err:  # under a file, not permitted: no ledger can be there, and none would be made
        raise PathUnusable.of(err, f"ledger.url {shown_url(parsed)}") from None
    return True


def insert_for(conn: Connection, table: Table) -> sqlite.Insert | postgresql.Insert:
    """The INSERT of the connection's dialect, with ``on_conflict_do_nothing`` / ``_do_update``."""
    return (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(table)


def _create_parent_dir(database: str | None, where: str) -> None:
    if not database or database == ":memory:" or database.startswith("file:"):
        return
    try:
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise PathUnusable.of(err, where, doing="create the directory") from None


def _leave_begin_to_sqlalchemy(dbapi_connection, _record) -> None:  # noqa: ANN001 (DBAPI types)
    # isolation_level None stops pysqlite from emitting its own (deferred) BEGIN.
    dbapi_connection.isolation_level = None


def _begin_immediate(conn) -> None:  # noqa: ANN001
    conn.exec_driver_sql("BEGIN IMMEDIATE")
