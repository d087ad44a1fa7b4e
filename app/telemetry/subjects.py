"""A stable pseudonym for the subject on log lines and spans: a keyed hash, never the subject."""

from __future__ import annotations

import hashlib
import hmac
import secrets

_hash_key: bytes = secrets.token_bytes(32)


def set_subject_hash_key(key: bytes | str | None) -> None:
    """Without a configured key the hash is stable only within this process."""
    global _hash_key
    if key:
        _hash_key = key.encode() if isinstance(key, str) else key


def subject_hash(subject: str) -> str:
    """A stable pseudonym: HMAC-SHA256 of the subject, truncated. Never the subject itself."""
    digest = hmac.new(_hash_key, b"subject:" + subject.encode(), hashlib.sha256).hexdigest()
    return digest[:16]
