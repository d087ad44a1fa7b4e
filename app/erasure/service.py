"""Erasing a person: every row about one subject, table group by table group, with one audit row
left behind (a keyed hash of the subject and when; no content).

The order makes a crash harmless, because each step is its own transaction, deletes only by
subject, and running the erasure again redoes whatever was not finished:

1. Under the subject's writer lock, in one transaction: the audit row, marked unfinished, and
   all of their memory state (memory, history, proposals, preferences). First, because it is
   the group that a running turn writes at its end: a turn's memory commit after this finds the
   audit row newer than the turn's start and writes nothing, and one before it is deleted here.
   A turn's transcript write after step 2 finds no conversation and fails its foreign key.
2. Their conversations, messages and search index entries (on SQLite, the index's deleted terms
   are merged away in the same transaction).
3. Every other table keyed by subject (app/erasure/registry.py), one transaction each.
4. The audit row marked complete; on SQLite the write-ahead log truncated.

docs/privacy.md says what stays below SQL and what an operator runs to remove it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import structlog
from sqlalchemy import Engine

from app.concurrency import to_thread
from app.conversations.service import ConversationService
from app.db import erasure_audit as audit
from app.db.engine import truncate_wal
from app.erasure.registry import SUBJECT_COLUMNS
from app.memory.service import MemoryService

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class ErasureReport:
    """How many rows each step removed (counts only: it is printed and logged)."""

    memory_documents: int
    conversations: int
    others: dict[str, int] = field(default_factory=dict)
    log_truncated: bool = True


class ErasureService:
    def __init__(
        self, engine: Engine, memory: MemoryService, conversations: ConversationService
    ) -> None:
        self.engine = engine
        self.memory = memory
        self.conversations = conversations

    def erase(self, subject: str) -> ErasureReport:
        digest = audit.subject_hash(self.memory.erasure_key, subject)
        memory_documents = self.memory.erase(subject, audit.now())
        conversations = self.conversations.erase(subject)
        others: dict[str, int] = {}
        for entry in SUBJECT_COLUMNS:
            with self.engine.begin() as connection:
                others[entry.name] = entry.erase(connection, subject, self.memory.erasure_key)
        with self.engine.begin() as connection:
            audit.mark_completed(connection, digest, audit.now())
        report = ErasureReport(memory_documents, conversations, others, truncate_wal(self.engine))
        log.info(
            "erasure.completed",
            memory_documents=report.memory_documents,
            conversations=report.conversations,
            log_truncated=report.log_truncated,
        )
        return report

    async def erase_async(self, subject: str) -> ErasureReport:
        return await to_thread(self.erase, subject)
