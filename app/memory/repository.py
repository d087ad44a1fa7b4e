"""Storage of the two memory documents. Functions take a connection and never commit:
the caller owns the transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import cast

from sqlalchemy import Connection, Delete, Insert, Update, delete, func, insert, select, update

from app.db.locking import locked_memory_select
from app.db.schema import agent_memory
from app.memory.rules import SCHEMA_VERSION, SEPARATOR, TARGETS, Snapshot, Target


class MemoryUnreadableError(RuntimeError):
    """Stored memory exists but this code cannot interpret it; it must never be overwritten."""


class CommitCancelledError(RuntimeError):
    """The request went away; raised inside the transaction so that it rolls back."""


CancelCheck = Callable[[], bool]


def check_cancel(should_cancel: CancelCheck, stage: str) -> None:
    if should_cancel():
        raise CommitCancelledError(f"memory commit cancelled {stage}")


def snapshot_from_rows(rows: Iterable[tuple[str, str, int]]) -> Snapshot:
    documents: dict[str, tuple[str, ...]] = {}
    for memory_type, content, schema_version in rows:
        if schema_version != SCHEMA_VERSION:
            raise MemoryUnreadableError(
                f"memory row has schema_version {schema_version}; this code reads {SCHEMA_VERSION}"
            )
        if memory_type not in TARGETS:
            raise MemoryUnreadableError(f"unknown memory_type {memory_type!r}")
        documents[memory_type] = tuple(content.split(SEPARATOR)) if content else ()
    return Snapshot(user=documents.get("user", ()), memory=documents.get("memory", ()))


def load_snapshot(connection: Connection, user_id: str, *, lock: bool = False) -> Snapshot:
    if lock:
        query = locked_memory_select(connection.dialect.name, user_id)
    else:
        query = select(
            agent_memory.c.memory_type, agent_memory.c.content, agent_memory.c.schema_version
        ).where(agent_memory.c.user_id == user_id)
    # Rows are tuples in SQLAlchemy 2.1 (Result.tuples() is deprecated there).
    rows = cast("list[tuple[str, str, int]]", connection.execute(query).all())
    return snapshot_from_rows(rows)


def document_writes(
    user_id: str, current: Snapshot, updated: Snapshot
) -> list[tuple[Target, Delete | Insert | Update]]:
    """The statement for each document that changed; a document emptied by its last removal is
    deleted. Built, not run: PostgreSQL runs them inside the history insert (writes.persist)."""
    writes: list[tuple[Target, Delete | Insert | Update]] = []
    for target in TARGETS:
        before, after = current.entries(target), updated.entries(target)
        if before == after:
            continue
        key = (agent_memory.c.user_id == user_id) & (agent_memory.c.memory_type == target)
        statement: Delete | Insert | Update
        if not after:
            statement = delete(agent_memory).where(key)
        elif not before:
            statement = insert(agent_memory).values(
                user_id=user_id,
                memory_type=target,
                content=SEPARATOR.join(after),
                schema_version=SCHEMA_VERSION,
            )
        else:
            statement = (
                update(agent_memory)
                .where(key)
                .values(content=SEPARATOR.join(after), updated_at=func.current_timestamp())
            )
        writes.append((target, statement))
    return writes


def delete_all(connection: Connection, user_id: str) -> int:
    result = connection.execute(delete(agent_memory).where(agent_memory.c.user_id == user_id))
    return result.rowcount or 0
