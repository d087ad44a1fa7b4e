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
from app.db.schema import agent_memory, memory_preferences, project_memory
from app.memory import expiries, projects
from app.memory.projects import Scope
from app.memory.rules import (
    GENERAL_TARGETS,
    LIMITS,
    SCHEMA_VERSION,
    SEPARATOR,
    TARGETS,
    Snapshot,
    Target,
    scope_targets,
)
from app.memory.unit_of_work import UnitOfWork


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
        if memory_type not in GENERAL_TARGETS:
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


def load_snapshot(
    connection: Connection, user_id: str, *, lock: bool = False, expiring: bool = True
) -> Snapshot:
    """The general documents, with their entries' expiries unless `expiring` is False (every
    entry, expired or not: readers filter with `until.visible`, writers expire them)."""
    # Built once per dialect, the user bound at execution: no statement construction per call.
    query = _locked_read(connection.dialect.name) if lock else _READ
    # Rows are tuples in SQLAlchemy 2.1 (Result.tuples() is deprecated there).
    result = connection.execute(query, {"owner_id": user_id})
    rows = cast("list[tuple[str, str, int]]", result.all())
    snapshot = snapshot_from_rows(rows)
    return expiries.attach(connection, user_id, snapshot) if expiring and rows else snapshot


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
    snapshot = snapshot_from_rows(documents)
    if documents:
        snapshot = expiries.attach(connection, user_id, snapshot)
    return snapshot, modes[0] if modes else None


def _project_document(connection: Connection, user_id: str, project_id: str) -> tuple[str, ...]:
    row = connection.execute(
        select(project_memory.c.content, project_memory.c.schema_version).where(
            project_memory.c.project_id == project_id, project_memory.c.user_id == user_id
        )
    ).first()
    if row is None:
        return ()
    if row.schema_version != SCHEMA_VERSION:
        raise MemoryUnreadableError(
            f"project memory has schema_version {row.schema_version}; "
            f"this code reads {SCHEMA_VERSION}"
        )
    return tuple(row.content.split(SEPARATOR)) if row.content else ()


def load_scoped(
    connection: Connection,
    user_id: str,
    scope: Scope,
    *,
    project_limit: int = LIMITS["project"],
    lock: bool = False,
) -> Snapshot:
    """The documents `scope` sees: outside projects, `load_snapshot`; in a project, the user
    profile, the project's document and the general document only when the scope reaches it
    (projects.ProjectNotFoundError when the project is not the user's)."""
    if scope.project_id is None:
        return load_snapshot(connection, user_id, lock=lock)
    general = load_snapshot(connection, user_id, lock=lock, expiring=False)
    project = projects.require(connection, user_id, scope.project_id)
    targets = scope_targets(
        in_project=True, general_memory=project.general_memory, owner=scope.owner
    )
    scoped = Snapshot(
        user=general.user,
        memory=general.memory if "memory" in targets else (),
        project=_project_document(connection, user_id, scope.project_id),
        targets=targets,
        project_limit=project_limit,
    )
    return expiries.attach(connection, user_id, scoped, scope.project_id)


DocumentWrite = Literal["insert", "update", "delete"]


@cache
def document_statement(target: Target, kind: DocumentWrite) -> Delete | Insert | Update:
    """One document's write, built once: `owner_id` and `<target>_document` are bound at
    execution (names of no column, which insert and update would take for values; distinct per
    document, so that PostgreSQL can run all documents' writes in one statement,
    writes.persist). The project document also binds `project_key`."""
    if target == "project":
        return _project_statement(kind)
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


def _project_statement(kind: DocumentWrite) -> Delete | Insert | Update:
    owner = bindparam("owner_id", type_=project_memory.c.user_id.type)
    project_id = bindparam("project_key", type_=project_memory.c.project_id.type)
    content = bindparam("project_document", type_=project_memory.c.content.type)
    if kind == "insert":
        return insert(project_memory).values(
            project_id=project_id, user_id=owner, content=content, schema_version=SCHEMA_VERSION
        )
    key = (project_memory.c.project_id == project_id) & (project_memory.c.user_id == owner)
    if kind == "delete":
        return delete(project_memory).where(key)
    return (
        update(project_memory)
        .where(key)
        .values(content=content, updated_at=func.current_timestamp())
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


def delete_all(unit: UnitOfWork) -> int:
    connection, user_id = unit.connection, unit.user_id
    result = connection.execute(delete(agent_memory).where(agent_memory.c.user_id == user_id))
    return result.rowcount or 0
