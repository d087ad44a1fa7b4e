"""What a person uses to see and steer what is remembered, beyond the memory itself: the
history, the save mode, pending proposals and a full export. Reads live here; every write (the
save mode, rejecting a proposal, undo, accept) goes through MemoryService's unit of work. Errors
propagate: the routes answer them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import Engine

from app.concurrency import to_thread
from app.conversations import repository as transcripts
from app.conversations.repository import Conversation, StoredMessage
from app.memory import history, proposals, repository
from app.memory.provenance import (
    HistoryEntry,
    Proposal,
    SaveMode,
    entry_strings,
    proposal_strings,
)
from app.memory.rules import Snapshot
from app.telemetry.sensitive import register_memory, register_sensitive


@dataclass(frozen=True)
class Export:
    """Everything the service keeps about one subject."""

    snapshot: Snapshot
    history: list[HistoryEntry]
    proposals: list[Proposal]
    conversations: list[tuple[Conversation, list[StoredMessage]]]
    expired_proposals: list[Proposal] = field(default_factory=list)


def _registered_entries(entries: list[HistoryEntry]) -> list[HistoryEntry]:
    for entry in entries:
        register_sensitive(*entry_strings(entry))
    return entries


def _registered_proposals(pending: list[Proposal]) -> list[Proposal]:
    for proposal in pending:
        register_sensitive(*proposal_strings(proposal))
    return pending


class MemoryControl:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    # -- history --------------------------------------------------------------------------

    def _history(self, user_id: str, limit: int, before: str | None) -> list[HistoryEntry] | None:
        with self.engine.connect() as connection:
            entries = history.page(connection, user_id, limit=limit, before=before)
        return None if entries is None else _registered_entries(entries)

    async def history(
        self, user_id: str, *, limit: int, before: str | None = None
    ) -> list[HistoryEntry] | None:
        """Newest first; None when `before` names no change of this user's."""
        return await to_thread(self._history, user_id, limit, before)

    # -- save mode ------------------------------------------------------------------------

    def _save_mode(self, user_id: str) -> SaveMode:
        with self.engine.connect() as connection:
            return proposals.save_mode(connection, user_id)

    async def save_mode(self, user_id: str) -> SaveMode:
        return await to_thread(self._save_mode, user_id)

    # -- proposals ------------------------------------------------------------------------

    def _pending(self, user_id: str) -> list[Proposal]:
        with self.engine.connect() as connection:
            return _registered_proposals(proposals.pending(connection, user_id))

    async def pending(self, user_id: str) -> list[Proposal]:
        return await to_thread(self._pending, user_id)

    # -- export ---------------------------------------------------------------------------

    def _export(self, user_id: str) -> Export:
        with self.engine.connect() as connection:
            snapshot = repository.load_snapshot(connection, user_id)
            register_memory(snapshot)
            entries = history.page(connection, user_id, limit=None) or []
            pending = proposals.pending(connection, user_id)
            expired = proposals.expired(connection, user_id)
            conversations = [
                (conversation, transcripts.messages(connection, conversation.id))
                for conversation in transcripts.list_for_user(connection, user_id)
            ]
            connection.rollback()
        for _conversation, messages in conversations:
            register_sensitive(*(message.content for message in messages))
        return Export(
            snapshot,
            _registered_entries(entries),
            _registered_proposals(pending),
            conversations,
            _registered_proposals(expired),
        )

    async def export(self, user_id: str) -> Export:
        return await to_thread(self._export, user_id)
