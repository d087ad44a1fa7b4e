"""Storage of a person's projects and of each project's memory document (revision 0012).

Both tables are memory state: every write here runs inside the user's unit of work
(app/memory/writes.py). Reads take a connection too, and nothing here commits. Every query is
keyed by the owner as well as the project id: another person's project reads as absent.
"""

from __future__ import annotations

import unicodedata
import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, delete, func, insert, select, update

from app.db.schema import (
    PROJECT_NAME_CHARS,
    conversations,
    memory_changes,
    memory_proposals,
    project_memory,
    projects,
)
from app.memory.history import now
from app.memory.unit_of_work import UnitOfWork


@dataclass(frozen=True)
class Scope:
    """Where a memory access runs: outside projects (`project_id` None) or in one project, and
    for whom: the person themself (`owner`: REST, their import) or the model (a turn, an MCP
    client), which reaches fewer documents (rules.scope_targets)."""

    project_id: str | None = None
    owner: bool = True


GENERAL = Scope()


class ProjectNotFoundError(LookupError):
    """The project named is not the caller's, or does not exist (the same 404 either way)."""


class ProjectLimitError(RuntimeError):
    """The person already has PROJECTS_MAX projects."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"at most {limit} projects")
        self.limit = limit


class ProjectNotEmptyError(RuntimeError):
    """Deleting a project that has conversations needs to be told what to do with them."""

    def __init__(self, conversations: int) -> None:
        super().__init__(f"the project has {conversations} conversations")
        self.conversations = conversations


class ProjectNameError(ValueError):
    """A name that is empty, too long or holds control characters."""


@dataclass(frozen=True)
class Project:
    id: str
    name: str
    general_memory: bool
    created_at: datetime
    updated_at: datetime
    conversation_count: int = 0


def normalize_name(raw: str) -> str:
    """The stored name: trimmed, 1 to PROJECT_NAME_CHARS characters, no control characters,
    valid Unicode (a lone surrogate, which JSON can carry, is not text any database stores)."""
    if any(unicodedata.category(character) == "Cs" for character in raw):
        raise ProjectNameError("name must be valid Unicode text (no unpaired surrogates)")
    name = unicodedata.normalize("NFC", raw).strip()
    if not name:
        raise ProjectNameError("name must not be empty")
    if len(name) > PROJECT_NAME_CHARS:
        raise ProjectNameError(f"name holds at most {PROJECT_NAME_CHARS} characters")
    if any(unicodedata.category(character) in ("Cc", "Cf") for character in name):
        raise ProjectNameError("name must not hold control characters")
    return name


_COLUMNS = (
    projects.c.id,
    projects.c.name,
    projects.c.general_memory,
    projects.c.created_at,
    projects.c.updated_at,
)


def _counts(connection: Connection, user_id: str) -> dict[str, int]:
    rows = connection.execute(
        select(conversations.c.project_id, func.count())
        .where(conversations.c.user_id == user_id, conversations.c.project_id.is_not(None))
        .group_by(conversations.c.project_id)
    ).all()
    return {str(project_id): int(count) for project_id, count in rows}


def conversation_count(connection: Connection, user_id: str, project_id: str) -> int:
    return int(
        connection.execute(
            select(func.count()).where(
                conversations.c.user_id == user_id, conversations.c.project_id == project_id
            )
        ).scalar_one()
    )


def list_projects(connection: Connection, user_id: str) -> list[Project]:
    """The person's projects, oldest first, each with its number of conversations."""
    counts = _counts(connection, user_id)
    rows = connection.execute(
        select(*_COLUMNS)
        .where(projects.c.user_id == user_id)
        .order_by(projects.c.created_at, projects.c.id)
    ).all()
    return [
        Project(
            row.id,
            row.name,
            bool(row.general_memory),
            row.created_at,
            row.updated_at,
            counts.get(row.id, 0),
        )
        for row in rows
    ]


def get(
    connection: Connection, user_id: str, project_id: str, *, for_update: bool = False
) -> Project | None:
    query = select(*_COLUMNS).where(projects.c.id == project_id, projects.c.user_id == user_id)
    row = connection.execute(query.with_for_update() if for_update else query).first()
    if row is None:
        return None
    count = conversation_count(connection, user_id, project_id)
    return Project(
        row.id, row.name, bool(row.general_memory), row.created_at, row.updated_at, count
    )


def require(
    connection: Connection, user_id: str, project_id: str, *, for_update: bool = False
) -> Project:
    project = get(connection, user_id, project_id, for_update=for_update)
    if project is None:
        raise ProjectNotFoundError("no such project")
    return project


def count(connection: Connection, user_id: str) -> int:
    return int(
        connection.execute(select(func.count()).where(projects.c.user_id == user_id)).scalar_one()
    )


def create(unit: UnitOfWork, name: str, general_memory: bool, *, limit: int) -> Project:
    """Inside the user's unit of work, so the count and the insert see no other writer."""
    connection, user_id = unit.connection, unit.user_id
    if count(connection, user_id) >= limit:
        raise ProjectLimitError(limit)
    stamp = now()
    project = Project(str(uuid.uuid4()), name, general_memory, stamp, stamp)
    connection.execute(
        insert(projects).values(
            id=project.id,
            user_id=user_id,
            name=name,
            general_memory=general_memory,
            created_at=stamp,
            updated_at=stamp,
        )
    )
    return project


def change(
    unit: UnitOfWork,
    project_id: str,
    *,
    name: str | None,
    general_memory: bool | None,
) -> Project:
    connection, user_id = unit.connection, unit.user_id
    values: dict[str, object] = {"updated_at": now()}
    if name is not None:
        values["name"] = name
    if general_memory is not None:
        values["general_memory"] = general_memory
    result = connection.execute(
        update(projects)
        .where(projects.c.id == project_id, projects.c.user_id == user_id)
        .values(values)
    )
    if not result.rowcount:
        raise ProjectNotFoundError("no such project")
    return require(connection, user_id, project_id)


def forget(unit: UnitOfWork, project_id: str) -> int:
    """The project's document and the history entries and proposals made in it; returns 1
    when there was a document."""
    connection, user_id = unit.connection, unit.user_id
    require(connection, user_id, project_id)
    owned_changes = (memory_changes.c.user_id == user_id) & (
        memory_changes.c.project_id == project_id
    )
    owned_proposals = (memory_proposals.c.user_id == user_id) & (
        memory_proposals.c.project_id == project_id
    )
    connection.execute(delete(memory_changes).where(owned_changes))
    connection.execute(delete(memory_proposals).where(owned_proposals))
    result = connection.execute(
        delete(project_memory).where(
            project_memory.c.project_id == project_id, project_memory.c.user_id == user_id
        )
    )
    return result.rowcount or 0


def remove(unit: UnitOfWork, project_id: str) -> None:
    """The project, its document, and the history entries and proposals made in it. The
    conversations are the caller's to delete or detach first."""
    connection, user_id = unit.connection, unit.user_id
    forget(unit, project_id)
    connection.execute(
        delete(projects).where(projects.c.id == project_id, projects.c.user_id == user_id)
    )


def forget_documents(unit: UnitOfWork) -> int:
    """Every project document of the person (forgetting memory keeps the projects)."""
    connection, user_id = unit.connection, unit.user_id
    result = connection.execute(delete(project_memory).where(project_memory.c.user_id == user_id))
    return result.rowcount or 0


def delete_all(unit: UnitOfWork) -> int:
    """Erasure: the person's project documents and projects."""
    connection, user_id = unit.connection, unit.user_id
    removed = forget_documents(unit)
    connection.execute(delete(projects).where(projects.c.user_id == user_id))
    return removed
