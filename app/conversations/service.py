"""The conversation transcript: kept apart from memory, owned per user, written best-effort
during a turn so that a database outage never stops an answer."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

import structlog
from sqlalchemy import Connection, Engine

from app.concurrency import to_thread
from app.conversations import repository, search
from app.conversations.repository import Conversation, MessageStatus, Role, StoredMessage
from app.conversations.search_text import query_words, snippet
from app.db.engine import one_statement_read
from app.operators import usage as usage_rows
from app.operators.usage import TurnUsage
from app.telemetry.sensitive import register_search

log = structlog.get_logger(__name__)

TITLE_CHARS = 80
# Conversation ids are uuid4() in canonical text form; nothing else can name one.
_CONVERSATION_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def new_conversation_id() -> str:
    return str(uuid.uuid4())


def is_conversation_id(value: str) -> bool:
    """Whether `value` is shaped like an id this service issues. Anything else (control
    characters, NUL, another case, padding) names no conversation, so it is answered as
    absent without asking the database, which might choke on it (PostgreSQL refuses NUL)."""
    return _CONVERSATION_ID.fullmatch(value) is not None


def title_for(message: str) -> str:
    first_line = message.strip().splitlines()[0] if message.strip() else "New conversation"
    return first_line[:TITLE_CHARS].strip() or "New conversation"


@dataclass(frozen=True)
class SearchResult:
    """One matching message of the owner's: where it is, and a snippet with matches marked."""

    message_id: int
    conversation_id: str
    title: str
    role: str
    snippet: str
    created_at: datetime


class ConversationService:
    def __init__(self, engine: Engine, *, search_config: str = "simple") -> None:
        self.engine = engine
        self.search_config = search_config  # PostgreSQL's text search configuration

    # -- reads and deletes for the owner (errors propagate: the routes answer them) ------------

    def _get(self, user_id: str, conversation_id: str) -> Conversation | None:
        if not is_conversation_id(conversation_id):
            return None
        with self.engine.connect() as connection:
            return repository.get(connection, user_id, conversation_id)

    async def get(self, user_id: str, conversation_id: str) -> Conversation | None:
        return await to_thread(self._get, user_id, conversation_id)

    def _list(self, user_id: str) -> list[Conversation]:
        with self.engine.connect() as connection:
            return repository.list_for_user(connection, user_id)

    async def list_for(self, user_id: str) -> list[Conversation]:
        return await to_thread(self._list, user_id)

    def _messages(
        self, user_id: str, conversation_id: str, last: int | None
    ) -> list[StoredMessage] | None:
        if not is_conversation_id(conversation_id):
            return None
        with self.engine.connect() as connection:
            if repository.get(connection, user_id, conversation_id) is None:
                return None
            return repository.messages(connection, conversation_id, last=last)

    async def messages(
        self, user_id: str, conversation_id: str, *, last: int | None = None
    ) -> list[StoredMessage] | None:
        """The owner's messages (the last `last` of them), or None when not the owner's."""
        return await to_thread(self._messages, user_id, conversation_id, last)

    def _delete(self, user_id: str, conversation_id: str) -> bool:
        if not is_conversation_id(conversation_id):
            return False
        with self.engine.begin() as connection:
            return repository.remove(connection, user_id, conversation_id)

    async def delete(self, user_id: str, conversation_id: str) -> bool:
        return await to_thread(self._delete, user_id, conversation_id)

    def _search(
        self, user_id: str, query: str, limit: int, exclude_turn_id: str | None
    ) -> list[SearchResult]:
        register_search(query, ())
        words = query_words(query)
        if not words:
            return []
        with self.engine.connect() as connection:
            one_statement_read(connection)
            hits = search.search(
                connection,
                user_id,
                words,
                limit,
                exclude_turn_id=exclude_turn_id,
                postgres_config=self.search_config,
            )
        results = [
            SearchResult(
                hit.message_id,
                hit.conversation_id,
                hit.title,
                hit.role,
                snippet(hit.content, words),
                hit.created_at,
            )
            for hit in hits
        ]
        register_search(
            query,
            (
                text
                for hit, result in zip(hits, results, strict=True)
                for text in (hit.content, hit.title, result.snippet)
            ),
        )
        return results

    async def search(
        self, user_id: str, query: str, limit: int, *, exclude_turn_id: str | None = None
    ) -> list[SearchResult]:
        """The owner's best-matching messages for `query`, read as words (never as syntax);
        `exclude_turn_id` leaves out one turn's messages (the turn that is searching)."""
        return await to_thread(self._search, user_id, query, limit, exclude_turn_id)

    # -- best-effort writes during a turn ------------------------------------------------------

    @contextlib.contextmanager
    def _transcript_write(self) -> Iterator[Connection]:
        """One transcript transaction. On PostgreSQL it commits without waiting for its WAL
        flush (`synchronous_commit = off`, this transaction only): the turn's two transcript
        commits stand between the request and its first text and `done`. A server crash can
        lose the last fraction of a second of transcript rows, never corrupt them, as
        SQLite's `synchronous=NORMAL` can on a power loss; memory commits still wait for
        theirs.

        The setting travels with the COMMIT, in one simple query (one round trip fewer than a
        statement of its own); the engine's commit then finds the transaction ended and sends
        nothing. Only a transaction whose statements all succeeded gets there."""
        with self.engine.begin() as connection:
            yield connection
            if connection.dialect.name == "postgresql":
                connection.exec_driver_sql("SET LOCAL synchronous_commit TO OFF; COMMIT")

    def _create(self, user_id: str, turn_id: str, first_message: str) -> str:
        conversation_id = new_conversation_id()
        # One transaction (one commit) for the conversation and its first message: this write
        # stands between the request and the first streamed text.
        stamp = repository.now()
        with self._transcript_write() as connection:
            repository.create(
                connection, conversation_id, user_id, title_for(first_message), stamp=stamp
            )
            repository.add_message(
                connection,
                conversation_id,
                turn_id,
                "user",
                first_message,
                "complete",
                stamp=stamp,
                touch=False,
            )
        return conversation_id

    async def create(self, user_id: str, turn_id: str, first_message: str) -> str | None:
        """A new conversation holding the turn's user message, or None when the transcript
        cannot be stored right now."""
        try:
            return await to_thread(self._create, user_id, turn_id, first_message)
        except Exception as error:
            log.warning("conversation.create_failed", error_type=type(error).__name__)
            return None

    def _append(
        self,
        conversation_id: str,
        turn_id: str,
        role: Role,
        content: str,
        status: MessageStatus,
        spent: TurnUsage | None,
    ) -> None:
        with self._transcript_write() as connection:
            repository.add_message(connection, conversation_id, turn_id, role, content, status)
            if spent is not None:
                usage_rows.record(connection, spent)

    async def append(
        self,
        conversation_id: str | None,
        turn_id: str,
        role: Role,
        content: str,
        status: MessageStatus = "complete",
        *,
        usage: TurnUsage | None = None,
    ) -> bool:
        """Store one message (and the turn's token usage, in the same transaction); a failure
        is logged (without content) and the turn goes on."""
        if conversation_id is None:
            return False
        try:
            await to_thread(self._append, conversation_id, turn_id, role, content, status, usage)
        except Exception as error:
            log.warning(
                "conversation.append_failed",
                conversation_id=conversation_id,
                turn_id=turn_id,
                role=role,
                status=status,
                error_type=type(error).__name__,
            )
            return False
        return True
