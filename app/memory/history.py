"""Storage of the memory history: one row per committed change, bounded per user and scope
(outside projects, and each project). Functions take a connection and never commit: the caller
owns the transaction (a change and its history row are written in the same one)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    Connection,
    Integer,
    Select,
    and_,
    bindparam,
    delete,
    insert,
    select,
)

from app.db.schema import memory_changes
from app.memory.provenance import HistoryEntry, Provenance, changes_from_json, changes_to_json
from app.memory.rules import Change
from app.memory.unit_of_work import UnitOfWork

_COLUMNS = (
    memory_changes.c.id,
    memory_changes.c.created_at,
    memory_changes.c.source,
    memory_changes.c.turn_id,
    memory_changes.c.conversation_id,
    memory_changes.c.undoes,
    memory_changes.c.client,
    memory_changes.c.operations,
    memory_changes.c.project_id,
)


def now() -> datetime:
    """Naive UTC with microseconds, as every application-written timestamp is stored."""
    return datetime.now(UTC).replace(tzinfo=None)


def _entry(row: Any) -> HistoryEntry:
    return HistoryEntry(
        id=row.id,
        created_at=row.created_at,
        provenance=Provenance(
            row.source, row.turn_id, row.conversation_id, row.undoes, client=row.client
        ),
        changes=changes_from_json(row.operations),
        project_id=row.project_id,
    )


ENTRY_INSERT = insert(memory_changes).values(
    {column: bindparam(f"entry_{column.name}", type_=column.type) for column in _COLUMNS}
    | {memory_changes.c.user_id: bindparam("owner_id", type_=memory_changes.c.user_id.type)}
)


def entry_params(
    user_id: str,
    provenance: Provenance,
    changes: Sequence[Change],
    project_id: str | None = None,
) -> dict[str, Any]:
    """What ENTRY_INSERT binds for a committed change (a new id; only the operations that
    changed something). No name is a column's: insert and update would take it for a value."""
    return {
        "entry_id": str(uuid.uuid4()),
        "owner_id": user_id,
        "entry_source": provenance.source,
        "entry_turn_id": provenance.turn_id,
        "entry_conversation_id": provenance.conversation_id,
        "entry_undoes": provenance.undoes,
        "entry_client": provenance.client,
        "entry_operations": changes_to_json([change for change in changes if change.changed]),
        "entry_created_at": now(),
        "entry_project_id": project_id,
    }


def _in_scope(user_id: Any, project_id: Any) -> ColumnElement[bool]:
    """The user's entries of one scope: outside projects (`project_id` None) or one project."""
    return and_(
        memory_changes.c.user_id == user_id,
        memory_changes.c.project_id.is_not_distinct_from(project_id),
    )


def _newest_beyond(user_id: Any, project_id: Any, keep: Any) -> Select[tuple[int]]:
    """The `seq` of the scope's entry that comes after its newest `keep` (None when none does)."""
    return (
        select(memory_changes.c.seq)
        .where(_in_scope(user_id, project_id))
        .order_by(memory_changes.c.seq.desc())
        .limit(1)
        .offset(keep)
    )


# The trim to run in the same statement as ENTRY_INSERT (PostgreSQL's data-modifying CTEs): it
# reads the statement's snapshot, which does not hold the new entry, so it keeps the newest
# `keep_older` (= the limit - 1) older ones, and the scope has the limit's entries afterwards.
_OWNER = bindparam("owner_id", type_=memory_changes.c.user_id.type)
_PROJECT = bindparam("entry_project_id", type_=memory_changes.c.project_id.type)
TRIM_BEFORE_INSERT = delete(memory_changes).where(
    _in_scope(_OWNER, _PROJECT),
    memory_changes.c.seq
    <= _newest_beyond(_OWNER, _PROJECT, bindparam("keep_older", type_=Integer())).scalar_subquery(),
)


def trim(unit: UnitOfWork, project_id: str | None, keep: int) -> int:
    """Drop the scope's oldest entries beyond `keep` (two statements: MariaDB refuses a DELETE
    whose subquery reads the same table)."""
    connection, user_id = unit.connection, unit.user_id
    cutoff = connection.execute(_newest_beyond(user_id, project_id, keep)).scalar()
    if cutoff is None:
        return 0
    result = connection.execute(
        delete(memory_changes).where(_in_scope(user_id, project_id), memory_changes.c.seq <= cutoff)
    )
    return result.rowcount or 0


def get(connection: Connection, user_id: str, change_id: str) -> HistoryEntry | None:
    """The entry only when `user_id` owns it: another user's id reads as absent."""
    row = connection.execute(
        select(*_COLUMNS).where(
            memory_changes.c.id == change_id, memory_changes.c.user_id == user_id
        )
    ).first()
    return _entry(row) if row is not None else None


def was_undone(connection: Connection, user_id: str, change_id: str) -> bool:
    return (
        connection.execute(
            select(memory_changes.c.seq).where(
                memory_changes.c.user_id == user_id, memory_changes.c.undoes == change_id
            )
        ).first()
        is not None
    )


EVERY_SCOPE = "*"  # `page`'s project: every entry of the user's (the export); never a UUID


def page(
    connection: Connection,
    user_id: str,
    *,
    limit: int | None,
    before: str | None = None,
    project_id: str | None = EVERY_SCOPE,
) -> list[HistoryEntry] | None:
    """The user's entries, newest first; `before` is an entry id (None when it is not theirs).
    `project_id`: only the entries made in that project, None: only those made outside
    projects; EVERY_SCOPE (the default): all of them."""
    query = select(*_COLUMNS).where(memory_changes.c.user_id == user_id)
    if project_id is None:
        query = query.where(memory_changes.c.project_id.is_(None))
    elif project_id != EVERY_SCOPE:
        query = query.where(memory_changes.c.project_id == project_id)
    if before is not None:
        cursor = connection.execute(
            select(memory_changes.c.seq).where(
                memory_changes.c.id == before, memory_changes.c.user_id == user_id
            )
        ).scalar()
        if cursor is None:
            return None
        query = query.where(memory_changes.c.seq < cursor)
    query = query.order_by(memory_changes.c.seq.desc())
    if limit is not None:
        query = query.limit(limit)
    return [_entry(row) for row in connection.execute(query).all()]


def delete_all(unit: UnitOfWork) -> int:
    connection, user_id = unit.connection, unit.user_id
    result = connection.execute(delete(memory_changes).where(memory_changes.c.user_id == user_id))
    return result.rowcount or 0


def owners_older_than(connection: Connection, cutoff: datetime, limit: int) -> list[str]:
    """Up to `limit` users who have an entry created before `cutoff` (retention's work list)."""
    query = (
        select(memory_changes.c.user_id)
        .where(memory_changes.c.created_at < cutoff)
        .group_by(memory_changes.c.user_id)
        .order_by(memory_changes.c.user_id)
        .limit(limit)
    )
    return [str(user_id) for user_id in connection.execute(query).scalars()]


def delete_older_than(unit: UnitOfWork, cutoff: datetime, limit: int) -> int:
    """The user's oldest entries created before `cutoff`, at most `limit` of them (two
    statements: MariaDB refuses a DELETE whose subquery reads the same table)."""
    connection, user_id = unit.connection, unit.user_id
    seqs = list(
        connection.execute(
            select(memory_changes.c.seq)
            .where(memory_changes.c.user_id == user_id, memory_changes.c.created_at < cutoff)
            .order_by(memory_changes.c.seq)
            .limit(limit)
        ).scalars()
    )
    if not seqs:
        return 0
    result = connection.execute(
        delete(memory_changes).where(
            memory_changes.c.user_id == user_id, memory_changes.c.seq.in_(seqs)
        )
    )
    return result.rowcount or 0
