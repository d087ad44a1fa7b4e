"""Storage of ask-before-saving: each user's save mode and their pending proposals (a turn's
staged batches, kept for the user to accept or reject). Functions take a connection and never
commit, and run inside the user's unit of work (app/memory/writes.py); expired proposals read as
absent and are deleted whenever a proposal is written."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, ScalarSelect, and_, bindparam, delete, insert, select, update

from app.db.schema import memory_preferences, memory_proposals
from app.memory.history import now
from app.memory.provenance import (
    Batches,
    Proposal,
    Proposer,
    SaveMode,
    batches_from_json,
    batches_to_json,
)
from app.memory.unit_of_work import UnitOfWork

_COLUMNS = (
    memory_proposals.c.id,
    memory_proposals.c.created_at,
    memory_proposals.c.expires_at,
    memory_proposals.c.turn_id,
    memory_proposals.c.conversation_id,
    memory_proposals.c.source,
    memory_proposals.c.client,
    memory_proposals.c.batches,
    memory_proposals.c.project_id,
)


def _proposal(row: Any) -> Proposal:
    return Proposal(
        id=row.id,
        created_at=row.created_at,
        expires_at=row.expires_at,
        turn_id=row.turn_id,
        conversation_id=row.conversation_id,
        batches=batches_from_json(row.batches),
        proposer=row.source or "turn",
        client=row.client,
        project_id=row.project_id,
    )


# -- save mode -----------------------------------------------------------------------------


# Read inside every memory commit: built once, the user bound at execution.
_SAVE_MODE = select(memory_preferences.c.save_mode).where(
    memory_preferences.c.user_id == bindparam("owner_id", type_=memory_preferences.c.user_id.type)
)


def save_mode(connection: Connection, user_id: str) -> SaveMode:
    return mode_of(connection.execute(_SAVE_MODE, {"owner_id": user_id}).scalar())


def mode_of(stored: object) -> SaveMode:
    """The save mode a stored value (None: no row) means."""
    return "ask" if stored == "ask" else "auto"


def save_mode_column() -> ScalarSelect[str]:
    """The stored save mode as a column of another statement (bound `owner_id`; NULL without a
    row, which `mode_of` reads as "auto")."""
    return _SAVE_MODE.scalar_subquery()


def set_save_mode(unit: UnitOfWork, mode: SaveMode) -> None:
    """Update, else insert (the caller retries the rare first-insert race)."""
    connection, user_id = unit.connection, unit.user_id
    key = memory_preferences.c.user_id == user_id
    result = connection.execute(
        update(memory_preferences).where(key).values(save_mode=mode, updated_at=now())
    )
    if not result.rowcount:
        connection.execute(
            insert(memory_preferences).values(user_id=user_id, save_mode=mode, updated_at=now())
        )


_RECALL_CHATS = select(memory_preferences.c.recall_chats).where(
    memory_preferences.c.user_id == bindparam("owner_id", type_=memory_preferences.c.user_id.type)
)


def recall_chats(connection: Connection, user_id: str) -> bool | None:
    """The person's choice of recall of earlier chats; None: never chosen (no row, or a row
    that only holds the save mode), and RECALL_CHATS_DEFAULT decides."""
    stored = connection.execute(_RECALL_CHATS, {"owner_id": user_id}).scalar()
    return None if stored is None else bool(stored)


def set_recall_chats(unit: UnitOfWork, recall: bool) -> None:
    """Update, else insert with the default save mode (the caller retries the rare
    first-insert race)."""
    connection, user_id = unit.connection, unit.user_id
    key = memory_preferences.c.user_id == user_id
    result = connection.execute(
        update(memory_preferences).where(key).values(recall_chats=recall, updated_at=now())
    )
    if not result.rowcount:
        connection.execute(
            insert(memory_preferences).values(
                user_id=user_id, save_mode="auto", recall_chats=recall, updated_at=now()
            )
        )


# -- proposals -----------------------------------------------------------------------------


def add(
    unit: UnitOfWork,
    batches: Batches,
    *,
    turn_id: str | None,
    conversation_id: str | None,
    ttl: timedelta,
    keep: int,
    proposer: Proposer = "turn",
    client: str | None = None,
    project_id: str | None = None,
) -> str:
    """Store a proposal; the user's expired ones, and the oldest beyond `keep` of its scope
    (outside projects, or its project), go in the same transaction."""
    connection, user_id = unit.connection, unit.user_id
    stamp = now()
    proposal_id = str(uuid.uuid4())
    owned = memory_proposals.c.user_id == user_id
    expired = memory_proposals.c.expires_at <= stamp
    connection.execute(delete(memory_proposals).where(owned, expired))
    connection.execute(
        insert(memory_proposals).values(
            id=proposal_id,
            user_id=user_id,
            turn_id=turn_id,
            conversation_id=conversation_id,
            source=None if proposer == "turn" else proposer,
            client=client,
            batches=batches_to_json(batches),
            created_at=stamp,
            expires_at=stamp + ttl,
            project_id=project_id,
        )
    )
    in_scope = and_(owned, memory_proposals.c.project_id.is_not_distinct_from(project_id))
    cutoff = connection.execute(
        select(memory_proposals.c.seq)
        .where(in_scope)
        .order_by(memory_proposals.c.seq.desc())
        .limit(1)
        .offset(keep)
    ).scalar()
    if cutoff is not None:
        connection.execute(
            delete(memory_proposals).where(in_scope, memory_proposals.c.seq <= cutoff)
        )
    return proposal_id


EVERY_SCOPE = "*"  # `pending`'s project: every proposal of the user's (the export)


def pending(
    connection: Connection,
    user_id: str,
    at: datetime | None = None,
    *,
    project_id: str | None = EVERY_SCOPE,
) -> list[Proposal]:
    """The user's unexpired proposals, newest first: those staged in `project_id` (None: outside
    projects; EVERY_SCOPE, the default: all)."""
    query = select(*_COLUMNS).where(
        memory_proposals.c.user_id == user_id, memory_proposals.c.expires_at > (at or now())
    )
    if project_id is None:
        query = query.where(memory_proposals.c.project_id.is_(None))
    elif project_id != EVERY_SCOPE:
        query = query.where(memory_proposals.c.project_id == project_id)
    rows = connection.execute(query.order_by(memory_proposals.c.seq.desc())).all()
    return [_proposal(row) for row in rows]


def get(connection: Connection, user_id: str, proposal_id: str) -> Proposal | None:
    """The unexpired proposal only when `user_id` owns it."""
    row = connection.execute(
        select(*_COLUMNS).where(
            memory_proposals.c.id == proposal_id,
            memory_proposals.c.user_id == user_id,
            memory_proposals.c.expires_at > now(),
        )
    ).first()
    return _proposal(row) if row is not None else None


def remove(unit: UnitOfWork, proposal_id: str, *, pending_only: bool = False) -> bool:
    """Delete the proposal when `user_id` owns it; with `pending_only`, True only when it had
    not expired (an expired one is deleted all the same, and reads as absent)."""
    connection, user_id = unit.connection, unit.user_id
    owned = (memory_proposals.c.id == proposal_id) & (memory_proposals.c.user_id == user_id)
    if pending_only:
        stamp = now()
        removed = connection.execute(
            delete(memory_proposals).where(owned, memory_proposals.c.expires_at > stamp)
        ).rowcount
        if not removed:
            connection.execute(delete(memory_proposals).where(owned))
        return bool(removed)
    return bool(connection.execute(delete(memory_proposals).where(owned)).rowcount)


def delete_all(unit: UnitOfWork) -> int:
    connection, user_id = unit.connection, unit.user_id
    result = connection.execute(
        delete(memory_proposals).where(memory_proposals.c.user_id == user_id)
    )
    return result.rowcount or 0


def delete_preferences(unit: UnitOfWork) -> int:
    """The user's save mode (erasure only: forgetting memory keeps this preference)."""
    connection, user_id = unit.connection, unit.user_id
    result = connection.execute(
        delete(memory_preferences).where(memory_preferences.c.user_id == user_id)
    )
    return result.rowcount or 0


def expired(connection: Connection, user_id: str, at: datetime | None = None) -> list[Proposal]:
    """The user's expired proposals still stored (they go with the next proposal, forgetting or
    erasure): the export includes them, as everything an erasure removes."""
    rows = connection.execute(
        select(*_COLUMNS)
        .where(
            memory_proposals.c.user_id == user_id, memory_proposals.c.expires_at <= (at or now())
        )
        .order_by(memory_proposals.c.seq.desc())
    ).all()
    return [_proposal(row) for row in rows]
