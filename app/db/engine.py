"""Engine construction per dialect: bounded waits everywhere (connect, pool checkout, statements,
locks, and a client-side lease), SQLite WAL and up-front write locks on request, and PostgreSQL
behind a transaction-mode pooler (PgBouncer) with the same bounds.

docs/operations-timeouts.md explains each bound, per dialect, as an operator sees it;
docs/operations-deployment.md the pooler and failover setups.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import StaticPool

from app.db import guard, sqlite_writers, writers

if TYPE_CHECKING:
    from app.settings import Settings

# Execution option a caller sets on a SQLite connection to take the write lock at BEGIN.
SQLITE_IMMEDIATE = "sqlite_immediate"
# Engine-wide execution option: what stands between the service and PostgreSQL (DB_POOLER).
POOLER = "app_pooler"

# "none": the service's connections are server sessions of their own (directly, or through a
# session-mode pooler). "transaction": each transaction may run on another server session
# (PgBouncer pool_mode=transaction, and the poolers of hosted PostgreSQL offerings), so nothing
# may be left on a session: no startup options, no prepared statements, no autocommit reads.
Pooler = Literal["none", "transaction"]


def one_statement_read(connection: Connection) -> None:
    """A read that is one SELECT, run in autocommit on PostgreSQL: the statement's own snapshot
    (as a transaction of one statement in READ COMMITTED) without psycopg's BEGIN and ROLLBACK,
    two round trips. Only there: psycopg switches autocommit without a round trip, pymysql
    sends one each way. The pool gives the next holder a transactional connection again. A
    read of several SELECTs may use it too: each statement then has its own snapshot, as each
    statement of a READ COMMITTED transaction has.

    Not behind a transaction pooler: there the statement and lock bounds are set per
    transaction (`SET LOCAL`), and a statement outside any transaction would run unbounded."""
    pooled = connection.get_execution_options().get(POOLER, "none") == "transaction"
    if connection.dialect.name == "postgresql" and not pooled:
        connection.execution_options(isolation_level="AUTOCOMMIT")


def one_statement_write(connection: Connection) -> None:
    """A write that is one statement and that no caller's deadline fences (a stream slot's
    release), run in autocommit on PostgreSQL: the statement commits itself, without BEGIN and
    COMMIT. Not for fenced work (app/db/guard.py): a statement already running when its caller
    gives up would still commit, where a transaction's COMMIT is never sent after that. Behind
    a transaction pooler it stays a transaction, as `one_statement_read` says why; the caller
    commits either way (a no-op in autocommit)."""
    one_statement_read(connection)


@dataclass(frozen=True)
class DatabaseLimits:
    """Every database wait the service bounds; the defaults are the settings' defaults.

    `None` lifts a statement or operation bound: only for migrations, whose DDL may rightly run
    long on a big table (they keep the lock timeout, so they never queue in front of traffic).
    """

    connect_timeout_seconds: int = 5
    pool_size: int = 15
    pool_max_overflow: int = 0
    pool_timeout_seconds: float = 10.0
    statement_timeout_seconds: float | None = 15.0
    lock_timeout_seconds: float = 5.0
    operation_timeout_seconds: float | None = 30.0
    # How the statement and lock bounds reach PostgreSQL (see `Pooler`); the other dialects
    # ignore it.
    pooler: Pooler = "none"

    @property
    def connections(self) -> int:
        """The most connections the pool opens at once."""
        return self.pool_size + self.pool_max_overflow


# SQLite's default pool, and so its worker threads. Its statements run inside this process
# behind one write lock, so threads past the cores add no throughput, only their contention for
# the interpreter, which the event loop needs too: CPU per turn at 32 concurrent falls as the
# pool shrinks (docs/performance.md, "What each design choice buys"). Four rather than fewer:
# a writer that holds the lock and one that waits for it (each in its thread) leave two for
# reads, which WAL lets run beside them.
SQLITE_POOL_SIZE = 4


def default_limits(url: str | URL) -> DatabaseLimits:
    """The bounds of an engine built without settings, as the service's defaults give them."""
    if make_url(url).get_backend_name() == "sqlite":
        return DatabaseLimits(pool_size=SQLITE_POOL_SIZE)
    return DatabaseLimits()


def database_limits(settings: Settings) -> DatabaseLimits:
    pool_size = settings.db_pool_size
    if pool_size is None:
        pool_size = default_limits(settings.database_url).pool_size
    return DatabaseLimits(
        connect_timeout_seconds=settings.db_connect_timeout_seconds,
        pool_size=pool_size,
        pool_max_overflow=settings.db_pool_max_overflow,
        pool_timeout_seconds=settings.db_pool_timeout_seconds,
        statement_timeout_seconds=settings.db_statement_timeout_seconds,
        lock_timeout_seconds=settings.db_lock_timeout_seconds,
        operation_timeout_seconds=settings.db_operation_timeout_seconds,
        pooler=settings.db_pooler,
    )


def migration_limits(settings: Settings) -> DatabaseLimits:
    return replace(
        database_limits(settings), statement_timeout_seconds=None, operation_timeout_seconds=None
    )


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _whole_seconds(seconds: float) -> int:
    return max(1, math.ceil(seconds))


def connect_args(url: URL, limits: DatabaseLimits) -> dict[str, Any]:
    """Driver arguments that bound connecting and, where the server allows it at connect time,
    every statement and lock wait of the session."""
    backend = url.get_backend_name()
    if backend == "postgresql" and limits.pooler == "transaction":
        # A transaction pooler refuses startup options (PgBouncer: "unsupported startup
        # parameter") or drops them, and prepared statements would live on a server session
        # that the next transaction may not get ("prepared statement _pg3_2 does not exist").
        # The bounds are set per transaction instead (`_bound_transactions`).
        return {"connect_timeout": limits.connect_timeout_seconds, "prepare_threshold": None}
    if backend == "postgresql":
        # Startup options: they hold for the whole session, before any statement runs. A
        # transaction whose client went silent is ended by the server after the client-side
        # lease, which releases its locks.
        options = [str(url.query["options"])] if "options" in url.query else []
        options.append(f"-c lock_timeout={_ms(limits.lock_timeout_seconds)}")
        if limits.statement_timeout_seconds is not None:
            options.append(f"-c statement_timeout={_ms(limits.statement_timeout_seconds)}")
        if limits.operation_timeout_seconds is not None:
            options.append(
                f"-c idle_in_transaction_session_timeout={_ms(limits.operation_timeout_seconds)}"
            )
        return {"connect_timeout": limits.connect_timeout_seconds, "options": " ".join(options)}
    if backend in ("mysql", "mariadb"):
        # PyMySQL's socket timeouts bound each read and write on the wire (the handshake too).
        arguments: dict[str, Any] = {"connect_timeout": limits.connect_timeout_seconds}
        if limits.operation_timeout_seconds is not None:
            wire = _whole_seconds(limits.operation_timeout_seconds)
            arguments.update(read_timeout=wire, write_timeout=wire)
        return arguments
    if backend == "mssql":
        return {"timeout": limits.connect_timeout_seconds}  # pyodbc's login timeout
    if backend == "sqlite":
        # The sqlite3 module's own busy wait, in seconds (the PRAGMA below sets it again).
        return {"check_same_thread": False, "timeout": limits.lock_timeout_seconds}
    return {}


def session_statements(backend: str, limits: DatabaseLimits, *, mariadb: bool) -> list[str]:
    """Statements run on every new connection to bound its statement and lock waits."""
    lock_seconds = _whole_seconds(limits.lock_timeout_seconds)
    if backend in ("mysql", "mariadb"):
        statements = [
            f"SET SESSION innodb_lock_wait_timeout = {lock_seconds}",  # row locks
            f"SET SESSION lock_wait_timeout = {lock_seconds}",  # metadata locks, LOCK TABLES
        ]
        statement = limits.statement_timeout_seconds
        if statement is not None and mariadb:
            statements.append(f"SET SESSION max_statement_time = {statement:g}")
        elif statement is not None:  # MySQL bounds read-only SELECTs only, in milliseconds
            statements.append(f"SET SESSION max_execution_time = {_ms(statement)}")
        return statements
    if backend == "mssql":
        return [f"SET LOCK_TIMEOUT {_ms(limits.lock_timeout_seconds)}"]
    if backend == "sqlite":
        return [f"PRAGMA busy_timeout={_ms(limits.lock_timeout_seconds)}"]
    return []  # PostgreSQL: the startup options already hold (or, pooled, `SET LOCAL`)


def transaction_bounds(limits: DatabaseLimits) -> str:
    """PostgreSQL's bounds for one transaction, as one statement (`set_config(..., true)` is
    `SET LOCAL`): they end with the transaction, so a pooler's next client never sees them."""
    bounds = [("lock_timeout", _ms(limits.lock_timeout_seconds))]
    if limits.statement_timeout_seconds is not None:
        bounds.append(("statement_timeout", _ms(limits.statement_timeout_seconds)))
    if limits.operation_timeout_seconds is not None:
        bounds.append(
            ("idle_in_transaction_session_timeout", _ms(limits.operation_timeout_seconds))
        )
    calls = ", ".join(f"set_config('{name}', '{value}ms', true)" for name, value in bounds)
    return f"SELECT {calls}"


def build_engine(url: str, limits: DatabaseLimits | None = None, *, echo: bool = False) -> Engine:
    limits = limits or default_limits(url)
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    kwargs: dict[str, Any] = {
        "echo": echo,
        "connect_args": connect_args(parsed, limits),
        "execution_options": {POOLER: limits.pooler},
    }
    pooled = True
    if backend == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)
        if database in ("", ":memory:"):
            kwargs["poolclass"] = StaticPool
            pooled = False
        lock = sqlite_writers.writer_lock(database)
        kwargs["connect_args"]["factory"] = sqlite_writers.connection_class(lock)
    if backend in ("mysql", "mariadb"):
        kwargs["pool_recycle"] = 3600
    if pooled:
        # Last in, first out: a checkout takes the connection used last, so a quiet process
        # keeps reusing a few warm connections (no liveness ping, statements psycopg has
        # prepared) while the rest sit idle, instead of cycling through every pooled one.
        kwargs.update(
            pool_size=limits.pool_size,
            max_overflow=limits.pool_max_overflow,
            pool_timeout=limits.pool_timeout_seconds,
            pool_use_lifo=True,
        )
    engine = create_engine(parsed, **kwargs)
    _bound_sessions(engine, limits)
    if backend == "postgresql" and limits.pooler == "transaction":
        _bound_transactions(engine, limits)
    if backend == "sqlite":
        _configure_sqlite(engine, limits)
    guard.install(engine, lease_seconds=limits.operation_timeout_seconds)
    writers.install_guard(engine)  # memory state is written only under a user's writer lock
    return engine


def _bound_sessions(engine: Engine, limits: DatabaseLimits) -> None:
    backend = engine.url.get_backend_name()
    if backend not in ("mysql", "mariadb", "mssql", "sqlite"):
        return

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        if backend == "mssql" and limits.statement_timeout_seconds is not None:
            # pyodbc's query timeout: the client cancels a statement that runs longer.
            dbapi_connection.timeout = _whole_seconds(limits.statement_timeout_seconds)
        mariadb = backend == "mariadb" or "mariadb" in _server_info(dbapi_connection).lower()
        cursor = dbapi_connection.cursor()
        try:
            for statement in session_statements(backend, limits, mariadb=mariadb):
                cursor.execute(statement)
        finally:
            cursor.close()


def _bound_transactions(engine: Engine, limits: DatabaseLimits) -> None:
    """Behind a transaction pooler: every transaction starts by setting its own bounds.

    psycopg would send its BEGIN as a round trip of its own before the first statement, and the
    bounds a second. So the driver connection rests in autocommit (psycopg then sends no BEGIN
    of its own, and its `commit()` and `rollback()` still end a transaction the server has
    open), and the transaction starts with `BEGIN; <bounds>` in one simple-protocol query: one
    round trip for both. A transaction at another isolation level (the memory writes) leaves
    autocommit, as SQLAlchemy sets the level; psycopg sends that BEGIN and the bounds follow
    it, and the connection returns to autocommit when it is checked in."""
    from psycopg.pq import TransactionStatus  # the PostgreSQL driver, present on this path

    bounds = transaction_bounds(limits)
    begin_and_bound = f"BEGIN; {bounds}"

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.autocommit = True

    @event.listens_for(engine, "checkin")
    def _on_checkin(dbapi_connection: Any, _record: Any) -> None:
        # After the pool's reset (a rollback) and SQLAlchemy's restoring of the isolation level,
        # which switches autocommit off; a connection the pool is discarding has none.
        if (
            dbapi_connection is not None
            and not dbapi_connection.closed
            and dbapi_connection.info.transaction_status == TransactionStatus.IDLE
        ):
            dbapi_connection.autocommit = True

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        if connection.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
            return  # no transaction to bound (only explicit callers ask for it)
        # Through the connection (not the driver's cursor): a failure here is wrapped, and a
        # disconnect invalidates the pool, as for any statement.
        resting = connection.connection.driver_connection.autocommit  # type: ignore[union-attr]
        connection.exec_driver_sql(begin_and_bound if resting else bounds)


def _server_info(dbapi_connection: Any) -> str:
    get_server_info = getattr(dbapi_connection, "get_server_info", None)  # PyMySQL, mysqlclient
    return str(get_server_info()) if callable(get_server_info) else ""


def truncate_wal(engine: Engine) -> bool:
    """SQLite: copy the write-ahead log into the database and truncate it to zero bytes, so that
    page images of deleted rows do not outlive an erasure there. True when the log was emptied
    (a reader still holding an old snapshot keeps it: a later checkpoint finishes). A no-op
    elsewhere (docs/privacy.md says what an operator runs on a server)."""
    if engine.url.get_backend_name() != "sqlite":
        return True
    with engine.connect() as connection:
        busy = connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").first()
    return busy is None or busy[0] == 0


def _configure_sqlite(engine: Engine, limits: DatabaseLimits) -> None:
    """Take control of BEGIN (pysqlite's own handling defers it) so writers can lock up front,
    one at a time in this process (app/db/sqlite_writers.py)."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA journal_mode=WAL")
        # In WAL mode NORMAL still never corrupts the database and keeps every commit across an
        # application crash; only an OS crash or power loss can drop the latest commits. FULL
        # fsyncs on every commit and dominated the embedded turn's time.
        cursor.execute("PRAGMA synchronous=NORMAL")
        # Deleted content is overwritten with zeros instead of lingering in free pages
        # (erasure and retention; docs/privacy.md).
        cursor.execute("PRAGMA secure_delete=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        if not connection.get_execution_options().get(SQLITE_IMMEDIATE, False):
            connection.exec_driver_sql("BEGIN")
            return
        dbapi_connection: sqlite_writers.WriterConnection = connection.connection.dbapi_connection
        dbapi_connection.take_writer_lock(limits.lock_timeout_seconds)
        try:
            connection.exec_driver_sql("BEGIN IMMEDIATE")
        except BaseException:
            dbapi_connection.let_go()
            raise
