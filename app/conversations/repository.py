"""Storage of conversation transcripts. Functions take a connection and never commit: the caller
owns the transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any, Literal

from sqlalchemy import Connection, Select, bindparam, delete, insert, select, update

from app.db.schema import conversation_messages, conversations

Role = Literal["user", "assistant"]
MessageStatus = Literal["complete", "interrupted", "failed"]


@dataclass(frozen=True)
class Conversation:
    id: str
    title: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class StoredMessage:
    role: Role
    content: str
    status: MessageStatus
    turn_id: str
    created_at: datetime


def now() -> datetime:
    """Naive UTC with microseconds, so that newest-first ordering is stable within a second."""
    return datetime.now(UTC).replace(tzinfo=None)


# The turn's transcript writes are built once, their values bound at execution: building an
# INSERT or UPDATE with `.values(...)` per call costs several times its execution on SQLite
# (the statement, its coercions and its cache key; scripts/bench/README.md).
_CREATE = insert(conversations)
_ADD = insert(conversation_messages)
_TOUCH = (
    update(conversations)
    .where(conversations.c.id == bindparam("touched_id", type_=conversations.c.id.type))
    .values(updated_at=bindparam("touched_at", type_=conversations.c.updated_at.type))
)


def create(
    connection: Connection,
    conversation_id: str,
    user_id: str,
    title: str,
    *,
    stamp: datetime | None = None,
) -> None:
    stamp = stamp or now()
    connection.execute(
        _CREATE,
        {
            "id": conversation_id,
            "user_id": user_id,
            "title": title,
            "created_at": stamp,
            "updated_at": stamp,
        },
    )


_OWNER = bindparam("owner_id", type_=conversations.c.user_id.type)
_CONVERSATION = bindparam("conversation_id", type_=conversations.c.id.type)
# A `Conversation`'s columns, in its fields' order.
_COLUMNS = (
    conversations.c.id,
    conversations.c.title,
    conversations.c.created_at,
    conversations.c.updated_at,
)
_GET = select(*_COLUMNS).where(
    conversations.c.id == _CONVERSATION, conversations.c.user_id == _OWNER
)
_LIST = (
    select(*_COLUMNS)
    .where(conversations.c.user_id == _OWNER)
    .order_by(conversations.c.updated_at.desc(), conversations.c.created_at.desc())
)


def get(connection: Connection, user_id: str, conversation_id: str) -> Conversation | None:
    """The conversation only when `user_id` owns it: another user's id reads as absent."""
    row = connection.execute(
        _GET, {"conversation_id": conversation_id, "owner_id": user_id}
    ).first()
    return Conversation(*row) if row is not None else None


def list_for_user(connection: Connection, user_id: str) -> list[Conversation]:
    rows = connection.execute(_LIST, {"owner_id": user_id}).all()
    return [Conversation(*row) for row in rows]


def add_message(
    connection: Connection,
    conversation_id: str,
    turn_id: str,
    role: Role,
    content: str,
    status: MessageStatus,
    *,
    stamp: datetime | None = None,
    touch: bool = True,
) -> None:
    """Store one message; `touch` moves the conversation's `updated_at` to it (a new
    conversation created with the same `stamp` needs no second write)."""
    stamp = stamp or now()
    connection.execute(
        _ADD,
        {
            "conversation_id": conversation_id,
            "turn_id": turn_id,
            "role": role,
            "content": content,
            "status": status,
            "created_at": stamp,
        },
    )
    if touch:
        connection.execute(_TOUCH, {"touched_id": conversation_id, "touched_at": stamp})


_MESSAGES = select(
    conversation_messages.c.role,
    conversation_messages.c.content,
    conversation_messages.c.status,
    conversation_messages.c.turn_id,
    conversation_messages.c.created_at,
).where(
    conversation_messages.c.conversation_id
    == bindparam("conversation_id", type_=conversation_messages.c.conversation_id.type)
)


@cache
def _messages_query(last: int | None) -> Select[Any]:
    """All messages oldest first, or the newest `last` of them newest first (built once per
    `last`: a literal LIMIT, which every dialect takes)."""
    if last is None:
        return _MESSAGES.order_by(conversation_messages.c.id)
    return _MESSAGES.order_by(conversation_messages.c.id.desc()).limit(last)


def messages(
    connection: Connection, conversation_id: str, *, last: int | None = None
) -> list[StoredMessage]:
    """Messages in order; with `last`, only the most recent `last` of them."""
    rows = list(connection.execute(_messages_query(last), {"conversation_id": conversation_id}))
    if last is not None:
        rows.reverse()
    return [StoredMessage(*row) for row in rows]


def remove(connection: Connection, user_id: str, conversation_id: str) -> bool:
    if get(connection, user_id, conversation_id) is None:
        return False
    connection.execute(
        delete(conversation_messages).where(
            conversation_messages.c.conversation_id == conversation_id
        )
    )
    connection.execute(delete(conversations).where(conversations.c.id == conversation_id))
    return True


def _remove_ids(connection: Connection, conversation_ids: list[str]) -> int:
    """Messages first (SQLite's search index reads each message's owner from its conversation
    while it removes the message), then the conversations."""
    if not conversation_ids:
        return 0
    connection.execute(
        delete(conversation_messages).where(
            conversation_messages.c.conversation_id.in_(conversation_ids)
        )
    )
    result = connection.execute(
        delete(conversations).where(conversations.c.id.in_(conversation_ids))
    )
    return result.rowcount or 0


def remove_all(connection: Connection, user_id: str) -> int:
    """Every conversation of the user and its messages (their search index rows go with them:
    triggers on SQLite, the rows' own columns and indexes elsewhere). Returns how many."""
    ids = [
        str(value)
        for value in connection.execute(
            select(conversations.c.id).where(conversations.c.user_id == user_id)
        ).scalars()
    ]
    removed = 0
    for start in range(0, len(ids), 500):  # bounded IN lists
        removed += _remove_ids(connection, ids[start : start + 500])
    return removed


def stale(connection: Connection, cutoff: datetime, limit: int) -> list[str]:
    """Up to `limit` conversations whose last activity is older than `cutoff`, oldest first."""
    query = (
        select(conversations.c.id)
        .where(conversations.c.updated_at < cutoff)
        .order_by(conversations.c.updated_at)
        .limit(limit)
    )
    return [str(value) for value in connection.execute(query).scalars()]


def remove_if_stale(connection: Connection, conversation_ids: list[str], cutoff: datetime) -> int:
    """Those of `conversation_ids` still inactive since `cutoff` (one that a turn touched since it
    was listed is kept: read again in this transaction)."""
    still = [
        str(value)
        for value in connection.execute(
            select(conversations.c.id)
            .where(conversations.c.id.in_(conversation_ids), conversations.c.updated_at < cutoff)
            .with_for_update()  # a turn's touch of one of them waits, then finds it gone
        ).scalars()
    ]
    return _remove_ids(connection, still)
