"""Per-dialect locking and the classification of errors that are safe to retry."""

from __future__ import annotations

from sqlalchemy import BindParameter, Select, select
from sqlalchemy.exc import DBAPIError, IntegrityError

from app.db.schema import agent_memory

RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # PostgreSQL serialization, deadlock
RETRYABLE_MYSQL_CODES = frozenset({1213})  # MariaDB/MySQL deadlock
RETRYABLE_MSSQL_CODES = frozenset({1205})  # SQL Server deadlock victim
# A bounded wait that ran out: PostgreSQL lock_timeout, statement_timeout and
# idle_in_transaction_session_timeout; MariaDB/MySQL lock wait, metadata lock wait and statement
# time limits; SQL Server lock request timeout (1222) and the ODBC query timeout (HYT00).
TIMEOUT_SQLSTATES = frozenset({"55P03", "57014", "25P03"})
TIMEOUT_MYSQL_CODES = frozenset({1205, 1969, 3024})
TIMEOUT_MSSQL_CODES = frozenset({1222})
UNIQUE_SQLSTATES = frozenset({"23505"})
UNIQUE_MYSQL_CODES = frozenset({1062})
UNIQUE_MSSQL_CODES = frozenset({2627, 2601})


def locked_memory_select(
    dialect: str, user_id: str | BindParameter[str]
) -> Select[tuple[str, str, int]]:
    """The user's rows, read under a write lock that excludes concurrent writers until commit.

    PostgreSQL and MariaDB: `FOR UPDATE`. SQL Server: `WITH (UPDLOCK, HOLDLOCK)`, which also
    range-locks a user with no rows yet. SQLite: the caller began with `BEGIN IMMEDIATE`.
    """
    query = select(
        agent_memory.c.memory_type, agent_memory.c.content, agent_memory.c.schema_version
    ).where(agent_memory.c.user_id == user_id)
    if dialect == "mssql":
        return query.with_hint(agent_memory, "WITH (UPDLOCK, HOLDLOCK)", "mssql")
    if dialect in ("postgresql", "mysql", "mariadb"):
        return query.with_for_update()
    return query


def _driver_code(error: DBAPIError) -> tuple[str | None, int | None]:
    original = error.orig
    sqlstate = getattr(original, "sqlstate", None) or getattr(original, "pgcode", None)
    args = getattr(original, "args", ())
    code = args[0] if args and isinstance(args[0], int) else None
    if code is None and args and isinstance(args[0], str) and args[0].isdigit():
        code = int(args[0])
    return sqlstate, code


def _mssql_native_code(error: DBAPIError) -> int | None:
    # pyodbc puts the native error number inside the message: "... (1205) (SQLExecDirectW)".
    message = str(error.orig)
    for native in (*RETRYABLE_MSSQL_CODES, *UNIQUE_MSSQL_CODES, *TIMEOUT_MSSQL_CODES):
        if f"({native})" in message:
            return native
    return None


def is_retryable(error: BaseException) -> bool:
    """Deadlocks and serialization failures only; anything unknown is not retried."""
    if not isinstance(error, DBAPIError) or error.orig is None:
        return False
    sqlstate, code = _driver_code(error)
    if sqlstate in RETRYABLE_SQLSTATES or code in RETRYABLE_MYSQL_CODES:
        return True
    if _mssql_native_code(error) in RETRYABLE_MSSQL_CODES:
        return True
    message = str(error.orig).lower()
    return "database is locked" in message or "database is busy" in message


def is_timeout(error: BaseException) -> bool:
    """A lock or statement wait that ran out of its bound: a clear failure. Not retried, except
    SQLite's busy error, which `is_retryable` also accepts (it can mean a momentary conflict)."""
    if not isinstance(error, DBAPIError) or error.orig is None:
        return False
    sqlstate, code = _driver_code(error)
    if sqlstate in TIMEOUT_SQLSTATES or code in TIMEOUT_MYSQL_CODES:
        return True
    if _mssql_native_code(error) in TIMEOUT_MSSQL_CODES:
        return True
    message = str(error.orig)
    # pyodbc: query timeout expired; SQLite: the busy timeout ran out (retried a few times first).
    return message.startswith("('HYT00'") or "database is locked" in message.lower()


def is_unique_violation(error: BaseException) -> bool:
    """Two first writes for one user both found no row and both inserted."""
    if not isinstance(error, IntegrityError):
        return False
    sqlstate, code = _driver_code(error)
    if sqlstate in UNIQUE_SQLSTATES or code in UNIQUE_MYSQL_CODES:
        return True
    if _mssql_native_code(error) in UNIQUE_MSSQL_CODES:
        return True
    return "unique constraint failed" in str(error.orig).lower()
