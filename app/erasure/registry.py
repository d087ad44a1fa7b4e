"""The registry of tables keyed by subject beyond memory state and transcripts: erasure walks it,
so a table added later (usage counters, rate limits, audit of operators) is erased by adding one
line here. tests/integration/test_erasure_registry.py fails for a column that holds a subject and
that no erasure step covers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlalchemy import Column, Connection, Table, delete, update

from app.db.erasure_audit import subject_hash
from app.db.schema import (
    audit_log,
    embedding_jobs,
    feature_flags,
    limit_counters,
    message_embeddings,
    stream_slots,
    usage_daily,
    web_sessions,
)

# "delete": the rows are the subject's (usage, limits); "clear": the row is shared and only
# names the subject in passing (the operator who last set a flag), so the name is set to NULL;
# "pseudonymize": the row must keep naming someone (who switched a flag, in the audit log), so
# the subject is replaced by its keyed hash, as in the erasure's own audit row.
Action = Literal["delete", "clear", "pseudonymize"]


@dataclass(frozen=True)
class SubjectColumn:
    """A column that holds a subject, and what erasing that subject does to its rows."""

    table: Table
    column: str
    action: Action = "delete"

    @property
    def name(self) -> str:
        return f"{self.table.name}.{self.column}"

    def erase(self, connection: Connection, subject: str, key: bytes) -> int:
        holder: Column[str] = self.table.c[self.column]
        if self.action == "delete":
            result = connection.execute(delete(self.table).where(holder == subject))
        else:
            value = None if self.action == "clear" else subject_hash(key, subject)
            result = connection.execute(
                update(self.table).where(holder == subject).values({self.column: value})
            )
        return result.rowcount or 0


# Erased after memory state and transcripts, one transaction each, in this order.
SUBJECT_COLUMNS: list[SubjectColumn] = [
    SubjectColumn(feature_flags, "updated_by", "clear"),
    # Semantic search (revision 0016): a message's vector and its pending embedding job (both go
    # with their message too; these steps catch any row whose message is already gone).
    SubjectColumn(message_embeddings, "user_id"),
    SubjectColumn(embedding_jobs, "user_id"),
    SubjectColumn(usage_daily, "user_id"),
    # Limit state: a user's counters and stream slots (an evaluation key's are keyed by a hash).
    SubjectColumn(limit_counters, "caller"),
    SubjectColumn(stream_slots, "caller"),
    # Browser sessions: an erased person is signed out everywhere (their cookies name no row).
    SubjectColumn(web_sessions, "subject"),
    SubjectColumn(audit_log, "actor", "pseudonymize"),
    SubjectColumn(audit_log, "target", "pseudonymize"),
]


def register(entry: SubjectColumn) -> None:
    """Add a table keyed by subject (at import of the module that defines it)."""
    if all(existing.name != entry.name for existing in SUBJECT_COLUMNS):
        SUBJECT_COLUMNS.append(entry)
