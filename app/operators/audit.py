"""The audit log: operator actions (who, when, what, from, to), each written in the same
transaction as the action it records, so a rolled-back action leaves no audit row and a
committed one always has its row. Functions take a connection and never commit.

Rows carry no memory or message content. An action on a user who must not be named afterwards
(an erasure) names its target by `subject_key`, a keyed hash of the subject.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, insert, select, update

from app.db.schema import SUBJECT_CHARS, audit_log

VALUE_CHARS = 1000


@dataclass(frozen=True)
class AuditEntry:
    id: int
    created_at: datetime
    actor: str
    action: str
    target: str
    before: Any
    after: Any


def _encode(value: Any) -> str | None:
    if value is None:
        return None
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    if len(text) > VALUE_CHARS:
        raise ValueError(f"an audit value holds at most {VALUE_CHARS} characters of JSON")
    return text


def _decode(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def record(
    connection: Connection, actor: str, action: str, target: str, before: Any, after: Any
) -> None:
    """Record one action in the caller's transaction. `before` and `after` are small JSON
    values (None when there was nothing, e.g. a flag never set); `actor` and `target` are at
    most 128 characters (a subject, `cli:<os user>`, a flag name, a `subject_key`)."""
    for name, value in (("actor", actor), ("target", target)):
        if not value or len(value) > SUBJECT_CHARS:
            raise ValueError(f"an audit {name} holds 1 to {SUBJECT_CHARS} characters")
    connection.execute(
        insert(audit_log).values(
            created_at=datetime.now(UTC).replace(tzinfo=None),
            actor=actor,
            action=action,
            target=target,
            old_value=_encode(before),
            new_value=_encode(after),
        )
    )


def entries(connection: Connection, *, limit: int, before: int | None = None) -> list[AuditEntry]:
    """Newest first, at most `limit`, older than the entry `before` when given."""
    query = select(
        audit_log.c.seq,
        audit_log.c.created_at,
        audit_log.c.actor,
        audit_log.c.action,
        audit_log.c.target,
        audit_log.c.old_value,
        audit_log.c.new_value,
    )
    if before is not None:
        query = query.where(audit_log.c.seq < before)
    rows = connection.execute(query.order_by(audit_log.c.seq.desc()).limit(limit)).all()
    return [
        AuditEntry(
            id=int(row.seq),
            created_at=row.created_at.replace(tzinfo=UTC),
            actor=row.actor,
            action=row.action,
            target=row.target,
            before=_decode(row.old_value),
            after=_decode(row.new_value),
        )
        for row in rows
    ]


def subject_key(subject: str, key: bytes) -> str:
    """A keyed hash of a subject (HMAC-SHA256, hex) to name a user an audit row must not name:
    the same subject and key always give the same value, and without the key it cannot be
    reversed or confirmed by guessing subjects."""
    return hmac.new(key, b"audit-subject:" + subject.encode("utf-8"), hashlib.sha256).hexdigest()


def pseudonymize_actor(connection: Connection, subject: str, key: bytes) -> int:
    """Name an erased operator by `subject_key` in the rows of their actions (who acted stays
    traceable with the key, the subject is gone); returns how many rows changed."""
    result = connection.execute(
        update(audit_log)
        .where(audit_log.c.actor == subject)
        .values(actor=subject_key(subject, key)),
    )
    return int(result.rowcount or 0)
