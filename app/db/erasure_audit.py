"""The erasure audit row: a keyed hash of the subject and when it was erased, nothing else.

The row is written first, in the same transaction that removes the subject's memory state under
their writer lock, and marked complete once every other table group is empty of them: an
unfinished row is an erasure that a crash interrupted (running it again finishes it). A turn's
memory commit that finds a row erased after the turn began writes nothing (app/memory/writes.py).
A store of one table, below both the memory layer that reads it and the erasure service that
writes it (app/erasure/).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import UTC, datetime

from sqlalchemy import Connection, ScalarSelect, bindparam, func, insert, select, update

from app.db.schema import erasures

_LABEL = b"amem-erasure:"
_PROCESS_KEY = secrets.token_bytes(32)


def now() -> datetime:
    """Naive UTC with microseconds, as every stored timestamp."""
    return datetime.now(UTC).replace(tzinfo=None)


def hash_key(configured: str | None, *, telemetry: str | None, dev_secret: str | None) -> bytes:
    """ERASURE_HASH_KEY, else TELEMETRY_HASH_KEY, else one derived from the dev secret (never the
    secret itself), else a key of this process only (its hashes match no other replica's)."""
    for key in (configured, telemetry):
        if key:
            return key.encode("utf-8")
    if dev_secret:
        return hmac.new(dev_secret.encode("utf-8"), b"erasure-hash-key", hashlib.sha256).digest()
    return _PROCESS_KEY


def is_process_key(key: bytes) -> bool:
    """Whether `key` is this process's own (no key configured): its hashes match no other's."""
    return hmac.compare_digest(key, _PROCESS_KEY)


def subject_hash(key: bytes, subject: str) -> str:
    """HMAC-SHA256 of the subject (hex): the same subject gives the same row; without the key
    nobody can test a guessed subject against the table."""
    return hmac.new(key, _LABEL + subject.encode("utf-8"), hashlib.sha256).hexdigest()


_HASH = bindparam("subject_hash", type_=erasures.c.subject_hash.type)
_EXISTS = select(erasures.c.subject_hash).where(erasures.c.subject_hash == _HASH)
_SINCE = select(func.count()).where(
    erasures.c.subject_hash == _HASH,
    erasures.c.erased_at >= bindparam("since", type_=erasures.c.erased_at.type),
)


def mark_started(connection: Connection, digest: str, stamp: datetime) -> None:
    """Upsert the subject's row as erased at `stamp` and not yet complete (one row per subject:
    a later erasure of the same subject moves its time)."""
    if connection.execute(_EXISTS, {"subject_hash": digest}).first() is None:
        connection.execute(
            insert(erasures).values(subject_hash=digest, erased_at=stamp, completed_at=None)
        )
    else:
        connection.execute(
            update(erasures)
            .where(erasures.c.subject_hash == digest)
            .values(erased_at=stamp, completed_at=None)
        )


def mark_completed(connection: Connection, digest: str, stamp: datetime) -> None:
    connection.execute(
        update(erasures).where(erasures.c.subject_hash == digest).values(completed_at=stamp)
    )


def erased_since(connection: Connection, digest: str, since: datetime) -> bool:
    """Whether the subject was erased at or after `since` (a turn that began before it)."""
    return bool(connection.execute(_SINCE, {"subject_hash": digest, "since": since}).scalar())


def erased_since_column() -> ScalarSelect[int]:
    """`erased_since` as a column of another statement (bound `subject_hash` and `since`), for a
    commit that reads it together with other values (app/memory/writes.py)."""
    return _SINCE.scalar_subquery()


def unfinished(connection: Connection) -> int:
    """Erasures that a crash interrupted (each finishes when it is run again)."""
    query = select(func.count()).where(erasures.c.completed_at.is_(None))
    return int(connection.execute(query).scalar() or 0)
