"""The secrets behind a browser session: the cookie's random value and what is derived from
AUTH_SESSION_SECRET (encryption of tokens at rest and of the login's state cookie, and the CSRF
token bound to one session)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

from cryptography.fernet import Fernet, InvalidToken

COOKIE_BYTES = 32


def new_session_value() -> str:
    """The cookie's value: 256 random bits, never stored (the table keeps its hash)."""
    return secrets.token_urlsafe(COOKIE_BYTES)


def session_hash(value: str) -> str:
    """The row key of a cookie value; a value nobody issued simply matches no row."""
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


class SessionKeys:
    """Keys derived from one secret, each for one purpose (so that no value made for one use is
    accepted for another)."""

    def __init__(self, secret: str) -> None:
        root = secret.encode()
        self._fernet = Fernet(base64.urlsafe_b64encode(self._derive(root, b"seal")))
        self._csrf = self._derive(root, b"csrf")

    @staticmethod
    def _derive(root: bytes, purpose: bytes) -> bytes:
        return hmac.new(root, b"agent-memory session " + purpose, hashlib.sha256).digest()

    def seal(self, text: str) -> str:
        """Encrypted and authenticated (Fernet): a provider token at rest, the login state."""
        return self._fernet.encrypt(text.encode()).decode("ascii")

    def unseal(self, sealed: str, *, max_age_seconds: int | None = None) -> str | None:
        """The text, or None when it was tampered with, made with another key, or (with
        `max_age_seconds`) is older than that."""
        try:
            return self._fernet.decrypt(sealed.encode("ascii"), ttl=max_age_seconds).decode()
        except (InvalidToken, UnicodeError, ValueError):
            return None

    def csrf_token(self, session_value: str) -> str:
        """The token a page must echo in X-CSRF-Token: bound to its session, so a token read
        from another session (or made up) does not fit."""
        digest = hmac.new(self._csrf, session_value.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")

    def csrf_matches(self, session_value: str, token: str) -> bool:
        return hmac.compare_digest(self.csrf_token(session_value), token)
