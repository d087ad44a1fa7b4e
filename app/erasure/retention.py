"""Retention: `python -m app purge` deletes conversations inactive for
RETENTION_CONVERSATION_DAYS and memory history entries older than RETENTION_HISTORY_DAYS (0: kept),
temporary chats TEMPORARY_CHAT_HOURS after they began, and takes the memory entries whose
remember-until time has come out of memory (each user's in their own unit of work, recorded as
a change of source `expired`).

It works in bounded batches of RETENTION_BATCH_SIZE rows, each its own small transaction: a
user's writer lock is held for one batch of their history at most, so a turn's commit waits for
one small transaction at worst and is otherwise unaffected; a conversation a turn touched since
it was listed is kept (read again, locked, in the deleting transaction). Every step deletes only
what is past its cutoff, so running it again, or on every replica at once, removes nothing twice
and leaves the same result.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import TypeVar

from sqlalchemy import Engine

from app.conversations.service import ConversationService
from app.db import erasure_audit as audit
from app.db.locking import is_retryable
from app.memory import expiries, history
from app.memory.service import MemoryService

T = TypeVar("T")
ATTEMPTS = 3


@dataclass(frozen=True)
class RetentionPolicy:
    conversation_days: int = 0
    history_days: int = 0
    batch_size: int = 100
    temporary_hours: int = 24  # TEMPORARY_CHAT_HOURS


@dataclass(frozen=True)
class PurgeReport:
    conversations: int
    history_entries: int
    unfinished_erasures: int
    temporary_chats: int = 0
    expired_entries: int = 0


def _retried(step: Callable[[], T]) -> T:
    """Two purgers on the same rows may deadlock on some databases: the loser runs again."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return step()
        except Exception as error:
            if not is_retryable(error) or attempt == ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def purge(
    engine: Engine,
    memory: MemoryService,
    conversations: ConversationService,
    policy: RetentionPolicy,
    *,
    at: datetime | None = None,
) -> PurgeReport:
    at = at or audit.now()
    removed_conversations = 0
    if policy.conversation_days > 0:
        cutoff = at - timedelta(days=policy.conversation_days)
        while True:
            removed, listed = _retried(lambda: conversations.expire(cutoff, policy.batch_size))
            removed_conversations += removed
            if listed == 0:
                break
    removed_entries = 0
    if policy.history_days > 0:
        cutoff = at - timedelta(days=policy.history_days)
        while True:
            with engine.connect() as connection:
                owners = history.owners_older_than(connection, cutoff, policy.batch_size)
                connection.rollback()
            if not owners:
                break
            for owner in owners:
                while True:
                    count = memory.expire_history(owner, cutoff, policy.batch_size)
                    removed_entries += count
                    if count < policy.batch_size:
                        break
    removed_temporary = 0
    cutoff = at - timedelta(hours=policy.temporary_hours)
    while True:
        removed, listed = _retried(
            lambda: conversations.expire_temporary(cutoff, policy.batch_size)
        )
        removed_temporary += removed
        if listed == 0 or removed == 0:
            break
    expired = _expire_entries(engine, memory, at, policy.batch_size)
    with engine.connect() as connection:
        unfinished = audit.unfinished(connection)
        connection.rollback()
    return PurgeReport(
        removed_conversations, removed_entries, unfinished, removed_temporary, expired
    )


def _expire_entries(engine: Engine, memory: MemoryService, at: datetime, batch: int) -> int:
    """Each user with an entry due at `at` gets one unit of work that expires all of theirs;
    a user whose rows stay (a write in between re-set them) is not visited twice."""
    expired, seen = 0, set[str]()
    while True:
        with engine.connect() as connection:
            owners = [
                o for o in expiries.owners_due(connection, at, batch + len(seen)) if o not in seen
            ]
            connection.rollback()
        if not owners:
            return expired
        for owner in owners:
            seen.add(owner)
            expired += _retried(partial(memory.expire_entries, owner))
