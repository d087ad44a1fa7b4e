"""Storage of the two memory documents. Functions take a connection and never commit:
the caller owns the transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cache
from typing import Literal, cast

from sqlalchemy import (
    Connection,
    Delete,
    Insert,
    Select,
    Update,
    bindparam,
    delete,
    func,
    insert,
    literal,
    select,
    update,
)

from app.db.locking import locked_memory_select
from app.db.schema import agent_memory, memory_preferences
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


_USER = bindparam("owner_id", type_=agent_memory.c.user_id.type)
_READ = select(
    agent_memory.c.memory_type, agent_memory.c.content, agent_memory.c.schema_version
).where(agent_memory.c.user_id == _USER)


@cache
def _locked_read(dialect: str) -> Select[tuple[str, str, int]]:
    return locked_memory_select(dialect, _USER)


def load_snapshot(connection: Connection, user_id: str, *, lock: bool = False) -> Snapshot:
    # Built once per dialect, the user bound at execution: no statement construction per call.
    query = _locked_read(connection.dialect.name) if lock else _READ
    # Rows are tuples in SQLAlchemy 2.1 (Result.tuples() is deprecated there).
    result = connection.execute(query, {"owner_id": user_id})
    rows = cast("list[tuple[str, str, int]]", result.all())
    return snapshot_from_rows(rows)


# The save mode travels as one more row of the memory read, under a name no document has: a
# turn's start learns both in one statement (one round trip, one snapshot).
_SAVE_MODE_ROW = "save_mode"
_READ_WITH_SAVE_MODE = _READ.union_all(
    select(
        literal(_SAVE_MODE_ROW, agent_memory.c.memory_type.type),
        memory_preferences.c.save_mode,
        literal(SCHEMA_VERSION, agent_memory.c.schema_version.type),
    ).where(memory_preferences.c.user_id == _USER)
)


def load_snapshot_and_save_mode(
    connection: Connection, user_id: str
) -> tuple[Snapshot, str | None]:
    """The memory documents and the stored save mode (None without a row), read by one
    statement."""
    result = connection.execute(_READ_WITH_SAVE_MODE, {"owner_id": user_id})
    rows = cast("list[tuple[str, str, int]]", result.all())
    modes = [content for memory_type, content, _version in rows if memory_type == _SAVE_MODE_ROW]
    documents = [row for row in rows if row[0] != _SAVE_MODE_ROW]
    return snapshot_from_rows(documents), modes[0] if modes else None


DocumentWrite = Literal["insert", "update", "delete"]


@cache
def document_statement(target: Target, kind: DocumentWrite) -> Delete | Insert | Update:
    """One document's write, built once: `owner_id` and `<target>_document` are bound at
    execution (names of no column, which insert and update would take for values; distinct per
    document, so that PostgreSQL can run both documents' writes in one statement,
    writes.persist)."""
    content = bindparam(f"{target}_document", type_=agent_memory.c.content.type)
    if kind == "insert":
        return insert(agent_memory).values(
            user_id=_USER, memory_type=target, content=content, schema_version=SCHEMA_VERSION
        )
    key = (agent_memory.c.user_id == _USER) & (agent_memory.c.memory_type == target)
    if kind == "delete":
        return delete(agent_memory).where(key)
    return (
        update(agent_memory).where(key).values(content=content, updated_at=func.current_timestamp())
    )


def document_writes(
    current: Snapshot, updated: Snapshot
) -> tuple[list[tuple[Target, DocumentWrite]], dict[str, str]]:
    """Which documents changed and how (a document emptied by its last removal is deleted),
    and the contents to bind to their `document_statement`s."""
    writes: list[tuple[Target, DocumentWrite]] = []
    contents: dict[str, str] = {}
    for target in TARGETS:
        before, after = current.entries(target), updated.entries(target)
        if before == after:
            continue
        kind: DocumentWrite = "delete" if not after else "insert" if not before else "update"
        writes.append((target, kind))
        if after:
            contents[f"{target}_document"] = SEPARATOR.join(after)
    return writes, contents


def delete_all(connection: Connection, user_id: str) -> int:
    result = connection.execute(delete(agent_memory).where(agent_memory.c.user_id == user_id))
    return result.rowcount or 0
