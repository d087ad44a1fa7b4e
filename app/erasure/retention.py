"""Retention: `python -m app purge` deletes conversations inactive for
RETENTION_CONVERSATION_DAYS and memory history entries older than RETENTION_HISTORY_DAYS (0: kept).

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
from typing import TypeVar

from sqlalchemy import Engine

from app.conversations.service import ConversationService
from app.db.locking import is_retryable
from app.erasure import audit
from app.memory import history
from app.memory.service import MemoryService

T = TypeVar("T")
ATTEMPTS = 3


@dataclass(frozen=True)
class RetentionPolicy:
    conversation_days: int = 0
    history_days: int = 0
    batch_size: int = 100


@dataclass(frozen=True)
class PurgeReport:
    conversations: int
    history_entries: int
    unfinished_erasures: int


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
    with engine.connect() as connection:
        unfinished = audit.unfinished(connection)
        connection.rollback()
    return PurgeReport(removed_conversations, removed_entries, unfinished)
