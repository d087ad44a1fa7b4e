"""What a person uses to see and steer what is remembered, beyond the memory itself: the
history, the save mode, pending proposals and a full export. Reads live here; every write (the
save mode, rejecting a proposal, undo, accept) goes through MemoryService's unit of work. Errors
propagate: the routes answer them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from sqlalchemy import Engine

from app.concurrency import to_thread
from app.conversations import repository as transcripts
from app.conversations.repository import Conversation, StoredMessage
from app.memory import history, projects, proposals, repository
from app.memory.projects import Project, Scope
from app.memory.provenance import (
    HistoryEntry,
    Proposal,
    SaveMode,
    entry_strings,
    proposal_strings,
)
from app.memory.rules import Snapshot
from app.operators.subjects import export_for_subject
from app.telemetry.sensitive import register_memory, register_sensitive

Row = TypeVar("Row")
Key = TypeVar("Key")

# Rows an export reads at once (EXPORT_PAGE_ROWS); its memory is bounded by a page, whatever the
# transcript's size.
EXPORT_PAGE = 200


@dataclass(frozen=True)
class ExportHead:
    """What an export starts with: the parts bounded by their own limits."""

    snapshot: Snapshot
    save_mode: SaveMode
    proposals: list[Proposal]
    # Expired proposals still stored (everything an erasure removes is exported).
    expired_proposals: list[Proposal] = field(default_factory=list)
    # The person's model usage per day (no content).
    usage: list[dict[str, Any]] = field(default_factory=list)
    # Each project with its document (its history entries carry its id).
    projects: list[tuple[Project, tuple[str, ...]]] = field(default_factory=list)
    # The person's recall choice (None: never chosen).
    recall_chats: bool | None = None


def _registered_entries(entries: list[HistoryEntry]) -> list[HistoryEntry]:
    for entry in entries:
        register_sensitive(*entry_strings(entry))
    return entries


def _registered_proposals(pending: list[Proposal]) -> list[Proposal]:
    for proposal in pending:
        register_sensitive(*proposal_strings(proposal))
    return pending


class MemoryControl:
    def __init__(self, engine: Engine, *, page_rows: int = EXPORT_PAGE) -> None:
        self.engine = engine
        self.page_rows = page_rows  # EXPORT_PAGE_ROWS: rows an export reads at once

    # -- history --------------------------------------------------------------------------

    def _history(
        self, user_id: str, limit: int, before: str | None, project_id: str | None
    ) -> list[HistoryEntry] | None:
        with self.engine.connect() as connection:
            entries = history.page(
                connection, user_id, limit=limit, before=before, project_id=project_id
            )
        return None if entries is None else _registered_entries(entries)

    async def history(
        self,
        user_id: str,
        *,
        limit: int,
        before: str | None = None,
        project_id: str | None = None,
    ) -> list[HistoryEntry] | None:
        """Newest first, the changes made in `project_id` (None: outside projects); None when
        `before` names no change of this user's in that scope."""
        return await to_thread(self._history, user_id, limit, before, project_id)

    # -- save mode ------------------------------------------------------------------------

    def _save_mode(self, user_id: str) -> SaveMode:
        with self.engine.connect() as connection:
            return proposals.save_mode(connection, user_id)

    async def save_mode(self, user_id: str) -> SaveMode:
        return await to_thread(self._save_mode, user_id)

    def _settings(self, user_id: str) -> tuple[SaveMode, bool | None]:
        with self.engine.connect() as connection:
            mode = proposals.save_mode(connection, user_id)
            return mode, proposals.recall_chats(connection, user_id)

    def _recall_chats(self, user_id: str) -> bool | None:
        with self.engine.connect() as connection:
            return proposals.recall_chats(connection, user_id)

    async def recall_chats(self, user_id: str) -> bool | None:
        """The person's recall choice (None: never chosen); read by each /v1/chat turn."""
        return await to_thread(self._recall_chats, user_id)

    async def settings(self, user_id: str) -> tuple[SaveMode, bool | None]:
        """The save mode and the recall choice (None: never chosen)."""
        return await to_thread(self._settings, user_id)

    # -- proposals ------------------------------------------------------------------------

    def _pending(self, user_id: str, project_id: str | None) -> list[Proposal]:
        with self.engine.connect() as connection:
            return _registered_proposals(
                proposals.pending(connection, user_id, project_id=project_id)
            )

    async def pending(self, user_id: str, project_id: str | None = None) -> list[Proposal]:
        """The pending proposals staged in `project_id` (None: outside projects)."""
        return await to_thread(self._pending, user_id, project_id)

    # -- export ---------------------------------------------------------------------------
    # Read a page at a time, each page on a connection of its own, so that an export holds
    # neither its whole transcript in memory nor a connection while the client reads.

    def _export_head(self, user_id: str) -> ExportHead:
        with self.engine.connect() as connection:
            snapshot = repository.load_snapshot(connection, user_id)
            register_memory(snapshot)
            save_mode = proposals.save_mode(connection, user_id)
            recall = proposals.recall_chats(connection, user_id)
            pending = proposals.pending(connection, user_id)
            expired = proposals.expired(connection, user_id)
            usage = export_for_subject(connection, user_id)["usage"]
            documents = [
                (project, repository.load_scoped(connection, user_id, Scope(project.id)).project)
                for project in projects.list_projects(connection, user_id)
            ]
            connection.rollback()
        for _project, document in documents:
            register_sensitive(*document)
        return ExportHead(
            snapshot,
            save_mode,
            _registered_proposals(pending),
            _registered_proposals(expired),
            usage,
            documents,
            recall,
        )

    async def export_head(self, user_id: str) -> ExportHead:
        """The memory, the save mode and the pending proposals (all bounded by their limits)."""
        return await to_thread(self._export_head, user_id)

    def _history_page(self, user_id: str, before: str | None) -> list[HistoryEntry]:
        with self.engine.connect() as connection:
            entries = history.page(connection, user_id, limit=self.page_rows, before=before)
        return _registered_entries(entries or [])

    async def _pages(
        self, read: Callable[[Key | None], list[Row]], key: Callable[[Row], Key]
    ) -> AsyncGenerator[Row, None]:
        """Every row `read` returns, a page at a time, each page read after the key of the
        previous one's last row. A short page is the last: no query for an empty one."""
        after: Key | None = None
        while page := await to_thread(read, after):
            for row in page:
                yield row
            if len(page) < self.page_rows:
                return
            after = key(page[-1])

    def export_history(self, user_id: str) -> AsyncGenerator[HistoryEntry, None]:
        """Every change, newest first, a page at a time."""
        return self._pages(partial(self._history_page, user_id), lambda entry: entry.id)

    def _conversations_page(self, user_id: str, after: str | None) -> list[Conversation]:
        with self.engine.connect() as connection:
            return transcripts.conversations_page(
                connection, user_id, after=after, limit=self.page_rows
            )

    def export_conversations(self, user_id: str) -> AsyncGenerator[Conversation, None]:
        return self._pages(partial(self._conversations_page, user_id), lambda talk: talk.id)

    def _messages_page(
        self, conversation_id: str, after: int | None
    ) -> list[tuple[int, StoredMessage]]:
        with self.engine.connect() as connection:
            return transcripts.messages_page(
                connection, conversation_id, after=after, limit=self.page_rows
            )

    async def export_messages(self, conversation: Conversation) -> AsyncIterator[StoredMessage]:
        """One conversation's messages, oldest first, a page at a time. Their text is not
        registered as sensitive (that registry would then grow with the transcript): an export
        writes it to its response alone, never to telemetry."""
        pages = self._pages(partial(self._messages_page, conversation.id), lambda row: row[0])
        async with aclosing(pages) as rows:
            async for _id, message in rows:
                yield message
