"""Helpers for memory storage tests: raw row access, statement watching, driver-level faults.

Faults are real DBAPI exceptions of the engine's own driver (with the sqlstate or error number
the server would send), raised from a SQLAlchemy event just before the statement would run, so
the code under test sees exactly what a deadlock or an unknown failure looks like.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg.errors
import pymysql.err
from sqlalchemy import Engine, event, insert, select

from app.db.engine import build_engine
from app.db.schema import agent_memory
from app.db.writers import maintenance
from app.memory.rules import SEPARATOR, Operation
from app.memory.service import MemoryService


def rows(engine: Engine, user_id: str) -> dict[str, tuple[str, int]]:
    """The user's stored rows as {memory_type: (content, schema_version)}."""
    with engine.connect() as connection:
        result = connection.execute(
            select(
                agent_memory.c.memory_type, agent_memory.c.content, agent_memory.c.schema_version
            ).where(agent_memory.c.user_id == user_id)
        )
        return {memory_type: (content, version) for memory_type, content, version in result}


def entries(engine: Engine, user_id: str, memory_type: str) -> list[str]:
    row = rows(engine, user_id).get(memory_type)
    return row[0].split(SEPARATOR) if row else []


def insert_row(
    engine: Engine, user_id: str, memory_type: str, content: str, schema_version: int = 1
) -> None:
    with engine.begin() as connection, maintenance(connection):
        connection.execute(
            insert(agent_memory).values(
                user_id=user_id,
                memory_type=memory_type,
                content=content,
                schema_version=schema_version,
            )
        )


def _normalized(statement: str) -> str:
    """One line, upper case: what the statement predicates below match on."""
    return " ".join(statement.split()).upper()


def is_memory_load(statement: str) -> bool:
    normalized = _normalized(statement)
    return normalized.startswith("SELECT") and "FROM AGENT_MEMORY" in normalized


MEMORY_WRITES = ("INSERT INTO AGENT_MEMORY", "UPDATE AGENT_MEMORY", "DELETE FROM AGENT_MEMORY")


def is_memory_write(statement: str) -> bool:
    """A statement that writes a memory document: on its own, or (PostgreSQL) as one of the
    data-modifying CTEs of the history insert (app/memory/writes.py, `persist`)."""
    normalized = _normalized(statement)
    if normalized.startswith("WITH "):
        return any(f"({write} " in normalized for write in MEMORY_WRITES)
    return normalized.startswith(MEMORY_WRITES)


def is_history_insert(statement: str) -> bool:
    """The insert of a history row; on PostgreSQL the same statement writes the documents."""
    normalized = _normalized(statement)
    return normalized.startswith("INSERT INTO AMEM_MEMORY_CHANGES") or (
        normalized.startswith("WITH ") and ") INSERT INTO AMEM_MEMORY_CHANGES " in normalized
    )


@dataclass
class StatementLog:
    statements: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def loads(self) -> int:
        return sum(1 for statement in self.statements if is_memory_load(statement))

    @property
    def writes(self) -> list[str]:
        return [statement for statement in self.statements if is_memory_write(statement)]


@contextmanager
def watch(engine: Engine, before: Callable[[str], None] | None = None) -> Iterator[StatementLog]:
    """Record every statement the engine runs; `before` may raise to fail one on purpose."""
    log = StatementLog()

    def on_execute(_conn: Any, _cursor: Any, statement: str, *_rest: Any) -> None:
        with log.lock:
            log.statements.append(statement)
        if before is not None:
            before(statement)

    event.listen(engine, "before_cursor_execute", on_execute)
    try:
        yield log
    finally:
        event.remove(engine, "before_cursor_execute", on_execute)


def deadlock_error(dialect: str) -> Exception:
    """The driver exception a deadlock or serialization failure arrives as on `dialect`."""
    if dialect == "postgresql":
        return psycopg.errors.DeadlockDetected("deadlock detected (injected)")
    if dialect in ("mysql", "mariadb"):
        return pymysql.err.OperationalError(
            1213, "Deadlock found when trying to get lock; try restarting transaction"
        )
    return sqlite3.OperationalError("database is locked")


def serialization_error(dialect: str) -> Exception:
    if dialect == "postgresql":
        return psycopg.errors.SerializationFailure("could not serialize access (injected)")
    return deadlock_error(dialect)


def unknown_error(dialect: str) -> Exception:
    """A real driver failure that is not a deadlock: it must never be retried."""
    if dialect == "postgresql":
        return psycopg.errors.DiskFull("could not extend file (injected)")
    if dialect in ("mysql", "mariadb"):
        return pymysql.err.InternalError(1030, "Got error 28 from storage engine")
    return sqlite3.OperationalError("disk I/O error")


def fail_loads(error: Callable[[], Exception], times: int) -> Callable[[str], None]:
    """A `before` hook that raises on the first `times` memory loads."""
    remaining = [times]
    guard = threading.Lock()

    def before(statement: str) -> None:
        if not is_memory_load(statement):
            return
        with guard:
            if remaining[0] <= 0:
                return
            remaining[0] -= 1
        raise error()

    return before


def cancel_on_call(n: int) -> tuple[Callable[[], bool], list[int]]:
    """A should_cancel that answers True from its n-th call on, and the running call count."""
    calls = [0]

    def should_cancel() -> bool:
        calls[0] += 1
        return calls[0] >= n

    return should_cancel, calls


def add(target: str, content: str) -> list[list[Operation]]:
    """One batch with one add, the shape the ledger hands to the commit."""
    return [[Operation(target, "add", content=content)]]  # type: ignore[arg-type]


def commit_facts_in_process(
    url: str, user_id: str, facts: list[str], start: Any, results: Any
) -> None:
    """Child-process body: a fresh engine commits each fact; reports retries or the failure."""
    engine = build_engine(url)
    try:
        service = MemoryService(engine)
        start.wait(timeout=60)
        retries = 0
        for fact in facts:
            retries += service.commit_operations(user_id, add("memory", fact)).retry_count
        results.put(("ok", retries))
    except BaseException as error:  # reported to the parent test, which fails on it
        results.put(("error", f"{type(error).__name__}: {error}"))
        raise
    finally:
        engine.dispose()
