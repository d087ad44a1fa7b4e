"""The registry of tables keyed by subject beyond memory state and transcripts: erasure walks it,
so a table added later (usage counters, rate limits, audit of operators) is erased by adding one
line here. tests/integration/test_erasure_registry.py fails for a column that holds a subject and
that no erasure step covers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlalchemy import Column, Connection, Table, delete, update

from app.db.schema import feature_flags

# "delete": the rows are the subject's (usage, limits); "clear": the row is shared and only
# names the subject in passing (the operator who last set a flag), so the name is set to NULL.
Action = Literal["delete", "clear"]


@dataclass(frozen=True)
class SubjectColumn:
    """A column that holds a subject, and what erasing that subject does to its rows."""

    table: Table
    column: str
    action: Action = "delete"

    @property
    def name(self) -> str:
        return f"{self.table.name}.{self.column}"

    def erase(self, connection: Connection, subject: str) -> int:
        holder: Column[str] = self.table.c[self.column]
        if self.action == "delete":
            result = connection.execute(delete(self.table).where(holder == subject))
        else:
            result = connection.execute(
                update(self.table).where(holder == subject).values({self.column: None})
            )
        return result.rowcount or 0


# Erased after memory state and transcripts, one transaction each, in this order.
SUBJECT_COLUMNS: list[SubjectColumn] = [
    SubjectColumn(feature_flags, "updated_by", "clear"),
]


def register(entry: SubjectColumn) -> None:
    """Add a table keyed by subject (at import of the module that defines it)."""
    if all(existing.name != entry.name for existing in SUBJECT_COLUMNS):
        SUBJECT_COLUMNS.append(entry)
