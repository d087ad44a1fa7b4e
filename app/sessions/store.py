"""The server-side half of a browser session: one row per signed-in browser.

The cookie holds a random value; the row is keyed by its hash, holds the subject and roles, the
session's end, and in oidc mode the provider's refresh token and ID token (encrypted). Signing
out deletes the row, so a copied cookie stops working at once, on every replica. Functions
take their own short transaction: a session is independent of any other write.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, delete, insert, select, update

from app.concurrency import to_thread
from app.db.schema import web_sessions
from app.sessions.keys import SessionKeys, new_session_value, session_hash


def utc_now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


@dataclass(frozen=True)
class ProviderTokens:
    """What the provider handed over that the session keeps (oidc mode)."""

    access_expires_at: datetime
    refresh_token: str | None
    id_token: str | None


@dataclass(frozen=True)
class Session:
    id_hash: str
    subject: str
    roles: frozenset[str]
    expires_at: datetime
    provider: ProviderTokens | None  # None in dev mode

    def needs_refresh(self, now: datetime, margin: timedelta) -> bool:
        return self.provider is not None and self.provider.access_expires_at - margin <= now


class SessionStore:
    def __init__(self, engine: Engine, keys: SessionKeys, *, lifetime_seconds: int) -> None:
        self.engine = engine
        self.keys = keys
        self.lifetime = timedelta(seconds=lifetime_seconds)

    async def create(
        self, subject: str, roles: Iterable[str], provider: ProviderTokens | None = None
    ) -> tuple[str, Session]:
        """A new session; the cookie value (returned once, never stored) and the session."""
        value = new_session_value()
        now = utc_now()
        session = Session(
            id_hash=session_hash(value),
            subject=subject,
            roles=frozenset(roles),
            expires_at=now + self.lifetime,
            provider=provider,
        )
        row = {
            "id_hash": session.id_hash,
            "subject": subject,
            "roles": json.dumps(sorted(session.roles)),
            "created_at": now,
            "expires_at": session.expires_at,
            **self._provider_columns(provider),
        }

        def write() -> None:
            with self.engine.begin() as connection:
                connection.execute(insert(web_sessions).values(row))

        await to_thread(write)
        return value, session

    async def find(self, value: str) -> Session | None:
        """The live session a cookie value names, or None (unknown, signed out or ended)."""
        keyed = web_sessions.c.id_hash == session_hash(value)

        def read() -> Session | None:
            with self.engine.begin() as connection:
                row = connection.execute(select(web_sessions).where(keyed)).first()
                if row is None:
                    return None
                if row.expires_at <= utc_now():
                    connection.execute(delete(web_sessions).where(keyed))
                    return None
                return self._session(row._mapping)

        return await to_thread(read)

    async def replace_tokens(
        self, session: Session, provider: ProviderTokens, roles: Iterable[str] | None = None
    ) -> bool:
        """Store a refresh's tokens, only if nobody refreshed this session since it was read
        (another replica, another tab): False when someone did."""
        assert session.provider is not None
        read_expiry = session.provider.access_expires_at
        values = self._provider_columns(provider)
        if roles is not None:
            values["roles"] = json.dumps(sorted(set(roles)))

        def write() -> bool:
            with self.engine.begin() as connection:
                result = connection.execute(
                    update(web_sessions)
                    .where(
                        web_sessions.c.id_hash == session.id_hash,
                        web_sessions.c.access_expires_at == read_expiry,
                    )
                    .values(values)
                )
                return bool(result.rowcount)

        return await to_thread(write)

    async def end(self, id_hash: str) -> None:
        """Sign-out, or a refresh the provider refused: the cookie is worthless from now on."""

        def write() -> None:
            with self.engine.begin() as connection:
                connection.execute(delete(web_sessions).where(web_sessions.c.id_hash == id_hash))

        await to_thread(write)

    def _provider_columns(self, provider: ProviderTokens | None) -> dict[str, object]:
        if provider is None:
            return {"access_expires_at": None, "refresh_token": None, "id_token": None}
        seal = self.keys.seal
        return {
            "access_expires_at": provider.access_expires_at,
            "refresh_token": seal(provider.refresh_token) if provider.refresh_token else None,
            "id_token": seal(provider.id_token) if provider.id_token else None,
        }

    def _session(self, row: object) -> Session:
        mapping = dict(row)  # type: ignore[call-overload]
        provider = None
        if mapping["access_expires_at"] is not None:
            provider = ProviderTokens(
                access_expires_at=mapping["access_expires_at"],
                refresh_token=self._unsealed(mapping["refresh_token"]),
                id_token=self._unsealed(mapping["id_token"]),
            )
        roles = json.loads(mapping["roles"])
        return Session(
            id_hash=mapping["id_hash"],
            subject=mapping["subject"],
            roles=frozenset(role for role in roles if isinstance(role, str)),
            expires_at=mapping["expires_at"],
            provider=provider,
        )

    def _unsealed(self, sealed: str | None) -> str | None:
        # A token sealed with a retired key reads as absent: the session then ends at its
        # next refresh, as any session whose refresh fails.
        return self.keys.unseal(sealed) if sealed else None


def delete_ended(engine: Engine) -> int:
    """Delete the sessions past their end (`python -m app purge`): a browser drops such a
    cookie itself, so its row would otherwise stay; one found by a request is deleted then."""
    with engine.begin() as connection:
        result = connection.execute(
            delete(web_sessions).where(web_sessions.c.expires_at <= utc_now())
        )
        return int(result.rowcount or 0)
