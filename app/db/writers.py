"""The per-user writer lock of a user's memory state, and the guard that refuses writes to those
tables from any connection that does not hold it.

Memory state is seven tables: the documents (`agent_memory`), their history, pending proposals,
the per-user preferences, the user's projects, each project's document (revision 0012) and the
entries' expiries (revision 0017). Every
write to them runs inside `holding_writer_lock` (opened by app/memory/unit_of_work.py, the one
way in); the guard, installed on every engine by `build_engine`, raises before a statement that
writes one of them reaches the database from anywhere else. docs/design.md ("Isolation, per
dialect") gives the argument.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from typing import Any

from sqlalchemy import Connection, Engine, event, text

from app.db.schema import (
    agent_memory,
    memory_changes,
    memory_expiries,
    memory_preferences,
    memory_proposals,
    project_memory,
    projects,
)

MEMORY_STATE_TABLES = (
    agent_memory,
    memory_changes,
    memory_proposals,
    memory_preferences,
    projects,
    project_memory,
    memory_expiries,
)

# connection.info key: whose writer lock this connection holds (or MAINTENANCE).
_HOLDER = "amem_writer_lock"
MAINTENANCE = "\x00maintenance"

_WRITES = re.compile(
    r"\b(?:insert\s+(?:ignore\s+)?into|replace\s+into|update|delete\s+from|merge\s+into)\s+"
    r"[`\"\[]?(?:" + "|".join(re.escape(table.name) for table in MEMORY_STATE_TABLES) + r")\b",
    re.IGNORECASE,
)


class WriterLockRequiredError(RuntimeError):
    """A statement would write memory state outside the unit of work (a programming error)."""


class WriterLockTimeoutError(RuntimeError):
    """The user's writer lock was not granted within the lock timeout (another writer held it)."""


@lru_cache(maxsize=4096)
def writes_memory_state(statement: str) -> bool:
    """Whether this SQL inserts, updates or deletes rows of a memory-state table.

    Remembered per statement text: the guard asks for every statement the service sends, and
    the texts are few (SQLAlchemy's compiled cache hands out the same ones), where the search
    runs over the whole text each time."""
    return _WRITES.search(statement) is not None


def install_guard(engine: Engine) -> None:
    """Refuse, before it is sent, any statement that writes memory state on a connection that
    does not hold a user's writer lock. Idempotent."""
    if not event.contains(engine, "before_cursor_execute", _refuse_outside_the_lock):
        event.listen(engine, "before_cursor_execute", _refuse_outside_the_lock)


def _refuse_outside_the_lock(
    connection: Connection,
    _cursor: Any,
    statement: str,
    _parameters: Any,
    _context: Any,
    _executemany: bool,
) -> None:
    if _HOLDER not in connection.info and writes_memory_state(statement):
        raise WriterLockRequiredError(
            "memory state is written only inside the unit of work (app/memory/unit_of_work.py)"
        )


def lock_name(user_id: str, database: str | None = None) -> str:
    """A fixed-size name for the user's lock in `database` (MariaDB's GET_LOCK takes at most 64
    characters). MariaDB's named locks are server-wide, unlike PostgreSQL's advisory locks and
    SQL Server's application locks: the database is part of the name, so that two deployments
    on one server (staging and production, or two test runs) never wait on each other's user."""
    key = user_id if database is None else f"{database}\x00{user_id}"
    return "amem_writer_" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]


def _mysql_lock_name(connection: Connection, user_id: str) -> str:
    return lock_name(user_id, connection.engine.url.database or "")


_POSTGRES_LOCK = text("SELECT pg_advisory_xact_lock(hashtextextended(:user_id, 0))")
# The wait is bounded like a row lock's: the session's innodb_lock_wait_timeout
# (DB_LOCK_TIMEOUT_SECONDS). 1: granted; 0: timed out; NULL: an error.
_MYSQL_LOCK = text("SELECT GET_LOCK(:name, @@SESSION.innodb_lock_wait_timeout)")
_MYSQL_UNLOCK = text("SELECT RELEASE_LOCK(:name)")
# Owned by the transaction; the wait is bounded by the session's LOCK_TIMEOUT. >= 0: granted.
_MSSQL_LOCK = text(
    "DECLARE @granted int; EXEC @granted = sp_getapplock @Resource = :name, "
    "@LockMode = 'Exclusive', @LockOwner = 'Transaction'; SELECT @granted"
)


def _acquire(connection: Connection, user_id: str) -> None:
    dialect = connection.dialect.name
    if dialect == "postgresql":
        connection.execute(_POSTGRES_LOCK, {"user_id": user_id})
    elif dialect in ("mysql", "mariadb"):
        name = _mysql_lock_name(connection, user_id)
        if connection.execute(_MYSQL_LOCK, {"name": name}).scalar() != 1:
            raise WriterLockTimeoutError("the user's writer lock was not granted in time")
    elif dialect == "mssql":
        granted = connection.execute(_MSSQL_LOCK, {"name": lock_name(user_id)}).scalar()
        if granted is None or int(granted) < 0:
            raise WriterLockTimeoutError("the user's writer lock was not granted in time")
    # SQLite: the transaction began with BEGIN IMMEDIATE, the database's one write lock.


@contextmanager
def holding_writer_lock(connection: Connection, user_id: str) -> Iterator[None]:
    """Take the user's writer lock as the transaction's first statement and mark the connection
    as its holder until the block ends. The caller has begun the transaction and ends it after
    this block: PostgreSQL's, SQL Server's and SQLite's locks end with it.

    MariaDB's GET_LOCK belongs to the session, not the transaction: it is released by
    `release_session_lock` once the transaction has ended, so that the next writer reads what
    this one committed.
    """
    _acquire(connection, user_id)
    connection.info[_HOLDER] = user_id
    try:
        yield
    finally:
        connection.info.pop(_HOLDER, None)


def release_session_lock(connection: Connection, user_id: str) -> None:
    """After the transaction: release MariaDB/MySQL's session-level lock (a no-op elsewhere).
    A connection that cannot release it is invalidated: the lock ends with its session."""
    if connection.dialect.name not in ("mysql", "mariadb") or connection.invalidated:
        return
    try:
        connection.execute(_MYSQL_UNLOCK, {"name": _mysql_lock_name(connection, user_id)})
        connection.rollback()
    except Exception:
        connection.invalidate()  # not raised: it would hide the error that ended the write


@contextmanager
def maintenance(connection: Connection) -> Iterator[None]:
    """Let this connection write memory state without a user's lock: migrations and test
    fixtures that plant rows only. The service's own paths never use it."""
    previous = connection.info.get(_HOLDER)
    connection.info[_HOLDER] = MAINTENANCE
    try:
        yield
    finally:
        if previous is None:
            connection.info.pop(_HOLDER, None)
        else:
            connection.info[_HOLDER] = previous
