"""Storage of conversation transcripts. Functions take a connection and never commit: the caller
owns the transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Any, Literal

from sqlalchemy import (
    Connection,
    Executable,
    Integer,
    Select,
    and_,
    bindparam,
    delete,
    false,
    func,
    insert,
    or_,
    select,
    true,
    update,
)

from app.conversations.search import drop_deleted_terms
from app.db.schema import conversation_messages, conversations, projects
from app.operators import limits as limit_rows
from app.operators import usage as usage_rows
from app.operators.limits import SlotRelease
from app.operators.usage import TurnUsage

Role = Literal["user", "assistant"]
MessageStatus = Literal["complete", "interrupted", "failed"]


@dataclass(frozen=True)
class Conversation:
    id: str
    title: str
    created_at: datetime
    updated_at: datetime
    project_id: str | None = None  # the project it belongs to (None: a general conversation)
    temporary: bool = False  # a temporary chat: never listed, searched or exported
    pinned: bool = False  # listed first
    archived: bool = False  # left out of the list unless asked for; still searchable


@dataclass(frozen=True)
class StoredMessage:
    role: Role
    content: str
    status: MessageStatus
    turn_id: str
    created_at: datetime
    # The turn that replaced this one (regenerate, edit-and-resend); None: current transcript.
    superseded_by: str | None = None
    # An answer's sources as stored (JSON, app/agent/sources.py); None: none were recorded.
    sources: str | None = None
    # The message's row id (what search results and an answer's sources name as message_id).
    id: int | None = None


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
    project_id: str | None = None,
    temporary: bool = False,
) -> None:
    stamp = stamp or now()
    values = {
        "id": conversation_id,
        "user_id": user_id,
        "title": title,
        "created_at": stamp,
        "updated_at": stamp,
    }
    if project_id is not None:  # outside projects the row is written as before revision 0012
        values["project_id"] = project_id
    if temporary:  # the server default (false) otherwise, as before revision 0017
        values["temporary"] = True
    connection.execute(_CREATE, values)


class ProjectGoneError(LookupError):
    """The project a new conversation was to start in is no longer its owner's."""


# A share lock on the owner's project row for the rest of the transaction: its deletion takes
# the row for update first (`app.memory.writes.delete_project`), so the two are serial and a
# conversation never starts in a project that is gone. SQLite: the transaction's one write lock.
_HOLD_PROJECT = (
    select(projects.c.id)
    .where(
        projects.c.id == bindparam("project_id", type_=projects.c.id.type),
        projects.c.user_id == bindparam("owner_id", type_=projects.c.user_id.type),
    )
    .with_for_update(read=True)
)


def hold_project(connection: Connection, user_id: str, project_id: str) -> None:
    """Share-lock the owner's project until the transaction ends; ProjectGoneError if none."""
    found = connection.execute(_HOLD_PROJECT, {"project_id": project_id, "owner_id": user_id})
    if found.first() is None:
        raise ProjectGoneError(project_id)


_OWNER = bindparam("owner_id", type_=conversations.c.user_id.type)
_CONVERSATION = bindparam("conversation_id", type_=conversations.c.id.type)
# A `Conversation`'s columns, in its fields' order.
_COLUMNS = (
    conversations.c.id,
    conversations.c.title,
    conversations.c.created_at,
    conversations.c.updated_at,
    conversations.c.project_id,
    conversations.c.temporary,
    conversations.c.pinned,
    conversations.c.archived,
)
# Temporary chats are read only by id, by their owner: never listed, paged (the export),
# searched or recalled (`LISTED`).
LISTED = conversations.c.temporary.is_(False)
_GET = select(*_COLUMNS).where(
    conversations.c.id == _CONVERSATION, conversations.c.user_id == _OWNER
)
# Pinned first, then the most recently updated; the id breaks ties, so that the order is total
# and a page's last row says exactly where the next page starts (`ListPosition`).
_ORDER = (
    conversations.c.pinned.desc(),
    conversations.c.updated_at.desc(),
    conversations.c.id.desc(),
)
_LIST = select(*_COLUMNS).where(conversations.c.user_id == _OWNER, LISTED)


def get(connection: Connection, user_id: str, conversation_id: str) -> Conversation | None:
    """The conversation only when `user_id` owns it: another user's id reads as absent."""
    row = connection.execute(
        _GET, {"conversation_id": conversation_id, "owner_id": user_id}
    ).first()
    return Conversation(*row) if row is not None else None


@dataclass(frozen=True)
class ListPosition:
    """Where a page of the list ended: the sort key of its last conversation. The next page
    holds what sorts after it; a conversation started or updated meanwhile sorts before it,
    so pages never repeat or skip a conversation that kept its place."""

    pinned: bool
    updated_at: datetime
    id: str


def _after(position: ListPosition) -> Any:
    c = conversations.c
    later = or_(
        c.updated_at < position.updated_at,
        and_(c.updated_at == position.updated_at, c.id < position.id),
    )
    if position.pinned:
        return or_(c.pinned == false(), and_(c.pinned == true(), later))
    return and_(c.pinned == false(), later)


def list_for_user(
    connection: Connection,
    user_id: str,
    project_id: str | None = None,
    *,
    archived: bool = False,
    limit: int | None = None,
    after: ListPosition | None = None,
) -> list[Conversation]:
    """The user's conversations, pinned first, then most recent first; only those of
    `project_id` when given; the archived ones instead with `archived`. With `limit`, at most
    that many, starting after `after` (the previous page's last)."""
    query = _LIST.where(conversations.c.archived == (true() if archived else false()))
    if project_id is not None:
        query = query.where(conversations.c.project_id == project_id)
    if after is not None:
        query = query.where(_after(after))
    query = query.order_by(*_ORDER)
    if limit is not None:
        query = query.limit(limit)
    rows = connection.execute(query, {"owner_id": user_id}).all()
    return [Conversation(*row) for row in rows]


def mark(
    connection: Connection,
    user_id: str,
    conversation_id: str,
    *,
    pinned: bool | None = None,
    archived: bool | None = None,
) -> bool:
    """Pin or unpin, archive or restore the owner's conversation (its `updated_at` stays: the
    flags are not activity); False when it is not the owner's (nothing done)."""
    if get(connection, user_id, conversation_id) is None:
        return False
    values: dict[str, bool] = {}
    if pinned is not None:
        values["pinned"] = pinned
    if archived is not None:
        values["archived"] = archived
    if values:
        connection.execute(
            update(conversations)
            .where(conversations.c.id == conversation_id, conversations.c.user_id == user_id)
            .values(**values)
        )
    return True


def move(
    connection: Connection, user_id: str, conversation_id: str, project_id: str | None
) -> bool:
    """Put the owner's conversation in a project (the caller checked it is theirs) or, with
    None, outside projects; False when the conversation is not the owner's."""
    result = connection.execute(
        update(conversations)
        .where(conversations.c.id == conversation_id, conversations.c.user_id == user_id)
        .values(project_id=project_id)
    )
    return bool(result.rowcount)


def _project_ids(connection: Connection, user_id: str, project_id: str) -> list[str]:
    return [
        str(value)
        for value in connection.execute(
            select(conversations.c.id).where(
                conversations.c.user_id == user_id, conversations.c.project_id == project_id
            )
        ).scalars()
    ]


def detach_project(connection: Connection, user_id: str, project_id: str) -> int:
    """A deleted project's conversations become general ones."""
    result = connection.execute(
        update(conversations)
        .where(conversations.c.user_id == user_id, conversations.c.project_id == project_id)
        .values(project_id=None)
    )
    return result.rowcount or 0


def remove_project(connection: Connection, user_id: str, project_id: str) -> int:
    """A deleted project's conversations, their messages and (on SQLite, in this transaction)
    their words in the search index."""
    ids = _project_ids(connection, user_id, project_id)
    removed = 0
    for start in range(0, len(ids), 500):  # bounded IN lists
        removed += _remove_ids(connection, ids[start : start + 500])
    if removed:
        drop_deleted_terms(connection)
    return removed


_PAGE_OF_CONVERSATIONS = select(*_COLUMNS).where(conversations.c.user_id == _OWNER, LISTED)


def conversations_page(
    connection: Connection, user_id: str, *, after: str | None, limit: int
) -> list[Conversation]:
    """Up to `limit` of the user's conversations in id order, those after id `after`: for
    reading them all a page at a time (an export), whatever their number."""
    query = _PAGE_OF_CONVERSATIONS
    if after is not None:
        query = query.where(conversations.c.id > after)
    rows = connection.execute(
        query.order_by(conversations.c.id).limit(limit), {"owner_id": user_id}
    )
    return [Conversation(*row) for row in rows]


def messages_page(
    connection: Connection, conversation_id: str, *, after: int | None, limit: int
) -> list[tuple[int, StoredMessage]]:
    """Up to `limit` messages, oldest first, those after the message id `after`, each with its
    id (the next page's `after`)."""
    query = select(*_MESSAGES.selected_columns).where(
        conversation_messages.c.conversation_id == conversation_id
    )
    if after is not None:
        query = query.where(conversation_messages.c.id > after)
    rows = connection.execute(query.order_by(conversation_messages.c.id).limit(limit))
    stored = [StoredMessage(*row) for row in rows]
    return [(message.id or 0, message) for message in stored]


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
    sources: str | None = None,
) -> None:
    """Store one message; `touch` moves the conversation's `updated_at` to it (a new
    conversation created with the same `stamp` needs no second write). `sources`: an
    answer's, as JSON."""
    stamp = stamp or now()
    values: dict[str, Any] = {
        "conversation_id": conversation_id,
        "turn_id": turn_id,
        "role": role,
        "content": content,
        "status": status,
        "created_at": stamp,
    }
    if sources is not None:  # without sources the row is written as before revision 0018
        values["sources"] = sources
    connection.execute(_ADD, values)
    if touch:
        connection.execute(_TOUCH, {"touched_id": conversation_id, "touched_at": stamp})


# On PostgreSQL appending a message is one statement: the message's INSERT, the conversation's
# `updated_at` UPDATE and the turn's usage (an answer's) each a data-modifying statement of a
# WITH, in one snapshot and one transaction. One round trip instead of one per statement; the
# rows and the commit are the same. (SQLite and MariaDB have no data-modifying WITH: their
# statements stay apart. A new conversation's first message cannot join its conversation's
# INSERT so: PostgreSQL's search trigger reads the conversation's owner, which a statement of
# the same WITH does not see.)
_MESSAGE_ID = bindparam("conversation_id", type_=conversation_messages.c.conversation_id.type)
_STAMP = bindparam("stamp", type_=conversation_messages.c.created_at.type)
_MESSAGE = insert(conversation_messages).values(
    conversation_id=_MESSAGE_ID,
    turn_id=bindparam("turn_id", type_=conversation_messages.c.turn_id.type),
    role=bindparam("role", type_=conversation_messages.c.role.type),
    content=bindparam("content", type_=conversation_messages.c.content.type),
    status=bindparam("status", type_=conversation_messages.c.status.type),
    created_at=_STAMP,
    sources=bindparam("sources", type_=conversation_messages.c.sources.type),
)


@cache
def _postgres_append(with_usage: bool, with_release: bool) -> Executable:
    touched = (
        update(conversations).where(conversations.c.id == _MESSAGE_ID).values(updated_at=_STAMP)
    )
    parts = [_MESSAGE.cte("added")]
    if with_release:
        parts.append(limit_rows.RELEASE.cte("released"))
    if not with_usage:
        return touched.add_cte(*parts)
    return usage_rows.postgres_record().add_cte(*parts, touched.cte("touched"))


def append_message(
    connection: Connection,
    conversation_id: str,
    turn_id: str,
    role: Role,
    content: str,
    status: MessageStatus,
    spent: TurnUsage | None = None,
    release: SlotRelease | None = None,
    sources: str | None = None,
) -> None:
    """One message at the end of the conversation, which it touches (`updated_at`), the
    turn's token usage when `spent` is given, and the release of the turn's stream slot when
    `release` is; `sources`: an answer's, as JSON."""
    if connection.dialect.name != "postgresql":
        add_message(connection, conversation_id, turn_id, role, content, status, sources=sources)
        if spent is not None:
            usage_rows.record(connection, spent)
        if release is not None:
            release.run(connection)
        return
    values: dict[str, Any] = {
        "conversation_id": conversation_id,
        "turn_id": turn_id,
        "role": role,
        "content": content,
        "status": status,
        "stamp": now(),
        "sources": sources,
    }
    if spent is not None:
        values.update(usage_rows.record_values(spent))
    if release is not None:
        values.update(release.values)
    connection.execute(_postgres_append(spent is not None, release is not None), values)


_IN_CONVERSATION = conversation_messages.c.conversation_id == bindparam(
    "conversation_id", type_=conversation_messages.c.conversation_id.type
)
_MESSAGES = select(
    conversation_messages.c.role,
    conversation_messages.c.content,
    conversation_messages.c.status,
    conversation_messages.c.turn_id,
    conversation_messages.c.created_at,
    conversation_messages.c.superseded_by,
    conversation_messages.c.sources,
    conversation_messages.c.id,
).where(_IN_CONVERSATION)
_CURRENT = conversation_messages.c.superseded_by.is_(None)
_BEFORE = conversation_messages.c.id < bindparam("before_id", type_=Integer())


@cache
def _messages_query(last: int | None, current: bool = False, before: bool = False) -> Select[Any]:
    """All messages oldest first, or the newest `last` of them newest first (built once per
    shape: a literal LIMIT, which every dialect takes). `current`: only the messages no later
    turn replaced; `before`: only those stored before the row `before_id`."""
    query = _MESSAGES
    if current:
        query = query.where(_CURRENT)
    if before:
        query = query.where(_BEFORE)
    if last is None:
        return query.order_by(conversation_messages.c.id)
    return query.order_by(conversation_messages.c.id.desc()).limit(last)


def messages(
    connection: Connection,
    conversation_id: str,
    *,
    last: int | None = None,
    current: bool = False,
    before_id: int | None = None,
) -> list[StoredMessage]:
    """Messages in order; with `last`, only the most recent `last` of them; with `current`,
    only the current transcript's; with `before_id`, only those stored before that row."""
    query = _messages_query(last, current, before_id is not None)
    values: dict[str, Any] = {"conversation_id": conversation_id}
    if before_id is not None:
        values["before_id"] = before_id
    rows = list(connection.execute(query, values))
    if last is not None:
        rows.reverse()
    return [StoredMessage(*row) for row in rows]


_STORED = select(conversation_messages.c.id).where(
    conversation_messages.c.conversation_id == bindparam("conversation_id"),
    conversation_messages.c.turn_id == bindparam("turn_id"),
    conversation_messages.c.role == bindparam("role"),
)


def has_message(connection: Connection, conversation_id: str, turn_id: str, role: str) -> bool:
    """Whether the turn's message of `role` is stored (a retried write checks it first)."""
    found = connection.execute(
        _STORED, {"conversation_id": conversation_id, "turn_id": turn_id, "role": role}
    ).first()
    return found is not None


def first_current_row(connection: Connection, conversation_id: str, turn_id: str) -> int | None:
    """The first row of `turn_id` in the conversation's current transcript (None: the turn is
    not there: unknown, or already replaced)."""
    return connection.execute(
        select(func.min(conversation_messages.c.id)).where(
            conversation_messages.c.conversation_id == conversation_id,
            conversation_messages.c.turn_id == turn_id,
            _CURRENT,
        )
    ).scalar()


def turn_after(connection: Connection, conversation_id: str, turn_id: str | None) -> str | None:
    """The turn that follows `turn_id` in the conversation's current transcript (its first turn
    when `turn_id` is None); None when there is none, or `turn_id` is not in it."""
    query = select(conversation_messages.c.turn_id).where(
        conversation_messages.c.conversation_id == conversation_id, _CURRENT
    )
    if turn_id is not None:
        last_row = connection.execute(
            select(func.max(conversation_messages.c.id)).where(
                conversation_messages.c.conversation_id == conversation_id,
                conversation_messages.c.turn_id == turn_id,
                _CURRENT,
            )
        ).scalar()
        if last_row is None:
            return None
        query = query.where(conversation_messages.c.id > last_row)
    found = connection.execute(query.order_by(conversation_messages.c.id).limit(1)).scalar()
    return str(found) if found is not None else None


def supersede_from(
    connection: Connection, conversation_id: str, first_row: int, by_turn: str
) -> None:
    """Mark the current transcript from row `first_row` on as replaced by the turn `by_turn`:
    the replaced turn and every later one leave the current transcript and are kept."""
    connection.execute(
        update(conversation_messages)
        .where(
            conversation_messages.c.conversation_id == conversation_id,
            conversation_messages.c.id >= first_row,
            _CURRENT,
        )
        .values(superseded_by=by_turn)
    )


def rename(connection: Connection, user_id: str, conversation_id: str, title: str) -> bool:
    """Set the owner's conversation's title; False when it is not the owner's (nothing done).
    Read first rather than trusting the UPDATE's row count: MariaDB counts changed rows, so an
    unchanged title would read as absent."""
    if get(connection, user_id, conversation_id) is None:
        return False
    connection.execute(
        update(conversations)
        .where(conversations.c.id == conversation_id, conversations.c.user_id == user_id)
        .values(title=title)
    )
    return True


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


def temporary_before(connection: Connection, cutoff: datetime, limit: int) -> list[str]:
    """Up to `limit` temporary chats begun before `cutoff`, oldest first (the purge's list)."""
    query = (
        select(conversations.c.id)
        .where(conversations.c.temporary.is_(True), conversations.c.created_at < cutoff)
        .order_by(conversations.c.created_at)
        .limit(limit)
    )
    return [str(value) for value in connection.execute(query).scalars()]


def remove_temporary(connection: Connection, conversation_ids: list[str]) -> int:
    """Those of `conversation_ids` that are temporary chats, with their messages."""
    still = [
        str(value)
        for value in connection.execute(
            select(conversations.c.id)
            .where(conversations.c.id.in_(conversation_ids), conversations.c.temporary.is_(True))
            .with_for_update()
        ).scalars()
    ]
    return _remove_ids(connection, still)


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


def clear_sources(connection: Connection, user_id: str) -> None:
    """Drop the stored sources of every answer of the user's (forgetting memory: they hold
    copies of its entries); the answers stay."""
    owned = select(conversations.c.id).where(conversations.c.user_id == user_id)
    connection.execute(
        update(conversation_messages)
        .where(
            conversation_messages.c.conversation_id.in_(owned),
            conversation_messages.c.sources.is_not(None),
        )
        .values(sources=None)
    )
