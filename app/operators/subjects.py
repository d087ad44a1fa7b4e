"""Everything the operator features keep about one user, for the user's export and erasure:
usage rows (exported, deleted) and limit state (deleted). Functions take a connection and never
commit: the export or erasure owns the transaction."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, delete

from app.db.schema import limit_counters, stream_slots
from app.operators import usage


def export_for_subject(connection: Connection, subject: str) -> dict[str, Any]:
    """The user's operator records for their data export: `{"usage": [{"day", "turns",
    "prompt_tokens", "completion_tokens"}]}`, oldest day first."""
    return {
        "usage": [
            {key: value for key, value in row.view().items() if key != "subject"}
            for row in usage.for_subject(connection, subject)
        ]
    }


def delete_for_subject(connection: Connection, subject: str) -> int:
    """Delete every usage row and all limit state of one user (their erasure); returns how many
    rows went. The audit log is not touched here: an erasure adds its own row there, keyed by
    `audit.subject_key`, and `audit.pseudonymize_actor` replaces the subject of an erased
    operator in the rows of their actions."""
    removed = usage.delete_for_subject(connection, subject)
    for table in (limit_counters, stream_slots):
        result = connection.execute(
            delete(table).where(table.c.kind == "user", table.c.caller == subject)
        )
        removed += int(result.rowcount or 0)
    return removed
