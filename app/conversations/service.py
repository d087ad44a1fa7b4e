"""The conversation transcript: kept apart from memory, owned per user, written best-effort
during a turn so that a database outage never stops an answer."""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import numpy as np
import numpy.typing as npt
import structlog
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from app.concurrency import to_thread
from app.conversations import repository, search
from app.conversations.repository import (
    Conversation,
    ListPosition,
    MessageStatus,
    Role,
    StoredMessage,
)
from app.conversations.search_text import parse_query, snippet
from app.conversations.titles import title_from_message
from app.db.engine import SQLITE_IMMEDIATE, one_statement_read
from app.operators.limits import SlotRelease
from app.operators.usage import TurnUsage
from app.telemetry.sensitive import register_search

log = structlog.get_logger(__name__)

Vector = npt.NDArray[np.float32]  # a query's embedding (app/embeddings/vectors.py)


class SemanticRanking(Protocol):
    """What the search asks of semantic search (app/embeddings/semantic.py's `SemanticSearch`,
    set by the runtime): a protocol, so that the transcripts never import the layer that
    indexes them."""

    async def query_vector(self, query: str) -> Vector | None: ...

    def hybrid(
        self,
        lexical: Sequence[search.SearchHit],
        user_id: str,
        vector: Vector,
        limit: int,
        *,
        project: str | None = ...,
        exclude_turn_id: str | None = ...,
    ) -> list[search.SearchHit]: ...


# Conversation ids are uuid4() in canonical text form; nothing else can name one.
_CONVERSATION_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def new_conversation_id() -> str:
    return str(uuid.uuid4())


def is_conversation_id(value: str) -> bool:
    """Whether `value` is shaped like an id this service issues. Anything else (control
    characters, NUL, another case, padding) names no conversation, so it is answered as
    absent without asking the database, which might choke on it (PostgreSQL refuses NUL)."""
    return _CONVERSATION_ID.fullmatch(value) is not None


class TurnNotCurrent(LookupError):
    """The turn a request replaces is not in the conversation's current transcript."""


@dataclass(frozen=True)
class AfterTurn:
    """A replaced turn named by its place, as the AI SDK's regenerate and edit name it: the
    turn that follows `turn_id` in the current transcript (None: the conversation's first)."""

    turn_id: str | None


@dataclass(frozen=True)
class SearchResult:
    """One matching message of the owner's: where it is, and a snippet with matches marked."""

    message_id: int
    conversation_id: str
    title: str
    role: str
    snippet: str
    created_at: datetime
    score: float = 0.0  # relevance within this search (higher is better)


class ConversationService:
    def __init__(
        self, engine: Engine, *, search_config: str = "simple", durable: bool = True
    ) -> None:
        self.engine = engine
        self.search_config = search_config  # PostgreSQL's text search configuration
        self.durable = durable  # TRANSCRIPT_COMMIT
        self.semantic: SemanticRanking | None = None  # set when EMBEDDING_BASE_URL is (runtime)

    # -- reads and deletes for the owner (errors propagate: the routes answer them) ------------

    def _get(self, user_id: str, conversation_id: str) -> Conversation | None:
        if not is_conversation_id(conversation_id):
            return None
        with self.engine.connect() as connection:
            return repository.get(connection, user_id, conversation_id)

    async def get(self, user_id: str, conversation_id: str) -> Conversation | None:
        return await to_thread(self._get, user_id, conversation_id)

    def _list(
        self,
        user_id: str,
        project_id: str | None,
        archived: bool,
        limit: int | None,
        after: ListPosition | None,
    ) -> list[Conversation]:
        with self.engine.connect() as connection:
            return repository.list_for_user(
                connection, user_id, project_id, archived=archived, limit=limit, after=after
            )

    async def list_for(
        self,
        user_id: str,
        project_id: str | None = None,
        *,
        archived: bool = False,
        limit: int | None = None,
        after: ListPosition | None = None,
    ) -> list[Conversation]:
        """Pinned first, then most recent first; only `project_id`'s when given; the archived
        ones instead with `archived`; at most `limit`, after `after` (repository.ListPosition)."""
        return await to_thread(self._list, user_id, project_id, archived, limit, after)

    def _mark(
        self, user_id: str, conversation_id: str, pinned: bool | None, archived: bool | None
    ) -> Conversation | None:
        if not is_conversation_id(conversation_id):
            return None
        with self.engine.begin() as connection:
            if not repository.mark(
                connection, user_id, conversation_id, pinned=pinned, archived=archived
            ):
                return None
            return repository.get(connection, user_id, conversation_id)

    async def mark(
        self,
        user_id: str,
        conversation_id: str,
        *,
        pinned: bool | None = None,
        archived: bool | None = None,
    ) -> Conversation | None:
        """Pin or unpin, archive or restore the owner's conversation; None when it is not the
        owner's."""
        return await to_thread(self._mark, user_id, conversation_id, pinned, archived)

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
        """The owner's messages, replaced ones included (the last `last` of them), or None
        when not the owner's."""
        return await to_thread(self._messages, user_id, conversation_id, last)

    def _history(
        self, user_id: str, conversation_id: str, last: int, replaces: str | AfterTurn | None
    ) -> tuple[Conversation, list[StoredMessage], str | None] | None:
        if not is_conversation_id(conversation_id):
            return None
        with self.engine.connect() as connection:
            one_statement_read(connection)  # stands between the request and its first text
            conversation = repository.get(connection, user_id, conversation_id)
            if conversation is None:
                return None
            if isinstance(replaces, AfterTurn):
                # No turn there (the client holds a message the server never stored): the
                # request is a new turn.
                after = replaces.turn_id
                known = after is None or is_conversation_id(after)
                replaces = (
                    repository.turn_after(connection, conversation_id, after) if known else None
                )
            before_id = None
            if replaces is not None:
                before_id = (
                    repository.first_current_row(connection, conversation_id, replaces)
                    if is_conversation_id(replaces)  # turn ids are uuid4 text too
                    else None
                )
                if before_id is None:
                    raise TurnNotCurrent(replaces)
            return (
                conversation,
                repository.messages(
                    connection, conversation_id, last=last, current=True, before_id=before_id
                ),
                replaces,
            )

    async def history(
        self,
        user_id: str,
        conversation_id: str,
        *,
        last: int,
        replaces: str | AfterTurn | None = None,
    ) -> tuple[Conversation, list[StoredMessage], str | None] | None:
        """The conversation, what the model reads before a new turn (the last `last` messages
        of its current transcript, no replaced turn; when the turn replaces one, only those
        before it) and the id of the turn it replaces (`replaces` resolved: an AfterTurn with
        no turn after it is a new turn, None). None when the conversation is not the owner's;
        TurnNotCurrent when a named turn is not in its current transcript. One connection and
        one thread hop for all: a continuing turn waits on it before its first text."""
        return await to_thread(self._history, user_id, conversation_id, last, replaces)

    def _rename(self, user_id: str, conversation_id: str, title: str) -> Conversation | None:
        if not is_conversation_id(conversation_id):
            return None
        with self.engine.begin() as connection:
            if not repository.rename(connection, user_id, conversation_id, title):
                return None
            return repository.get(connection, user_id, conversation_id)

    async def rename(self, user_id: str, conversation_id: str, title: str) -> Conversation | None:
        """Give the owner's conversation a checked title; None when it is not the owner's."""
        return await to_thread(self._rename, user_id, conversation_id, title)

    def _delete(self, user_id: str, conversation_id: str) -> bool:
        if not is_conversation_id(conversation_id):
            return False
        with self._deleting() as connection:
            removed = repository.remove(connection, user_id, conversation_id)
            if removed:
                search.drop_deleted_terms(connection)
        if removed:
            search.optimize_fulltext(self.engine)
        return removed

    async def delete(self, user_id: str, conversation_id: str) -> bool:
        return await to_thread(self._delete, user_id, conversation_id)

    @contextlib.contextmanager
    def _deleting(self) -> Iterator[Connection]:
        """A transaction that reads, then deletes. On SQLite it takes the write lock at BEGIN
        (waiting up to the busy timeout): a transaction that began reading could not wait for
        it later, and would fail at once while another writer holds it."""
        with (
            self.engine.connect().execution_options(**{SQLITE_IMMEDIATE: True}) as connection,
            connection.begin(),
        ):
            yield connection

    def erase(self, user_id: str) -> int:
        """Every conversation of the user, its messages and their search index entries, in one
        transaction; returns how many conversations."""
        with self._deleting() as connection:
            removed = repository.remove_all(connection, user_id)
            search.drop_deleted_terms(connection)
        search.optimize_fulltext(self.engine)
        return removed

    def expire(self, cutoff: datetime, limit: int) -> tuple[int, int]:
        """Retention: up to `limit` conversations inactive since before `cutoff`, in one small
        transaction (no user's writer lock: transcripts are not memory state). Returns how many
        were removed and how many were listed (0: nothing is left to expire)."""
        with self.engine.connect() as connection:
            candidates = repository.stale(connection, cutoff, limit)
            connection.rollback()
        if not candidates:
            return 0, 0
        with self._deleting() as connection:
            removed = repository.remove_if_stale(connection, candidates, cutoff)
            if removed:
                search.drop_deleted_terms(connection)
        if removed:
            search.optimize_fulltext(self.engine)
        return removed, len(candidates)

    def ranked(
        self,
        user_id: str,
        query: str,
        limit: int,
        *,
        exclude_turn_id: str | None = None,
        project: str | None = search.ANY_PROJECT,
    ) -> list[search.SearchHit]:
        """The owner's messages ranked for `query` by the lexical index (any word may match,
        quoted phrases required, best first, ties newest first), with their message ids and
        scores: what `search` snippets, and what another ranking can fuse with. Blocking (call
        it from a thread); errors propagate."""
        parsed = parse_query(query)
        if not parsed:
            return []
        with self.engine.connect() as connection:
            one_statement_read(connection)
            return search.search(
                connection,
                user_id,
                parsed,
                limit,
                exclude_turn_id=exclude_turn_id,
                postgres_config=self.search_config,
                project=project,
            )

    def expire_temporary(self, cutoff: datetime, limit: int) -> tuple[int, int]:
        """The purge: up to `limit` temporary chats begun before `cutoff`, with their messages
        and search index rows, in one small transaction. Returns how many were removed and how
        many were listed (0: none is left)."""
        with self.engine.connect() as connection:
            candidates = repository.temporary_before(connection, cutoff, limit)
            connection.rollback()
        if not candidates:
            return 0, 0
        with self._deleting() as connection:
            removed = repository.remove_temporary(connection, candidates)
            if removed:
                search.drop_deleted_terms(connection)
        if removed:
            search.optimize_fulltext(self.engine)
        return removed, len(candidates)

    def _search(
        self,
        user_id: str,
        query: str,
        limit: int,
        exclude_turn_id: str | None,
        project: str | None = search.ANY_PROJECT,
        vector: Vector | None = None,
    ) -> list[SearchResult]:
        register_search(query, ())
        semantic = self.semantic if vector is not None else None
        depth = search.MAX_RESULTS if semantic is not None else limit  # fused: a deeper list
        hits = self.ranked(user_id, query, depth, exclude_turn_id=exclude_turn_id, project=project)
        words = parse_query(query).words
        if semantic is not None and vector is not None:  # fused with the nearest messages
            hits = semantic.hybrid(
                hits, user_id, vector, limit, project=project, exclude_turn_id=exclude_turn_id
            )
        results = [
            SearchResult(
                hit.message_id,
                hit.conversation_id,
                hit.title,
                hit.role,
                snippet(hit.content, words),
                hit.created_at,
                hit.score,
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
        self,
        user_id: str,
        query: str,
        limit: int,
        *,
        exclude_turn_id: str | None = None,
        project: str | None = search.ANY_PROJECT,
    ) -> list[SearchResult]:
        """The owner's best-matching messages for `query`, read as words (never as syntax);
        `exclude_turn_id` leaves out one turn's messages (the turn that is searching);
        `project`: one project's conversations, or (None) only those outside projects.
        With semantic search on, the query's vector is asked for first (a bounded wait that
        falls back to words alone, app/embeddings/semantic.py)."""
        vector = None
        if self.semantic is not None and parse_query(query):
            vector = await self.semantic.query_vector(query)
        return await to_thread(
            self._search, user_id, query, limit, exclude_turn_id, project, vector
        )

    # -- best-effort writes during a turn ------------------------------------------------------

    @contextlib.contextmanager
    def _transcript_write(self) -> Iterator[Connection]:
        """One transcript transaction. By default it commits durably, as memory commits do: a
        turn whose `done` a client received keeps its transcript across a server crash or a
        failover to a synchronous standby (the history names turns, so a lost answer would
        leave it pointing at nothing).

        With TRANSCRIPT_COMMIT=async, on PostgreSQL it commits without waiting for its WAL
        flush or standby (`synchronous_commit = off`, this transaction only): the turn's two
        transcript commits stand between the request and its first text and `done`. A crash
        or failover can then lose the last transcript rows (up to three times the server's
        `wal_writer_delay`, 0.6 s by default), never corrupt them. The setting travels with
        the COMMIT, in one simple query (one round trip fewer than a statement of its own);
        the engine's commit then finds the transaction ended and sends nothing. Only a
        transaction whose statements all succeeded gets there."""
        # SQLite: the write lock is taken at BEGIN, where a busy database is waited for; a
        # deferred transaction that has read could only fail on its first write when another
        # process (a replica, a second worker) wrote meanwhile.
        with (
            self.engine.connect().execution_options(**{SQLITE_IMMEDIATE: True}) as connection,
            connection.begin(),
        ):
            yield connection
            if connection.dialect.name == "postgresql" and not self.durable:
                connection.exec_driver_sql("SET LOCAL synchronous_commit TO OFF; COMMIT")

    def user_message(
        self,
        user_id: str,
        turn_id: str,
        message: str,
        *,
        conversation_id: str,
        new: bool,
        project_id: str | None = None,
        replaces: str | None = None,
        temporary: bool = False,
    ) -> Callable[[Connection], str]:
        """The turn's user message as work for a transaction of the caller's (the limits'
        admission, `LimitStore.admit_with`): a new conversation `conversation_id` holding it,
        or appended to the existing one. The work returns the conversation's id."""

        def write(connection: Connection) -> str:
            if new:
                _create_on(
                    connection, conversation_id, user_id, turn_id, message, project_id, temporary
                )
            else:
                _append_on(connection, conversation_id, turn_id, "user", message, replaces)
            return conversation_id

        return write

    def _create(
        self,
        user_id: str,
        turn_id: str,
        first_message: str,
        project_id: str | None = None,
        conversation_id: str | None = None,
        retried: bool = False,
        temporary: bool = False,
    ) -> str:
        conversation_id = conversation_id or new_conversation_id()
        # One transaction (one commit) for the conversation and its first message: this write
        # stands between the request and the first streamed text.
        with self._transcript_write() as connection:
            if retried and repository.has_message(connection, conversation_id, turn_id, "user"):
                return conversation_id  # the try that failed had committed it after all
            _create_on(
                connection,
                conversation_id,
                user_id,
                turn_id,
                first_message,
                project_id,
                temporary,
            )
        return conversation_id

    async def create(
        self,
        user_id: str,
        turn_id: str,
        first_message: str,
        project_id: str | None = None,
        *,
        conversation_id: str | None = None,
        retried: bool = False,
        temporary: bool = False,
    ) -> str | None:
        """A new conversation (in `project_id`, checked as the owner's by the caller, and held
        against its deletion until the row is written) holding the turn's user message, or
        None when the transcript cannot be stored right now (or the project is gone).
        `retried`: an earlier write of this `conversation_id` failed and may have committed
        all the same; it is looked for first."""
        arguments = (project_id, conversation_id, retried, temporary)
        try:
            return await to_thread(self._create, user_id, turn_id, first_message, *arguments)
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
        replaces: str | None,
        spent: TurnUsage | None,
        release: SlotRelease | None,
        retried: bool = False,
        sources: str | None = None,
    ) -> None:
        with self._transcript_write() as connection:
            if retried and repository.has_message(connection, conversation_id, turn_id, role):
                return  # the lost connection had committed it after all
            _append_on(
                connection,
                conversation_id,
                turn_id,
                role,
                content,
                replaces,
                status,
                spent,
                release,
                sources,
            )

    async def append(
        self,
        conversation_id: str | None,
        turn_id: str,
        role: Role,
        content: str,
        status: MessageStatus = "complete",
        *,
        replaces: str | None = None,
        usage: TurnUsage | None = None,
        release: SlotRelease | None = None,
        retried: bool = False,
        sources: str | None = None,
    ) -> bool:
        """Store one message (and the turn's token usage and the release of its stream slot,
        in the same transaction); a failure is logged (without content) and the turn goes on.
        `replaces`: the turn this one replaces (regenerate, edit-and-resend); it and every
        later turn leave the current transcript, kept as replaced versions. `retried`: an
        earlier write of this message failed and may have committed; it is looked for first.
        `sources`: an answer's (JSON, app/agent/sources.py)."""
        if conversation_id is None:
            return False
        arguments = (conversation_id, turn_id, role, content, status, replaces, usage, release)
        try:
            try:
                await to_thread(self._append, *arguments, retried, sources)
            except DBAPIError as error:
                if not error.connection_invalidated:
                    raise
                # A connection lost mid-write (a killed backend, a failover): once more on a
                # new one, which finds the message if the lost one had committed it.
                await to_thread(self._append, *arguments, True, sources)
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
        if release is not None:
            release.committed()
        return True


def _create_on(
    connection: Connection,
    conversation_id: str,
    user_id: str,
    turn_id: str,
    first_message: str,
    project_id: str | None,
    temporary: bool = False,
) -> None:
    stamp = repository.now()
    if project_id is not None:
        repository.hold_project(connection, user_id, project_id)
    repository.create(
        connection,
        conversation_id,
        user_id,
        title_from_message(first_message),
        stamp=stamp,
        project_id=project_id,
        temporary=temporary,
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


def _append_on(
    connection: Connection,
    conversation_id: str,
    turn_id: str,
    role: Role,
    content: str,
    replaces: str | None,
    status: MessageStatus = "complete",
    spent: TurnUsage | None = None,
    release: SlotRelease | None = None,
    sources: str | None = None,
) -> None:
    if replaces is not None:
        # In the same transaction as the new message: the transcript never shows both versions
        # as current, nor neither.
        first_row = repository.first_current_row(connection, conversation_id, replaces)
        if first_row is not None:
            repository.supersede_from(connection, conversation_id, first_row, turn_id)
    repository.append_message(
        connection, conversation_id, turn_id, role, content, status, spent, release, sources
    )
