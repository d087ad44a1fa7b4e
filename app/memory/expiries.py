"""Storage of remember-until: when entries expire, one row per entry that carries an expiry,
keyed by its document and the SHA-256 of its text (never a copy of the text). Functions take a
connection and never commit: the caller owns the transaction (the memory unit of work)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from sqlalchemy import Connection, delete, insert, select

from app.db.schema import memory_expiries
from app.memory.rules import GENERAL_TARGETS, Expiry, Snapshot, Target
from app.memory.unit_of_work import UnitOfWork


def digest(entry: str) -> str:
    return hashlib.sha256(entry.encode("utf-8", "surrogatepass")).hexdigest()


def document_key(target: Target, project_id: str | None) -> str:
    """The `document` column: the general documents by name, a project's by its id."""
    if target == "project":
        if project_id is None:
            raise ValueError("the project document needs its project's id")
        return project_id
    return target


def _documents(project_id: str | None) -> list[str]:
    return [*GENERAL_TARGETS, *([project_id] if project_id is not None else [])]


def attach(
    connection: Connection, user_id: str, snapshot: Snapshot, project_id: str | None = None
) -> Snapshot:
    """`snapshot` with the expiries of its entries (a row whose entry is gone is ignored)."""
    rows = connection.execute(
        select(
            memory_expiries.c.document, memory_expiries.c.entry_digest, memory_expiries.c.expires_at
        ).where(
            memory_expiries.c.user_id == user_id,
            memory_expiries.c.document.in_(_documents(project_id)),
        )
    ).all()
    if not rows:
        return snapshot
    when = {(str(row[0]), str(row[1])): row[2] for row in rows}
    found: set[Expiry] = set()
    for target in snapshot.targets:
        if target == "project" and project_id is None:
            continue
        key = document_key(target, project_id)
        for entry in snapshot.entries(target):
            at = when.get((key, digest(entry)))
            if at is not None:
                found.add((target, entry, at))
    if not found:
        return snapshot
    return replace(snapshot, expiries=frozenset(found))


def _by_key(expiries: Iterable[Expiry], project_id: str | None) -> dict[tuple[str, str], datetime]:
    return {(document_key(target, project_id), digest(entry)): at for target, entry, at in expiries}


def persist(
    unit: UnitOfWork,
    current: Snapshot,
    updated: Snapshot,
    project_id: str | None = None,
) -> bool:
    """Write the difference between the two snapshots' expiries; whether there was one."""
    connection, user_id = unit.connection, unit.user_id
    before, after = _by_key(current.expiries, project_id), _by_key(updated.expiries, project_id)
    gone = [key for key, at in before.items() if after.get(key) != at]
    new = [(key, at) for key, at in after.items() if before.get(key) != at]
    for document, entry_digest in gone:
        connection.execute(
            delete(memory_expiries).where(
                memory_expiries.c.user_id == user_id,
                memory_expiries.c.document == document,
                memory_expiries.c.entry_digest == entry_digest,
            )
        )
    if new:
        connection.execute(
            insert(memory_expiries),
            [
                {
                    "user_id": user_id,
                    "document": document,
                    "entry_digest": entry_digest,
                    "expires_at": at,
                }
                for (document, entry_digest), at in new
            ],
        )
    return bool(gone or new)


def delete_all(unit: UnitOfWork) -> int:
    connection, user_id = unit.connection, unit.user_id
    result = connection.execute(delete(memory_expiries).where(memory_expiries.c.user_id == user_id))
    return result.rowcount or 0


def delete_document(unit: UnitOfWork, project_id: str) -> int:
    """A project's expiries (its document was forgotten, or the project deleted)."""
    connection, user_id = unit.connection, unit.user_id
    result = connection.execute(
        delete(memory_expiries).where(
            memory_expiries.c.user_id == user_id, memory_expiries.c.document == project_id
        )
    )
    return result.rowcount or 0


def owners_due(connection: Connection, now: datetime, limit: int) -> list[str]:
    """Up to `limit` users with an entry whose expiry has come (the purge's work list)."""
    query = (
        select(memory_expiries.c.user_id)
        .where(memory_expiries.c.expires_at <= now)
        .group_by(memory_expiries.c.user_id)
        .order_by(memory_expiries.c.user_id)
        .limit(limit)
    )
    return [str(owner) for owner in connection.execute(query).scalars()]


def due_documents(connection: Connection, user_id: str, now: datetime) -> list[str]:
    """The user's documents ('user', 'memory' or a project's id) with an entry due at `now`."""
    query = (
        select(memory_expiries.c.document)
        .where(memory_expiries.c.user_id == user_id, memory_expiries.c.expires_at <= now)
        .group_by(memory_expiries.c.document)
    )
    return [str(document) for document in connection.execute(query).scalars()]


def delete_due(unit: UnitOfWork, now: datetime) -> int:
    """The user's rows due at `now` (after their entries were expired: what is left belongs to
    no entry)."""
    connection, user_id = unit.connection, unit.user_id
    result = connection.execute(
        delete(memory_expiries).where(
            memory_expiries.c.user_id == user_id, memory_expiries.c.expires_at <= now
        )
    )
    return result.rowcount or 0
