"""The per-dialect bounds, as the engine hands them to each driver and server, including SQL
Server, which cannot run here: checked at the level of the arguments and statements it gets."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, OperationalError

from app.db.engine import (
    SQLITE_POOL_SIZE,
    DatabaseLimits,
    connect_args,
    database_limits,
    default_limits,
    migration_limits,
    session_statements,
)
from app.db.locking import is_retryable, is_timeout
from app.settings import Settings

LIMITS = DatabaseLimits(
    connect_timeout_seconds=4,
    statement_timeout_seconds=12.5,
    lock_timeout_seconds=2.5,
    operation_timeout_seconds=20,
)


def _settings(**values: object) -> Settings:
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///./data/agent_memory.db",
        "sqlite://",
        "postgresql+psycopg://u@h/d",
        "mysql+pymysql://u@h/d",
    ],
)
def test_the_defaults_are_the_settings_defaults(url: str) -> None:
    """An engine built without settings (scripts, tests) gets the same bounds as the service."""
    assert database_limits(_settings(database_url=url)) == default_limits(url)


def test_sqlite_keeps_four_connections_and_a_server_fifteen_unless_told() -> None:
    """SQLite's statements are the process's own CPU: its pool, and so its worker threads, stay
    small; a database server's pool is sized for its round trips. DB_POOL_SIZE wins on both."""
    assert database_limits(_settings()).pool_size == SQLITE_POOL_SIZE == 4
    assert database_limits(_settings(database_url="postgresql://u@h/d")).pool_size == 15
    assert database_limits(_settings(database_url="mariadb+pymysql://u@h/d")).pool_size == 15
    for url in ("sqlite:///x.db", "postgresql://u@h/d"):
        limits = database_limits(_settings(database_url=url, db_pool_size=7))
        assert limits.pool_size == 7 and limits.connections == 7


def test_postgresql_bounds_every_session_at_startup() -> None:
    """libpq startup options: statement, lock (also advisory locks: the writer queue) and idle
    in-transaction timeouts in milliseconds; options already in the URL are kept."""
    url = make_url("postgresql+psycopg://app@db/app?options=-c%20search_path%3Dmemory")
    arguments = connect_args(url, LIMITS)
    assert arguments["connect_timeout"] == 4
    assert arguments["options"].split(" -c ") == [
        "-c search_path=memory",
        "lock_timeout=2500",
        "statement_timeout=12500",
        "idle_in_transaction_session_timeout=20000",
    ]
    assert session_statements("postgresql", LIMITS, mariadb=False) == []


@pytest.mark.parametrize(
    ("mariadb", "statement"),
    [
        (True, "SET SESSION max_statement_time = 12.5"),
        (False, "SET SESSION max_execution_time = 12500"),
    ],
    ids=["mariadb", "mysql"],
)
def test_mariadb_and_mysql_bound_reads_writes_locks_and_statements(
    mariadb: bool, statement: str
) -> None:
    """PyMySQL's socket timeouts bound each read and write on the wire; the session bounds row
    locks, metadata locks (LOCK TABLES, DDL) in whole seconds, and statements."""
    arguments = connect_args(make_url("mysql+pymysql://root@db/app"), LIMITS)
    assert arguments == {"connect_timeout": 4, "read_timeout": 20, "write_timeout": 20}
    assert session_statements("mysql", LIMITS, mariadb=mariadb) == [
        "SET SESSION innodb_lock_wait_timeout = 3",
        "SET SESSION lock_wait_timeout = 3",
        statement,
    ]


def test_sql_server_bounds_login_and_locks() -> None:
    """pyodbc's login timeout at connect, SET LOCK_TIMEOUT in milliseconds on every session (the
    query timeout is set on the pyodbc connection by the engine's connect hook)."""
    assert connect_args(make_url("mssql+pyodbc://app@dsn"), LIMITS) == {"timeout": 4}
    assert session_statements("mssql", LIMITS, mariadb=False) == ["SET LOCK_TIMEOUT 2500"]


def test_sqlite_bounds_its_busy_wait() -> None:
    assert connect_args(make_url("sqlite:///x.db"), LIMITS)["timeout"] == 2.5
    assert session_statements("sqlite", LIMITS, mariadb=False) == ["PRAGMA busy_timeout=2500"]


def test_migrations_keep_the_lock_bound_and_drop_the_statement_bounds() -> None:
    """A migration's DDL may rightly run long on a big table, but must never queue in front of
    traffic waiting for a lock."""
    limits = migration_limits(_settings(db_lock_timeout_seconds=3))
    arguments = connect_args(make_url("postgresql+psycopg://app@db/app"), limits)
    assert arguments["options"] == "-c lock_timeout=3000"
    assert "read_timeout" not in connect_args(make_url("mysql+pymysql://root@db/app"), limits)
    assert session_statements("mariadb", limits, mariadb=True) == [
        "SET SESSION innodb_lock_wait_timeout = 3",
        "SET SESSION lock_wait_timeout = 3",
    ]


class _DriverError(Exception):
    pass


def _wrapped(original: BaseException) -> DBAPIError:
    return OperationalError("SELECT 1", {}, original)


@pytest.mark.parametrize(
    "message",
    [
        "('HYT00', '[HYT00] [Microsoft][ODBC Driver 18 for SQL Server]Query timeout expired (0)')",
        "('HY000', '[HY000] Lock request time out period exceeded. (1222) (SQLExecDirectW)')",
    ],
    ids=["query_timeout", "lock_timeout"],
)
def test_sql_server_timeouts_are_recognised_and_not_retried(message: str) -> None:
    """pyodbc's messages carry the ODBC state or the native number: both timeouts are clear
    failures (MemoryBusyError), not deadlocks to retry."""
    error = _wrapped(_DriverError(message))
    assert is_timeout(error)
    assert not is_retryable(error)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"db_lock_timeout_seconds": 20, "db_statement_timeout_seconds": 10},
            "DB_LOCK_TIMEOUT_SECONDS must not exceed DB_STATEMENT_TIMEOUT_SECONDS",
        ),
        (
            {"db_operation_timeout_seconds": 15},
            "DB_OPERATION_TIMEOUT_SECONDS must exceed DB_STATEMENT_TIMEOUT_SECONDS",
        ),
        ({"db_connect_timeout_seconds": 1}, "greater than or equal to 2"),
        ({"db_pool_size": 0}, "greater than or equal to 1"),
        ({"memory_read_timeout_seconds": 0}, "greater than or equal to 0.05"),
        ({"flag_read_timeout_seconds": "soon"}, "valid number"),
        ({"readiness_timeout_seconds": -1}, "greater than or equal to 0.1"),
    ],
    ids=[
        "lock_above_statement",
        "lease_not_above_statement",
        "connect",
        "pool",
        "memory_read",
        "flag_read",
        "readiness",
    ],
)
def test_bad_bounds_are_refused_with_a_clear_message(
    values: dict[str, object], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        _settings(**values)
